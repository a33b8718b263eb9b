"""One simulated node's bookkeeping (:class:`SimNode`): its batch layer and what its shell
keeps around it -- commits in flight, snapshots, the producer's queue, the open
transaction, its standby and its zombie."""

from __future__ import annotations

from collections import deque
from typing import Final

from atomickafka.core.engine import Engine
from atomickafka.node.batch import NodeBatch, NodeSpec, OutRecord
from atomickafka.node.snapshots import LoadedSnapshot, newest_snapshots
from atomickafka.node.standby import NodeStandby

__all__ = ["MEMBERS_AGAIN_MS", "SNAPSHOT_EVERY", "STANDBY_JUMP", "STANDBY_PENDING", "SimNode"]

#: Records between automatic snapshots of a node (small, so that crashes use them).
SNAPSHOT_EVERY: Final = 12
#: A standby this far behind a committed snapshot loads it (small, so that runs do).
STANDBY_JUMP: Final = 4
#: Records a standby buffers past the committed offset.
STANDBY_PENDING: Final = 8
#: How often (log time) a node's shell writes its members record again while messages
#: wait for members (node/runtime.py's ``MEMBERS_AGAIN_S``, §4.9.5).
MEMBERS_AGAIN_MS: Final = 1000


class SimNode:
    """One topic's node: its batch layer and what its shell keeps around it."""

    def __init__(self, spec: NodeSpec, engine: Engine) -> None:
        self.spec = spec
        self.engine_class = type(engine)
        self.batch = NodeBatch(spec, engine)
        self.committed = 0
        #: At-least-once: (step at which it takes effect, offset) of commits in flight.
        self.commits: deque[tuple[int, int]] = deque()
        #: At-least-once: a snapshot waiting for the commit to pass its offset.
        self.snapshot: tuple[int, list[OutRecord]] | None = None
        self.snapshot_rows: list[tuple[bytes | None, bytes | None]] = []
        #: The hot standby (with ``Chaos.takeover``).
        self.standby: NodeStandby | None = None
        #: When (log time) the shell last wrote the node's members record; ``None``:
        #: not since its process started (it writes one after its first round).
        self.members_at: int | None = None
        #: At-least-once, scripted (:class:`Hold`): records in the producer's queue.
        self.queued: list[OutRecord] = []
        #: Exactly-once: the open transaction's records and the offset it commits.
        self.txn: list[OutRecord] = []
        self.txn_commit: int | None = None
        #: A zombie (a fenced instance going on) and how many steps it has left.
        self.zombie: NodeBatch | None = None
        self.zombie_steps = 0

    def new_standby(self, log_length: int) -> NodeStandby:
        """A standby starting as the shell starts one: from the newest snapshot."""
        return NodeStandby(
            self.spec,
            self.newest_snapshot(log_length),
            committed=self.committed,
            max_pending=STANDBY_PENDING,
            jump_records=STANDBY_JUMP,
            engine_class=self.engine_class,
        )

    def newest_seq(self) -> int:
        """The highest snapshot number in the store (-1: none)."""
        return max(
            (s.seq for s in newest_snapshots(self.snapshot_rows, self.spec.role)), default=-1
        )

    def recover(self, snapshot: LoadedSnapshot | None) -> NodeBatch:
        """The batch layer of a restart from ``snapshot`` and the committed offset."""
        return NodeBatch.recover(
            self.spec, snapshot, self.committed, engine_class=self.engine_class
        )

    def newest_snapshot(self, log_length: int) -> LoadedSnapshot | None:
        """The newest readable snapshot the input log still covers (as the shell)."""
        for found in newest_snapshots(self.snapshot_rows, self.spec.role):
            offset = found.offsets.get(self.spec.input_partition, 0)
            if found.state is not None and offset <= log_length:
                return found
        return None
