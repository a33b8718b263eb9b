"""Nodes going down in a simulated run (:class:`Outages`): crashes, restarts, takeovers,
pauses and downtime."""

from __future__ import annotations

from dataclasses import replace

from atomickafka.core.compact import BINARY
from atomickafka.core.compact import JSON as JSON_CONTROL
from atomickafka.core.engine import Algorithm
from atomickafka.core.protocols import CARRIER, EVERY
from atomickafka.core.wire import MessageType
from atomickafka.node.batch import NodeBatch, SettingsChangedError
from atomickafka.verify.choosers import pick
from atomickafka.verify.sim.node import SimNode
from atomickafka.verify.sim.state import SimState
from atomickafka.verify.streams import decoded_log

__all__ = ["Outages"]


class Outages(SimState):
    """Nodes going down: crashes and restarts (into another control format, or with the
    wrong protocol), takeovers by their standbys (which follow their logs), pauses, and
    downtime of the whole cluster."""

    def crash(self, topic: str, *, zombie: bool = False) -> None:
        """``topic``'s process restarts -- its node, and every node its host process
        runs (§6.7) -- each from its newest readable snapshot and committed offset
        (uncommitted work of the at-least-once mode is lost)."""
        for hosted in self.host_of[topic]:
            self._crash_node(hosted, zombie=zombie)

    def _crash_node(self, topic: str, *, zombie: bool) -> None:
        node = self.nodes[topic]
        snapshot = node.newest_snapshot(len(self.committed_log(topic)))
        old = node.batch
        node.batch = node.recover(snapshot)
        self._lose_uncommitted(node, "crash")
        if zombie and self.chooser.chance(self.chaos.zombie):
            # the instance a restart replaced (not one whose producer failed) may go on
            # for a while: its markers and bundles are written, its transaction is fenced
            node.zombie, node.zombie_steps = old, self.chooser.integer(1, 20)
            self.events["zombie"] += 1
        self._note(
            f"{topic} crashes, restarts at {node.batch.position} (snapshot "
            f"{None if snapshot is None else snapshot.seq}), replays to {node.committed}"
        )

    def _lose_uncommitted(self, node: SimNode, event: str) -> None:
        """A node's process ended: its commits in flight and a snapshot waiting for
        them are lost (at-least-once)."""
        node.commits.clear()
        node.snapshot = None
        node.members_at = None
        node.queued = []  # the producer's queue dies with the process
        node.txn, node.txn_commit = [], None  # the open transaction aborts
        self.events[event] += 1

    def upgrade(self, topic: str) -> None:
        """``topic``'s node restarts writing the other control format (§3.9) and the
        other Notify values (§4.16): one step of a rolling upgrade (binary, carrier) or
        of its rollback (JSON, every)."""
        node = self.nodes[topic]
        other = BINARY if node.spec.control_format == JSON_CONTROL else JSON_CONTROL
        values = EVERY if node.spec.notify_values == CARRIER else CARRIER
        node.spec = replace(node.spec, control_format=other, notify_values=values)
        self.control_formats[topic] = other
        self.notify_values[topic] = values
        self._note(f"{topic} restarts writing {other} control records, {values} Notify values")
        self.events["upgrade"] += 1
        self.crash(topic)

    def wrong_restart(self, topic: str) -> None:
        """``topic``'s node is restarted with another protocol (WRONG RESTART): it must
        refuse (§6.6) -- from its snapshot, or at its own members record in the replay --
        unless nothing protocol-specific was committed (no own members record below its
        committed offset); then it restarts with its own protocol."""
        node = self.nodes[topic]
        own = node.spec.algorithm
        wrong = replace(
            node.spec, algorithm=pick(self.chooser, [a for a in Algorithm if a is not own])
        )
        log = self.committed_log(topic)  # with a control log, its members records are there
        try:
            snapshot = node.newest_snapshot(len(log))
            batch = NodeBatch.recover(
                wrong, snapshot, node.committed, engine_class=node.engine_class
            )
            self.replay(topic, batch, node.committed)
        except SettingsChangedError:
            self.events["wrong_restart_refused"] += 1
        else:
            below = log.records[: node.committed]
            if any(m.messageType is MessageType.MEMBERS and m.senderID == node.spec.node_id
                   for m in decoded_log(below)):  # fmt: skip
                self.determinism_errors.append(
                    f"{topic}: restarted with {wrong.algorithm.value} and not refused"
                )
            self.events["wrong_restart_harmless"] += 1
        self.crash(topic)

    def replay(self, topic: str, batch: NodeBatch, committed: int) -> None:
        """Replay ``topic``'s logs into ``batch`` up to the committed offset, as
        :func:`replayed_deliveries` does: a separate input log first (the records wait
        in the batch until markers apply them), then the committed log."""
        wall = self.clock.wall_s
        (committed_log, start), *inputs = self._fetches(topic, batch)
        for log, at in inputs:
            batch.step_input(log.read(at, max(0, len(log) - at)), wall_s=wall)
        batch.step(committed_log.read(start, max(0, committed - start)), wall_s=wall)

    def follow(self, topic: str, batch: int) -> None:
        """``topic``'s standby reads the committed offset (by chance), jumps to the
        newest snapshot when worth it, and fetches up to ``batch`` records."""
        node = self.nodes[topic]
        standby = node.standby
        if standby is None:
            return
        if self.chooser.chance(0.5):
            standby.commit_seen(node.committed)
        newest = node.newest_snapshot(len(self.committed_log(topic)))
        if newest is not None and standby.wants(newest):
            standby.jump(newest)
            self.events["standby_jump"] += 1
            self._note(f"{topic}'s standby jumps to snapshot {newest.seq}")
        fetches = standby.fetches()  # its committed log, and with a control log its input log
        name, at, room = fetches[0] if len(fetches) == 1 or self.chooser.chance(0.5) else fetches[1]
        take = min(batch, room)
        if take <= 0:
            return
        records = self._logs_of(topic)[name].read(at, take)
        if name == standby.batch.ordering.committed_topic:
            standby.take(records)
        else:
            standby.take_input(records)

    def takeover(self, topic: str) -> None:
        """``topic``'s node dies; its standby takes over from its own state (a restart
        when it has none to continue), and the dead node comes back as the standby. A
        host process's standby is cold (§6.7): its takeover is the group's restart, the
        old process a zombie."""
        if len(self.host_of[topic]) > 1:
            self.crash(topic, zombie=True)
            return
        node = self.nodes[topic]
        standby = node.standby
        batch = None
        if standby is not None:
            batch = standby.take_over(node.committed, node.newest_seq())
        if batch is None:
            self.crash(topic)
        else:
            position = node.batch.position
            if self.exactly_once and self.chooser.chance(self.chaos.zombie):
                node.zombie, node.zombie_steps = node.batch, self.chooser.integer(1, 20)
                self.events["zombie"] += 1
            node.batch = batch
            self._lose_uncommitted(node, "takeover")
            self._note(
                f"{topic} dies at {position}; its standby takes over at {batch.position}, "
                f"replays to {node.committed}"
            )
        node.standby = node.new_standby(len(self.committed_log(topic)))

    def delay(self, topic: str, steps: int) -> None:
        """``topic``'s node does not step for the next ``steps`` steps."""
        self.paused_until[topic] = self.clock.step + steps
        self.events["delay"] += 1
        self._note(f"{topic} paused for {steps} steps")

    def downtime(self) -> None:
        """The log's time jumps on by more than half the memory window (DOWNTIME)."""
        window = min(n.spec.window_ms for n in self.nodes.values())
        self.clock.jump_to(self.clock.now_ms + window // 2 + self.chooser.integer(1, window // 4))
        self.events["downtime"] += 1
        self._note(f"downtime: time jumps to {self.clock.now_ms} ms")
