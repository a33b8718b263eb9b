"""What a reader of an AtomicKafka topic gets: one delivered message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Delivery"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message delivered at ``topic``, in the order every destination agrees on.

    ``timeStamp`` is the final Lamport timestamp; ``(timeStamp, messageID)`` is the
    message's place in the total order. ``partition``/``offset`` locate the Delivery
    record in Kafka; ``kafka_timestamp_ms`` is its Kafka timestamp (when it was written).
    """

    messageID: str
    value: Any
    timeStamp: int
    destinations: tuple[str, ...]
    topic: str
    partition: int
    offset: int
    kafka_timestamp_ms: int | None = None
    layer: int | None = None  # the partition layer that ordered it (partitioned topics)

    def to_json_dict(self) -> dict[str, Any]:
        """The ``--json`` form: the wire names plus where the record sits."""
        return {
            "messageID": self.messageID,
            "value": self.value,
            "timeStamp": self.timeStamp,
            "topic": list(self.destinations),
            "deliveredAt": self.topic,
            "partition": self.partition,
            "offset": self.offset,
        }
