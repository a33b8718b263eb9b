"""The Kafka shell around one node's :class:`~atomickafka.core.engine.Engine`.

The loop, per batch: consume up to ``batch_size`` records of the input log, decode them
(setting malformed ones aside in the dead-letter topic with the reason), feed them to the
engine, produce its outputs asynchronously, and move on. The input offset of a batch is
committed only once the broker has acknowledged every output of that batch and of every
batch before it, so a crash never loses an output whose input was committed.

Recovery rests on determinism: at start the node re-reads its input log from the
beginning, rebuilding the engine's state; outputs of records below the committed offset
were already written and are dropped, outputs from there on are produced (again, if the
crash came between produce and commit; receivers drop such duplicates by messageID).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import Message as KafkaMessage
from confluent_kafka._types import HeadersType
from confluent_kafka.admin import AdminClient

from atomickafka.core.engine import Algorithm, Engine, Output
from atomickafka.kafka.settings import consumer_config, producer_config
from atomickafka.kafka.consumer import consume_batch, retry_transient, watermarks
from atomickafka.core.wire import Message, MessageError, MessageType, decode, encode
from atomickafka.node.metrics import NodeMetrics, NodeStatus
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    TYPE_HEADER,
    Layout,
    dead_letter_topic,
    delivery_topic,
    ensure_topics,
    input_topic,
    is_delivery_record,
    node_group,
    node_topics,
)

__all__ = ["NodeConfig", "NodeRuntime", "NodeStartError"]

log = logging.getLogger("atomickafka.node")

_TYPE_HEADERS: dict[MessageType, HeadersType] = {
    t: [(TYPE_HEADER, t.value.encode())] for t in MessageType
}


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything one node needs to run."""

    bootstrap: str
    topic: str
    algorithm: Algorithm = Algorithm.OPTIMIZED
    layout: Layout = Layout.SPLIT
    overrides: dict[str, str] = field(default_factory=dict)
    batch_size: int = 2000
    poll_timeout_s: float = 0.05
    status_interval_s: float = 1.0
    commit_interval_s: float = 0.1
    create_topics: bool = True
    max_input_bytes: int = 900_000  # leaves room under Kafka's 1 MB default for our fields

    @property
    def node_id(self) -> str:
        """Stable across restarts, so that replayed outputs equal the originals."""
        return f"node-{self.topic}"


_DEAD_LETTER_KEEP = 512 * 1024


class NodeStartError(RuntimeError):
    """The node cannot start safely; the message says why and what to do."""


def _produce_retrying(producer: Producer, topic: str, value: bytes | None, **kwargs: Any) -> None:
    """``produce``, waiting while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)  # let delivery reports drain the queue


class _Batch:
    """Outputs of one input batch still awaiting the broker's acknowledgement."""

    __slots__ = ("error", "next_offset", "outstanding")

    def __init__(self, next_offset: int) -> None:
        self.next_offset = next_offset
        self.outstanding = 0
        self.error: KafkaError | None = None

    def on_delivery(self, err: KafkaError | None, _msg: KafkaMessage) -> None:
        self.outstanding -= 1
        if err is not None and self.error is None:
            self.error = err


class NodeRuntime:
    """Runs one node until :meth:`stop` is called (or a signal arrives).

    Create it in the process that runs it: Kafka clients must not cross a ``fork()``.
    """

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.engine = Engine(config.topic, config.node_id, config.algorithm)
        self.metrics = NodeMetrics()
        self._input = input_topic(config.topic, config.layout)
        self._stop = threading.Event()
        self._batches: deque[_Batch] = deque()
        self._committed = -1
        self._last_commit = 0.0
        self._replay_until = 0
        self._position = 0
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._routes: dict[tuple[str, bool], str] = {}
        self._status_count = 0
        self._failed = False
        self._dead_letters: list[tuple[KafkaMessage, str]] = []

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Ask the loop to finish its batch, flush, commit and return."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """Stop cleanly on SIGINT and SIGTERM."""

        def _handler(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: stopping", signum)
            self.stop()

        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the node; return an exit status (0 after a clean stop)."""
        cfg = self.config
        if cfg.create_topics:
            admin = AdminClient({"bootstrap.servers": cfg.bootstrap, **cfg.overrides})
            ensure_topics(admin, node_topics(cfg.topic, cfg.layout))
        self._producer = Producer(producer_config(cfg.bootstrap, cfg.overrides))
        self._consumer = Consumer(
            consumer_config(cfg.bootstrap, node_group(cfg.topic), cfg.overrides)
        )
        try:
            self._start_position()
            status = self._loop(max_seconds)
        finally:
            self._shutdown()
        return 1 if self._failed else status

    def _start_position(self) -> None:
        assert self._consumer is not None
        part = TopicPartition(self._input, 0)
        consumer = self._consumer
        committed = retry_transient(
            lambda: consumer.committed([part], timeout=10)[0].offset, "committed offset"
        )
        low, high = watermarks(consumer, part)
        self._committed = committed if committed >= 0 else 0
        if low > 0:
            raise NodeStartError(
                f"input log {self._input} starts at offset {low}, not 0: records were "
                "deleted (retention?), so the node's state cannot be rebuilt by replay"
            )
        if self._committed > high:
            raise NodeStartError(
                f"committed offset {self._committed} of group {node_group(self.config.topic)} "
                f"is past the end ({high}) of {self._input}: was the topic re-created? "
                "Delete the group's offsets (kafka-consumer-groups --reset-offsets) to start over"
            )
        self._replay_until = self._committed
        self._consumer.assign([TopicPartition(self._input, 0, OFFSET_BEGINNING)])
        log.info(
            "node %s starting: input %s, replaying %d records, algorithm %s, layout %s",
            self.config.topic,
            self._input,
            self._replay_until,
            self.config.algorithm.value,
            self.config.layout.value,
        )

    def _loop(self, max_seconds: float | None) -> int:
        assert self._consumer is not None and self._producer is not None
        cfg = self.config
        consumer, producer = self._consumer, self._producer
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        next_status = 0.0
        while not self._stop.is_set():
            records = consume_batch(consumer, cfg.batch_size, cfg.poll_timeout_s)
            if records:
                self._process(records)
            producer.poll(0)
            now = time.monotonic()
            if self._settle(now) != 0:
                return 1
            if now >= next_status:
                self._publish_status(now)
                next_status = now + cfg.status_interval_s
            if deadline is not None and now >= deadline:
                break
        return 0

    def _shutdown(self) -> None:
        producer, consumer = self._producer, self._consumer
        if producer is not None:
            remaining = producer.flush(30)
            if remaining:
                log.error("%d outputs not acknowledged at shutdown", remaining)
                self._failed = True
            else:
                self._settle(time.monotonic(), force=True)
        if consumer is not None:
            consumer.close()
        log.info("node %s stopped", self.config.topic)

    # ------------------------------------------------------------------ the batch

    def _process(self, records: list[KafkaMessage]) -> None:
        decoded: list[Message] = []
        first_seen = self.metrics.first_seen
        now = time.monotonic()
        last_offset = -1
        for record in records:
            err = record.error()
            if err is not None:
                if err.fatal():
                    raise KafkaException(err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer: %s (librdkafka retries)", err)
                continue
            offset = record.offset()
            assert offset is not None
            if offset >= self._replay_until > last_offset >= 0 and decoded:
                # this batch straddles the end of the replay: split it there
                self._apply(decoded, last_offset)
                decoded = []
            last_offset = offset
            message = self._decode(record, offset)
            if message is not None:
                decoded.append(message)
                if message.messageID not in first_seen:
                    first_seen[message.messageID] = now
        if last_offset >= 0:
            self._apply(decoded, last_offset)

    def _decode(self, record: KafkaMessage, offset: int) -> Message | None:
        if self.config.layout is Layout.SHARED and is_delivery_record(record):
            return None  # our own output in the shared layout
        raw = record.value()
        try:
            if raw is None:
                raise MessageError(None, "record has no value")
            if len(raw) > self.config.max_input_bytes:
                raise MessageError(
                    None,
                    f"record of {len(raw)} bytes is over the {self.config.max_input_bytes}-byte "
                    "limit (its Notify and Delivery copies must fit in a Kafka record)",
                )
            message = decode(raw)
        except MessageError as exc:
            if offset >= self._replay_until:
                self._dead_letters.append((record, str(exc)))
            return None
        if message.messageType is MessageType.DELIVERY:
            return None
        return message

    def _apply(self, decoded: list[Message], last_offset: int) -> None:
        outputs = self.engine.handle_batch(decoded)
        self._position = last_offset + 1
        if last_offset < self._replay_until:
            return  # replay: these outputs were written before the restart
        batch = _Batch(last_offset + 1)
        self._batches.append(batch)
        if self._dead_letters:
            for record, reason in self._dead_letters:
                self._dead_letter(record, reason, batch)
            self._dead_letters.clear()
        if outputs:
            self._produce(outputs, batch)

    def _produce(self, outputs: list[Output], batch: _Batch) -> None:
        assert self._producer is not None
        producer = self._producer
        route = self._route
        callback: Callable[[KafkaError | None, KafkaMessage], None] = batch.on_delivery
        for output in outputs:
            message = output.message
            value = encode(message)
            topic = route(output.topic, message.messageType is MessageType.DELIVERY)
            batch.outstanding += 1
            _produce_retrying(
                producer,
                topic,
                value,
                on_delivery=callback,
                headers=_TYPE_HEADERS[message.messageType],
            )

    def _route(self, topic: str, is_delivery: bool) -> str:
        key = (topic, is_delivery)
        name = self._routes.get(key)
        if name is None:
            layout = self.config.layout
            name = delivery_topic(topic, layout) if is_delivery else input_topic(topic, layout)
            self._routes[key] = name
        return name

    def _dead_letter(self, record: KafkaMessage, reason: str, batch: _Batch) -> None:
        """Set a malformed record aside, with why and where it came from.

        Its write is part of ``batch``: the input offset is committed only once the
        dead letter is safely written too.
        """
        assert self._producer is not None
        self.metrics.dead_letters += 1
        log.warning(
            "malformed record at %s[%s]@%s set aside: %s",
            record.topic(),
            record.partition(),
            record.offset(),
            reason,
        )
        headers: list[tuple[str, str | bytes | None]] = [
            ("atomickafka-error", reason.encode()),
            ("atomickafka-source", f"{record.topic()}/{record.partition()}".encode()),
            ("atomickafka-offset", str(record.offset()).encode()),
        ]
        value = record.value()
        if value is not None and len(value) > _DEAD_LETTER_KEEP:
            headers.append(("atomickafka-truncated-from", str(len(value)).encode()))
            value = value[:_DEAD_LETTER_KEEP]
        batch.outstanding += 1
        _produce_retrying(
            self._producer,
            dead_letter_topic(self.config.topic),
            value,
            key=record.key(),
            headers=headers,
            on_delivery=batch.on_delivery,
        )

    # ------------------------------------------------------------------ commits

    def _settle(self, now: float, *, force: bool = False) -> int:
        """Commit past every fully acknowledged batch; non-zero if an output failed."""
        if self._failed:
            return 1
        batches = self._batches
        target = self._committed
        while batches and batches[0].outstanding <= 0:
            if batches[0].error is not None:
                # never commit at or past it: a restart replays and writes it again
                log.error(
                    "an output of the batch ending at offset %d failed: %s",
                    batches[0].next_offset - 1,
                    batches[0].error,
                )
                self._failed = True
                break
            target = batches.popleft().next_offset
        if self._failed and target <= self._committed:
            return 1
        if target > self._committed and (
            force or now - self._last_commit >= self.config.commit_interval_s
        ):
            assert self._consumer is not None
            offsets = [TopicPartition(self._input, 0, target)]
            if force:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            self._committed = target
            self._last_commit = now
        return 1 if self._failed else 0

    # ------------------------------------------------------------------ status

    def status(self, now: float | None = None) -> NodeStatus:
        """The node's current status (counters, pending, oldest pending age)."""
        replaying = self._position < self._replay_until
        return self.metrics.snapshot(
            self.engine, layout=self.config.layout.value, replaying=replaying, now=now
        )

    def _publish_status(self, now: float) -> None:
        assert self._producer is not None
        status = self.status(now)
        payload = orjson.dumps(status.to_dict())
        self._status_count += 1
        level = logging.INFO if self._status_count % 10 == 1 else logging.DEBUG
        log.log(level, "status", extra={"fields": status.to_dict()})
        with contextlib.suppress(BufferError):  # queue full: the next status will do
            self._producer.produce(STATUS_TOPIC, payload, key=self.config.topic.encode())
