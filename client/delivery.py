"""What the client hands its user: a message it sent, and a message delivered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import KafkaError

from atomickafka.core.reader import KafkaRecord
from atomickafka.core.wire import Message

__all__ = ["Delivery", "OnDelivery", "SentMessage"]


@dataclass(frozen=True, slots=True)
class SentMessage:
    """A message :meth:`~atomickafka.client.AtomicKafkaClient.send` published, as its
    ``on_delivery`` callback receives it.

    ``layer`` is the partition layer it was sent to (``None``: an unpartitioned
    topic); ``records`` counts the Kafka records written for it (one per input log).
    """

    messageID: str
    destinations: tuple[str, ...]
    value: Any
    via: str | None = None
    key: str | bytes | None = None
    layer: int | None = None
    records: int = 1


#: ``on_delivery(err, sent)``, as confluent-kafka's ``produce(..., on_delivery(err,
#: msg))``: called once per message, from :meth:`~atomickafka.client.AtomicKafkaClient.
#: flush` or a later ``send``, when every record of it is acknowledged (``err`` is
#: ``None``) or one failed (``err`` is the first error).
OnDelivery = Callable[[KafkaError | None, SentMessage], None]


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

    @classmethod
    def of(cls, message: Message, record: KafkaRecord, topic: str) -> Delivery:
        """The delivery ``message`` (read from ``record`` at ``topic``) stands for."""
        assert message.timeStamp is not None  # a Delivery always has its final timestamp
        ts_type, ts = record.timestamp()
        return cls(
            messageID=message.messageID,
            value=orjson.loads(message.value or b"null"),
            timeStamp=message.timeStamp,
            destinations=message.topic,
            topic=topic,
            partition=record.partition() or 0,
            offset=record.offset() or 0,
            kafka_timestamp_ms=ts if ts_type else None,
            layer=message.partitionID,
        )

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
