"""What a simulated run produced (:class:`SimulationResult`), and rule 8's replay of a
node's final logs (:func:`replayed_deliveries`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import DeadLetter, PlainRecord, read_dead_letter
from atomickafka.core.reasons import Reason
from atomickafka.core.wire import Message
from atomickafka.node.batch import NodeBatch, NodeSpec, OutKind, OutRecord
from atomickafka.verify.checker import CheckReport, SentMessage, check, deliveries_from_wire
from atomickafka.verify.streams import decoded_log

__all__ = ["SimulationResult", "dead_letter", "replayed_deliveries"]


@dataclass(slots=True, repr=False)
class SimulationResult:
    """What a run produced: what was sent, what each topic delivered, and how it went.

    ``deliveries`` is what a client reads from each delivery stream: in exactly-once
    mode every delivery record, as a plain ``read_committed`` consumer reads it; in
    at-least-once mode with repeats dropped (``raw`` has them; ``streams`` every
    record). ``logs`` holds the messages of each input log, decoded as the node decodes
    them; ``records`` the logs themselves. ``doomed`` names the messages that must be
    delivered nowhere (forged, or to destinations of different protocols).
    """

    topics: tuple[str, ...]
    algorithm: Algorithm
    protocols: dict[str, Algorithm]
    exactly_once: bool
    sent: list[SentMessage]
    doomed: set[str]
    deliveries: dict[str, list[Message]]
    raw: dict[str, list[Message]]
    streams: dict[str, list[PlainRecord]]
    records: dict[str, list[PlainRecord]]
    specs: dict[str, NodeSpec]
    dead_letters: dict[str, list[OutRecord]]
    engines: dict[str, Engine]
    steps: int
    quiescent: bool
    events: Counter[str]
    determinism_errors: list[str]
    trace: list[str]
    #: Messages a stray reached in flight: delivered at all their destinations or none.
    all_or_none: frozenset[str] = frozenset()
    #: With control logs (§7): each node's control log (``records``: its input log).
    controls: dict[str, list[PlainRecord]] = field(default_factory=dict)
    #: The members each node started knowing (``members_known``: as restarted from a
    #: snapshot that knows them), where rule 8's replay starts too; a node not here
    #: started knowing none.
    starting_members: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def replayed(self, topic: str) -> list[Message]:
        """Rule 8 for ``topic``: what a fresh node delivers reading its final logs
        (:func:`replayed_deliveries`, with its control log where it has one)."""
        members = self.starting_members.get(topic)
        if topic in self.controls:
            return replayed_deliveries(
                self.specs[topic], self.controls[topic], self.records[topic], members=members
            )
        return replayed_deliveries(self.specs[topic], self.records[topic], members=members)

    @property
    def logs(self) -> dict[str, list[Message]]:
        """Per topic, the messages of its input log as its node decodes them (with
        their log time and offset); records a node sets aside are left out."""
        return {t: decoded_log(rs) for t, rs in self.records.items()}

    def check(self, *, complete: bool | None = None, **options: Any) -> CheckReport:
        """Run the independent checker; validity is checked when the run is quiescent."""
        if complete is None:
            complete = self.quiescent
        options.setdefault("all_or_none", self.all_or_none)
        return check(self.sent, deliveries_from_wire(self.deliveries), complete=complete, **options)

    def rejected_reasons(self) -> dict[str, list[str]]:
        """Per topic, the reasons its node gave for setting input aside (when any);
        the notes about aborted messages are in :attr:`aborted`."""
        out: dict[str, list[str]] = {}
        for topic, letters in self.dead_letters.items():
            reasons = [d.reason for d in map(dead_letter, letters) if d.code is not Reason.ABORTED]
            if reasons:
                out[topic] = reasons
        return out

    @property
    def aborted(self) -> dict[str, list[str]]:
        """Per topic, the ids its node aborted, in order."""
        out: dict[str, list[str]] = {}
        for topic, letters in self.dead_letters.items():
            out[topic] = [
                mid
                for letter in map(dead_letter, letters)
                if letter.code is Reason.ABORTED
                for mid in letter.message_ids
            ]
        return out

    def stuck(self) -> dict[str, int]:
        """Per topic, messages its node heard of but has not delivered (when > 0)."""
        return {t: e.pending_count for t, e in self.engines.items() if e.pending_count}

    def delivered_ids(self, topic: str) -> list[str]:
        """The ids ``topic`` delivered, in order."""
        return [m.messageID for m in self.deliveries[topic]]

    def __repr__(self) -> str:
        return f"<SimulationResult: {self.describe()}>"

    def describe(self) -> str:
        """A one-paragraph account of the run, for assertion messages."""
        events = ", ".join(f"{k}={v}" for k, v in sorted(self.events.items()))
        lengths = ", ".join(f"{t}:{len(self.records[t])}" for t in self.topics)
        protocols = ",".join(self.protocols[t].value for t in self.topics)
        mode = "exactly-once" if self.exactly_once else "at-least-once"
        return (
            f"{self.algorithm.value} ({protocols}) {mode} run over {len(self.topics)} topics: "
            f"{self.steps} steps, quiescent={self.quiescent}, {len(self.sent)} sends; log "
            f"lengths {lengths}; events {events}; stuck {self.stuck()}"
        )


def dead_letter(letter: OutRecord) -> DeadLetter:
    """A dead letter the simulated node wrote, as core/reader reads it."""
    return read_dead_letter(PlainRecord(letter.value, headers=list(letter.headers)))


def replayed_deliveries(
    spec: NodeSpec,
    committed: Sequence[PlainRecord],
    inputs: Sequence[PlainRecord] = (),
    *,
    members: Collection[str] | None = None,
) -> list[Message]:
    """Rule 8 through the batch layer: what a fresh node of ``spec`` delivers (or writes
    to its merger) reading its final logs, each in one batch -- with a control log its
    input log first (buffered), then its committed log (the markers it writes
    meanwhile are not appended: the committed log is the input order). ``members``: the
    node starts knowing them, as the simulated node did (``members_known``)."""
    engine = NodeBatch.fresh_engine(spec)
    if members is not None:
        engine.know_members(members)
    batch = NodeBatch(spec, engine)
    records = batch.step_input(inputs, wall_s=0.0).records if inputs else []
    records += batch.step(committed, wall_s=0.0).records
    out: list[Message] = []
    for record in records:
        if record.kind is OutKind.DELIVERY and record.value is not None:
            out.extend(decode_any(record.value, record.key, list(record.headers)))
    return out
