"""One producer wrapper for every role (node, merger, client, tools).

:class:`RecordProducer` owns a librdkafka producer configured by
:mod:`atomickafka.kafka.settings`, and ``send`` waits while librdkafka's local queue is
full instead of failing (the queue drains as the broker acknowledges). Encoding stays
with the caller (:mod:`atomickafka.core.wire`); the wrapper only attaches the
``atomickafka-type`` header when asked, from shared constants, never a list per record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage
from confluent_kafka._types import HeadersType

from atomickafka.core.wire import MessageType
from atomickafka.kafka.settings import producer_config
from atomickafka.kafka.topics import TYPE_HEADER

__all__ = ["DeliveryCallback", "RecordProducer", "type_headers"]

DeliveryCallback = Callable[[KafkaError | None, KafkaMessage], None]

_TYPE_HEADERS: Final[dict[MessageType, HeadersType]] = {
    t: [(TYPE_HEADER, t.value.encode())] for t in MessageType
}


def type_headers(kind: MessageType) -> HeadersType:
    """The shared header list naming a record's type (do not modify it)."""
    return _TYPE_HEADERS[kind]


class _Unsent:
    """Stands in for the record of a delivery report when ``produce`` itself refused it."""

    def __init__(self, topic: str, value: bytes | None) -> None:
        self._topic, self._value = topic, value

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes | None:
        return self._value


class RecordProducer:
    """A librdkafka producer that never fails a ``send`` on a full local queue."""

    def __init__(
        self,
        bootstrap: str,
        overrides: Mapping[str, str] | None = None,
        **extra: str | int | bool,
    ) -> None:
        self.producer = Producer(producer_config(bootstrap, overrides, **extra))

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        partition: int | None = None,
        key: bytes | None = None,
        headers: HeadersType | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue one record; wait (serving delivery reports) while the queue is full.

        A record librdkafka refuses on the spot (too large for ``message.max.bytes``)
        is reported to ``on_delivery`` like a failed delivery, when one is given.
        """
        where = -1 if partition is None else partition  # -1: the partitioner picks
        produce = self.producer.produce
        while True:
            try:
                produce(
                    topic,
                    value,
                    key=key,
                    partition=where,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                self.producer.poll(0.05)  # delivery reports free room in the queue
            except KafkaException as exc:  # refused locally (e.g. over message.max.bytes)
                if on_delivery is None:
                    raise
                on_delivery(exc.args[0], _Unsent(topic, value))  # type: ignore[arg-type]
                return

    def poll(self, timeout_s: float = 0.0) -> int:
        """Serve delivery reports; return how many were served."""
        return int(self.producer.poll(timeout_s))

    def flush(self, timeout_s: float) -> int:
        """Wait for every queued record; return how many are still not acknowledged."""
        return int(self.producer.flush(timeout_s))

    def warm_up(self, topics: list[str], timeout_s: float = 10.0) -> None:
        """Fetch metadata for ``topics`` now rather than on the first send."""
        for topic in topics:
            self.producer.list_topics(topic, timeout=timeout_s)

    def __len__(self) -> int:
        return len(self.producer)
