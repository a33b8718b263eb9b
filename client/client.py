"""The filtering client: publish to several topics, read ordered deliveries.

>>> from client import AtomicKafkaClient          # doctest: +SKIP
>>> with AtomicKafkaClient("127.0.0.1:19092") as ak:
...     mid = ak.send({"order": 42}, ["payments", "audit"])
...     ak.flush()
...     for d in ak.deliveries("audit", from_beginning=True, timeout_s=5):
...         print(d.messageID, d.value)
"""

from __future__ import annotations

import itertools
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import Message as KafkaMessage
from confluent_kafka._types import HeadersType

from atomickafka.kafka.settings import consumer_config, producer_config
from atomickafka.kafka.consumer import consume_batch
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    decode,
    encode,
    is_valid_topic_name,
)
from atomickafka.kafka.topics import TYPE_HEADER, Layout, delivery_topic, input_topic
from client.delivery import Delivery

__all__ = ["AtomicKafkaClient", "DeliveryError"]

_CLIENT_HEADERS: HeadersType = [(TYPE_HEADER, MessageType.CLIENT.value.encode())]


class DeliveryError(RuntimeError):
    """The broker did not accept one or more sent messages."""


class AtomicKafkaClient:
    """Send atomic-multicast messages and read a topic's ordered deliveries.

    ``layout`` must match the nodes' ``--layout``. ``config`` holds librdkafka settings
    (``-X``) applied to every Kafka client this object creates.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        layout: Layout | str = Layout.SPLIT,
        client_id: str | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.layout = Layout(layout)
        self.client_id = client_id or f"c{uuid.uuid4().hex[:12]}"
        if not client_id_is_valid(self.client_id):
            raise ValueError(f"client_id must be 1-64 characters of [A-Za-z0-9._-]: {client_id!r}")
        # messageIDs are "<id_prefix>-<n>"; a random part per instance keeps them unique
        # even when a restarted program reuses its client_id (2019 ids collided so).
        self.id_prefix = (
            self.client_id if client_id is None else f"{client_id}-{uuid.uuid4().hex[:8]}"
        )
        self._config = dict(config or {})
        self._seq = itertools.count()
        self._producer: Producer | None = None
        self._failures: list[tuple[str, KafkaError]] = []

    # ------------------------------------------------------------------ sending

    def send(self, value: Any, destinations: Iterable[str], via: str | None = None) -> str:
        """Publish ``value`` to every topic in ``destinations``; return its messageID.

        The message is written to ``via``'s input log (by default one of the
        destinations); a ``via`` that is not a destination relays it. Asynchronous:
        call :meth:`flush` to wait until the broker has every sent message.
        ``value`` is any JSON-serialisable value.
        """
        topics = _check_destinations(destinations)
        message_id = f"{self.id_prefix}-{next(self._seq)}"
        if via is None:
            via = topics[zlib.crc32(message_id.encode()) % len(topics)]
        elif not is_valid_topic_name(via):
            raise ValueError(f"via is not a valid topic name: {via!r}")
        record = Message(
            messageID=message_id,
            messageType=MessageType.CLIENT,
            topic=topics,
            value=value,
            senderID=self.client_id,
        )
        producer = self._ensure_producer()
        payload = encode(record)
        while True:
            try:
                producer.produce(
                    input_topic(via, self.layout),
                    payload,
                    on_delivery=self._on_delivery,
                    headers=_CLIENT_HEADERS,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        return message_id

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch metadata for ``topics``' input logs now, so the first :meth:`send` to
        them does not wait for it (useful before latency-sensitive traffic)."""
        producer = self._ensure_producer()
        for topic in _check_destinations(topics):
            producer.list_topics(input_topic(topic, self.layout), timeout=timeout_s)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every sent message is acknowledged; raise :class:`DeliveryError` if not."""
        if self._producer is not None:
            remaining = self._producer.flush(timeout_s)
            if remaining:
                raise DeliveryError(f"{remaining} messages not acknowledged after {timeout_s}s")
        if self._failures:
            failures, self._failures = self._failures, []
            first_record, first_err = failures[0]
            raise DeliveryError(
                f"{len(failures)} messages failed; first: {first_err} for {first_record}"
            )

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                producer_config(
                    self.bootstrap_servers, self._config, **{"client.id": self.client_id}
                )
            )
        return self._producer

    def _on_delivery(self, err: KafkaError | None, msg: KafkaMessage) -> None:
        if err is not None:
            raw = msg.value() or b""
            self._failures.append((raw[:120].decode(errors="replace"), err))

    # ------------------------------------------------------------------ reading

    def deliveries(
        self,
        topic: str,
        *,
        from_beginning: bool = True,
        timeout_s: float | None = None,
        max_messages: int | None = None,
    ) -> Iterator[Delivery]:
        """Yield ``topic``'s deliveries in order, hiding control records and duplicates.

        Stops after ``max_messages`` deliveries, or once no delivery arrived for
        ``timeout_s`` seconds (``None``: wait forever).
        """
        if not is_valid_topic_name(topic):
            raise ValueError(f"not a valid topic name: {topic!r}")
        source = delivery_topic(topic, self.layout)
        consumer = Consumer(
            consumer_config(
                self.bootstrap_servers,
                f"{self.client_id}-reader",
                self._config,
                **{"enable.partition.eof": False},
            )
        )
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(source, 0, start)])
        seen: set[str] = set()
        count = 0
        idle_deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            if max_messages is not None and max_messages <= 0:
                return
            while idle_deadline is None or time.monotonic() < idle_deadline:
                for record in _records(consumer):
                    delivery = _to_delivery(record, topic)
                    if delivery is None or delivery.messageID in seen:
                        continue
                    seen.add(delivery.messageID)
                    yield delivery
                    count += 1
                    if max_messages is not None and count >= max_messages:
                        return
                    if timeout_s is not None:
                        idle_deadline = time.monotonic() + timeout_s
        finally:
            consumer.close()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush what was sent and release the producer."""
        if self._producer is not None:
            self.flush()
            self._producer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def client_id_is_valid(client_id: str) -> bool:
    """Client ids become messageID prefixes: keep them short and plain."""
    return 0 < len(client_id) <= 64 and is_valid_topic_name(client_id)


def _check_destinations(destinations: Iterable[str]) -> tuple[str, ...]:
    if isinstance(destinations, str):
        destinations = [destinations]
    topics = list(destinations)
    if not topics:
        raise ValueError("a message needs at least one destination topic")
    for name in topics:
        if not is_valid_topic_name(name):
            raise ValueError(f"not a valid topic name: {name!r}")
    return tuple(sorted(set(topics)))


def _records(consumer: Consumer) -> Iterator[KafkaMessage]:
    """One poll's worth of records (waiting up to 0.1 s); transient errors are skipped."""
    for record in consume_batch(consumer, 1000, 0.1):
        err = record.error()
        if err is None:
            yield record
        elif err.fatal():
            raise KafkaException(err)
        # else: end of partition, topic not there yet, a broker blip: librdkafka retries


def _to_delivery(record: KafkaMessage, topic: str) -> Delivery | None:
    headers = record.headers()
    if headers:
        pairs = headers.items() if isinstance(headers, dict) else headers
        for key, value in pairs:
            if key == TYPE_HEADER and value != b"DeliveryMessage":
                return None  # control or client record: not for readers
    raw = record.value()
    if raw is None:
        return None
    try:
        message = decode(raw)
    except MessageError:
        return None  # not ours; the node sets malformed input aside
    if message.messageType is not MessageType.DELIVERY or message.timeStamp is None:
        return None
    if message.sentFromTopic != topic:
        return None  # only the topic's own node delivers into it
    ts_type, ts = record.timestamp()
    return Delivery(
        messageID=message.messageID,
        value=message.value,
        timeStamp=message.timeStamp,
        destinations=message.topic,
        topic=topic,
        partition=record.partition() or 0,
        offset=record.offset() or 0,
        kafka_timestamp_ms=ts if ts_type else None,
    )
