"""What the client hands its user: a message it sent, and a message delivered."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import KafkaError

from atomickafka.core.raw import BYTES
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
    #: The Kafka key and the headers the sender gave, delivered unchanged.
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: The value's bytes as they were sent; ``value`` is them read as JSON, unless they
    #: were sent as bytes (then ``value`` is these bytes too).
    raw: bytes = b""
    #: When the sender sent it (its clock, ms since the epoch), when it said so.
    sentAt: int | None = None

    @property
    def is_bytes(self) -> bool:
        """True when the value was sent as bytes, not as a JSON value."""
        return isinstance(self.value, bytes)

    @classmethod
    def of(cls, message: Message, record: KafkaRecord, topic: str) -> Delivery:
        """The delivery ``message`` (read from ``record`` at ``topic``) stands for."""
        assert message.timeStamp is not None  # a Delivery always has its final timestamp
        ts_type, ts = record.timestamp()
        raw = message.value or b""
        value: Any = raw if message.encoding == BYTES else orjson.loads(raw or b"null")
        return cls(
            messageID=message.messageID,
            value=value,
            timeStamp=message.timeStamp,
            destinations=message.topic,
            topic=topic,
            partition=record.partition() or 0,
            offset=record.offset() or 0,
            kafka_timestamp_ms=ts if ts_type else None,
            layer=message.partitionID,
            key=message.key,
            headers=message.headers,
            raw=raw,
            sentAt=message.sentAt,
        )

    def to_json_dict(self) -> dict[str, Any]:
        """The ``--json`` form (what ``atomickafka check`` reads): the wire names plus
        where the record sits. A value sent as bytes is ``valueBase64``; a key and
        headers, when there are any, are base64 too."""
        out: dict[str, Any] = {"messageID": self.messageID}
        if self.is_bytes:
            out["valueBase64"] = base64.b64encode(self.raw).decode()
        else:
            out["value"] = self.value
        out |= {
            "timeStamp": self.timeStamp,
            "topic": list(self.destinations),
            "deliveredAt": self.topic,
            "partition": self.partition,
            "offset": self.offset,
        }
        if self.layer is not None:
            out["layer"] = self.layer
        if self.key is not None:
            out["key"] = base64.b64encode(self.key).decode()
        if self.headers:
            out["headers"] = [[n, base64.b64encode(v).decode()] for n, v in self.headers]
        return out
