"""The filtering client: publish to several topics, read ordered deliveries.

>>> from atomickafka.client import AtomicKafkaClient          # doctest: +SKIP
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
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.client.delivery import Delivery
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.wire import (
    MAX_VALUE_BYTES,
    MessageError,
    MessageType,
    client_message,
    decode_record,
    encode_client,
    is_valid_topic_name,
    parse_destinations,
)
from atomickafka.kafka.consumer import consume_batch, make_consumer, usable
from atomickafka.kafka.producer import RecordProducer, type_headers
from atomickafka.kafka.status import Status, StatusWatch
from atomickafka.kafka.topics import Layout, delivery_topic, header_type, input_topic

__all__ = [
    "AtomicKafkaClient",
    "DeliveryError",
    "DestinationError",
    "OfflineDestinationError",
    "SentCallback",
]

#: Called once every record of a sent message is acknowledged (``None``) or failed.
SentCallback = Callable[[str, KafkaError | None], None]

_REFRESH_S = 1.0  # how often send() looks at the status topic again


class DeliveryError(RuntimeError):
    """The broker did not accept one or more sent messages."""


class DestinationError(ValueError):
    """The destinations cannot take the message as they are served now."""


class OfflineDestinationError(DestinationError):
    """A destination has no live AtomicKafka node: its other destinations would stall."""


class _Pending:
    """Counts the records of one message until all are acknowledged."""

    __slots__ = ("callback", "error", "left", "message_id", "owner")

    def __init__(
        self, owner: AtomicKafkaClient, message_id: str, left: int, callback: SentCallback | None
    ) -> None:
        self.owner, self.message_id, self.left, self.callback = owner, message_id, left, callback
        self.error: KafkaError | None = None

    def on_delivery(self, err: KafkaError | None, msg: KafkaMessage) -> None:
        self.left -= 1
        if err is not None and self.error is None:
            self.error = err
            raw = msg.value() or b""
            self.owner.failures.append((raw[:120].decode(errors="replace"), err))
        if self.left == 0 and self.callback is not None:
            self.callback(self.message_id, self.error)


class AtomicKafkaClient:
    """Send atomic-multicast messages and read a topic's ordered deliveries.

    ``layout`` must match the nodes' ``--layout``. ``config`` holds librdkafka settings
    (``-X``) applied to every Kafka client this object creates. Before sending to a
    topic the client checks, in the status topic, that a node serves it and which
    protocol it runs (``direct``: the message is written to every destination's input
    log; otherwise to one). ``allow_offline`` sends anyway to topics without a live node
    (their other destinations then wait until one starts), with ``algorithm`` (default
    :data:`~atomickafka.core.engine.DEFAULT_ALGORITHM`) when no node says which.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        layout: Layout | str = Layout.SPLIT,
        client_id: str | None = None,
        config: Mapping[str, str] | None = None,
        algorithm: Algorithm | str | None = None,
        allow_offline: bool = False,
        max_value_bytes: int = MAX_VALUE_BYTES,
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
        self.algorithm = None if algorithm is None else Algorithm(algorithm)
        self.allow_offline = allow_offline
        self.max_value_bytes = max_value_bytes
        self.failures: list[tuple[str, KafkaError]] = []
        self._config = dict(config or {})
        self._seq = itertools.count()
        self._producer: RecordProducer | None = None
        self._watch: StatusWatch | None = None
        self._watched_at = 0.0
        self._routes: dict[tuple[str, ...], tuple[Algorithm, int] | DestinationError] = {}
        self._partitions: dict[str, int] = {}
        self._headers = type_headers(MessageType.CLIENT) if self.layout is Layout.SHARED else None

    # ------------------------------------------------------------------ sending

    def send(
        self,
        value: Any,
        destinations: Iterable[str],
        via: str | None = None,
        *,
        key: str | bytes | None = None,
        on_sent: SentCallback | None = None,
    ) -> str:
        """Publish ``value`` (any JSON value) to every topic in ``destinations``; return
        its messageID.

        Asynchronous: :meth:`flush` waits until the broker has every sent message, and
        ``on_sent(messageID, error)`` is called once it has all of this one's records.
        ``via`` writes the message to that topic's input log instead, which relays it if
        it is not a destination. On a partitioned topic ``key`` keeps messages in one
        layer (so they keep their relative order cheaply); without it messages are spread
        round-robin. Raises ``ValueError`` (:class:`OfflineDestinationError` for a topic
        without a live node) before anything is written.
        """
        topics = parse_destinations(destinations)
        if via is not None and not is_valid_topic_name(via):
            raise ValueError(f"via is not a valid topic name: {via!r}")
        seq = next(self._seq)
        message_id = f"{self.id_prefix}-{seq}"
        route = [*topics, via] if via is not None else list(topics)
        algorithm, partitions = self._serving(route)
        layer = _layer(key, seq, partitions)
        message = client_message(message_id, topics, value, self.client_id, layer)
        size = len(message.value or b"")
        if size > self.max_value_bytes:
            raise ValueError(
                f"the value is {size} bytes as JSON; AtomicKafka carries at most "
                f"{self.max_value_bytes} bytes (MAX_VALUE_BYTES)"
            )
        if via is not None:
            targets = (
                [via] if via not in topics or algorithm is not Algorithm.DIRECT else list(topics)
            )
        elif algorithm is Algorithm.DIRECT:
            targets = list(topics)
        else:
            targets = [topics[zlib.crc32(message_id.encode()) % len(topics)]]
        producer = self._ensure_producer()
        payload = encode_client(message)
        pending = _Pending(self, message_id, len(targets), on_sent)
        for target in targets:
            producer.send(
                input_topic(target, self.layout),
                payload,
                partition=layer,
                headers=self._headers,
                on_delivery=pending.on_delivery,
            )
        producer.poll(0)
        return message_id

    def _serving(self, topics: list[str]) -> tuple[Algorithm, int]:
        """The protocol the topics' nodes run and the layers they share; raises
        :class:`OfflineDestinationError` for a topic no live node serves. Decided once
        per route until the statuses are read again (not per message)."""
        statuses = self._statuses()
        key = tuple(topics)
        known = self._routes.get(key)
        if known is None:
            known = self._routes[key] = self._judge(topics, statuses)
        if isinstance(known, DestinationError):
            raise type(known)(str(known))  # a fresh one: no traceback piles up
        return known

    def _judge(
        self, topics: list[str], statuses: dict[str, Status]
    ) -> tuple[Algorithm, int] | DestinationError:
        now = time.time()
        offline = []
        algorithms: set[str] = set()
        layers: list[int] = []
        for topic in dict.fromkeys(topics):
            mine = [s for s in statuses.values() if s.topic == topic]
            nodes = [s for s in mine if s.role == "node"]
            if not nodes or not all(s.live(now) for s in mine):
                offline.append(_describe(topic, mine, now))
                continue
            algorithms.update(s.algorithm for s in nodes)
            layers.append(min(s.partitions for s in nodes))
        if offline and not self.allow_offline:
            return OfflineDestinationError(
                f"no live AtomicKafka node for {'; '.join(offline)}: start one "
                "(atomickafka node/cluster), or send with allow_offline / --allow-offline"
            )
        if len(algorithms) > 1:
            return DestinationError(
                f"the destinations' nodes run different protocols ({', '.join(sorted(algorithms))})"
            )
        algorithm = (
            Algorithm(algorithms.pop()) if algorithms else self.algorithm or DEFAULT_ALGORITHM
        )
        return algorithm, min(layers, default=1)

    def _statuses(self) -> dict[str, Status]:
        if self._watch is None:
            self._watch = StatusWatch(self.bootstrap_servers, self._config)
        now = time.monotonic()
        if now - self._watched_at >= _REFRESH_S:
            self._watched_at = now
            self._routes.clear()  # judged again against what was read now
            return self._watch.refresh()
        return self._watch.statuses

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch metadata for ``topics``' input logs and read the node statuses now, so
        the first :meth:`send` does not wait for them (before latency-sensitive traffic)."""
        names = [input_topic(t, self.layout) for t in parse_destinations(topics)]
        self._ensure_producer().warm_up(names, timeout_s)
        self._statuses()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every sent message is acknowledged; raise :class:`DeliveryError` if not."""
        if self._producer is not None:
            remaining = self._producer.flush(timeout_s)
            if remaining:
                raise DeliveryError(f"{remaining} records not acknowledged after {timeout_s}s")
        if self.failures:
            failures, self.failures = self.failures, []
            first_record, first_err = failures[0]
            raise DeliveryError(
                f"{len(failures)} records failed; first: {first_err} for {first_record}"
            )

    def _ensure_producer(self) -> RecordProducer:
        if self._producer is None:
            self._producer = RecordProducer(
                self.bootstrap_servers, self._config, **{"client.id": self.client_id}
            )
        return self._producer

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
        if max_messages is not None and max_messages <= 0:
            return
        consumer = make_consumer(
            self.bootstrap_servers, None, self._config, **{"enable.partition.eof": False}
        )
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(delivery_topic(topic, self.layout), 0, start)])
        seen: set[str] = set()
        count = 0
        idle_deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while idle_deadline is None or time.monotonic() < idle_deadline:
                for record in usable(consume_batch(consumer, 1000, 0.1)):
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
        """Flush what was sent and release the Kafka clients."""
        try:
            if self._producer is not None:
                self.flush()
                self._producer = None
        finally:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

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


def _layer(key: str | bytes | None, seq: int, partitions: int) -> int | None:
    """The layer of a message: by key, else round-robin; ``None`` when unpartitioned."""
    if partitions <= 1:
        return None
    if key is None:
        return seq % partitions
    data = key.encode() if isinstance(key, str) else key
    return zlib.crc32(data) % partitions


def _describe(topic: str, statuses: list[Status], now: float) -> str:
    if not statuses:
        return f"{topic!r} (no node has ever published a status)"
    newest = max(statuses, key=lambda s: s.time)
    return f"{topic!r} (last status {newest.age_s(now):.0f} s ago)"


_DELIVERY_TYPES = (MessageType.DELIVERY.value.encode(), None)


def _to_delivery(record: KafkaMessage, topic: str) -> Delivery | None:
    if header_type(record) not in _DELIVERY_TYPES:
        return None  # a client record or a bundle, in the shared layout
    raw = record.value()
    if raw is None:
        return None
    try:
        (message,) = decode_record(raw)
    except (MessageError, ValueError):
        return None  # not ours; the node sets malformed input aside
    if message.messageType is not MessageType.DELIVERY or message.timeStamp is None:
        return None
    if message.sentFromTopic != topic:
        return None  # only the topic's own node (or merger) delivers into it
    ts_type, ts = record.timestamp()
    return Delivery(
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
