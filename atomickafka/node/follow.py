"""The I/O of a node's hot standby (docs/DESIGN.md §6.4): what it reads while it waits
for its role's lease. The decisions are :class:`~atomickafka.node.standby.NodeStandby`'s.

While standing by, a node instance

- reads the role's snapshots from ``atomickafka-snap.T`` and keeps following that
  topic (signatures checked when signing is on), so that it knows the newest one;
- starts a :class:`NodeStandby` from the newest usable snapshot (the same choice a
  restart makes, :func:`~atomickafka.node.snapshots.choose_snapshot`);
- follows the node's committed log (with a control log, that log and the input log;
  ``read_committed``, assigned, never joining a group) and,
  about once a second, reads the active instance's committed offset from the node's
  consumer group (``Consumer.committed``: an offset fetch, no membership, nothing
  committed) -- the standby applies the records below it. That fetch does not ask for
  *stable* offsets: it returns the last committed offset and never waits for an open
  transaction (a killed instance's stays open until its successor fences it);
- loads a newer snapshot when it has fallen far behind one, and starts over from a
  snapshot when retention deleted records below its position.

On takeover, :meth:`NodeFollower.take_over` hands the standby's batch layer to the
new active instance. Following is best effort: anything it cannot do leaves the
instance a cold standby, which recovers at takeover as a restart does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.core.signing import Signer
from atomickafka.errors import AtomicKafkaError
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable, watermarks
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER
from atomickafka.kafka.topics import node_group, snapshot_topic
from atomickafka.node.batch import NodeBatch, NodeSpec, Ordering
from atomickafka.node.config import NodeConfig
from atomickafka.node.snapshots import SnapshotFollower, choose_snapshot, snapshots_of_mode
from atomickafka.node.standby import NodeStandby

__all__ = ["COMMITTED_EVERY_S", "NodeFollower", "SnapshotReader", "out_of_range", "signed_rows"]

log = logging.getLogger("atomickafka.node")

#: How often a standby reads the active instance's committed offset (s).
COMMITTED_EVERY_S: Final = 1.0
#: The bound on one read of a topic's end (s).
_READ_TIMEOUT_S: Final = 5.0
#: The bound on one read of the committed offset (s): a standby must keep serving its
#: lease, and a missed reading only delays what it applies.
_COMMITTED_TIMEOUT_S: Final = 1.0
#: How long a standby may take to read the snapshot topic to its end (s).
_SNAPSHOTS_TIMEOUT_S: Final = 60.0


def signed_rows(
    records: Iterable[KafkaMessage], topic: str, signer: Signer | None
) -> list[tuple[bytes | None, bytes | None]]:
    """``(key, value)`` of snapshot records, leaving out (and logging) the unsigned or
    wrongly signed ones when signing is on."""
    rows: list[tuple[bytes | None, bytes | None]] = []
    for record in records:
        key, value = record.key(), record.value()
        key_bytes = key.encode() if isinstance(key, str) else key
        if signer is not None:
            problem = signer.problem(topic, key_bytes, value, record.headers())
            if problem is not None:
                log.warning(
                    "snapshot record %s@%s ignored: %s",
                    topic,
                    record.offset(),
                    problem,
                    extra={"fields": {"offset": record.offset()}},
                )
                continue
        rows.append((key_bytes, value))
    return rows


class SnapshotReader:
    """A role's snapshots as a standby follows them: a consumer on the topic's snapshot
    topic (``read_committed``, from its start), signatures checked, rows into a
    :class:`SnapshotFollower`."""

    def __init__(self, config: NodeConfig, role: str, signer: Signer | None) -> None:
        self.topic = snapshot_topic(config.topic)
        self.signer = signer
        self.follower = SnapshotFollower(role)
        self._consumer = make_consumer(
            config.connection, None, **{"isolation.level": "read_committed"}
        )
        assign_from(self._consumer, [TopicPartition(self.topic, 0, OFFSET_BEGINNING)])

    def read(self, timeout_s: float = 0.0) -> None:
        """Read what has arrived (waiting up to ``timeout_s`` for the first record)."""
        records = usable(consume_batch(self._consumer, 5000, timeout_s))
        if records:
            self.follower.add(signed_rows(records, self.topic, self.signer))

    def to_end(self, timeout_s: float) -> bool:
        """Read up to the topic's end as it is now; False (logged) if that took longer
        than ``timeout_s``."""
        part = TopicPartition(self.topic, 0)
        _, high = watermarks(self._consumer, part, _READ_TIMEOUT_S * 4)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            (position,) = self._consumer.position([part])
            if position.offset >= high or high <= 0:
                return True
            self.read(0.2)
        log.warning("the snapshot topic %s was not read to its end", self.topic)
        return False

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


class NodeFollower:
    """A standing-by node instance's consumers and its :class:`NodeStandby`: one
    consumer (``read_committed``, assigned, never in a group) follows the node's
    committed log from the standby's position and, with a control log, its input log
    from what the standby has read of it; each log is paused while the standby holds
    as many of its records as it may (:meth:`NodeStandby.fetches`)."""

    def __init__(self, config: NodeConfig, spec: NodeSpec, signer: Signer | None) -> None:
        self.config = config
        self.spec = spec
        self.standby: NodeStandby | None = None
        self.reader = SnapshotReader(config, spec.role, signer)
        self.snapshots = self.reader.follower
        self.ordering = Ordering.of(spec)
        # the committed offset, the position and the snapshots' offsets: the committed log's
        self._part = TopicPartition(self.ordering.committed_topic, spec.input_partition)
        self._input_part = TopicPartition(spec.input_topic, spec.input_partition)
        settings = config.connection.consumer_config(
            node_group(config.topic, config.layer), **{"isolation.level": "read_committed"}
        )
        # never commit, and never skip: a log cut below the position is an error here
        settings.update({"enable.auto.commit": False, "auto.offset.reset": "error"})
        self._log = Consumer(settings, logger=LIBRDKAFKA_LOGGER)
        # reads the group's committed offset only (never records): read_uncommitted, so
        # that librdkafka does not ask for stable offsets and wait out open transactions
        settings["isolation.level"] = "read_uncommitted"
        self._offsets = Consumer(settings, logger=LIBRDKAFKA_LOGGER)
        self._committed_at = 0.0
        self._failed_at = 0.0
        self._paused: set[str] = set()
        #: Committed-log records applied (replayed) so far, for the metrics.
        self.applied = 0

    @property
    def following(self) -> bool:
        """Whether this instance still follows (a hot standby), or waits cold."""
        return self.standby is not None

    def stop_following(self) -> None:
        """Wait cold from now on: a takeover recovers as a restart does."""
        self.standby = None

    # ------------------------------------------------------------------ reads

    def committed(self, timeout_s: float = _COMMITTED_TIMEOUT_S) -> int:
        """The role's last committed offset of its committed log (0 when none); an open
        transaction's offset is not one yet."""
        (part,) = self._offsets.committed([self._part], timeout=timeout_s)
        return max(0, part.offset)

    def _bounds(self) -> tuple[int, int]:
        return watermarks(self._log, self._part, _READ_TIMEOUT_S * 4)

    # ------------------------------------------------------------------ following

    def start(self) -> bool:
        """Start following from the newest usable snapshot taken in the node's mode;
        False (logged) when the logs cannot be followed (cut below every snapshot, or
        the committed offset is past the log's end): the instance then stays a cold
        standby."""
        self.standby = None
        self.reader.to_end(_SNAPSHOTS_TIMEOUT_S)
        low, high = self._bounds()
        committed = self.committed(_READ_TIMEOUT_S)
        if committed > high:
            log.warning("standby: committed offset %d past the log's end %d", committed, high)
            return False
        found = snapshots_of_mode(self.snapshots.snapshots(), marked=self.ordering.marked)
        choice = choose_snapshot(found, {self._part.partition: (low, high)})
        for why in choice.skipped:
            log.warning("standby: %s", why)
        if choice.cut:
            log.warning("standby: %s starts at %d, above every snapshot", self._part.topic, low)
            return False
        standby = NodeStandby(
            self.spec,
            choice.snapshot,
            committed=committed,
            max_pending=2 * self.config.batch_size,
        )
        if self.ordering.marked:
            input_low, _ = watermarks(self._log, self._input_part, _READ_TIMEOUT_S * 4)
            if input_low > standby.input_fetch_from:
                log.warning("standby: the input log starts at %d, above the snapshot's", input_low)
                return False
        self.standby = standby
        self._committed_at = time.monotonic()
        self._assign(standby)
        log.info(
            "following %s from %s (snapshot %s) below the committed offset (%d now)",
            self.spec.role,
            ", ".join(
                f"{topic}[{self._part.partition}]@{at}" for topic, at, _ in standby.fetches()
            ),
            "none" if choice.snapshot is None else choice.snapshot.seq,
            committed,
        )
        return True

    def _assign(self, standby: NodeStandby) -> None:
        """Read the logs from where the standby goes on."""
        partition = self._part.partition
        self._log.assign([TopicPartition(t, partition, at) for t, at, _ in standby.fetches()])
        self._paused.clear()

    def caught_up(self) -> bool:
        """Whether everything below the committed offset last read has been applied
        (the consumer may be past the last record, on a transaction marker)."""
        standby = self.standby
        if standby is None or standby.position >= standby.committed:
            return True
        if standby.pending or standby.batch.queued:
            return False
        (fetched,) = self._log.position([self._part])
        return fetched.offset >= standby.committed  # what it fetched below it is applied

    def round(self, timeout_s: float) -> bool:
        """One bounded round: the committed offset when due (and a jump to a newer
        snapshot when that is worth it), then a batch of the logs (each paused while
        the standby has no room for it). False when there was no room for any record
        (the caller waits instead)."""
        standby = self.standby
        if standby is None:
            return False
        self._serve_committed(standby.commit_seen, lambda: self._maybe_jump(standby))
        fetches = standby.fetches()
        for topic, _, room in fetches:
            self._pace(TopicPartition(topic, self._part.partition), room > 0)
        if len(self._paused) == len(fetches):
            return False
        batch = consume_batch(self._log, max(1, *(room for _, _, room in fetches)), timeout_s)
        if any(out_of_range(r) for r in batch):
            log.warning("standby: a log was cut above its position; starting over")
            self.start()
            return True
        committed_log: list[KafkaMessage] = []
        inputs: list[KafkaMessage] = []
        name = self._part.topic
        for record in usable(batch):
            (committed_log if record.topic() == name else inputs).append(record)
        if inputs:
            self.applied += standby.take_input(inputs)
        if committed_log:
            self.applied += standby.take(committed_log)
        return True

    def _pace(self, part: TopicPartition, room: bool) -> None:
        name = part.topic
        if not room and name not in self._paused:
            self._log.pause([part])
            self._paused.add(name)
        elif room and name in self._paused:
            self._log.resume([part])
            self._paused.discard(name)

    def _serve_committed(
        self, commit_seen: Callable[[int], int], maybe_jump: Callable[[], None]
    ) -> None:
        """About once a second: read the committed offset and hand it to the standby
        (``commit_seen``), read new snapshots and jump to one when worth it. A failed
        reading is retried the next time (logged at most every 10 s)."""
        now = time.monotonic()
        if now - self._committed_at < COMMITTED_EVERY_S:
            return
        self._committed_at = now
        try:
            self.applied += commit_seen(self.committed())
            self.reader.read()
            maybe_jump()
        except KafkaException as exc:  # transient: the next reading retries
            if now - self._failed_at >= 10.0:
                self._failed_at = now
                log.warning("standby: reading the committed offset: %s", exc)

    def _maybe_jump(self, standby: NodeStandby) -> None:
        behind = standby.committed - standby.position
        if not self.snapshots.changed or behind < standby.jump_records:
            return  # nothing new, or not far enough behind for any snapshot to be worth it
        found = snapshots_of_mode(self.snapshots.snapshots(), marked=self.ordering.marked)
        newest = next((s for s in found if s.state is not None), None)
        if newest is not None and standby.wants(newest):
            before = standby.position
            standby.jump(newest)
            self._assign(standby)
            log.info("standby: jumped from offset %d to snapshot %d", before, newest.seq)

    def take_over(self, committed: int, low: int) -> NodeBatch | None:
        """The standby's batch layer for the new active instance (after fencing),
        ``committed`` and ``low`` the committed offset and the committed log's first
        offset read now; ``None`` when there is none to continue (the caller recovers
        as a restart does)."""
        standby, self.standby = self.standby, None
        if standby is None:
            return None
        if standby.position < low:
            log.warning("takeover: %s now starts at %d, above the state", self._part.topic, low)
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

    def close(self) -> None:
        """Release the consumers."""
        self._log.close()
        self._offsets.close()
        self.reader.close()


def out_of_range(record: KafkaMessage) -> bool:
    """A consume error saying the log no longer holds the position (cut by retention)."""
    err = record.error()
    return err is not None and err.code() in (
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.OFFSET_OUT_OF_RANGE,
    )
