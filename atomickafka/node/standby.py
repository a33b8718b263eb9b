"""A node's hot standby, pure: the decisions a standby makes while it follows the
active instance's logs (docs/DESIGN.md §6.4, §7.1).

A standby keeps a :class:`~atomickafka.node.batch.NodeBatch` built from the newest
snapshot and applies the node's committed log to it -- but only the records *below the
active instance's committed offset* ``C`` (read from the role's consumer group), as a
replay whose outputs are dropped: the active instance wrote them. It never steps past
``C``: records from ``C`` on are the active instance's to process, and after a takeover
they are processed live by whoever is active. Records fetched past ``C`` wait in a
bounded buffer until ``C`` passes them. With a control log it reads the input log too,
as far as the markers below ``C`` need and a bounded buffer beyond (the batch buffers
them, :meth:`NodeStandby.take_input`); with one log the committed log is the input log
and there is nothing else to read.

On takeover the new active instance fences the old one, reads ``C`` once more and
continues from the standby's state (:meth:`NodeStandby.take_over`): a replay from its
position to ``C``, then live. Why that is the state a restart would have rebuilt:
rule 8 (§4.8) -- a node's state at an offset is a function of its committed log up to
that offset, whatever the batching -- and the standby applied exactly the log below
``C``, the same records (``read_committed``) the active instance read.

No I/O and no clock: the shell reads the logs, the committed offset and the snapshot
topic, and hands them in; the simulators drive this class the same way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

from atomickafka.core.engine import Engine
from atomickafka.core.reader import KafkaRecord
from atomickafka.node.batch import NodeBatch, NodeSpec, Ready
from atomickafka.node.snapshots import LoadedSnapshot

__all__ = ["JUMP_RECORDS", "NodeStandby"]

#: A standby this many committed-log records or more behind a newer snapshot (that the
#: committed offset has passed) loads it instead of applying the records in between.
JUMP_RECORDS: Final = 10_000


class NodeStandby:
    """A node's standby: a batch layer that follows its logs below the active
    instance's committed offset (see the module)."""

    def __init__(
        self,
        spec: NodeSpec,
        snapshot: LoadedSnapshot | None,
        *,
        committed: int = 0,
        max_pending: int = 10_000,
        jump_records: int = JUMP_RECORDS,
        engine_class: type[Engine] = Engine,
    ) -> None:
        self.spec = spec
        self.max_pending = max(1, max_pending)
        self.jump_records = jump_records
        self._engine_class = engine_class
        #: The active instance's committed offset, as last read (it only grows).
        self.committed = committed
        self._pending: deque[KafkaRecord] = deque()
        self.jumps = 0
        self.batch = self._recover(snapshot)

    def _recover(self, snapshot: LoadedSnapshot | None) -> NodeBatch:
        batch = NodeBatch.recover(
            self.spec, snapshot, self.committed, engine_class=self._engine_class
        )
        batch.writing = False
        return batch

    @property
    def position(self) -> int:
        """The next committed-log offset to apply (everything below it is in the state)."""
        return self.batch.position

    @property
    def room(self) -> int:
        """How many more committed-log records the shell may fetch now (the buffer of
        records past the committed offset is bounded)."""
        return self.max_pending - len(self._pending)

    @property
    def input_room(self) -> int:
        """How many more input-log records the shell may fetch now (a control log's
        node; always some while a marker waits for them)."""
        room = self.max_pending - self.batch.buffered
        return max(room, 1) if self.batch.waiting else room

    @property
    def pending(self) -> int:
        """Committed-log records fetched but not applied yet (at or past ``C``)."""
        return len(self._pending)

    @property
    def fetch_from(self) -> int:
        """The next committed-log offset the shell fetches: after the buffered records."""
        if self._pending:
            return (self._pending[-1].offset() or 0) + 1
        return self.batch.control_fetch_from

    @property
    def input_fetch_from(self) -> int:
        """The next input-log offset the shell fetches (a control log's node)."""
        return self.batch.read_until

    def fetches(self) -> list[tuple[str, int, int]]:
        """What the shell reads: (topic, next offset, room) of the committed log and,
        with a control log, of the input log."""
        ordering = self.batch.ordering
        plan = [(ordering.committed_topic, self.fetch_from, self.room)]
        if ordering.marked:
            plan.append((ordering.input_topic, self.input_fetch_from, self.input_room))
        return plan

    def commit_seen(self, committed: int) -> int:
        """The active instance's committed offset is ``committed`` (a smaller one than
        seen before is stale and ignored); apply what it released. Returns the records
        applied."""
        self.committed = max(self.committed, committed)
        return self._apply()

    def take(self, records: Sequence[KafkaRecord]) -> int:
        """Committed-log records the shell fetched, in offset order from where it fetches
        (records below what the batch applied or queued -- left from before a jump --
        are dropped). Returns the records applied."""
        start = self.batch.control_fetch_from
        self._pending.extend(r for r in records if (r.offset() or 0) >= start)
        return self._apply()

    def take_input(self, records: Sequence[KafkaRecord]) -> int:
        """Input-log records the shell fetched (a control log's node), in offset order
        from :attr:`input_fetch_from`; applies what markers waited for."""
        return self._step(lambda b: b.step_input(records, wall_s=0.0))

    def _apply(self) -> int:
        pending, committed = self._pending, self.committed
        ready: list[KafkaRecord] = []
        while pending and (pending[0].offset() or 0) < committed:
            ready.append(pending.popleft())
        if not ready:
            return 0
        return self._step(lambda b: b.step(ready, wall_s=0.0))

    def _step(self, step: Callable[[NodeBatch], Ready]) -> int:
        """Apply as a replay below the committed offset; the committed-log records
        applied."""
        batch = self.batch
        before = batch.position
        batch.replay_until = max(batch.replay_until, self.committed)
        result = step(batch)
        # every record applied was below the committed offset: a replay, nothing written
        assert not result.records, "a standby stepped past the committed offset"
        return batch.position - before

    def wants(self, snapshot: LoadedSnapshot) -> bool:
        """Whether to load ``snapshot`` rather than apply the records up to it: it is
        readable, the committed offset has passed it and it is at least
        :attr:`jump_records` ahead of the standby's position."""
        if snapshot.state is None:
            return False
        offset = snapshot.offsets.get(self.spec.input_partition, 0)
        return offset <= self.committed and offset - self.position >= self.jump_records

    def jump(self, snapshot: LoadedSnapshot) -> int:
        """Load ``snapshot`` (one :meth:`wants`); return the committed-log offset to
        fetch from next. The shell fetches again from :meth:`fetches` (with a control
        log, the input log from the snapshot's ``applied``)."""
        self.batch = self._recover(snapshot)
        position = self.position
        while self._pending and (self._pending[0].offset() or 0) < position:
            self._pending.popleft()
        self.jumps += 1
        return self.fetch_from

    def take_over(self, committed: int, newest_seq: int) -> NodeBatch | None:
        """Become the active instance's batch layer: ``committed`` is the committed
        offset read after fencing the old instance, ``newest_seq`` the highest snapshot
        number in the snapshot topic. The batch replays from :attr:`position` to
        ``committed`` (outputs dropped), then goes live; its snapshots continue above
        ``newest_seq``. ``None`` when the state cannot be continued: the committed
        offset went below the standby's position (the group's offsets were reset), so
        the shell recovers as a restart does. Buffered committed-log records are
        dropped: the shell fetches again from the batch's ``control_fetch_from`` (and
        goes on reading a separate input log from its ``read_until``)."""
        batch = self.batch
        if committed < batch.position:
            return None
        self.committed = max(self.committed, committed)
        batch.replay_until = committed
        batch.snapshot_seq = max(batch.snapshot_seq, newest_seq)
        batch.writing = True
        self._pending.clear()
        return batch
