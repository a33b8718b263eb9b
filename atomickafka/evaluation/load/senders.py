"""What the baselines' senders share (the single sequencer's and the bare pipe's): a
producer, message ids, the writes that failed, flushing and closing; and writing a
message as a Delivery to each of its destinations, as both baselines deliver."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from atomickafka.client import DeliveryError
from atomickafka.core.wire import Message, MessageType, encode_delivery
from atomickafka.kafka.connection import Where
from atomickafka.kafka.producer import DeliveryCallback, RecordProducer, type_headers

__all__ = ["ProducingSender", "write_deliveries"]


def write_deliveries(
    producer: RecordProducer,
    message: Message,
    sender_id: str,
    timestamp: int,
    on_delivery: DeliveryCallback | None = None,
) -> int:
    """Write ``message`` as a ``DeliveryMessage`` into each of its destinations' topics
    (``sentFromTopic`` the destination, so that its readers take it); return how many."""
    headers = type_headers(MessageType.DELIVERY)
    for destination in message.topic:
        delivery = message._replace(
            messageType=MessageType.DELIVERY,
            senderID=sender_id,
            sentFromTopic=destination,
            timeStamp=timestamp,
        )
        producer.send(
            destination, encode_delivery(delivery), headers=headers, on_delivery=on_delivery
        )
    producer.poll(0)
    return len(message.topic)


class ProducingSender:
    """A sender writing through its own producer; subclasses write the records."""

    def __init__(self, where: Where, client_id: str) -> None:
        self.client_id = client_id
        self.id_prefix = f"{client_id}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._failures: list[tuple[str, KafkaError]] = []
        self._producer = RecordProducer(where, **{"client.id": client_id})

    def _next_id(self) -> tuple[int, str]:
        """The next message's sequence number and id (``<id_prefix>-<n>``)."""
        seq = next(self._seq)
        return seq, f"{self.id_prefix}-{seq}"

    def _report_for(self, message_id: str) -> Callable[[KafkaError | None, Any], None]:
        """A delivery callback that notes a failed write of ``message_id``."""

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self._failures.append((message_id, err))

        return on_delivery

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for every write; raise :class:`DeliveryError` (as the client does) if any
        failed."""
        remaining = self._producer.flush(timeout_s)
        if remaining or self._failures:
            raise DeliveryError(list(self._failures), remaining, timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Release the producer, waiting up to ``timeout_s`` for what was sent."""
        self._producer.close(timeout_s)
