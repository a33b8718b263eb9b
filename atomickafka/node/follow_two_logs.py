"""The I/O of a hot standby of a node with a control log (docs/DESIGN.md §6.4 and §7).
The decisions are :class:`~atomickafka.node.ordering_log.OrderedStandby`'s.

As :class:`~atomickafka.node.follow.NodeFollower`, over two logs: the committed offset
it reads from the node's group is the control log's; one consumer (``read_committed``,
assigned, never in a group) follows the control log from the standby's position and the
input log from what the standby has read of it. The control log's records below the
committed offset are applied, each marker's range of the input log in its place; each
log is paused while the standby holds as many of its records as it may
(:attr:`OrderedStandby.room`, :attr:`OrderedStandby.input_room`).
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.core.signing import Signer
from atomickafka.errors import AtomicKafkaError
from atomickafka.kafka.consumer import consume_batch, usable, watermarks
from atomickafka.node.batch import NodeBatch, NodeSpec
from atomickafka.node.config import NodeConfig
from atomickafka.node.follow import NodeFollower, out_of_range
from atomickafka.node.ordering_log import OrderedStandby
from atomickafka.node.snapshots import LoadedSnapshot, choose_snapshot

__all__ = ["TwoLogFollower", "ordered_snapshots"]

log = logging.getLogger("atomickafka.node")

_READ_TIMEOUT_S = 5.0


def ordered_snapshots(found: list[LoadedSnapshot], ordered: bool) -> list[LoadedSnapshot]:
    """The snapshots taken in the mode ``ordered`` (with a control log, their state has
    ``ordering``), and the unreadable ones (for the choice's reasons)."""
    return [s for s in found if s.state is None or ("ordering" in s.state) == ordered]


class TwoLogFollower(NodeFollower):
    """A standing-by node instance with a control log: its consumers and its
    :class:`OrderedStandby`."""

    def __init__(self, config: NodeConfig, spec: NodeSpec, signer: Signer | None) -> None:
        super().__init__(config, spec, signer)
        assert spec.control_topic is not None
        # the committed offset, the position and the snapshots' offsets: the control log's
        self._part = TopicPartition(spec.control_topic, spec.input_partition)
        self._input_part = TopicPartition(spec.input_topic, spec.input_partition)
        self._ordered: OrderedStandby | None = None
        self._paused: set[str] = set()

    def start(self) -> bool:
        """Start following both logs from the newest usable snapshot (taken with a
        control log); False (logged) when they cannot be followed: a cold standby."""
        self._ordered = None
        self.reader.to_end(60.0)
        low, high = self._bounds()
        committed = self.committed(_READ_TIMEOUT_S)
        if committed > high:
            log.warning("standby: committed offset %d past the log's end %d", committed, high)
            return False
        found = ordered_snapshots(self.snapshots.snapshots(), True)
        choice = choose_snapshot(found, {self._part.partition: (low, high)})
        for why in choice.skipped:
            log.warning("standby: %s", why)
        if choice.cut:
            log.warning("standby: the control log starts at %d, above every snapshot", low)
            return False
        standby = OrderedStandby(
            self.spec,
            choice.snapshot,
            committed=committed,
            max_pending=2 * self.config.batch_size,
        )
        input_low, _ = watermarks(self._log, self._input_part, _READ_TIMEOUT_S * 4)
        if input_low > standby.input_fetch_from:
            log.warning("standby: the input log starts at %d, above the snapshot's", input_low)
            return False
        self._ordered = standby
        self._fetch_both(standby)
        log.info(
            "following %s[%d] from offset %d and %s from offset %d (snapshot %s) below the "
            "committed offset (%d now)",
            self._part.topic,
            self._part.partition,
            standby.position,
            self._input_part.topic,
            standby.input_fetch_from,
            "none" if choice.snapshot is None else choice.snapshot.seq,
            committed,
        )
        return True

    @property
    def following(self) -> bool:
        return self._ordered is not None

    def stop_following(self) -> None:
        self._ordered = None

    def _fetch_both(self, standby: OrderedStandby) -> None:
        self._log.assign(
            [
                TopicPartition(self._part.topic, self._part.partition, standby.fetch_from),
                TopicPartition(
                    self._input_part.topic, self._input_part.partition, standby.input_fetch_from
                ),
            ]
        )
        self._paused.clear()

    def caught_up(self) -> bool:
        """Everything below the committed offset last read has been applied."""
        standby = self._ordered
        return standby is None or standby.position >= standby.committed

    def round(self, timeout_s: float) -> bool:
        """One bounded round: the committed offset when due, then a batch of either log
        (each paused while the standby has no room for it). False when there was no
        room for any record."""
        standby = self._ordered
        if standby is None:
            return False
        self._serve_committed(standby.commit_seen, lambda: self._maybe_jump_ordered(standby))
        self._pace(self._part, standby.room > 0)
        self._pace(self._input_part, standby.input_room > 0)
        if len(self._paused) == 2:
            return False
        batch = consume_batch(self._log, max(standby.room, standby.input_room, 1), timeout_s)
        if any(out_of_range(r) for r in batch):
            log.warning("standby: a log was cut above its position; starting over")
            self.start()
            return True
        control: list[KafkaMessage] = []
        inputs: list[KafkaMessage] = []
        for record in usable(batch):
            (control if record.topic() == self._part.topic else inputs).append(record)
        if inputs:
            self.applied += standby.take_input(inputs)
        if control:
            self.applied += standby.take(control)
        return True

    def _pace(self, part: TopicPartition, room: bool) -> None:
        name = part.topic
        if not room and name not in self._paused:
            self._log.pause([part])
            self._paused.add(name)
        elif room and name in self._paused:
            self._log.resume([part])
            self._paused.discard(name)

    def _maybe_jump_ordered(self, standby: OrderedStandby) -> None:
        behind = standby.committed - standby.position
        if not self.snapshots.changed or behind < standby.jump_records:
            return  # nothing new, or not far enough behind for a snapshot to be worth it
        found = ordered_snapshots(self.snapshots.snapshots(), True)
        newest = next((s for s in found if s.state is not None), None)
        if newest is not None and standby.wants(newest):
            before = standby.position
            standby.jump(newest)
            self._fetch_both(standby)
            log.info("standby: jumped from offset %d to snapshot %d", before, newest.seq)

    def take_over(self, committed: int, low: int) -> NodeBatch | None:
        """The standby's batch layer for the new active instance (after fencing), as
        :meth:`NodeFollower.take_over`, in control-log offsets."""
        standby, self._ordered = self._ordered, None
        if standby is None:
            return None
        if standby.position < low:
            log.warning("takeover: the control log now starts at %d, above the state", low)
            return None
        try:
            self.reader.to_end(_READ_TIMEOUT_S)
        except (KafkaException, AtomicKafkaError) as exc:
            log.warning("takeover: the snapshot topic: %s", exc)
        batch = standby.take_over(committed, self.snapshots.newest_seq)
        if batch is None:
            log.warning(
                "takeover: committed offset %d below the standby's position %d",
                committed,
                standby.position,
            )
        return batch
