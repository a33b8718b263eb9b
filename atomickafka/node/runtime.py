"""The Kafka shell around one node's batch layer: only the I/O loop (docs/DESIGN.md §6).

Start-up: make sure the node's topics exist with the settings ordering relies on, then
follow the input log as a hot standby does (:mod:`atomickafka.node.follow`): from the
newest usable snapshot, applying the records below the committed offset of the node's
consumer group. Once caught up, join the role's lease group and wait, still following,
until this instance is the active one (:mod:`atomickafka.node.lease`). Then open the writer
(exactly-once: a transactional producer whose ``transactional.id`` is the role's, which
fences any older instance; at-least-once: a gapless idempotent producer) and read the
committed offset once more: a standby continues from its state
(:meth:`NodeStandby.take_over <atomickafka.node.standby.NodeStandby.take_over>`), any
other start loads the newest usable snapshot and hands it with the committed offset to
:meth:`NodeBatch.recover <atomickafka.node.batch.NodeBatch.recover>`. Either way the
records up to the committed offset are replayed with their outputs dropped.

The loop, per batch: consume up to ``batch_size`` input records (``read_committed``),
let the batch layer decide, write what it returns and commit through the writer,
serve the lease, publish the status once a second. Every decision -- decoding,
signatures, dead letters, bundling, replay cut, snapshots -- is the batch layer's; this
module only moves bytes. An instance that loses its lease or is fenced stops at once
(exit status :data:`EXIT_FENCED`; the supervisor starts it again as a standby).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient

from atomickafka.core.reader import (
    DEAD_LETTER_ERROR_HEADER,
    DEAD_LETTER_OFFSET_HEADER,
    PlainRecord,
    delivery_order_key,
    header_value,
    read_delivery,
)
from atomickafka.core.reasons import Reason, refusal
from atomickafka.core.signing import Signer
from atomickafka.errors import AtomicKafkaError
from atomickafka.kafka.admin import (
    KEEP_FOREVER,
    MIN_MESSAGE_BYTES,
    TopicSpec,
    admin_client,
    ensure_topics,
    too_small,
)
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.consumer import (
    assign_from,
    consume_batch,
    last_matching,
    make_consumer,
    read_to_end,
    retry_transient,
    usable,
    watermarks,
)
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.secrets import load_signer
from atomickafka.kafka.status import (
    Role,
    Status,
    WaitingHead,
    publish_status,
    status_topic_spec,
)
from atomickafka.kafka.topics import (
    CONTROL_PREFIX,
    INPUT_PREFIX,
    STATUS_TOPIC,
    Layout,
    control_topic,
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
    node_group,
    snapshot_topic,
)
from atomickafka.logs import log_context
from atomickafka.metrics.shell import ShellMetrics
from atomickafka.node.batch import (
    NodeBatch,
    NodeSpec,
    NodeStartError,
    OutKind,
    OutRecord,
    Ready,
)
from atomickafka.node.batch_types import HOW_TO_RECONFIGURE
from atomickafka.node.config import NodeConfig
from atomickafka.node.follow import NodeFollower, signed_rows
from atomickafka.node.lease import LEASE_TOPIC
from atomickafka.node.lifecycle import LAGGING_STATUS_S
from atomickafka.node.log_reader import FETCH_QUEUE_BACKOFF_MS, LOCAL_QUEUE_KBYTES, LogReader
from atomickafka.node.metrics import HeadWatch, Progress, Rates, status_of
from atomickafka.node.offsets import Ticket
from atomickafka.node.role_shell import EXIT_FENCED, RoleShell
from atomickafka.node.snapshots import (
    LoadedSnapshot,
    choose_snapshot,
    newest_snapshots,
    snapshots_of_mode,
)
from atomickafka.node.writers import (
    AckedWriter,
    SplitWriter,
    Writer,
)

__all__ = [
    "EXIT_FENCED",
    "NodeRuntime",
    "NodeStartError",
    "freeze_heap",
    "node_spec",
    "node_topic_specs",
    "read_snapshots",
]

log = logging.getLogger("atomickafka.node")

#: Input logs carry the broker's append time: the engine's clock bound (§4.11).
LOG_APPEND_TIME: Final = {"message.timestamp.type": "LogAppendTime"}
#: How often a node writes its members record again, unchanged, while messages wait for
#: members (§4.9.5): such a record is what refuses a destination that has no node.
MEMBERS_AGAIN_S: Final = 1.0
#: How long one read of the group's committed offset waits while the lease is lost (s).
OVERTAKEN_READ_S: Final = 1.0
#: The status's ``inputDrainSeconds`` at most (an interval that read a handful of
#: records behind a long backlog would say hours; anything past this holds clients back).
_DRAIN_CAP_S: Final = 60.0
#: How often a node moves every object alive to the collector's permanent generation
#: (``gc.freeze``): a full collection then scans only what was allocated since, not the
#: whole state (pending messages, the ids remembered for the memory window), which took
#: about 200 ms per full collection (docs/performance.md). Frozen objects are still
#: freed when their last reference goes; only a reference cycle that is garbage at the
#: moment of a freeze is kept, and the node's loop makes none.
FREEZE_EVERY_S: Final = 1.0
_frozen_at = 0.0


def freeze_heap(now: float) -> bool:
    """``gc.freeze()`` at most every :data:`FREEZE_EVERY_S` (monotonic ``now``); True
    when it froze."""
    global _frozen_at  # noqa: PLW0603 (one heap per process)
    if now - _frozen_at < FREEZE_EVERY_S:
        return False
    _frozen_at = now
    gc.freeze()
    return True


#: Snapshot topics keep the newest records per key (two snapshots per role). A segment
#: rolls every 10 minutes, so that compaction (which leaves the open segment alone)
#: keeps what a recovery or a standby reads to that, not days of snapshots.
COMPACTED: Final = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "600000",
}


def node_topic_specs(config: NodeConfig) -> dict[str, TopicSpec]:
    """Every Kafka topic the node of ``config`` needs, with partitions and configs."""
    topic, layout = config.topic, config.layout
    input_configs = {**KEEP_FOREVER, **LOG_APPEND_TIME}
    specs = {
        delivery_topic(topic): TopicSpec(),
        dead_letter_topic(topic): TopicSpec(),
        STATUS_TOPIC: status_topic_spec(),
        snapshot_topic(topic): TopicSpec(configs=COMPACTED),
        LEASE_TOPIC: TopicSpec(),
    }
    if layout is Layout.SHARED:  # the input log is the topic itself: keep its timestamps
        input_configs = dict(KEEP_FOREVER)
    specs[input_topic(topic, layout)] = TopicSpec(config.partitions, input_configs)
    if config.layered:
        specs[layers_topic(topic)] = TopicSpec(config.partitions, KEEP_FOREVER)
    if config.control_log:  # one partition per layer, as the input log (§7)
        specs[control_topic(topic)] = TopicSpec(
            config.partitions, {**KEEP_FOREVER, **LOG_APPEND_TIME}
        )
    return specs


def node_spec(config: NodeConfig, signer: Signer | None) -> NodeSpec:
    """What the batch layer needs to know, with every topic name resolved."""
    layout = config.layout
    return NodeSpec(
        topic=config.topic,
        node_id=config.node_id,
        role=config.key,
        algorithm=config.algorithm,
        input_topic=input_topic(config.topic, layout),
        input_partition=config.partition,
        delivery_topic=delivery_topic(config.topic),
        dead_letter_topic=dead_letter_topic(config.topic),
        snapshot_topic=snapshot_topic(config.topic),
        input_prefix="" if layout is Layout.SHARED else INPUT_PREFIX,
        layer=config.layer if config.layered else None,
        layers_topic=layers_topic(config.topic) if config.layered else None,
        shared_layout=layout is Layout.SHARED,
        max_value_bytes=config.max_value_bytes,
        window_ms=config.window_ms,
        snapshot_every_records=config.snapshot_every_records,
        snapshot_every_s=config.snapshot_every_s,
        signer=signer,
        delivery_format=config.delivery_format,
        reconfigure=config.reconfigure,
        control_format=config.control_format,
        notify_values=config.notify_values,
        control_prefix=CONTROL_PREFIX if config.control_log else None,
        control_topic=control_topic(config.topic) if config.control_log else None,
    )


def read_snapshots(config: NodeConfig, role: str, signer: Signer | None) -> list[LoadedSnapshot]:
    """The snapshots of ``role`` in its topic's snapshot topic, newest first (unsigned
    or wrongly signed records are left out when signing is on)."""
    topic = snapshot_topic(config.topic)
    records = read_to_end(config.connection, topic, [0])
    return newest_snapshots(signed_rows(records, topic, signer), role)


class Membership:
    """The topics that have a node, learnt from the status topic, read incrementally
    (§4.9.5): every node status ever published names its topic (the topic is
    compacted, so each node's latest status stays). Only the records' keys are read
    (``T``, ``T/layer``: a node; ``T/merger``: a merger), so a status topic of many
    records is read quickly. :attr:`caught_up` once it has read up to where the topic
    ended when it started: until then its view may lack live nodes, and a members
    record written from it could refuse a live destination."""

    def __init__(self, connection: Connection) -> None:
        self.topics: set[str] = set()
        self._consumer = make_consumer(connection)
        metadata = self._consumer.list_topics(STATUS_TOPIC, timeout=10).topics.get(STATUS_TOPIC)
        # a topic just created (on several brokers) may show no partitions yet: read its
        # first one then (the status topic has one), or this node never learns its peers
        partitions = sorted(metadata.partitions) if metadata and metadata.partitions else [0]
        self._ends: dict[int, int] = {}
        for p in partitions:
            try:
                self._ends[p] = watermarks(self._consumer, TopicPartition(STATUS_TOPIC, p))[1]
            except (KafkaException, AtomicKafkaError):
                self._ends[p] = 0  # unknown: taken as read (the records come anyway)
        assign_from(
            self._consumer, [TopicPartition(STATUS_TOPIC, p, OFFSET_BEGINNING) for p in partitions]
        )
        self.caught_up = not any(self._ends.values())
        log.info("reading node statuses from %s partitions %s", STATUS_TOPIC, partitions)

    def poll(self, timeout_s: float = 0.0) -> set[str]:
        """Read what has arrived; return every topic known to have a node."""
        before = len(self.topics)
        for record in usable(consume_batch(self._consumer, 5000, timeout_s)):
            key = record.key()
            name = key.decode(errors="replace") if isinstance(key, bytes) else key
            if name and record.value() is not None and not name.endswith("/merger"):
                self.topics.add(name.split("/", 1)[0])
            part, offset = record.partition(), record.offset()
            if part is not None and offset is not None and offset + 1 >= self._ends.get(part, 0):
                self._ends.pop(part, None)
        if not self.caught_up and not self._ends:
            self.caught_up = True
        if len(self.topics) > before:
            log.info("topics with a node: %s", ", ".join(sorted(self.topics)))
        return self.topics

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


class NodeRuntime(RoleShell):
    """Runs one node until :meth:`stop` is called (or a signal arrives).

    Create it in the process that runs it: Kafka clients must not cross a ``fork()``.
    """

    kind = "node"

    def __init__(self, config: NodeConfig) -> None:
        layer = config.layer if config.layered else None
        super().__init__(config, ShellMetrics("node", config.topic, layer))
        self.signer = load_signer(config.secret_file)
        self.spec = node_spec(config, self.signer)
        self.batch = NodeBatch(self.spec, NodeBatch.fresh_engine(self.spec))
        #: Which logs the node reads (§7.1): the committed log, whose offset it commits
        #: and replays, and with a control log the input log beside it.
        self.ordering = self.batch.ordering
        self.rates = Rates(3)  # records read, outputs, deliveries per second
        self.progress = Progress()  # input offsets applied per second (inputDrainSeconds)
        self.records_read = 0  # Kafka records of the input log processed (not replayed)
        self.head = HeadWatch(config.stuck_after_s)
        self.recovery_s: float | None = None
        self._recovery_started = 0.0
        self._input = self.ordering.committed_topic
        self._reader: LogReader | None = None
        self._partition = config.partition
        self._consumer: Consumer | None = None
        #: Reads the group's committed offset while the lease is lost (:meth:`_overtaken`).
        self._offsets_probe: Consumer | None = None
        self._status_count = 0
        self._mismatch_logged: set[str] = set()
        self._bad_logged: set[str] = set()
        #: The last process ran with another secret: outputs are written again (§6.6).
        self._rewrite = False
        self._membership: Membership | None = None
        self._members_at = 0.0
        self._members_written_at = 0.0
        self._follower: NodeFollower | None = None  # while a hot standby
        self._followed = 0  # records the follower applied, counted in the metrics
        #: Dead letters this instance wrote: its status's count. The batch layer counts
        #: those of replayed records too, whose outputs are dropped (with another secret
        #: than before a restart, every replayed record would count, none written).
        self.dead_letters_written = 0
        #: Run by a host process (:mod:`atomickafka.node.host`), which owns the Kafka
        #: clients: the consumer is shared with the other nodes it hosts.
        self.hosted = False

    # ------------------------------------------------------------------ lifecycle

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the node; return an exit status (0 after a clean stop). Its log lines
        carry its ``node``, ``topic`` and ``layer``."""
        cfg = self.config
        layer = cfg.layer if cfg.layered else None
        with log_context(node=cfg.key, topic=cfg.topic, layer=layer):
            return self._run(max_seconds)

    @property
    def role_key(self) -> str:
        """The node's status key and lease name: ``T``, or ``T/p`` for a layer."""
        return self.config.key

    def _prepare_topics(self) -> None:
        cfg = self.config
        admin = admin_client(cfg.connection)
        specs = node_topic_specs(cfg)
        if cfg.create_topics:
            ensure_topics(admin, specs)
        self._refuse_other_mode(admin)
        written = [t for t in specs if t not in (STATUS_TOPIC, LEASE_TOPIC)]
        small = too_small(admin, written)
        if small:
            names = ", ".join(f"{t} ({v})" for t, v in small.items())
            raise NodeStartError(
                f"topics take records of fewer than {MIN_MESSAGE_BYTES} bytes: {names}; "
                "AtomicKafka writes records and batches of up to 1,000,000 bytes. Raise "
                "max.message.bytes (kafka-configs --alter --entity-type topics "
                f"--entity-name TOPIC --add-config max.message.bytes={MIN_MESSAGE_BYTES})"
            )

    def _refuse_other_mode(self, admin: AdminClient) -> None:
        """Refuse to start without ``--control-log`` where this topic has a control log:
        its peers write their proposals there, and a node reading only its input log
        would never see them (§7.1, switching). The other way round, a node that ran
        without one refuses its snapshots (:meth:`_of_this_mode`)."""
        cfg = self.config
        if self.ordering.marked:
            return
        name = control_topic(cfg.topic)
        existing = retry_transient(lambda: admin.list_topics(timeout=10).topics, "topic metadata")
        if name in existing:
            raise NodeStartError(
                f"topic {cfg.topic} has a control log ({name}): its deployment runs with "
                "control logs, and its peers write their proposals there, which a node "
                "run with --no-control-log never reads. Start it without --no-control-log "
                "(control logs are the default), as every node of the deployment (a "
                "deployment switches by starting over on new topics, docs/DESIGN.md §7.1)"
            )

    def _start_standby(self) -> None:
        """Follow the input log below the committed offset, as a hot standby, and read
        the statuses now rather than when the lease comes."""
        cfg = self.config
        if self.signer is not None:  # before following from an older state (§6.6)
            verified = read_snapshots(cfg, cfg.key, self.signer)
            if len(self._signed_or_taken_up(verified)) > len(verified) or self._rewrite:
                return  # a cold start: an unsigned snapshot taken up, or outputs rewritten
        try:
            self._membership = Membership(cfg.connection)
            self._follower = NodeFollower(cfg, self.spec, self.signer)
            self._follower.start()
        except (KafkaException, AtomicKafkaError) as exc:
            self._stop_following(f"cannot follow the input log: {exc}")

    def _catch_up(self) -> bool:
        """Follow until caught up with the committed offset, for at most the lease's
        session timeout: a dead instance holds the lease that long anyway, and a node
        that replays for longer does it as the active instance, publishing its status
        (a topic without a live status looks offline to clients)."""
        follower = self._follower
        deadline = time.monotonic() + self.config.session_timeout_ms / 1000
        while follower is not None and follower.following and not self.stopping:
            if follower.caught_up() or time.monotonic() > deadline:
                break
            try:
                if not follower.round(0.1):
                    time.sleep(0.05)
            except (KafkaException, AtomicKafkaError) as exc:
                self._stop_following(f"following stopped: {exc}")
            self._count_followed()
            if self._tick(time.monotonic()):
                return False  # the run's time is up
        return not self.stopping

    def _stand_by(self) -> None:
        """One bounded round of following (or of waiting, with no room or no state)."""
        lease, follower = self._lease, self._follower
        assert lease is not None
        try:
            followed = follower is not None and follower.round(0.1)
            if self._membership is not None and time.monotonic() - self._members_at >= 2.0:
                self._members_at = time.monotonic()
                self._membership.poll()
        except (KafkaException, AtomicKafkaError) as exc:
            self._stop_following(f"following stopped: {exc}")
            followed = False
        self._count_followed()
        if not followed:
            lease.poll(0.2)

    def _count_followed(self) -> None:
        """The records the standby applied count as replayed (their outputs were
        written by the active instance)."""
        follower = self._follower
        if follower is not None and follower.applied > self._followed:
            self.metrics.read((), follower.applied - self._followed)
            self._followed = follower.applied

    def _stop_following(self, why: str) -> None:
        log.warning("node %s: %s; a cold standby now (a takeover recovers)", self.config.key, why)
        if self._follower is not None:
            self._follower.stop_following()

    def _open(self) -> None:
        """Become the active instance: open the writer (fencing older instances), then
        continue from the standby's state or recover from the newest snapshot, with
        the committed offset read after fencing."""
        cfg = self.config
        started = time.monotonic()
        consumer = self._open_consumer()
        if cfg.exactly_once:  # fences older instances before the committed offset is read
            self._writer = SplitWriter(
                cfg.connection,
                cfg.key,
                consumer,
                self._input,
                self._partition,
                commit_interval_s=cfg.commit_interval_s,
                on_unwritable=self.unwritable,
                on_wait=self._heartbeat,
                on_written=self.wrote,
                holds_role=self.holds_lease,
            )
        source = self._recover_batch(consumer)
        if not cfg.exactly_once:  # nothing to fence: opened once the batch recovered
            self._writer = AckedWriter(
                cfg.connection,
                consumer,
                self._input,
                self._partition,
                commit_interval_s=cfg.commit_interval_s,
                on_unwritable=self.unwritable,
            )
        self._start_reading(consumer)
        if self._membership is None:
            self._membership = Membership(cfg.connection)
            self._membership.poll(2.0)
        else:
            self._membership.poll()
        self.active = True
        self.metrics.became_active()
        self._recovery_started = started
        log.info(
            "node %s active: input %s[%d] from offset %d (%s), replaying to %d, "
            "algorithm %s, layout %s, %s",
            cfg.key,
            self._input,
            self._partition,
            self.batch.position,
            source,
            self.batch.replay_until,
            cfg.algorithm.value,
            cfg.layout.value,
            "exactly-once" if cfg.exactly_once else "at-least-once",
            extra={"fields": {"offset": self.batch.position}},
        )

    def _open_consumer(self) -> Consumer:
        """The node's read_committed consumer, with a small local queue when the input log
        is paused behind the control log."""
        cfg = self.config
        small_queue = (
            {
                "queued.max.messages.kbytes": LOCAL_QUEUE_KBYTES,
                "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            }
            if self.ordering.marked  # the input log paused, the control log never behind it
            else {}
        )
        consumer = make_consumer(
            cfg.connection,
            node_group(cfg.topic, cfg.layer),
            **{"isolation.level": "read_committed"},
            **small_queue,
        )
        self._consumer = consumer
        return consumer

    def _recover_batch(self, consumer: Consumer) -> str:
        """Take up the standby's batch or recover one from the newest usable snapshot,
        from the committed offset; where it came from."""
        low, high, committed = self._log_bounds(consumer)
        batch, source = self._followed_batch(committed, low), "standby state"
        if batch is None:
            snapshot = self._usable_snapshot(low, high)
            batch = NodeBatch.recover(self.spec, snapshot, committed)
            source = "snapshot " + ("none" if snapshot is None else str(snapshot.seq))
        self.batch = batch
        if self._rewrite and batch.replay_until > batch.position:
            batch.replay_until = batch.position  # write again what followed the snapshot
            batch.delivered_up_to = self._last_own_delivery(consumer)
        return source

    def open_hosted(
        self,
        consumer: Consumer,
        writer: Writer,
        status: RecordProducer,
        membership: Membership,
        group_consumer: Consumer,
        started: float,
    ) -> str:
        """Become active inside a host process (:mod:`atomickafka.node.host`), which
        opened the Kafka clients and fenced older writers: recover the batch (the
        committed offset read through ``group_consumer``, of this node's group), add its
        logs to the shared ``consumer`` and write through ``writer``; where the state
        came from."""
        self._consumer, self._writer, self._status = consumer, writer, status
        self._membership = membership
        source = self._recover_batch(group_consumer)
        self._start_reading(consumer)
        self.active = True
        self.metrics.became_active()
        self._recovery_started = started
        return source

    def close_hosted(self) -> None:
        """Release what this hosted node opened itself (the host closes the rest)."""
        if self._offsets_probe is not None:
            self._offsets_probe.close()

    def _start_reading(self, consumer: Consumer) -> None:
        """Start the writer at the batch's replay point and assign the log reader."""
        cfg = self.config
        assert self._writer is not None
        self._writer.start_at(self.batch.replay_until)
        self.batch.step_budget = cfg.batch_size  # steps that write every so often
        reader = LogReader(consumer, self.ordering, self._partition, shared=self.hosted)
        reader.assign(self.batch)
        self._reader = reader
        reader.check_start(self.batch)

    def _still_ours(self) -> bool:
        """After the lease came back: False when the node's group has committed past
        this instance's position -- another instance processed the log meanwhile (with
        ``--at-least-once`` nothing else fences this one)."""
        if self._consumer is None:
            return True
        # The last committed offset, not a stable one: an instance that took over and
        # was cut off in turn keeps its transaction (and its offsets) open until the
        # transaction times out, and a stable read waits that long (60 s) -- with the
        # lease held and nothing written (seen with network partitions, issue 39).
        offsets = make_consumer(
            self.config.connection,
            node_group(self.config.topic, self.config.layer),
            **{"isolation.level": "read_uncommitted"},
        )
        try:
            committed = self._committed_offset(offsets)
        finally:
            offsets.close()
        if committed > self.batch.position:
            log.warning(
                "node %s: its group committed offset %d, past this instance's %d: another "
                "instance wrote meanwhile",
                self.config.key,
                committed,
                self.batch.position,
            )
            return False
        return True

    def _overtaken(self) -> bool:
        """While the lease is lost: True once the node's group has committed past this
        instance's position (another instance took the role and wrote). One quick read,
        not retried: during a cut it fails or times out, and the wait goes on."""
        if self._consumer is None:
            return False
        if self._offsets_probe is None:
            self._offsets_probe = make_consumer(
                self.config.connection,
                node_group(self.config.topic, self.config.layer),
                **{"isolation.level": "read_uncommitted"},
            )
        part = TopicPartition(self._input, self._partition)
        try:
            committed = self._offsets_probe.committed([part], timeout=OVERTAKEN_READ_S)[0].offset
        except KafkaException:
            return False
        if committed <= self.batch.position:
            return False
        log.warning(
            "node %s: while its lease was lost, its group committed offset %d, past this "
            "instance's %d: another instance took the role",
            self.config.key, committed, self.batch.position,
        )  # fmt: skip
        return True

    def _last_own_delivery(self, consumer: Consumer) -> tuple[int, int, str] | None:
        """The key of the last delivery this node wrote (to ``T``, or to its layer's
        stream), validly signed, reading backwards."""
        spec, signer = self.spec, self.signer
        if spec.layers_topic is not None:
            part = TopicPartition(spec.layers_topic, self._partition)
        else:
            part = TopicPartition(spec.delivery_topic, 0)

        def own(record: KafkaMessage) -> tuple[int, int, str] | None:
            message = read_delivery(record, at=spec.topic)
            if message is None or message.senderID != spec.node_id:
                return None
            if signer is not None and signer.problem(
                record.topic() or "", record.key(), record.value(), record.headers()
            ):
                return None
            return delivery_order_key(message)

        return last_matching(consumer, part, own)

    def _followed_batch(self, committed: int, low: int) -> NodeBatch | None:
        """A hot standby's batch layer, continued (``None``: not a hot standby)."""
        follower, self._follower = self._follower, None
        if follower is None:
            return None
        try:
            return follower.take_over(committed, low)
        except (KafkaException, AtomicKafkaError) as exc:
            log.warning("node %s: the standby state is not used: %s", self.config.key, exc)
            return None
        finally:
            follower.close()

    def _committed_offset(self, consumer: Consumer) -> int:
        part = TopicPartition(self._input, self._partition)
        committed = retry_transient(
            lambda: consumer.committed([part], timeout=10)[0].offset, "committed offset"
        )
        return committed if committed >= 0 else 0

    def _log_bounds(self, consumer: Consumer) -> tuple[int, int, int]:
        """The input log's first and next offsets and the committed offset; refuse to
        start when the committed offset is past the log's end (a re-created topic)."""
        low, high = watermarks(consumer, TopicPartition(self._input, self._partition))
        committed = self._committed_offset(consumer)
        if committed > high:
            group = node_group(self.config.topic, self.config.layer)
            raise NodeStartError(
                f"committed offset {committed} of group {group} is past the end ({high}) of "
                f"{self._input}: was the topic re-created? Delete the group's offsets "
                "(kafka-consumer-groups --reset-offsets) to start over"
            )
        return low, high, committed

    def _usable_snapshot(self, low: int, high: int) -> LoadedSnapshot | None:
        """The newest snapshot whose offset the input log still holds; refuse to start
        when the log was cut below every snapshot (records were lost to retention), or
        when signing is on and the newest snapshot is not signed with this node's secret
        (§6.6: signing was just turned on, or the secret is another; with --reconfigure,
        an unsigned newest snapshot is taken up once)."""
        found = read_snapshots(self.config, self.config.key, self.signer)
        if self.signer is not None:
            found = self._signed_or_taken_up(found)
        found = self._of_this_mode(found)
        choice = choose_snapshot(found, {self._partition: (low, high)})
        for why in choice.skipped:
            log.warning("%s", why)
        if choice.cut:
            raise NodeStartError(
                f"input log {self._input}[{self._partition}] starts at offset {low}, but no "
                "readable snapshot covers an offset at or after it: records were deleted "
                "(retention shorter than the snapshot interval?), so the node's state cannot "
                "be rebuilt. Keep input logs longer than two snapshot intervals plus the "
                "longest downtime (docs/DESIGN.md §6.5)"
            )
        return choice.snapshot

    def _of_this_mode(self, found: list[LoadedSnapshot]) -> list[LoadedSnapshot]:
        """The snapshots taken with a control log, or without, as this node runs: their
        offsets are the control log's or the input log's. Refuse to start when the
        newest readable one was taken in the other mode (§7, *Switching*)."""
        readable = [s for s in found if s.state is not None]
        marked = self.ordering.marked
        if readable and ("ordering" in (readable[0].state or {})) != marked:
            was, runs = ("without", "with") if marked else ("with", "without")
            as_before = "--no-control-log" if marked else "without --no-control-log"
            raise NodeStartError(
                f"node {self.config.key}: its newest snapshot ({readable[0].seq}) was taken "
                f"{was} a control log, and this node runs {runs} one (control logs are the "
                "default; --no-control-log runs without). A deployment switches control "
                "logs on or off only with new topics (docs/DESIGN.md §7.1, Switching): run "
                f"every node as before ({as_before})"
            )
        return snapshots_of_mode(found, marked=marked)

    def _signed_or_taken_up(self, verified: list[LoadedSnapshot]) -> list[LoadedSnapshot]:
        """With signing on: ``verified`` (the snapshots signed with this node's secret),
        unless a newer one is not (§6.6)."""
        cfg = self.config
        every = read_snapshots(cfg, cfg.key, None)
        newest = max((s.seq for s in verified), default=-1)
        newer = [s for s in every if s.seq > newest and s.state is not None]
        if not newer:
            return verified
        latest = newer[0]
        was_signed = bool((latest.state or {}).get("node", {}).get("signed", False))
        if was_signed:
            # its last process held another secret: everything signed with this one was
            # set aside there, and what it should have written it never did. Go on from
            # the newest state signed with this secret and write its outputs again:
            # peers drop the repeated control records (§4.12), deliveries already in the
            # topic are skipped (§6.6)
            log.warning(
                "node %s: its newest snapshot (%d) is signed with a secret this node does "
                "not hold: its last process ran with another --secret-file. Going on from "
                "the newest snapshot signed with this one (%s) and writing again what "
                "followed it",
                cfg.key,
                latest.seq,
                "none" if not verified else verified[0].seq,
            )
            self._rewrite = True
            return verified
        if not was_signed and cfg.reconfigure:
            log.warning(
                "node %s: taking up unsigned snapshot %d once (--reconfigure)", cfg.key, latest.seq
            )
            return [latest, *verified]
        raise NodeStartError(
            f"node {cfg.key}: its newest snapshot ({latest.seq}) was written without "
            "signing: signing was turned on; going on from an "
            "older state would replay its log under other settings. To turn signing on "
            f"safely: {HOW_TO_RECONFIGURE.split(': ', 1)[1]}"
        )

    def _round(self) -> None:
        """One round (§7.1): a separate input log's records are buffered (and marked),
        the committed log's applied in its order, each marker's range in place."""
        consumer, writer = self._consumer, self._writer
        assert consumer is not None and writer is not None
        cfg = self.config
        timeout = 0.0 if self.has_more else cfg.poll_timeout_s
        records = usable(consume_batch(consumer, cfg.batch_size, timeout))
        self.process(records)
        writer.settle(idle=not records)
        freeze_heap(time.monotonic())

    @property
    def has_more(self) -> bool:
        """Records are queued past the last step's budget: the next poll should not wait."""
        return self.batch.queued > 0 and not self.batch.waiting

    def process(self, records: list[KafkaMessage]) -> None:
        """Hand one poll's records of this node's logs to the batch layer (none: go on
        with what a budget left queued, or idle) and write what it decided; pause or
        resume its logs; write a members record when due. The writer is settled by the
        caller (once per round, for every node a host process runs)."""
        reader, batch = self._reader, self.batch
        assert reader is not None
        wall = time.time()
        committed_log, inputs = reader.split(records)
        readies = []
        if inputs:
            readies.append(batch.step_input(inputs, wall_s=wall))
        if committed_log or not readies:  # (none: goes on with what a budget left queued)
            readies.append(batch.step(committed_log, wall_s=wall))
        replayed = sum(r.replayed for r in readies)
        self.metrics.read(records, replayed)
        # records of either log, not replayed committed-log records (the input log's are
        # buffered even while the committed log replays: counted as read)
        self.records_read += max(0, len(records) - replayed)
        for ready in readies:
            self._write(ready, 0)
        reader.pace(batch)
        self._note_members()

    def _final_round(self) -> None:
        """A clean stop ends with a snapshot at the node's position: its restart has
        nothing to replay, and a drained node can take up new settings (§6.6)."""
        if self.batch.replaying or self._writer is None:
            return
        self._write(self.batch.snapshot_now(wall_s=time.time()), 0)
        log.info(
            "node %s: snapshot %d at offset %d on a clean stop",
            self.config.key,
            self.batch.snapshot_seq,
            self.batch.position,
        )

    def _note_members(self) -> None:
        """Every couple of seconds (and after a replay), tell the batch layer which
        topics have a node; it writes a MembersMessage when that grew, and every second
        while messages wait for members: only such a record can refuse them (§4.9.5)."""
        now = time.monotonic()
        if self._membership is None or self.batch.replaying:
            return
        if not self._membership.caught_up:
            self._membership.poll()  # a members record from a partial view could refuse
            return  # a live destination (§4.9.5): none before the view is whole
        awaited = self.batch.engine.awaiting_members
        if now - self._members_at < (0.2 if awaited else 2.0):
            return
        self._members_at = now
        again = bool(awaited) and now - self._members_written_at >= MEMBERS_AGAIN_S
        ready = self.batch.members(self._membership.poll(), again=again)
        if ready.records:
            self._members_written_at = now
            log.log(
                logging.DEBUG if again else logging.INFO,
                "writing a members record: %s (awaited: %s)",
                ", ".join(sorted(self._membership.topics)),
                ", ".join(awaited) or "none",
            )
            self._write(ready, 0)

    def _write(self, ready: Ready, consumed: int) -> None:
        writer = self._writer
        assert writer is not None
        if consumed and ready.replayed < consumed:
            self.records_read += consumed - ready.replayed
        if self.recovery_s is None and not self.batch.replaying:
            self.recovery_s = round(time.monotonic() - self._recovery_started, 3)
            log.info("node %s recovered in %.3f s", self.config.key, self.recovery_s)
            self.metrics.recovered(self.recovery_s, self.batch.engine.stats.protocol_mismatches)
        self._log_dead_letters(ready.records)
        self.dead_letters_written += sum(r.kind is OutKind.DEAD_LETTER for r in ready.records)
        commit = None if ready.commit is None else {self._partition: ready.commit}
        writer.write(ready.records, commit, snapshot_offset=ready.snapshot_offset)
        if not writer.reports_written:
            self.wrote(ready.records)

    def wrote(self, records: Sequence[OutRecord]) -> None:
        """``records`` were written (a transaction's once it committed): the metrics."""
        self.metrics.wrote(records, time.time())

    def unwritable(self, ticket: Ticket, topic: str, value: bytes | None, reason: str) -> None:
        """A control output the broker refuses for good is set aside (§6.3)."""
        log.error("an output to %s could not be written: %s", topic, reason)
        why = refusal(Reason.OUTPUT_REFUSED, f"output to {topic} refused: {reason}")
        letter = self.batch.dead_letter(value, why)
        writer = self._writer
        assert writer is not None
        writer.send_dead_letter(ticket, letter)
        self.dead_letters_written += 1
        if not writer.reports_written:  # else it reports the letter once committed
            self.wrote([letter])

    def _log_dead_letters(self, records: list[OutRecord]) -> None:
        for record in records:
            if record.kind is not OutKind.DEAD_LETTER:
                continue
            reason = header_value(
                PlainRecord(None, headers=list(record.headers)), DEAD_LETTER_ERROR_HEADER
            )
            text = (reason or b"").decode(errors="replace")
            if record.reason is Reason.PROTOCOL_MISMATCH:
                sender = text.split(":", 1)[1].split(" runs ", 1)[0].strip()
                if sender in self._mismatch_logged:
                    continue
                self._mismatch_logged.add(sender)
            offset = header_value(
                PlainRecord(None, headers=list(record.headers)), DEAD_LETTER_OFFSET_HEADER
            )
            fields = {"offset": int(offset)} if offset is not None and offset.isdigit() else {}
            log.warning("set aside in %s: %s", record.topic, text, extra={"fields": fields})

    def _close_io(self, *, abandon: bool) -> None:
        writer, consumer = self._writer, self._consumer
        if self._follower is not None:
            self._follower.close()
        if writer is not None:
            try:
                writer.close(abandon=abandon)
            except KafkaException as exc:
                log.error("closing the writer: %s", exc)
        if consumer is not None:
            consumer.close()
        if self._offsets_probe is not None:
            self._offsets_probe.close()
        if self._membership is not None:
            self._membership.close()

    def _shutdown(self, failed: int | None) -> None:
        super()._shutdown(failed)
        log.info("node %s stopped", self.config.key)

    # ------------------------------------------------------------------ status

    def measure(self, now: float) -> None:
        """Take the rates over the interval since the last measure and note the queue
        head; the status publisher does this once per status interval."""
        stats = self.batch.engine.stats
        self.rates.take((self.records_read, stats.records_out, stats.deliveries), now)
        backlog = (self._input_lag() or 0) >= self._backlog_offsets
        self.progress.take(self._offsets_done(), now, backlog)
        head = self.batch.engine.oldest_pending()
        self.head.observe(None if head is None else head.messageID, now)

    def status(self, now: float | None = None) -> Status:
        """The node's current status (counters, the rates and queue head as last
        measured, what the first queued messages wait for); reading it changes nothing."""
        mono = time.monotonic() if now is None else now
        engine, cfg = self.batch.engine, self.config
        stats = engine.stats
        in_per_s, out_per_s, deliveries_per_s = self.rates.last
        waiting = tuple(
            WaitingHead(w.messageID, w.timeStamp, w.decided, w.missing) for w in engine.waiting(10)
        )
        return replace(
            status_of(cfg, Role.NODE, cfg.key, cfg.node_id, self.signer),
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
            dead_letters=self.dead_letters_written,
            rejected=stats.rejected,
            duplicates=stats.duplicates,
            protocol_mismatches=stats.protocol_mismatches,
            aborted=stats.aborted,
            records_in_per_s=in_per_s,
            records_out_per_s=out_per_s,
            deliveries_per_s=deliveries_per_s,
            replaying=self.batch.replaying,
            bad_signatures=dict(self.batch.bad_signatures),
            newer_formats=dict(self.batch.newer_formats),
            control_log=self.ordering.marked,
            notify_values=cfg.notify_values,
            input_buffered=self.batch.buffered,
            **self._lag(),
        )

    def _lag(self) -> dict[str, Any]:
        """How far behind its input log the node is: records not read yet, and how long
        the oldest of them has waited, at most (the log's time of the last record read
        to now; the clocks of the broker and of this host agree within milliseconds on
        one host, within their NTP skew elsewhere)."""
        lag = self._input_lag() or 0
        if lag <= 0:
            return {"input_lag": 0, "input_lag_s": 0.0, "input_drain_s": 0.0}
        # the oldest record not applied (read and queued), or the last one read
        read_ms = self.batch.oldest_unapplied_ms or self.batch.engine.now_ms
        waited = max(0.0, time.time() - read_ms / 1000) if read_ms else 0.0
        drain = self.progress.drain_s(lag, _DRAIN_CAP_S, at_least=self._backlog_offsets)
        return {"input_lag": lag, "input_lag_s": round(waited, 3), "input_drain_s": round(drain, 3)}

    @property
    def _backlog_offsets(self) -> int:
        """Unapplied offsets that make a backlog: two read batches (fewer are the
        records of one moment's traffic, whatever the pace)."""
        return 2 * self.config.batch_size

    def _behind_s(self) -> float:
        lag = self._lag()
        return max(float(lag["input_lag_s"]), float(lag["input_drain_s"]))

    def _offsets_done(self) -> int:
        """Offsets of its input the node has applied: of its committed log, and with a
        control log of the input log too (what :meth:`_input_lag` counts the rest of;
        with one log nothing is applied through markers)."""
        return self.batch.position + self.batch.applied

    def _publish_status(self, now: float) -> None:
        if not self.active:
            return  # a standby publishes nothing under the role's key
        assert self._status is not None
        self.measure(now)
        status = self.status(now)
        self._lagging = status.behind_s > LAGGING_STATUS_S
        self._export_metrics(status)
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
        publish_status(self._status, status)

    def _export_metrics(self, status: Status) -> None:
        """Set the gauges from the status just taken (once per status interval)."""
        self.metrics.measure(
            pending=status.pending,
            head_age_s=status.oldest_pending_age_s,
            input_lag=self._input_lag(),
            input_buffered=status.input_buffered,
            input_behind_s=status.behind_s,
        )
        self.metrics.count_protocol_mismatches(self.batch.engine.stats.protocol_mismatches)
        self.metrics.count_bad_signatures(self.batch.bad_signatures)
        for sender in self.batch.bad_signatures.keys() - self._bad_logged:
            self._bad_logged.add(sender)
            log.warning(
                "node %s: records claiming to come from %s fail the signature check: signed "
                "with a secret this node does not hold (is %s's --secret-file the "
                "deployment's, or this node's?); messages shared with it wait until the "
                "secrets agree",
                self.config.key,
                sender,
                sender,
            )

    def _input_lag(self) -> int | None:
        """Records of the input log past the node's position, from the high watermark
        the consumer last fetched (no request to the broker)."""
        consumer = self._consumer
        if consumer is None:
            return None
        reader = self._reader
        return None if reader is None else reader.lag(self.batch)
