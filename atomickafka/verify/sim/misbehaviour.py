"""The simulator's misbehaviour (:class:`Misbehaviour`): what the chaos does to the logs
and the nodes, drawn step by step."""

from __future__ import annotations

from typing import Final

from atomickafka.core.engine import Algorithm
from atomickafka.core.marker import MAX_MARKER_RANGE, encode_marker
from atomickafka.core.reader import PlainRecord, peek, read_messages
from atomickafka.core.wire import Message, MessageType, encode_bundle
from atomickafka.verify.choosers import pick
from atomickafka.verify.hostile import (
    INTRUDER,
    StrayBound,
    bad_value_bundle,
    stray_control,
    stray_in_flight,
    stray_tick,
    stray_timestamp,
)
from atomickafka.verify.sim.steps import NodeSteps
from atomickafka.verify.streams import Log, stated_protocol

__all__ = ["Misbehaviour"]

#: Stray bounds an Ack or Notify is drawn from: applied, held a moment, refused. Not
#: just under ``CLOCK_HOLD_US``: a record about a delivered message is then held for up
#: to an hour and judged against the node's memory only when released, after §4.13's
#: one-minute window has forgotten the id -- the message is taken up again there (a
#: known limit of unsigned clusters, reported with issue 15).
_SHORT_BOUNDS: Final = (
    StrayBound.UNDER_LEAD,
    StrayBound.OVER_LEAD,
    StrayBound.OVER_HOLD,
    StrayBound.MAXIMUM,
)

#: The strays of STRAY IN FLIGHT: (kind, the protocol named, answers).
_IN_FLIGHT_STRAYS: Final = (
    (MessageType.NOTIFY, "other", None),
    (MessageType.ACK, "other", None),
    (MessageType.NOTIFY, None, None),
    (MessageType.ABORT, "own", None),
    (MessageType.ABORT, "own", (10**9, 0)),  # answers nothing a node wrote
)


class Misbehaviour(NodeSteps):
    """One step's worth of chaos (:meth:`misbehave`), and the hostile records it writes:
    duplicates and copies without ``seq``, strays, forged bundles and markers, misplaced
    copies (the crashes, restarts and takeovers it draws are :class:`Outages`')."""

    # ------------------------------------------------------------------ copies

    def duplicate(self, topic: str, index: int, log: Log | None = None) -> None:
        """Append record ``index`` of ``topic``'s input log (or of ``log``, one of its
        logs) again: a writer's retry."""
        log = self.inputs[topic] if log is None else log
        log.copy_of(index)
        self.events["duplicate"] += 1
        where = topic if log is self.inputs[topic] else log.topic
        self._note(f"duplicate {where}[{index}]")

    def copy_stream_record(self, topic: str, index: int) -> None:
        """Append record ``index`` of ``topic``'s delivery (or layer) stream again."""
        self.readers[topic].copies.add(self.streams[topic].copy_of(index).offset())

    def unsequenced_copy(self, topic: str, index: int, log: Log | None = None) -> None:
        """Append record ``index`` of ``topic``'s input log (or of ``log``) again without
        the ``seq`` of its messages, as a node of a release before §4.12 writes them
        (signed: a member; to the log its writer writes it to)."""
        record = (self.inputs[topic] if log is None else log).records[index]
        messages = read_messages(record)
        if not messages or not peek(record).is_bundle:
            return
        first = messages[0]
        value = encode_bundle(
            [m._replace(seq=None) for m in messages],
            sender_id=first.senderID,
            sent_from=first.sentFromTopic or "",
            protocol=stated_protocol(first.protocol),
            partition=first.partitionID,
        )
        self._append_signed(self.inputs[topic], value)  # where a one-log node reads it
        self.events["unsequenced"] += 1
        self._note(f"copy of {topic}[{index}] without seq")

    def misplaced_copy(self, topic: str) -> None:
        """A copy of one of the recent relays or peers' bundles of ``topic``'s logs in
        its other log (MISPLACED): honest records, where their writers never put them
        (§7.1); with one log, again in that log."""
        committed = self.committed_log(topic)
        sources = list({id(log): log for log in (self.inputs[topic], committed)}.values())
        candidates: list[tuple[Log, PlainRecord]] = []
        for log in sources:
            for record in log.records[-self.chaos.duplicate_window :]:
                if (log.topic, record.offset()) in self._hostile:
                    continue
                messages = read_messages(record) or []
                if any(m.seq is not None for m in messages):  # a relay or a bundle
                    candidates.append((log, record))
        if not candidates:
            return
        source, record = pick(self.chooser, candidates)
        # the other log (with one log, the same)
        target = self.inputs[topic] if source is committed else committed
        headers = [(k, v) for k, v in record.headers() or () if isinstance(v, bytes)]
        target.append(record.value(), key=record.key(), headers=headers)
        self.events["misplaced"] += 1
        self._note(f"copy of {source.topic}[{record.offset()}] into {target.topic}")

    # ------------------------------------------------------------------ hostile input

    def stray(self, topic: str, kind: int, bound: StrayBound) -> None:
        """Append a stray record to ``topic``'s input log with a timestamp at ``bound``:
        ``kind`` 0 a Tick from the merger's id, 1 a Tick from an intruder, 2 an Ack and
        3 a Notify about a message ``topic`` has delivered and still remembers, from
        another of its destinations (when there is none: a Tick). Unsigned, without
        ``seq``. (A record about an id the node has forgotten (§4.13) is a new message
        there, which a writer without the secret can forge anyway: signing is the
        answer to that, not the bounds under test here. So the chaos never copies an
        Ack or Notify stray later, when its id may be forgotten.)"""
        ts = stray_timestamp(self.clock.now_ms, bound)
        about = self._delivered_multicast(topic) if kind >= 2 else None
        log = self._hostile_log(topic)
        self._hostile.add((log.topic, len(log)))
        if about is None:
            sender = f"merger-{topic}" if kind != 1 else INTRUDER
            value = stray_tick(sender, ts, self.layer, self.control_formats[topic])
        else:
            message, sender = about
            if log is self.inputs[topic]:  # (never copied later: see above)
                self._about_ids[topic].add(len(log))
            value = stray_control(
                MessageType.ACK if kind == 2 else MessageType.NOTIFY,
                message,
                sender,
                ts,
                protocol=self.protocols[sender].value,
                layer=self.layer,
                control_format=self.control_formats[sender],
            )
        log.append(value)
        self.events[f"stray_{bound.value}"] += 1
        self._note(f"stray record ({kind}, {bound.value}) into {topic}")

    def _hostile_log(self, topic: str) -> Log:
        """Where a stray control record for ``topic``'s node lands: its input log, or,
        with a control log, that log or (drawn) the control log, where its peers' control
        records are read (in the input log it is set aside as misplaced, §7.1)."""
        committed = self.committed_log(topic)
        if committed is not self.inputs[topic] and self.chooser.chance(0.5):
            return committed
        return self.inputs[topic]

    def _delivered_multicast(self, topic: str) -> tuple[Message, str] | None:
        reader = self.readers[topic]
        reader.poll()
        window = self.nodes[topic].spec.window_ms
        multicasts = [  # remembered when the stray is read: not a new message there
            m
            for m in reader.read
            if len(m.topic) > 1
            and self._settled_at.get((topic, m.messageID), 0) + window // 2 > self.clock.now_ms
        ]
        if not multicasts:
            return None
        message = pick(self.chooser, multicasts)
        others = [t for t in message.topic if t != topic and t in self.protocols]
        return (message, pick(self.chooser, others)) if others else None

    def stray_in_flight(self) -> None:
        """Append a stray about a recent multicast to one of its destinations' logs
        (STRAY IN FLIGHT): unsigned, "from" another of its destinations, with a drawn
        ``seq``; the message is then delivered everywhere or nowhere."""
        if not self._in_flight:
            return
        about = pick(self.chooser, list(self._in_flight))
        served = [t for t in about.topic if t in self.inputs]
        if len(served) < 2:
            return
        target = pick(self.chooser, served)
        sender = pick(self.chooser, [t for t in served if t != target])
        kind, named, answers = pick(self.chooser, list(_IN_FLIGHT_STRAYS))
        own = self.protocols[target]
        protocol = {
            "other": pick(self.chooser, [a.value for a in Algorithm if a is not own]),
            "own": own.value,
            None: None,
        }[named]
        seq = pick(self.chooser, [None, (0, 0), (10**6, self.chooser.integer(0, 3))])
        value = stray_in_flight(
            kind,
            about,
            sender,
            1,
            protocol=protocol,
            layer=self.layer,
            seq=seq,
            answers=answers,
            control_format=self.control_formats[sender],
        )
        log = self._hostile_log(target)
        self._hostile.add((log.topic, len(log)))
        log.append(value)
        self._stray_hit.add(about.messageID)
        self.events["stray_in_flight"] += 1
        self._note(f"stray {kind.value} ({protocol}) about {about.messageID} into {target}")

    def bad_value(self, topic: str) -> None:
        """Append a forged Bundle whose relayed ClientMessage value is not JSON."""
        self._forged += 1
        mid = f"forged-{self._forged}"
        others = [t for t in self.topics if t != topic]
        destinations = tuple(sorted({topic, pick(self.chooser, others)})) if others else (topic,)
        sender = pick(self.chooser, list(self.topics))
        value = bad_value_bundle(
            mid,
            destinations,
            sender,
            protocol=self.protocols[topic].value,
            layer=self.layer,
            control_format=self.control_formats[sender],
        )
        self.doomed.add(mid)
        log = self._writers_log(topic, value, ())  # a bundle: where its sender writes one
        self._hostile.add((log.topic, len(log)))
        self._append_signed(log, value)
        self.events["bad_value"] += 1
        self._note(f"forged bundle {mid} with a value that is not JSON into {topic}")

    def forge_marker(self, topic: str) -> None:
        """An unsigned apply marker in the name of ``topic``'s node (FORGED MARKER),
        naming input offsets from its next unapplied one (a few, or as many as a marker
        may name): with a control log it waits for offsets nobody wrote until a record
        in its range refutes it (§7.1); with one log it is no record a node reads."""
        node = self.nodes[topic]
        start = node.batch.applied
        size = pick(self.chooser, [1, 3, MAX_MARKER_RANGE])
        value = encode_marker(node.spec.node_id, topic, start, start + size, self.layer)
        log = self.committed_log(topic)
        log.append(value)
        self.events["forged_marker"] += 1
        self._note(f"forged marker [{start}, {start + size}) into {log.topic}")

    # ------------------------------------------------------------------ the schedule

    def misbehave(self) -> None:
        """One step's worth of chaos, each kind drawn by its probability."""
        chooser = self.chooser
        chaos = self.chaos
        topics = self.topics
        if chooser.chance(chaos.duplicate):
            recent = self._recent_record()
            if recent is not None:
                self.duplicate(*recent)
        if chooser.chance(chaos.unsequenced):
            recent = self._recent_record()
            if recent is not None:
                self.unsequenced_copy(*recent)
        if chooser.chance(chaos.delay):
            self.delay(pick(chooser, topics), chooser.integer(1, chaos.max_delay))
        if chooser.chance(chaos.checkpoint):
            self.checkpoint(pick(chooser, topics))
        if chooser.chance(chaos.crash):
            self.crash(pick(chooser, topics), zombie=self.exactly_once)
        if chooser.chance(chaos.stray):
            kind = chooser.integer(0, 3)
            bounds = list(StrayBound) if kind < 2 else list(_SHORT_BOUNDS)
            self.stray(pick(chooser, topics), kind, pick(chooser, bounds))
        if chooser.chance(chaos.bad_value):
            self.bad_value(pick(chooser, topics))
        if chooser.chance(chaos.stray_in_flight):
            self.stray_in_flight()
        self._hazards()
        self._restarts()
        if chaos.takeover:
            self._standbys()

    def _hazards(self) -> None:
        """Issue 35's hazards, each by chance: downtime, a misplaced copy, a forged
        marker (a late members record is drawn where the shell writes it)."""
        chooser, chaos = self.chooser, self.chaos
        if chooser.chance(chaos.downtime):
            self.downtime()
        if chooser.chance(chaos.misplaced):
            self.misplaced_copy(pick(chooser, self.topics))
        if chooser.chance(chaos.forged_marker):
            self.forge_marker(pick(chooser, self.topics))

    def _restarts(self) -> None:
        """A node restarted with a protocol it was not running (by chance), and one
        restarted writing the other control format (by chance)."""
        chooser, chaos = self.chooser, self.chaos
        if chooser.chance(chaos.wrong_restart):
            self.wrong_restart(pick(chooser, self.topics))
        if chooser.chance(chaos.upgrade):
            self.upgrade(pick(chooser, self.topics))

    def _standbys(self) -> None:
        """The standbys follow (each by chance); one may take over."""
        chooser, chaos = self.chooser, self.chaos
        for topic in self.topics:
            if chooser.chance(chaos.follow):
                self.follow(topic, chooser.integer(1, chaos.max_batch))
        if chooser.chance(chaos.takeover):
            self.takeover(pick(chooser, self.topics))

    def _recent_record(self) -> tuple[str, int] | None:
        """A drawn topic and one of the last ``duplicate_window`` offsets of its input
        log. (Copies in a control log are not drawn: a client's direct copy repeated
        there, or a bundle without ``seq``, which no release that writes control logs
        writes, are not yet covered; see the closing notes of issue 37.)"""
        nonempty = [t for t in self.topics if len(self.inputs[t])]
        if not nonempty:
            return None
        topic = pick(self.chooser, nonempty)
        size = len(self.inputs[topic])
        low = max(0, size - self.chaos.duplicate_window)
        index = self.chooser.integer(low, size - 1)
        return None if index in self._about_ids[topic] else (topic, index)
