"""The Kafka shell around one topic's merger batch layer: only the I/O loop (§6, §8).

It reads every partition of ``atomickafka-layers.T`` (``read_committed``), hands the
records to :class:`~atomickafka.node.merger_batch.MergerBatch` and writes what comes
back: the merged Delivery records to ``T``, ticks into idle layers' input logs, dead
letters, snapshots. Like a node it first waits for its role's lease (a standby takes
over when the active merger dies) and writes through a transactional producer that
fences older instances (or, at-least-once, a gapless one).

Recovery: the newest readable snapshot gives the merger's state and the layer offsets
to replay from; the last Delivery this merger wrote to ``T`` -- found by reading ``T``
backwards and taking only the merger's own records, so a record someone else wrote
into ``T`` is reported once and ignored, never trusted -- says what not to release
again. The merged order is strictly increasing, so that one key is enough.

A standing-by merger follows the snapshot topic and keeps the newest snapshot's state
loaded, so a takeover neither reads that topic nor restores a snapshot; it replays the
layers from that snapshot on (at most a snapshot interval). It does not follow the
layers themselves: docs/DESIGN.md §6.4 says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.core.merger import MergeKey
from atomickafka.core.signing import Signer
from atomickafka.errors import AtomicKafkaError, ConfigError
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.consumer import (
    last_matching,
    make_consumer,
    watermarks,
)
from atomickafka.kafka.secrets import load_signer
from atomickafka.kafka.status import LayerState, Role, Status, WaitingHead, publish_status
from atomickafka.kafka.topics import (
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
    merger_key,
    snapshot_topic,
)
from atomickafka.logs import log_context
from atomickafka.metrics.shell import ShellMetrics
from atomickafka.node.batch import OutRecord, Ready
from atomickafka.node.config import NodeConfig
from atomickafka.node.follow import SnapshotReader
from atomickafka.node.merger_batch import MergerBatch, MergerSpec, own_delivery_key
from atomickafka.node.metrics import HeadWatch, Rates, status_of
from atomickafka.node.role_shell import RoleShell
from atomickafka.node.runtime import NodeStartError, node_topic_specs, read_snapshots
from atomickafka.node.snapshots import LoadedSnapshot, choose_snapshot
from atomickafka.node.writers import (
    GaplessWriter,
    SplitWriter,
    Writer,
)

__all__ = ["MergerRuntime", "merger_spec"]

log = logging.getLogger("atomickafka.merger")

#: How long the head may stay blocked before the blocking layers are asked again.
TICK_RETRY_S: Final = 2.0


def merger_spec(config: NodeConfig, signer: Signer | None = None) -> MergerSpec:
    """The merger batch layer's settings for ``config`` (a partitioned topic)."""
    return MergerSpec(
        config.topic,
        config.partitions,
        role=merger_key(config.topic),
        layers_topic=layers_topic(config.topic),
        delivery_topic=delivery_topic(config.topic),
        input_topic=input_topic(config.topic, config.layout),
        dead_letter_topic=dead_letter_topic(config.topic),
        snapshot_topic=snapshot_topic(config.topic),
        snapshot_every_records=config.snapshot_every_records,
        snapshot_every_s=config.snapshot_every_s,
        signer=signer,
        delivery_format=config.delivery_format,
        control_format=config.control_format,
    )


class MergerRuntime(RoleShell):
    """Runs the merger of one partitioned topic until :meth:`stop` is called."""

    kind = "merger"

    def __init__(self, config: NodeConfig) -> None:
        if not config.layered:
            raise ConfigError("a merger serves a partitioned topic (partitions > 1)")
        super().__init__(config, ShellMetrics("merger", config.topic))
        self.signer = load_signer(config.secret_file)
        self.spec = merger_spec(config, self.signer)
        self.batch = MergerBatch(self.spec)
        self.key = merger_key(config.topic)
        self.sender_id = self.spec.sender_id
        self.foreign = 0  # records in T that are not this merger's
        self.rates = Rates(1)  # deliveries per second
        self._consumer: Consumer | None = None
        self._replay_ends: dict[int, int] = {}
        self._blocked_since: float | None = None
        self.recovery_s: float | None = None
        self._recovery_started = 0.0
        self._head_watch = HeadWatch(config.stuck_after_s)  # the head's age, for the metrics
        self._snapshots: SnapshotReader | None = None  # while a standby
        self._loaded: tuple[int, MergerBatch] | None = None  # the newest snapshot, restored

    @property
    def merger(self) -> object:
        """The merger core (for tests and tools)."""
        return self.batch.merger

    # ------------------------------------------------------------------ lifecycle

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the merger; return an exit status (0 after a clean stop). Its log lines
        carry its ``node`` (``T/merger``) and ``topic``."""
        with log_context(node=self.key, topic=self.config.topic, layer=None):
            return self._run(max_seconds)

    @property
    def role_key(self) -> str:
        """The merger's status key and lease name: ``T/merger``."""
        return self.key

    def _prepare_topics(self) -> None:
        cfg = self.config
        if cfg.create_topics:
            ensure_topics(admin_client(cfg.connection), node_topic_specs(cfg))

    def _start_standby(self) -> None:
        """Stand by following the snapshot topic (the newest snapshot kept restored)."""
        try:
            self._snapshots = SnapshotReader(self.config, self.key, self.signer)
            self._snapshots.to_end(60.0)
            self._load_newest()
        except (KafkaException, AtomicKafkaError) as exc:
            log.warning("merger %s: cannot follow its snapshots: %s", self.config.topic, exc)
            self._drop_snapshots()

    def _stand_by(self) -> None:
        reader, lease = self._snapshots, self._lease
        assert lease is not None
        if reader is not None:
            try:
                reader.read()
                self._load_newest()
            except (KafkaException, AtomicKafkaError) as exc:
                log.warning("merger %s: snapshots not followed: %s", self.config.topic, exc)
                self._drop_snapshots()
        lease.poll(0.2)

    def _load_newest(self) -> None:
        reader = self._snapshots
        if reader is None or not reader.follower.changed:
            return
        newest = next((s for s in reader.follower.snapshots() if s.state is not None), None)
        if newest is not None and (self._loaded is None or self._loaded[0] != newest.seq):
            self._loaded = (newest.seq, MergerBatch.recover(self.spec, newest))

    def _drop_snapshots(self) -> None:
        if self._snapshots is not None:
            self._snapshots.close()
        self._snapshots, self._loaded = None, None

    def _open(self) -> None:
        cfg = self.config
        started = time.monotonic()
        source = layers_topic(cfg.topic)
        consumer = make_consumer(cfg.connection, None, **{"isolation.level": "read_committed"})
        self._consumer = consumer
        if cfg.exactly_once:  # deliveries in transactions, ticks outside them (§6.3)
            self._writer = SplitWriter(
                cfg.connection,
                self.key,
                consumer,
                source,
                0,
                commit_interval_s=cfg.commit_interval_s,
                on_wait=self._heartbeat,
                on_written=self._wrote,
                holds_role=self.holds_lease,
            )
        else:
            self._writer = GaplessWriter(cfg.connection)
        bounds = {
            layer: watermarks(consumer, TopicPartition(source, layer))
            for layer in range(cfg.partitions)
        }
        snapshot = self._usable_snapshot(bounds)
        loaded, self._loaded = self._loaded, None
        if loaded is not None and snapshot is not None and loaded[0] == snapshot.seq:
            self.batch = loaded[1]  # restored while standing by
        else:
            self.batch = MergerBatch.recover(self.spec, snapshot)
        resume = self._last_own_delivery(consumer)
        if resume is not None:
            self.batch.resume_after(resume)
        start = []
        for layer, (_, high) in bounds.items():
            position = self.batch.positions.get(layer, 0)
            if high > position:
                self._replay_ends[layer] = high
            start.append(TopicPartition(source, layer, position))
        consumer.assign(start)
        self.active = True
        self.metrics.became_active()
        self._recovery_started = started
        self._note_recovered()
        log.info(
            "merger %s active: snapshot %s, resumes after %s, %s",
            cfg.topic,
            snapshot.seq if snapshot is not None else "none",
            resume,
            "exactly-once" if cfg.exactly_once else "at-least-once",
        )

    def _usable_snapshot(self, bounds: dict[int, tuple[int, int]]) -> LoadedSnapshot | None:
        """The newest snapshot every layer stream still holds (``bounds``: each layer
        partition's first and next offsets); refuse to start when a stream was cut
        below every snapshot, as a node does (DESIGN §6.5)."""
        reader = self._snapshots
        if reader is not None and reader.to_end(5.0):
            found = reader.follower.snapshots()  # followed while standing by
        else:
            found = read_snapshots(self.config, self.key, self.signer)
        if reader is not None:
            reader.close()
            self._snapshots = None
        choice = choose_snapshot(found, bounds)
        for why in choice.skipped:
            log.warning("%s", why)
        if choice.cut:
            raise NodeStartError(
                f"layer stream {layers_topic(self.config.topic)} partitions "
                f"{sorted(choice.cut)} start above every readable snapshot of the merger: "
                "records were deleted, so its state cannot be rebuilt. Keep layer streams "
                "longer than two snapshot intervals plus the longest downtime "
                "(docs/DESIGN.md §6.5)"
            )
        return choice.snapshot

    def _last_own_delivery(self, consumer: Consumer) -> MergeKey | None:
        """The key of the last Delivery this merger wrote to ``T``, reading backwards;
        records of other writers are counted and reported once, never trusted."""
        target = delivery_topic(self.config.topic)

        def passed(_record: KafkaMessage) -> None:
            self.foreign += 1

        found = last_matching(
            consumer,
            TopicPartition(target, 0),
            lambda record: own_delivery_key(self.spec, record),
            on_passed=passed,
        )
        if self.foreign:
            log.warning(
                "merger %s: %d records at the end of %s are not this merger's (another "
                "writer?); ignored",
                self.config.topic,
                self.foreign,
                target,
            )
        return found

    def _round(self) -> None:
        consumer, writer = self._consumer, self._writer
        assert consumer is not None and writer is not None
        records, ready = self._next_ready(consumer, self.batch)
        self.metrics.read(records)
        self._note_progress(records)
        if self._replay_ends and not records:
            self._note_position(consumer)
        self._note_recovered()
        self._write(writer, ready)
        self._retry_ticks_if_blocked(writer)
        writer.settle(idle=not records)

    def _note_progress(self, records: list[KafkaMessage]) -> None:
        for record in records:
            part, offset = record.partition(), record.offset()
            if (
                part is not None
                and offset is not None
                and offset + 1 >= self._replay_ends.get(part, 0)
            ):
                self._replay_ends.pop(part, None)

    def _note_position(self, consumer: Consumer) -> None:
        """A layer's replay also ends where the consumer's position passes the end it had
        at start: a layer writes transactionally, so its last offset may be a commit
        marker, which is never returned as a record."""
        source = layers_topic(self.config.topic)
        positions = consumer.position([TopicPartition(source, p) for p in self._replay_ends])
        for tp in positions:
            if tp.offset >= self._replay_ends.get(tp.partition, 0):
                self._replay_ends.pop(tp.partition, None)

    def _retry_ticks_if_blocked(self, writer: Writer) -> None:
        """Rule 3: a head blocked for :data:`TICK_RETRY_S` asks its blockers again."""
        now = time.monotonic()
        if not self.batch.merger.blocked_by():
            self._blocked_since = None
            return
        if self._blocked_since is None:
            self._blocked_since = now
        elif now - self._blocked_since >= TICK_RETRY_S:
            self._blocked_since = now
            self._write(writer, self.batch.retry_ticks())

    def _write(self, writer: Writer, ready: Ready) -> None:
        writer.write(ready.records, None)
        if not writer.reports_written:  # else it reports what it wrote (_wrote)
            self._wrote(ready.records)

    def _wrote(self, records: Sequence[OutRecord]) -> None:
        """``records`` were written (a transaction's once it committed): the metrics."""
        self.metrics.wrote(records, time.time())

    def _close_io(self, *, abandon: bool) -> None:
        self._drop_snapshots()
        if self._writer is not None:
            try:
                self._writer.close(abandon=abandon)
            except KafkaException as exc:
                log.error("closing the writer: %s", exc)
        if self._consumer is not None:
            self._consumer.close()

    # ------------------------------------------------------------------ status

    def measure(self, now: float) -> None:
        """Take the delivery rate over the interval since the last measure (the status
        publisher does this once per status interval)."""
        self.rates.take((self.batch.released,), now)

    def status(self) -> Status:
        """Pending items, each layer's watermark and what the head waits for; reading it
        changes nothing."""
        merger, cfg = self.batch.merger, self.config
        head = merger.head
        blocked = merger.blocked_by()
        marks = merger.watermarks
        return replace(
            status_of(cfg, Role.MERGER, self.key, self.sender_id, self.signer),
            pending=merger.pending_count,
            oldest_pending_id=None if head is None else head.messageID,
            watermark=min(marks),
            records_in=merger.stats.records_in,
            records_out=self.batch.released,
            deliveries=self.batch.released,
            deliveries_per_s=self.rates.last[0],
            dead_letters=self.batch.dead_letters + self.foreign,
            rejected=merger.stats.rejected,
            replaying=bool(self._replay_ends),
            layers=tuple(
                LayerState(layer, mark, layer in blocked) for layer, mark in enumerate(marks)
            ),
            waiting=()
            if head is None
            else (
                WaitingHead(
                    head.messageID,
                    head.timeStamp,
                    decided=True,
                    waiting_for=tuple(f"layer {layer}" for layer in blocked),
                ),
            ),
        )

    def _publish_status(self, now: float) -> None:
        if not self.active:
            return
        assert self._status is not None
        self.measure(now)
        status = self.status()
        self._export_metrics(status, now)
        publish_status(self._status, status)

    def _note_recovered(self) -> None:
        """The replay of the layers is over: note how long the start took."""
        if self.recovery_s is None and not self._replay_ends:
            self.recovery_s = round(time.monotonic() - self._recovery_started, 3)
            self.metrics.recovered(self.recovery_s)

    def _export_metrics(self, status: Status, now: float) -> None:
        """Set the gauges from the status just taken (once per status interval)."""
        self._head_watch.observe(status.oldest_pending_id, now)
        self.metrics.measure(
            pending=status.pending,
            head_age_s=self._head_watch.age(now),
            input_lag=self._input_lag(),
        )

    def _input_lag(self) -> int | None:
        """Records of the layers topic past the merger's positions, from the high
        watermarks the consumer last fetched (no request to the broker)."""
        consumer = self._consumer
        if consumer is None:
            return None
        source = layers_topic(self.config.topic)
        parts = [TopicPartition(source, layer) for layer in range(self.config.partitions)]
        try:
            positions = consumer.position(parts)
            marks = [consumer.get_watermark_offsets(p, cached=True) for p in parts]
        except KafkaException:
            return None
        lag = 0
        for part, mark in zip(positions, marks, strict=True):
            if mark is None or mark[1] < 0:
                return None
            position = max(self.batch.positions.get(part.partition, 0), part.offset)
            lag += max(0, mark[1] - position)
        return lag
