"""How a simulated node's writes reach the logs (:class:`Writes`), in both delivery
modes, and what a scripted run may hold back (:class:`Hold`)."""

from __future__ import annotations

from collections import deque
from enum import StrEnum
from typing import Final

from atomickafka.core.marker import decode_marker
from atomickafka.core.raw import decode_any
from atomickafka.core.wire import MessageType
from atomickafka.errors import ConfigError
from atomickafka.node.batch import OutKind, OutRecord, Ready
from atomickafka.verify.sim.node import SimNode
from atomickafka.verify.sim.outages import Outages
from atomickafka.verify.sim.result import dead_letter
from atomickafka.verify.streams import CONTROL_PREFIX, INPUT_PREFIX

__all__ = ["Hold", "Writes"]

#: What a node writes outside its transaction in exactly-once mode (§6.3).
_CONTROL_KINDS: Final = frozenset({OutKind.CONTROL, OutKind.TICK})
#: A commit whose batch's writes are not acknowledged yet takes effect at no step.
_UNACKNOWLEDGED: Final = 2**62
#: The records that may reach a log too late for a message (:meth:`_note_late_relays`).
_LATE_KINDS: Final = frozenset({MessageType.CLIENT, MessageType.NOTIFY})


class Hold(StrEnum):
    """At-least-once, for scripted runs (the golden transcripts): what becomes of a
    step's writes (:meth:`Simulator.write`). The producer's queue and the broker's
    acknowledgements are the shell's; which offset is committed, and what is written,
    is the batch layer's :class:`~atomickafka.node.batch.Ready`."""

    #: Written and acknowledged at once: the commit takes effect ``commit_lag`` later.
    NOTHING = "nothing"
    #: Written; the acknowledgements have not come back (:meth:`Simulator.acknowledge`):
    #: neither this commit nor any later one takes effect until they do.
    ACKS = "acks"
    #: Still in the producer's queue: neither written nor acknowledged; a crash loses it.
    WRITES = "writes"


class Writes(Outages):
    """What a node's shell writes, as the writer of the delivery mode would: records to
    their logs and streams, commits (at once, delayed, or held back: :class:`Hold`), and
    the producer's failures, which restart the node."""

    def write(self, topic: str, ready: Ready, hold: Hold = Hold.NOTHING) -> None:
        """Write what a step decided, as the shell's writer of the mode would;
        ``hold`` (at-least-once only) keeps the writes unacknowledged or queued."""
        node = self.nodes[topic]
        if self.exactly_once:
            if hold is not Hold.NOTHING:
                raise ConfigError("hold is for the at-least-once mode")
            self._write_exactly_once(topic, ready)
            return
        if node.queued:  # the producer writes in order: behind what it still holds
            hold = Hold.WRITES
        if hold is not Hold.NOTHING:
            self._write_held(node, topic, ready, hold)
            return
        outputs = ready.outputs()
        if outputs and self.chooser.chance(self.chaos.producer_gap):
            failed = self.chooser.integer(0, len(outputs) - 1)
            written = outputs[:failed] if self.gapless else outputs[:failed] + outputs[failed + 1 :]
            for record in written:
                self._route(topic, record)
            self.events["producer_gap"] += 1
            self._note(f"{topic}: write {failed} of {len(outputs)} fails ({len(written)} written)")
            self.crash(topic)
            return
        for record in outputs:
            self._route(topic, record)
        snapshot = ready.snapshot_records()
        if snapshot and ready.snapshot_offset is not None:
            node.snapshot = (ready.snapshot_offset, snapshot)
        if ready.commit is not None:
            node.commits.append((self.clock.step + self.commit_lag, ready.commit))
        self._settle(node)

    def _write_held(self, node: SimNode, topic: str, ready: Ready, hold: Hold) -> None:
        """At-least-once: a step's writes made (``ACKS``) or queued (``WRITES``), its
        commit waiting for their acknowledgements (and holding back every later one)."""
        if hold is Hold.WRITES:
            node.queued.extend(ready.outputs())
        else:
            for record in ready.outputs():
                self._route(topic, record)
        snapshot = ready.snapshot_records()
        if snapshot and ready.snapshot_offset is not None:
            node.snapshot = (ready.snapshot_offset, snapshot)
        if ready.commit is not None:
            node.commits.append((_UNACKNOWLEDGED, ready.commit))

    def unacknowledged(self, topic: str) -> int:
        """At-least-once: the commits of ``topic``'s node waiting for acknowledgements."""
        return sum(1 for due, _ in self.nodes[topic].commits if due == _UNACKNOWLEDGED)

    def acknowledge(self, topic: str) -> list[OutRecord]:
        """At-least-once: ``topic``'s producer writes its queue and every acknowledgement
        comes back; the commits waiting for them take effect. Returns what was written."""
        node = self.nodes[topic]
        written, node.queued = node.queued, []
        for record in written:
            self._route(topic, record)
        now = self.clock.step
        node.commits = deque((min(due, now), offset) for due, offset in node.commits)
        self._settle(node)
        return written

    def _write_exactly_once(self, topic: str, ready: Ready) -> None:
        """Exactly-once (§6.3): control records at once (a failed write leaves a prefix
        and restarts the node), the rest into the node's open transaction."""
        node = self.nodes[topic]
        control = [r for r in ready.records if r.kind in _CONTROL_KINDS]
        if control and self.chooser.chance(self.chaos.producer_gap):
            failed = self.chooser.integer(0, len(control) - 1)
            for record in control[:failed]:  # gapless: a prefix, then the node exits
                self._route(topic, record)
            self.events["producer_gap"] += 1
            self._note(f"{topic}: control write {failed} of {len(control)} fails")
            self.crash(topic)
            return
        for record in control:
            self._route(topic, record)
        for record in ready.records:
            if record.kind in _CONTROL_KINDS:
                continue
            node.txn.append(record)
            if record.kind is OutKind.DELIVERY or record.kind is OutKind.WATERMARK:
                self.uncommitted[topic].append(record.value, key=record.key, headers=record.headers)
        if ready.commit is not None:
            node.txn_commit = ready.commit

    def _commit(self, topic: str) -> None:
        """Exactly-once: ``topic``'s process commits its open transaction -- the records
        of its node (and of every node its host process runs, §6.7) become visible,
        their input offsets committed -- or, by chance, the commit fails (the
        transaction aborts and the process restarts)."""
        if self.chooser.chance(self.chaos.producer_gap):
            self.events["producer_gap"] += 1
            self._note(f"{topic}: a commit fails")
            self.crash(topic)
            return
        for hosted in self.host_of[topic]:
            node = self.nodes[hosted]
            for record in node.txn:
                self._route(hosted, record)
            if node.txn_commit is not None:
                node.committed = node.txn_commit
            node.txn, node.txn_commit = [], None
        self.events["commit"] += 1

    def _settle(self, node: SimNode) -> None:
        while node.commits and node.commits[0][0] <= self.clock.step:
            node.committed = max(node.committed, node.commits.popleft()[1])
        if node.snapshot is not None and node.committed >= node.snapshot[0]:
            node.snapshot_rows.extend((r.key, r.value) for r in node.snapshot[1])
            node.snapshot = None

    def _route(self, source: str, record: OutRecord) -> None:
        """Put one record where the shell writes it."""
        kind = record.kind
        if kind is OutKind.CONTROL or kind is OutKind.TICK:
            logs = self.inputs
            if record.topic.startswith(CONTROL_PREFIX):
                logs = self.controls
                target = record.topic.removeprefix(CONTROL_PREFIX)
            else:
                target = record.topic.removeprefix(INPUT_PREFIX)
            if target not in logs:
                self.unrouted.append(record)  # a topic without a node here
                return
            assert record.value is not None
            logs[target].append(record.value, key=record.key, headers=record.headers)
            if self.chaos.downtime or self.chaos.late_members:
                self._note_late_relays(target, record.value)
        elif kind is OutKind.DELIVERY or kind is OutKind.WATERMARK:
            self.streams[source].append(record.value, key=record.key, headers=record.headers)
            if self.chaos.stray and kind is OutKind.DELIVERY and record.value is not None:
                (message,) = decode_any(record.value, record.key, list(record.headers))
                now = self.nodes[source].batch.engine.now_ms
                self._settled_at.setdefault((source, message.messageID), now)
            if self.trace is not None and kind is OutKind.DELIVERY:
                self._note(f"{source} DELIVERS {(record.value or b'')[:80]!r}")
        elif kind is OutKind.DEAD_LETTER:
            self.dead_letters[source].append(record)
            self._note(f"{source} SETS ASIDE: {dead_letter(record).reason}")
        else:
            self.nodes[source].snapshot_rows.append((record.key, record.value))

    def _note_late_relays(self, target: str, value: bytes) -> None:
        """A relay's copies that reach ``target``'s log more than half the memory
        window after their clients sent them (their relay was down, DOWNTIME) are late
        there (§4.13), and so is a ``poc`` Notify written that late (its writer failed
        between its Notifies and was down): a peer's Ack may have made an entry there
        that was abandoned a window after (rule 9). Such a message may be delivered
        nowhere, but only everywhere or nowhere."""
        window = self.nodes[target].spec.window_ms
        if decode_marker(value) is not None:
            return
        for message in decode_any(value):
            sent_at = message.sentAt
            late_kind = message.messageType in _LATE_KINDS
            if late_kind and sent_at is not None and self.clock.now_ms - sent_at > window // 2:
                self._stray_hit.add(message.messageID)
