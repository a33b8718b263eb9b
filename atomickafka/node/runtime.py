"""The Kafka shell around one node's :class:`~atomickafka.core.engine.Engine` (§6).

The loop, per batch: consume up to ``batch_size`` records of the input log, decode them
(a record that is not AtomicKafka's goes to the dead-letter topic with the reason),
feed the messages to the engine, and produce what it returns: the control messages
bundled per destination, each delivery as one record, a dead letter for each message
it refused or dropped. The input offset of a batch is committed only once the broker
has acknowledged every output of that batch and of every batch before it
(:class:`~atomickafka.node.offsets.OffsetsTracker`), so a crash never loses an output
whose input was committed.

Recovery rests on determinism: at start the node re-reads its input log from the
beginning, rebuilding the engine's state; outputs of records below the committed
offset were already written and are dropped, outputs from there on are produced (again,
if the crash came between produce and commit; receivers drop repeated messageIDs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.core.engine import Engine, Output, Step
from atomickafka.core.reader import (
    DEAD_LETTER_ERROR_HEADER,
    DEAD_LETTER_MESSAGES_HEADER,
    DEAD_LETTER_OFFSET_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEAD_LETTER_TRUNCATED_HEADER,
    declares_delivery,
)
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    decode_record,
    encode_delivery,
    encode_watermark,
    pack_bundles,
)
from atomickafka.errors import AtomicKafkaError
from atomickafka.kafka.admin import (
    KEEP_FOREVER,
    MIN_MESSAGE_BYTES,
    TopicSpec,
    admin_client,
    ensure_topics,
    too_small,
)
from atomickafka.kafka.consumer import consume_batch, make_consumer, retry_transient, usable
from atomickafka.kafka.producer import RecordProducer, type_headers
from atomickafka.kafka.status import Role, Status, WaitingHead, publish_status
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
    node_group,
)
from atomickafka.node.config import NodeConfig
from atomickafka.node.lifecycle import Stoppable
from atomickafka.node.metrics import HeadWatch, Rates, status_of
from atomickafka.node.offsets import OffsetsTracker, Ticket

__all__ = ["NodeRuntime", "NodeStartError", "node_topic_specs"]

log = logging.getLogger("atomickafka.node")

#: How much of a set-aside record the dead-letter topic keeps (all of any record a
#: producer with the default limits can write; more only when the broker allows more).
_DEAD_LETTER_KEEP: Final = 990_000


class NodeStartError(AtomicKafkaError):
    """The node cannot start safely; the message says why and what to do."""


def node_topic_specs(config: NodeConfig) -> dict[str, TopicSpec]:
    """Every Kafka topic the node of ``config`` needs, with partitions and configs."""
    topic, layout = config.topic, config.layout
    specs = {
        delivery_topic(topic): TopicSpec(),
        dead_letter_topic(topic): TopicSpec(),
        STATUS_TOPIC: TopicSpec(configs={"cleanup.policy": "compact"}),
    }
    specs[input_topic(topic, layout)] = TopicSpec(config.partitions, KEEP_FOREVER)
    if config.layered:
        specs[layers_topic(topic)] = TopicSpec(config.partitions, KEEP_FOREVER)
    return specs


class NodeRuntime(Stoppable):
    """Runs one node until :meth:`stop` is called (or a signal arrives).

    Create it in the process that runs it: Kafka clients must not cross a ``fork()``.
    """

    def __init__(self, config: NodeConfig) -> None:
        super().__init__()
        self.config = config
        self.engine = Engine(
            config.topic,
            config.node_id,
            config.algorithm,
            partition=config.layer if config.layered else None,
            max_value_bytes=config.max_value_bytes,
        )
        self.rates = Rates(3)  # records read, outputs, deliveries per second
        self.records_read = 0  # Kafka records of the input log processed (not replayed)
        self.head = HeadWatch(config.stuck_after_s)
        self.dead_letters = 0
        self._input = input_topic(config.topic, config.layout)
        self._partition = config.partition
        self._shared = config.layout is Layout.SHARED
        self._tracker = OffsetsTracker(0)
        self._last_commit = 0.0
        self._producer: RecordProducer | None = None
        self._consumer: Consumer | None = None
        self._routes: dict[str, str] = {}
        self._watermark_sent = -1
        self._status_count = 0
        self._failed = False
        self._mismatch_logged: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the node; return an exit status (0 after a clean stop)."""
        cfg = self.config
        admin = admin_client(cfg.bootstrap, cfg.overrides)
        if cfg.create_topics:
            ensure_topics(admin, node_topic_specs(cfg))
        small = too_small(admin, [t for t in node_topic_specs(cfg) if t != STATUS_TOPIC])
        if small:
            names = ", ".join(f"{t} ({v})" for t, v in small.items())
            raise NodeStartError(
                f"topics take records of fewer than {MIN_MESSAGE_BYTES} bytes: {names}; "
                "AtomicKafka writes records and batches of up to 1,000,000 bytes. Raise "
                "max.message.bytes (kafka-configs --alter --entity-type topics "
                f"--entity-name TOPIC --add-config max.message.bytes={MIN_MESSAGE_BYTES})"
            )
        self._producer = RecordProducer(cfg.bootstrap, cfg.overrides)
        self._consumer = make_consumer(
            cfg.bootstrap, node_group(cfg.topic, cfg.layer), cfg.overrides
        )
        try:
            self._start_position()
            status = self._loop(max_seconds)
        finally:
            self._shutdown()
        return 1 if self._failed else status

    def _start_position(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        part = TopicPartition(self._input, self._partition)
        committed = retry_transient(
            lambda: consumer.committed([part], timeout=10)[0].offset, "committed offset"
        )
        low, high = retry_transient(
            lambda: consumer.get_watermark_offsets(part, timeout=10), "watermarks"
        )
        start = committed if committed >= 0 else 0
        if low > 0:
            raise NodeStartError(
                f"input log {self._input}[{self._partition}] starts at offset {low}, not 0: "
                "records were deleted (retention?), so the node's state cannot be rebuilt"
            )
        if start > high:
            group = node_group(self.config.topic, self.config.layer)
            raise NodeStartError(
                f"committed offset {start} of group {group} is past the end ({high}) of "
                f"{self._input}: was the topic re-created? "
                "Delete the group's offsets (kafka-consumer-groups --reset-offsets) to start over"
            )
        self._tracker = OffsetsTracker(start)
        consumer.assign([TopicPartition(self._input, self._partition, OFFSET_BEGINNING)])
        log.info(
            "node %s starting: input %s[%d], replaying %d records, algorithm %s, layout %s",
            self.config.key,
            self._input,
            self._partition,
            start,
            self.config.algorithm.value,
            self.config.layout.value,
        )

    def _loop(self, max_seconds: float | None) -> int:
        assert self._consumer is not None and self._producer is not None
        cfg = self.config
        consumer, producer = self._consumer, self._producer
        self._start_clock(cfg.status_interval_s, max_seconds)
        while not self.stopping:
            records = usable(consume_batch(consumer, cfg.batch_size, cfg.poll_timeout_s))
            if records:
                self._process(records)
            producer.poll(0)
            now = time.monotonic()
            if self._settle(now) != 0:
                return 1
            if self._tick(now):
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
        log.info("node %s stopped", self.config.key)

    # ------------------------------------------------------------------ the batch

    def _process(self, records: list[KafkaMessage]) -> None:
        offsets = [r.offset() or 0 for r in records]
        cut = self._tracker.split(offsets)
        if 0 < cut < len(records):  # straddles the end of the replay: split it there
            self._apply(records[:cut])
            self._apply(records[cut:])
        else:
            self._apply(records)

    def _apply(self, records: Sequence[KafkaMessage]) -> None:
        messages: list[Message] = []
        sources: list[KafkaMessage] = []
        unreadable: list[tuple[KafkaMessage, str]] = []
        shared = self._shared
        for record in records:
            if shared and declares_delivery(record):
                continue  # our own output, in the shared layout
            raw = record.value()
            try:
                if raw is None:
                    raise MessageError(None, "record has no value")
                decoded = decode_record(raw)
            except MessageError as exc:
                unreadable.append((record, str(exc)))
                continue
            messages.extend(decoded)
            sources.extend([record] * len(decoded))
        step = self.engine.step(messages)
        ticket = self._tracker.processed(records[-1].offset() or 0)
        if ticket is None:
            return  # replay: these outputs were written before the restart
        self.records_read += len(records)
        for record, reason in unreadable:
            self._dead_letter(ticket, record.value(), reason, record)
        groups: dict[int, tuple[KafkaMessage, list[tuple[Message, str]]]] = {}
        for rejection in step.rejected:  # one dead letter per input record
            if rejection.position is None:  # held in an earlier batch (§4.11)
                note = {"messageID": rejection.message.messageID, "held": True}
                self._dead_letter(ticket, orjson.dumps(note), rejection.reason, None)
                continue
            source = sources[rejection.position]
            refused = groups.setdefault(id(source), (source, []))[1]
            refused.append((rejection.message, rejection.reason))
        for source, refused in groups.values():
            self._refused(ticket, refused, source)
        for aborted in step.aborted:
            note = {"messageID": aborted.messageID, "topic": list(aborted.destinations)}
            self._dead_letter(ticket, orjson.dumps(note), f"aborted: {aborted.reason}", None)
            log.warning("message %s dropped: %s", aborted.messageID, aborted.reason)
        self._produce(step, ticket)

    def _produce(self, step: Step, ticket: Ticket) -> None:
        assert self._producer is not None
        send = self._producer.send
        callback = ticket.on_delivery
        cfg = self.config
        control: dict[str, list[Message]] = {}
        deliveries: list[Output] = []
        for output in step.outputs:
            kind = output.message.messageType
            if kind is MessageType.DELIVERY or kind is MessageType.PARTITION_DELIVERY:
                deliveries.append(output)
            else:
                control.setdefault(output.topic, []).append(output.message)
        bundle_headers = type_headers(MessageType.BUNDLE) if self._shared else None
        for target, messages in control.items():
            for record in pack_bundles(
                messages,
                sender_id=cfg.node_id,
                sent_from=cfg.topic,
                protocol=cfg.algorithm.value,
                partition=self.engine.partition,
            ):
                ticket.sent()
                send(
                    self._route(target),
                    record,
                    partition=self._partition,
                    headers=bundle_headers,
                    on_delivery=callback,
                )
        if deliveries:
            where = layers_topic(cfg.topic) if cfg.layered else delivery_topic(cfg.topic)
            headers = type_headers(MessageType.DELIVERY) if self._shared else None
            for output in deliveries:
                ticket.sent()
                send(
                    where,
                    encode_delivery(output.message),
                    partition=self._partition,
                    headers=headers,
                    on_delivery=callback,
                )
        if cfg.layered:
            watermark = self.engine.watermark()
            if watermark != self._watermark_sent:
                ticket.sent()
                send(
                    layers_topic(cfg.topic),
                    encode_watermark(cfg.node_id, watermark, self._partition),
                    partition=self._partition,
                    on_delivery=callback,
                )
                self._watermark_sent = watermark

    def _route(self, topic: str) -> str:
        name = self._routes.get(topic)
        if name is None:
            name = self._routes[topic] = input_topic(topic, self.config.layout)
        return name

    # ------------------------------------------------------------------ set aside

    def _refused(
        self, ticket: Ticket, refused: list[tuple[Message, str]], source: KafkaMessage
    ) -> None:
        """Messages of one input record the engine refused: the record, verbatim, in the
        dead-letter topic, with the first reason and the ids of the refused messages."""
        first, reason = refused[0]
        if "protocol mismatch" in reason and first.senderID not in self._mismatch_logged:
            self._mismatch_logged.add(first.senderID)
            log.warning(
                "records from %s run another protocol and are set aside in %s: %s",
                first.senderID or "another node",
                dead_letter_topic(self.config.topic),
                reason,
            )
        if len(refused) > 1:
            reason += f" (and {len(refused) - 1} more messages of this record)"
        ids = ",".join(m.messageID for m, _ in refused)[:2000]
        self._dead_letter(
            ticket, source.value(), reason, source, [(DEAD_LETTER_MESSAGES_HEADER, ids)]
        )

    def _dead_letter(
        self,
        ticket: Ticket,
        value: bytes | None,
        reason: str,
        source: KafkaMessage | None,
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Set something aside in the dead-letter topic, with why and where it came from.

        Its write is part of ``ticket``: the input offset is committed only once the
        dead letter is safely written too.
        """
        assert self._producer is not None
        self.dead_letters += 1
        headers: list[tuple[str, str | bytes | None]] = [
            (DEAD_LETTER_ERROR_HEADER, reason.encode())
        ]
        headers += [(key, text.encode()) for key, text in extra]
        if source is not None:
            log.warning(
                "record at %s[%s]@%s set aside: %s",
                source.topic(),
                source.partition(),
                source.offset(),
                reason,
            )
            headers += [
                (DEAD_LETTER_SOURCE_HEADER, f"{source.topic()}/{source.partition()}".encode()),
                (DEAD_LETTER_OFFSET_HEADER, str(source.offset()).encode()),
            ]
        if value is not None and len(value) > _DEAD_LETTER_KEEP:
            headers.append((DEAD_LETTER_TRUNCATED_HEADER, str(len(value)).encode()))
            value = value[:_DEAD_LETTER_KEEP]
        ticket.sent()
        self._producer.send(
            dead_letter_topic(self.config.topic),
            value,
            key=None if source is None else source.key(),
            headers=headers,
            on_delivery=ticket.on_delivery,
        )

    # ------------------------------------------------------------------ commits

    def _settle(self, now: float, *, force: bool = False) -> int:
        """Set aside what the broker refused for good, commit past every acknowledged
        batch; non-zero once an output failed (the node then exits, and replays)."""
        tracker = self._tracker
        for ticket, msg, reason in tracker.unwritable():
            log.error("an output to %s could not be written: %s", msg.topic(), reason)
            self._dead_letter(
                ticket, msg.value(), f"output to {msg.topic()} refused: {reason}", None
            )
        target = tracker.target()
        if tracker.failed is not None:
            if not self._failed:
                log.error("%s; exiting so that a restart replays it", tracker.failed)
            self._failed = True
            return 1
        if target is not None and (
            force or now - self._last_commit >= self.config.commit_interval_s
        ):
            assert self._consumer is not None
            offsets = [TopicPartition(self._input, self._partition, target)]
            try:
                if force:
                    self._consumer.commit(offsets=offsets, asynchronous=False)
                else:
                    self._consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:  # a commit is retried with the next batch
                log.warning("commit of offset %d failed: %s", target, exc)
                return 0
            tracker.committed_at(target)
            self._last_commit = now
        return 0

    # ------------------------------------------------------------------ status

    def measure(self, now: float) -> None:
        """Take the rates over the interval since the last measure and note the queue
        head; the status publisher does this once per status interval."""
        stats = self.engine.stats
        self.rates.take((self.records_read, stats.records_out, stats.deliveries), now)
        head = self.engine.oldest_pending()
        self.head.observe(None if head is None else head.messageID, now)

    def status(self, now: float | None = None) -> Status:
        """The node's current status (counters, the rates and queue head as last
        measured, what the first queued messages wait for); reading it changes nothing."""
        mono = time.monotonic() if now is None else now
        engine, cfg = self.engine, self.config
        stats = engine.stats
        in_per_s, out_per_s, deliveries_per_s = self.rates.last
        waiting = tuple(
            WaitingHead(w.messageID, w.timeStamp, w.decided, w.missing) for w in engine.waiting(10)
        )
        return replace(
            status_of(cfg, Role.NODE, cfg.key, cfg.node_id),
            layer=cfg.layer if cfg.layered else None,
            clock=engine.clock,
            watermark=engine.watermark() if cfg.layered else None,
            pending=engine.pending_count,
            oldest_pending_id=waiting[0].message_id if waiting else None,
            oldest_pending_age_s=self.head.age(mono) if waiting else None,
            waiting=waiting,
            records_in=stats.records_in,
            records_out=stats.records_out,
            deliveries=stats.deliveries,
            dead_letters=self.dead_letters,
            rejected=stats.rejected,
            protocol_mismatches=stats.protocol_mismatches,
            aborted=stats.aborted,
            records_in_per_s=in_per_s,
            records_out_per_s=out_per_s,
            deliveries_per_s=deliveries_per_s,
            replaying=self._tracker.replaying(),
        )

    def _publish_status(self, now: float) -> None:
        assert self._producer is not None
        self.measure(now)
        status = self.status(now)
        self._status_count += 1
        level = logging.INFO if self._status_count % 10 == 1 else logging.DEBUG
        log.log(level, "status", extra={"fields": status.to_dict()})
        stuck = self.head.stuck(now)
        head = status.head
        if stuck is not None and head is not None:
            missing = head.waiting_for
            log.warning(
                "message %s has held the queue head for %.0f s, waiting for %s",
                head.message_id,
                stuck,
                (
                    "the proposals of " + ", ".join(missing) + " (is a node running there?)"
                    if missing
                    else "its decision"
                ),
                extra={"fields": {"stuck": head.to_dict()}},
            )
        publish_status(self._producer, status)
