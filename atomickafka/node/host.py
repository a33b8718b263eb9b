"""A host process: several topics' nodes in one process that share its Kafka clients
(``cluster --topics-per-process N``, docs/DESIGN.md §6.7).

Each hosted node is a whole :class:`~atomickafka.node.runtime.NodeRuntime` -- its own
batch layer, input and control logs, consumer group, snapshots, status and metrics --
but the process opens one set of Kafka clients for all of them, as Kafka Streams runs
one producer per thread rather than one per task (KIP-447):

- one ``read_committed`` consumer assigned every hosted node's partitions; each round's
  records go to the node whose log they are (:meth:`HostRuntime._round`);
- one :class:`~atomickafka.node.writers.SplitWriter`: one gapless idempotent producer
  for every node's control records, and one transaction per commit interval that holds
  every node's deliveries and snapshots and commits each node's input offset to that
  node's own consumer group (a slot per node, :class:`~atomickafka.node.writers.InputSlot`;
  Kafka takes several groups' offsets into one transaction);
- one lease, one status producer, one members reader.

Why this is safe (rule 8 and §6.3 hold node by node): every node's batch layer is
unchanged and sees its own logs in their order, so its outputs do not depend on which
other nodes share its process or where a poll cut its batches. A node's deliveries,
snapshot and input offset commit in one transaction, as before; the transaction now
holds other nodes' too, which only makes their commits coincide. A node's offset commits
only once every control record of its batches below it is acknowledged (its own ticket
tracker). Fencing: the transactional id and the lease are the group's (:attr:`HostConfig.key
<atomickafka.node.config.HostConfig.key>`), so a restart or a standby of the same group
fences the instance before; on opening, the host also initialises each hosted node's own
transactional id once, which fences a node of one of these topics that ran in a process
of its own before (a deployment that switches to hosting). A host's standby is cold: it
waits for the group's lease and recovers each node from its snapshot and committed
offset (no hot following).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Final

from confluent_kafka import Consumer
from confluent_kafka import Message as KafkaMessage

from atomickafka.kafka.consumer import consume_batch, make_consumer, usable
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.status import Status
from atomickafka.kafka.topics import (
    dead_letter_topic,
    delivery_topic,
    layers_topic,
    node_group,
    snapshot_topic,
)
from atomickafka.logs import log_context
from atomickafka.node.batch import OutRecord
from atomickafka.node.config import HostConfig
from atomickafka.node.log_reader import FETCH_QUEUE_BACKOFF_MS, LOCAL_QUEUE_KBYTES
from atomickafka.node.offsets import Ticket
from atomickafka.node.role_shell import RoleShell
from atomickafka.node.runtime import Membership, NodeRuntime, freeze_heap
from atomickafka.node.writers import (
    InputSlot,
    OffsetCommit,
    SplitWriter,
    Writer,
    transactional_id,
)

__all__ = ["HostRuntime", "SlotWriter"]

log = logging.getLogger("atomickafka.host")

#: How long initialising a hosted node's own transactional id may take (s).
FENCE_TIMEOUT_S: Final = 60.0


class SlotWriter(Writer):
    """What one hosted node writes through: its slot of the host's shared
    :class:`~atomickafka.node.writers.SplitWriter`. The host settles and closes the
    shared writer; the node only hands over its batches."""

    reports_written = True

    def __init__(self, shared: SplitWriter, slot: int, node: NodeRuntime) -> None:
        self._shared, self._slot, self._node = shared, slot, node

    def start_at(self, committed: int) -> None:
        """The node's committed input offset: its slot's commits go on above it."""
        self._shared.start_slot(self._slot, committed, self._node.unwritable)

    def write(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot_offset: int | None = None,
    ) -> None:
        """Hand the node's batch to the shared writer, its offset under the node's slot."""
        slot_commit = None if not commit else {self._slot: max(commit.values())}
        self._shared.write(
            records, slot_commit, snapshot_offset=snapshot_offset, reporter=self._node.wrote
        )

    def send_dead_letter(self, ticket: Ticket, record: OutRecord) -> None:
        """Into the shared transaction."""
        self._shared.send_dead_letter(ticket, record)

    def settle(self, *, idle: bool = False) -> None:
        """Nothing: the host settles the shared writer once a round."""
        del idle

    def raise_failure(self) -> None:
        """What the shared writer's commit failed with."""
        self._shared.raise_failure()

    def close(self, *, abandon: bool = False) -> None:
        """Nothing: the host closes the shared writer."""
        del abandon


class HostRuntime(RoleShell):
    """Runs the nodes of one :class:`~atomickafka.node.config.HostConfig` in this
    process until :meth:`stop` is called (or a signal arrives)."""

    kind = "host"

    def __init__(self, config: HostConfig) -> None:
        self.host = config
        self.nodes = [NodeRuntime(c) for c in config.nodes]
        # The process's settings are its nodes' (they differ only in their topics);
        # fences and write failures are counted under the first node's metrics.
        super().__init__(config.nodes[0], self.nodes[0].metrics)
        for node in self.nodes:
            node.hosted = True
        #: Which node each read log and each written topic belongs to.
        self._reader_of: dict[str, NodeRuntime] = {}
        self._writer_of: dict[str, NodeRuntime] = {}
        for node in self.nodes:
            ordering, topic = node.ordering, node.config.topic
            self._reader_of[ordering.committed_topic] = node
            self._reader_of[ordering.input_topic] = node
            for written in (
                delivery_topic(topic),
                dead_letter_topic(topic),
                snapshot_topic(topic),
                layers_topic(topic),
            ):
                self._writer_of[written] = node
        self._consumer: Consumer | None = None
        self._group_consumers: list[Consumer] = []
        self._membership: Membership | None = None
        self._started = 0.0  # when the host began to open: each node's recovery from then

    @property
    def role_key(self) -> str:
        """The group's name: its lease and transactional id."""
        return self.host.key

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the hosted nodes; return an exit status (0 after a clean stop)."""
        with log_context(node=self.host.key):
            return self._run(max_seconds)

    def _prepare_topics(self) -> None:
        for node in self.nodes:
            node._prepare_topics()

    # ------------------------------------------------------------------ opening

    def _open(self) -> None:
        """Fence every older writer of the hosted nodes, open the shared clients, and
        recover each node from its snapshot and its group's committed offset (read after
        the fence)."""
        cfg = self.config
        self._started = time.monotonic()
        for node in self.nodes:
            self._fence_alone(node.config.key)
        marked = any(node.ordering.marked for node in self.nodes)
        small_queue = (
            {  # librdkafka bounds one consumer's queue as a whole: each node's share
                "queued.max.messages.kbytes": LOCAL_QUEUE_KBYTES * len(self.nodes),
                "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            }
            if marked
            else {}
        )
        consumer = make_consumer(
            cfg.connection, None, **{"isolation.level": "read_committed"}, **small_queue
        )
        self._consumer = consumer
        slots: dict[int, InputSlot] = {}
        for slot, node in enumerate(self.nodes):
            group = node_group(node.config.topic, node.config.layer)
            offsets = make_consumer(cfg.connection, group, **{"isolation.level": "read_committed"})
            self._group_consumers.append(offsets)
            slots[slot] = InputSlot(
                node.ordering.committed_topic,
                node.config.partition,
                group,
                offsets.consumer_group_metadata(),
                offsets,
            )
        shared = SplitWriter(
            cfg.connection,
            self.host.key,
            consumer,
            "",
            -1,
            commit_interval_s=cfg.commit_interval_s,
            on_wait=self._heartbeat,
            on_written=self._committed,
            holds_role=self.holds_lease,
            slots=slots,
        )
        self._writer = shared
        self._membership = Membership(cfg.connection)
        self._membership.poll(2.0)
        for slot, node in enumerate(self.nodes):
            self._open_node(node, SlotWriter(shared, slot, node), self._group_consumers[slot])
        self.active = True

    def _fence_alone(self, key: str) -> None:
        """Initialise the node's own transactional id once: a node of this topic that
        ran in a process of its own (or still does, a zombie) is fenced, and its open
        transaction ended, before this host reads the committed offsets."""
        settings = {"transactional.id": transactional_id(key)}
        producer = RecordProducer(self.config.connection, **settings)
        try:
            producer.init_transactions(FENCE_TIMEOUT_S)
        finally:
            producer.close(5)

    def _open_node(self, node: NodeRuntime, writer: SlotWriter, offsets: Consumer) -> None:
        """One hosted node becomes active: its batch recovered (the committed offset read
        through its group's consumer), its logs added to the shared consumer."""
        consumer, status, membership = self._consumer, self._status, self._membership
        assert consumer is not None and status is not None and membership is not None
        source = node.open_hosted(consumer, writer, status, membership, offsets, self._started)
        log.info(
            "node %s active in host %s: from offset %d (%s), replaying to %d",
            node.config.key,
            self.host.key,
            node.batch.position,
            source,
            node.batch.replay_until,
            extra={"fields": {"offset": node.batch.position}},
        )

    # ------------------------------------------------------------------ the loop

    def _round(self) -> None:
        """One poll of the shared consumer; each node takes its logs' records (or none:
        it goes on with what a budget left queued, or idles); then the shared writer is
        settled once."""
        consumer, writer = self._consumer, self._writer
        assert consumer is not None and writer is not None
        cfg = self.config
        timeout = 0.0 if any(node.has_more for node in self.nodes) else cfg.poll_timeout_s
        records = usable(consume_batch(consumer, cfg.batch_size, timeout))
        by_node: dict[NodeRuntime, list[KafkaMessage]] = {node: [] for node in self.nodes}
        reader_of = self._reader_of
        for record in records:
            node = reader_of.get(record.topic() or "")
            if node is not None:
                by_node[node].append(record)
        for node, mine in by_node.items():
            node.process(mine)
        writer.settle(idle=not records)
        freeze_heap(time.monotonic())

    def _committed(self, records: Sequence[OutRecord]) -> None:
        """A shared transaction committed: each node hears of its own records."""
        mine: dict[NodeRuntime, list[OutRecord]] = {}
        for record in records:
            node = self._writer_of.get(record.topic)
            if node is not None:
                mine.setdefault(node, []).append(record)
        for node, written in mine.items():
            node.wrote(written)

    def _final_round(self) -> None:
        for node in self.nodes:
            node._final_round()

    # ------------------------------------------------------------------ status, lease

    def _publish_status(self, now: float) -> None:
        for node in self.nodes:
            node._publish_status(now)
        self._lagging = any(node._lagging for node in self.nodes)

    def _behind_s(self) -> float:
        return max(node._behind_s() for node in self.nodes) if self.active else 0.0

    def status(self) -> Status:
        """The first hosted node's status (each node publishes its own)."""
        return self.nodes[0].status()

    def _stopped_statuses(self) -> list[Status]:
        return [node.status().stopped() for node in self.nodes]

    def _overtaken(self) -> bool:
        return any(node._overtaken() for node in self.nodes)

    def _still_ours(self) -> bool:
        return all(node._still_ours() for node in self.nodes)

    # ------------------------------------------------------------------ closing

    def _close_io(self, *, abandon: bool) -> None:
        writer = self._writer
        try:
            if writer is not None:
                writer.close(abandon=abandon)
        finally:
            for consumer in (self._consumer, *self._group_consumers):
                if consumer is not None:
                    consumer.close()
            for node in self.nodes:
                node.close_hosted()
            if self._membership is not None:
                self._membership.close()
        log.info("host %s stopped", self.host.key)
