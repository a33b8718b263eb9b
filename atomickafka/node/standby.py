"""A node's hot standby, pure: the decisions a standby makes while it follows the
active instance's input log (docs/DESIGN.md §6.4).

A standby keeps a :class:`~atomickafka.node.batch.NodeBatch` built from the newest
snapshot and applies the input log to it -- but only the records *below the active
instance's committed offset* ``C`` (read from the role's consumer group), as a replay
whose outputs are dropped: the active instance wrote them. It never steps past ``C``:
records from ``C`` on are the active instance's to process, and after a takeover they
are processed live by whoever is active. Records fetched past ``C`` wait in a bounded
buffer until ``C`` passes them.

On takeover the new active instance fences the old one, reads ``C`` once more and
continues from the standby's state (:meth:`NodeStandby.take_over`): a replay from its
position to ``C``, then live. Why that is the state a restart would have rebuilt:
rule 8 (§4.8) -- a node's state at an offset is a function of its input log up to
that offset, whatever the batching -- and the standby applied exactly the log below
``C``, the same records (``read_committed``) the active instance read.

No I/O and no clock: the shell reads the log, the committed offset and the snapshot
topic, and hands them in; the simulators drive this class the same way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final

from atomickafka.core.engine import Engine
from atomickafka.core.reader import KafkaRecord
from atomickafka.node.batch import NodeBatch, NodeSpec
from atomickafka.node.snapshots import LoadedSnapshot

__all__ = ["JUMP_RECORDS", "NodeStandby"]

#: A standby this many input records or more behind a newer snapshot (that the
#: committed offset has passed) loads it instead of applying the records in between.
JUMP_RECORDS: Final = 10_000


class NodeStandby:
    """A node's standby: a batch layer that follows the input log below the active
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
        self.batch = NodeBatch.recover(spec, snapshot, committed, engine_class=engine_class)
        #: The active instance's committed offset, as last read (it only grows).
        self.committed = committed
        self._pending: deque[KafkaRecord] = deque()
        self.jumps = 0

    @property
    def position(self) -> int:
        """The next input offset to apply (everything below it is in the state)."""
        return self.batch.position

    @property
    def room(self) -> int:
        """How many more records the shell may fetch now (the buffer of records past
        the committed offset is bounded)."""
        return self.max_pending - len(self._pending)

    @property
    def pending(self) -> int:
        """Records fetched but not applied yet (at or past the committed offset)."""
        return len(self._pending)

    def commit_seen(self, committed: int) -> int:
        """The active instance's committed offset is ``committed`` (a smaller one than
        seen before is stale and ignored); apply what it released. Returns the records
        applied."""
        self.committed = max(self.committed, committed)
        return self._apply()

    def take(self, records: Sequence[KafkaRecord]) -> int:
        """Records the shell fetched, in offset order from where it fetches (records
        below :attr:`position` -- left from before a jump -- are dropped). Returns the
        records applied."""
        position = self.position
        self._pending.extend(r for r in records if (r.offset() or 0) >= position)
        return self._apply()

    def _apply(self) -> int:
        pending, committed = self._pending, self.committed
        ready: list[KafkaRecord] = []
        while pending and (pending[0].offset() or 0) < committed:
            ready.append(pending.popleft())
        if not ready:
            return 0
        batch = self.batch
        batch.replay_until = max(batch.replay_until, committed)
        result = batch.step(ready, wall_s=0.0)
        # every record was below the committed offset: a replay, nothing to write
        assert not result.records and result.replayed == len(ready), "a standby stepped past C"
        return len(ready)

    def wants(self, snapshot: LoadedSnapshot) -> bool:
        """Whether to load ``snapshot`` rather than apply the records up to it: it is
        readable, the committed offset has passed it and it is at least
        :attr:`jump_records` ahead of the standby's position."""
        if snapshot.state is None:
            return False
        offset = snapshot.offsets.get(self.spec.input_partition, 0)
        return offset <= self.committed and offset - self.position >= self.jump_records

    def jump(self, snapshot: LoadedSnapshot) -> int:
        """Load ``snapshot`` (one :meth:`wants`); return the offset to fetch from next."""
        fetch_from = self.fetch_from
        self.batch = NodeBatch.recover(
            self.spec, snapshot, self.committed, engine_class=self._engine_class
        )
        position = self.position
        while self._pending and (self._pending[0].offset() or 0) < position:
            self._pending.popleft()
        self.jumps += 1
        return max(fetch_from, position)

    @property
    def fetch_from(self) -> int:
        """The next offset the shell fetches: after the buffered records."""
        if self._pending:
            return (self._pending[-1].offset() or 0) + 1
        return self.position

    def take_over(self, committed: int, newest_seq: int) -> NodeBatch | None:
        """Become the active instance's batch layer: ``committed`` is the committed
        offset read after fencing the old instance, ``newest_seq`` the highest snapshot
        number in the snapshot topic. The batch replays from :attr:`position` to
        ``committed`` (outputs dropped), then goes live; its snapshots continue above
        ``newest_seq``. ``None`` when the state cannot be continued: the committed
        offset went below the standby's position (the group's offsets were reset), so
        the shell recovers as a restart does. Buffered records are dropped: the shell
        fetches again from :attr:`position`."""
        batch = self.batch
        if committed < batch.position:
            return None
        self.committed = max(self.committed, committed)
        batch.replay_until = committed
        batch.snapshot_seq = max(batch.snapshot_seq, newest_seq)
        self._pending.clear()
        return batch
