"""The bare Kafka pipe: each message written straight to each destination, no ordering.

The floor of the comparison: what a message costs when a client writes it to every
destination's topic and consumers read it, with nothing in between. Its records keep
AtomicKafka's wire format (one ``DeliveryMessage`` per destination, ``senderID`` =
:data:`BARE_ID`, ``sentFromTopic`` = the destination, ``timeStamp`` = the client's
sequence number), so the same reader, recording, metrics and checker apply. Nothing
orders them: two destinations may take two clients' messages in different orders, so
only integrity and validity are expected of it (:data:`UNORDERED`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from atomickafka.core.wire import client_message
from atomickafka.evaluation.load.senders import ProducingSender, write_deliveries
from atomickafka.verify.checker import ViolationKind

__all__ = ["BARE_ID", "UNORDERED", "BarePipeSender"]

#: ``senderID`` of the bare pipe's records.
BARE_ID: Final = "kafka"

#: What the checker reports of a pipe that orders nothing: the destinations disagree
#: on orders, and the timestamps (each client's own sequence) do not order a topic.
UNORDERED: Final = frozenset(
    {
        ViolationKind.ORDER,
        ViolationKind.GAP,
        ViolationKind.CYCLE,
        ViolationKind.TIMESTAMP_ORDER,
    }
)


class BarePipeSender(ProducingSender):
    """Writes each message as a Delivery record to each of its destinations."""

    def send(self, value: Any, destinations: Iterable[str], *, via: str | None = None) -> str:
        """Write one message to each of ``destinations``; return its id."""
        del via  # the client writes to every destination itself
        seq, message_id = self._next_id()
        message = client_message(message_id, destinations, value, self.client_id)
        write_deliveries(self._producer, message, BARE_ID, seq, self._report_for(message_id))
        return message_id

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch the destinations' metadata now."""
        self._producer.warm_up(list(topics), timeout_s)
