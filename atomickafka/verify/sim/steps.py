"""A simulated node's steps (:class:`NodeSteps`)."""

from __future__ import annotations

from atomickafka.node.batch import NodeBatch, OutKind, Ready
from atomickafka.verify.sim.node import MEMBERS_AGAIN_MS
from atomickafka.verify.sim.writes import Writes

__all__ = ["NodeSteps"]


class NodeSteps(Writes):
    """A node's step: it reads a batch of one of its logs (or steps idle), its shell
    writes what it decided and its members record; its zombie's steps; a snapshot
    taken now."""

    def step_node(self, topic: str, batch: int, *, budgeted: bool = False) -> int:
        """``topic``'s node consumes up to ``batch`` records of one of its logs (drawn,
        when its committed log and a separate input log both have some), or, with none,
        steps idle (a tick, a marker or an input tick when due); returns how many it
        read. ``budgeted`` (the scheduler's steps): the step applies at most a drawn
        budget of them, as the shell bounds its steps, the rest the next step; scripted
        steps apply all."""
        node = self.nodes[topic]
        if node.zombie is not None:
            self._zombie_step(topic, batch)
        layer = node.batch
        # a step's budget, as the shell bounds its steps (none, or a few records)
        layer.step_budget = (self.chooser.integer(0, 4) or None) if budgeted else None
        ready, records = self._read_some(topic, layer, batch)
        if ready is None:
            ready = layer.idle(wall_s=self.clock.wall_s)
        else:
            self.events["batch"] += 1
        self.write(topic, ready)
        txn_open = bool(node.txn) or node.txn_commit is not None
        if (
            self.exactly_once
            and txn_open
            and (not records or self.chooser.chance(self.chaos.commit))
        ):
            self._commit(topic)
        self.write_members(topic)
        return records

    def _read_some(self, topic: str, layer: NodeBatch, count: int) -> tuple[Ready | None, int]:
        """``layer`` reads up to ``count`` records of one of the logs it reads that has
        unread records (drawn when both have): what it decided and how many it read
        (``None``, 0: none had any)."""
        unread = [(log, at) for log, at in self._fetches(topic, layer) if len(log) > at]
        if not unread:
            return None, 0
        log, at = unread[0] if len(unread) == 1 or self.chooser.chance(0.5) else unread[1]
        records = log.read(at, count)
        wall = self.clock.wall_s
        if log.topic == layer.ordering.committed_topic:
            ready = layer.step(records, wall_s=wall)
        else:
            ready = layer.step_input(records, wall_s=wall)
        self._note(f"{topic} reads {log.topic} [{at}:{at + len(records)}]")
        return ready, len(records)

    def _zombie_step(self, topic: str, batch: int) -> None:
        """The fenced instance of ``topic``'s node goes on for a step: it writes what
        needs no transaction (control records) and what it puts into its transaction
        shows only in the uncommitted view (the transaction never commits)."""
        node = self.nodes[topic]
        zombie = node.zombie
        assert zombie is not None
        ready, records = self._read_some(topic, zombie, batch)
        if ready is not None:
            for record in ready.records:
                if record.kind is OutKind.CONTROL or record.kind is OutKind.TICK:
                    self._route(topic, record)
                elif record.kind is OutKind.DELIVERY or record.kind is OutKind.WATERMARK:
                    self.uncommitted[topic].append(
                        record.value, key=record.key, headers=record.headers
                    )
            self.events["zombie_step"] += 1
            self._note(f"{topic}'s zombie reads {records} records")
        node.zombie_steps -= 1
        if node.zombie_steps <= 0 or ready is None:
            node.zombie = None  # its next commit is refused: it stops

    def write_members(self, topic: str) -> None:
        """After a round, what the shell does (node/runtime.py's ``_note_members``):
        it writes the node's members record -- every topic of the run has a node -- once
        its replay is done, when it has not since it started, and again every second
        while messages wait for members (§4.9.5)."""
        node = self.nodes[topic]
        if node.batch.replaying:
            return
        if node.members_at is None and self.chooser.chance(self.chaos.late_members):
            self.downtime()  # (LATE MEMBERS: what the node read waits that long)
            self.events["late_members"] += 1
        now = self.clock.now_ms
        awaited = bool(node.batch.engine.awaiting_members)
        if node.members_at is None:
            again = awaited
        else:
            again = awaited and now - node.members_at >= MEMBERS_AGAIN_MS
            if not again:
                return
        ready = node.batch.members(self.views[topic], again=again)
        node.members_at = now
        if ready.records:
            self.events["members"] += 1
            self.write(topic, ready)

    def checkpoint(self, topic: str) -> None:
        """``topic``'s node takes a snapshot now."""
        node = self.nodes[topic]
        ready = node.batch.snapshot_now(wall_s=self.clock.wall_s)
        if self.exactly_once:  # in the open transaction, with what the state produced
            node.txn.extend(ready.records)
        else:
            node.snapshot = (node.batch.position, ready.snapshot_records())
            self._settle(node)
        self.events["checkpoint"] += 1
