"""AtomicKafka as a transcript drives it: the simulators' cluster, step by scripted step.

:class:`Cluster` runs one transcript command at a time on the in-memory cluster of
:mod:`atomickafka.verify.simulator` (and, with layers, of
:mod:`atomickafka.verify.layered`): every node is the production batch layer, a
:class:`~atomickafka.node.batch.NodeBatch`, and every merger a
:class:`~atomickafka.node.merger_batch.MergerBatch`. What a step writes, in which
order, and which input offset it commits is what their ``Ready`` says; where it goes
is where the simulator's shell puts it (at-least-once: written by a gapless producer,
committed once acknowledged). A crash restarts the node as production does,
:meth:`NodeBatch.recover` from the newest snapshot its store holds and the committed
offset. Every node starts as one restarted from a snapshot at offset 0 that knows
every member (so it writes no members record and takes every destination at once), or
with ``setup ... fresh`` as on its first start (no snapshot: a message naming another
topic waits until the node reads back the members record its shell writes); snapshots
are otherwise taken as production takes them (every ``snapshots=N`` records given to
``setup``, by default production's 50,000: none in a short transcript) or by
``snapshot NODE``. Deliveries are written in the production format, JSON envelopes
(``setup ... format=raw``: raw records). The commands (arguments in ``[]`` are
optional):

``setup topics=(A,B,C) [protocol=direct|optimized|poc] [layers=N] [format=json|raw] \
[snapshots=N] [fresh]``
    A new cluster: one node per topic (``A``), or per topic and layer (``A/0``,
    ``A/1``) and a merger per topic.
``send id=M to=(A,B) [via=R] [only=(A)] [layer=L] [value=V] [client=C] [count=N]``
    A client writes ClientMessage ``M`` (``count``: ``M-0`` .. ``M-<N-1>``).
    ``direct``: to every destination, or to those in ``only`` (a partial write);
    ``poc``/``optimized``: to ``via``, by default the first destination. A ``via``
    that is not a destination relays.
``step NODE [n=N] [hold=acks|writes]``
    The node reads its next ``n`` records (default: all) as one batch; ``hold`` keeps
    the writes unacknowledged, or in the producer's queue.
``drain``
    Step every node that has records to read, in name order, until none has.
``dup NODE at=I``
    Record ``I`` of the node's log is written again at its end (a producer retry).
``replay NODE [from=I]``
    The node re-reads from ``I`` (default: its committed offset), state kept.
``flush NODE``
    Its queued writes are written and every acknowledgement comes back.
``snapshot NODE``
    The node takes a snapshot now (written once its offset is committed).
``crash NODE`` / ``recover NODE``
    The node loses its state, its producer queue and pending acknowledgements; on
    recovery it starts from its newest snapshot and replays up to its committed offset
    without writing (§6).
``merge TOPIC [layer=L]``
    The topic's merger reads what its layers wrote (every layer, or one); tick
    requests become TickMessage records in the idle layers' logs.
``deliveries`` / ``log NODE`` / ``state NODE`` / ``check``
    Show the delivery streams (a repeated id marked ``(repeat)``: readers drop it),
    a log, a node's state; run the order checker on what readers see.

The trace is terse and stable: ``read A[3] from B: Notify m1@4`` is record 3 of A's
log; ``send B[2] Notify m1@5`` the record written at B's position 2; ``m1@5`` is message
``m1`` at timestamp 5 (``m1@5/1``: released from layer 1); the last line of a step is
the node's clock, the head of its queue and its committed offset.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, cast

from atomickafka.core.engine import Algorithm, Engine, Output, Step
from atomickafka.core.marker import decode_marker, encode_marker
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import PlainRecord, read_delivery
from atomickafka.core.wire import Message, MessageError, MessageType
from atomickafka.node.batch import (
    NodeBatch,
    NodeSpec,
    OutKind,
    OutRecord,
    Ready,
    SettingsChangedError,
)
from atomickafka.verify.checker import check, deliveries_from_wire
from atomickafka.verify.layered import LayeredSimulator
from atomickafka.verify.simulator import Hold, RandomChooser, Send, Simulator
from atomickafka.verify.streams import CONTROL_PREFIX, INPUT_PREFIX, Log
from atomickafka.verify.workload import LayerSend
from tests.unit.transcript import Command, TranscriptError

__all__ = ["Cluster", "TracedEngine"]

_DRAIN_ROUNDS = 100  # a drain that needs more rounds than this is reported, not looped
_QUEUE_SHOWN = 4
#: Production's snapshot interval in records (``NodeSpec``'s default).
_PRODUCTION_SNAPSHOT_EVERY = cast(
    int, next(f.default for f in fields(NodeSpec) if f.name == "snapshot_every_records")
)


@dataclass(slots=True)
class EngineStep:
    """One :meth:`Engine.step` call as the trace shows it: its result, the proposals
    it made, how many duplicates it read, and the engine's state after it."""

    step: Step
    proposals: list[tuple[str, int]]
    duplicates: int
    state: str


class TracedEngine(Engine):
    """An :class:`Engine` that notes, per :meth:`step`, the proposals it makes (§4.1)
    and the duplicates it reads, for the trace.

    It wraps the handlers to know which message it is reading and the ``_propose``
    seam to note the value; everything else is the engine's own. The batch layer calls
    :meth:`step` once per part of a batch (the replayed part, then the rest).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[EngineStep] = []
        self._proposals: list[tuple[str, int]] = []
        self._reading = ""
        self._duplicates_shown = 0
        self._handlers = {kind: self._noting(h) for kind, h in self._handlers.items()}

    def _noting(self, handler: Callable[[Message], list[Output]]) -> Callable[..., list[Output]]:
        def handle(record: Message) -> list[Output]:
            self._reading = record.messageID
            return handler(record)

        return handle

    def _propose(self) -> int:
        proposal = super()._propose()
        self._proposals.append((self._reading, proposal))
        return proposal

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> Engine:
        """A traced engine from a snapshot: its counts so far are not this step's."""
        engine = super().restore(snapshot)
        assert isinstance(engine, TracedEngine)
        engine._duplicates_shown = engine.stats.duplicates
        return engine

    def step(self, records: Iterable[Message]) -> Step:
        result = super().step(records)
        duplicates = self.stats.duplicates - self._duplicates_shown
        self._duplicates_shown = self.stats.duplicates
        self.steps.append(EngineStep(result, self._proposals, duplicates, _engine_state(self)))
        self._proposals = []
        return result

    def take_steps(self) -> list[EngineStep]:
        """The engine steps since the last call, in order."""
        out, self.steps = self.steps, []
        return out


# ---------------------------------------------------------------------------- formatting


def _short(kind: MessageType) -> str:
    return kind.value.removesuffix("Message")


def _message(message: Message) -> str:
    if message.messageType is MessageType.MEMBERS:
        return "Members {" + ",".join(message.topic) + "}"
    text = f"{_short(message.messageType)} {message.messageID}"
    if message.messageType is MessageType.TICK:
        text = "Tick"
    if message.timeStamp is not None:
        text += f"@{message.timeStamp}"
    if message.messageType is MessageType.CLIENT:
        text += " {" + ",".join(message.topic) + "}"
    if message.messageType is MessageType.NOTIFY and message.value is None:
        text += " (no value)"  # a lean Notify (§4.16)
    return text


#: One record of an input log, decoded: a ClientMessage, a Tick, or a Bundle's messages.
LogRecord = tuple[Message, ...]


def _decoded(value: bytes | None, key: Any = None, headers: Any = None) -> LogRecord:
    try:
        return tuple(decode_any(value or b"", key, headers))
    except MessageError:
        return ()


def _record(record: LogRecord) -> str:
    """A log record: ``Client m1 {A,B}``, ``Tick@7``, ``from B: Notify m1@4, ...``."""
    if not record:
        return "(unreadable)"
    body = ", ".join(_message(m) for m in record)
    sender = record[0].sentFromTopic
    if sender is not None:
        return f"from {sender}: {body}"
    return body


_NUMBERED = re.compile(r"(.*?)(\d+)")


def _successor(previous: tuple[str, int | None], item: tuple[str, int | None]) -> bool:
    """True when ``item`` continues a run after ``previous``: ``x-3@7`` then ``x-4@8``."""
    a, b = _NUMBERED.fullmatch(previous[0]), _NUMBERED.fullmatch(item[0])
    if a is None or b is None or a[1] != b[1] or int(b[2]) != int(a[2]) + 1:
        return False
    ta, tb = previous[1], item[1]
    return (ta is None and tb is None) or (ta is not None and tb is not None and tb == ta + 1)


def _runs(
    items: Sequence[tuple[str, int | None]], marked: frozenset[int] = frozenset(), minimum: int = 3
) -> list[str]:
    """``id@ts`` for each item (`` (repeat)`` after the indices in ``marked``); a run of
    ``minimum`` or more unmarked numbered ids with consecutive timestamps is shown as
    one: ``hot-0..hot-19@1..20``."""
    out: list[str] = []
    start = 0
    while start < len(items):
        end = start + 1
        if start not in marked:
            while end < len(items) and end not in marked and _successor(items[end - 1], items[end]):
                end += 1
        if end - start >= minimum:
            (fid, fts), (lid, lts) = items[start], items[end - 1]
            text = f"{fid}..{lid}"
            out.append(text if fts is None else f"{text}@{fts}..{lts}")
        else:
            for index in range(start, end):
                mid, ts = items[index]
                text = mid if ts is None else f"{mid}@{ts}"
                out.append(f"{text} (repeat)" if index in marked else text)
        start = end
    return out


def _plain_client(record: LogRecord) -> bool:
    return (
        len(record) == 1
        and record[0].messageType is MessageType.CLIENT
        and record[0].sentFromTopic is None
    )


def _reads(node: str, records: Sequence[tuple[int, LogRecord]]) -> list[str]:
    """``read A[0] ...`` per record; runs of plain single-topic ClientMessages in one."""
    lines: list[str] = []
    index = 0
    while index < len(records):
        offset, record = records[index]
        end = index + 1
        if _plain_client(record):
            while (
                end < len(records)
                and _plain_client(records[end][1])
                and records[end][1][0].topic == record[0].topic
                and _successor(
                    (records[end - 1][1][0].messageID, None), (records[end][1][0].messageID, None)
                )
            ):
                end += 1
        if end - index >= 3:
            last_offset, last = records[end - 1]
            dests = "{" + ",".join(record[0].topic) + "}"
            lines.append(
                f"read {node}[{offset}..{last_offset}] Client "
                f"{record[0].messageID}..{last[0].messageID} {dests}"
            )
        else:
            lines.extend(f"read {node}[{o}] {_record(r)}" for o, r in records[index:end])
        index = end
    return lines


def _log_texts(records: Sequence[PlainRecord]) -> list[tuple[int, str]]:
    """Each record as the trace shows it: a marker ``mark A[0..2]`` (its input log's
    offsets), any other record as :func:`_record`."""
    out = []
    for record in records:
        offset = record.offset() or 0
        try:
            marker = decode_marker(record.value())
        except MessageError:
            marker = None
        if marker is not None:
            out.append((offset, f"mark {marker.topic}[{marker.start}..{marker.end - 1}]"))
        else:
            out.append((offset, _record(_decoded(record.value(), record.key(), record.headers()))))
    return out


def _log_records(records: Sequence[PlainRecord]) -> list[tuple[int, LogRecord]]:
    return [(r.offset() or 0, _decoded(r.value(), r.key(), r.headers())) for r in records]


def _engine_state(engine: Engine) -> str:
    """``clock 3, queue m1@2 decided, m2@3 waits B``, and what waits for a members
    record naming its destinations (§4.9.5)."""
    awaiting = engine.awaiting_members
    if awaiting:
        return f"{_queue_state(engine)}; waits for members {{{','.join(awaiting)}}}"
    return _queue_state(engine)


def _queue_state(engine: Engine) -> str:
    waiting = engine.waiting(_QUEUE_SHOWN + 1)
    if not waiting:
        return f"clock {engine.clock}, queue empty"
    shown = []
    for item in waiting[:_QUEUE_SHOWN]:
        text = f"{item.messageID}@{item.timeStamp}"
        if item.decided:
            text += " decided"
        elif item.missing:
            text += " waits " + ",".join(item.missing)
        else:
            text += " undecided"
        shown.append(text)
    if len(waiting) > _QUEUE_SHOWN:
        shown.append(f"... {engine.pending_count} in all")
    return f"clock {engine.clock}, queue " + ", ".join(shown)


def _dropped(outputs: Sequence[Output]) -> list[str]:
    """What the engine decided for a replayed part, which the batch layer drops: one
    line per destination's control messages, one for the deliveries."""
    control: dict[str, list[Message]] = {}
    delivered: list[tuple[str, int | None]] = []
    for output in outputs:
        message = output.message
        if message.messageType in (MessageType.DELIVERY, MessageType.PARTITION_DELIVERY):
            delivered.append((message.messageID, message.timeStamp))
        else:
            control.setdefault(output.topic, []).append(message)
    lines = [f"drop {t} " + ", ".join(_message(m) for m in ms) for t, ms in control.items()]
    if delivered:
        lines.append("drop deliver " + ", ".join(_runs(delivered)))
    return lines


def _layer_item(message: Message) -> str:
    if message.messageType is MessageType.WATERMARK:
        return f"watermark {message.timeStamp}"
    return f"{message.messageID}@{message.timeStamp}"


def _merger_state(merger: Any) -> str:
    marks = "watermarks " + " ".join(str(w) for w in merger.watermarks)
    head = merger.head
    if head is None:
        return f"{marks}, nothing buffered"
    blockers = merger.blocked_by()
    waits = f" waits for layer {','.join(map(str, blockers))}" if blockers else ""
    return f"{marks}, head {head.messageID}@{head.timeStamp}/{head.layer}{waits}"


def _first_each(stream: Sequence[Message]) -> list[Message]:
    """What a reader sees: the stream with repeated messageIDs dropped."""
    seen: set[str] = set()
    out = []
    for message in stream:
        if message.messageID not in seen:
            seen.add(message.messageID)
            out.append(message)
    return out


# ---------------------------------------------------------------------------- the cluster


class Cluster:
    """The simulators' cluster one transcript drives (see the module);
    ``delivery_format`` is what ``setup`` takes without ``format=``."""

    def __init__(self, delivery_format: str = "json") -> None:
        self.delivery_format = delivery_format
        self._sims: list[Simulator] = []
        self._layered: LayeredSimulator | None = None
        self._down: set[str] = set()
        self._commands: dict[str, Callable[[Command], list[str]]] = {
            "setup": self._setup,
            "send": self._send,
            "step": self._step,
            "drain": self._drain,
            "dup": self._dup,
            "replay": self._replay,
            "flush": self._flush,
            "snapshot": self._snapshot,
            "crash": self._crash,
            "recover": self._recover,
            "merge": self._merge,
            "deliveries": self._show_deliveries,
            "log": self._show_log,
            "state": self._show_state,
            "check": self._check,
            "standby": self._standby,
            "follow": self._follow,
            "takeover": self._takeover,
            "restart": self._restart,
            "mark": self._mark,
        }

    def run(self, command: Command) -> str:
        """Execute one transcript command; its trace."""
        handler = self._commands.get(command.name)
        if handler is None:
            raise TranscriptError(
                f"unknown command {command.name!r}; known: {', '.join(self._commands)}"
            )
        if command.name != "setup" and not self._sims:
            raise TranscriptError("no cluster yet: start with setup")
        return "\n".join(handler(command))

    # ------------------------------------------------------------------ set up

    def _setup(self, cmd: Command) -> list[str]:
        try:
            algorithm = Algorithm(cmd.get("protocol") or "direct")
        except ValueError:
            raise TranscriptError(f"unknown protocol {cmd.get('protocol')!r}") from None
        topics = cmd.values("topics")
        layers = cmd.integer("layers")
        delivery_format = cmd.get("format") or self.delivery_format
        if delivery_format not in ("json", "raw"):
            raise TranscriptError(f"format= is json or raw, not {delivery_format!r}")
        every = cmd.integer("snapshots", _PRODUCTION_SNAPSHOT_EVERY)
        assert every is not None
        fresh = cmd.flag("fresh")
        logs = cmd.get("logs") or "one"
        if logs not in ("one", "control"):
            raise TranscriptError(f"logs= is one or control, not {logs!r}")
        options: dict[str, Any] = {
            "algorithm": algorithm,
            "chooser": RandomChooser(0),  # the calm chaos draws nothing
            "exactly_once": False,
            "commit_lag": 0,
            "snapshot_every": every,
            "members_known": not fresh,
            "delivery_format": delivery_format,
            "control_logs": logs == "control",
        }
        self._down = set()
        options["engine_factory"] = lambda t, a: TracedEngine(t, f"node-{t}", a)
        if layers is None:
            self._layered = None
            self._sims = [Simulator(topics, **options)]
        else:
            self._layered = LayeredSimulator(topics, layers, **options)
            self._sims = self._layered.sims
        text = f"nodes {' '.join(self._names())} ({algorithm.value})"
        if logs == "control":
            text += ", control logs"
        if fresh:
            text += ", first start"
        if self._layered is not None:
            text += f"; mergers {' '.join(self._layered.topics)}"
        return [text]

    def _names(self) -> list[str]:
        """Every node's name, topic by topic: ``A/0 A/1 B/0 B/1``."""
        return [self._name(sim, t) for t in self._sims[0].topics for sim in self._sims]

    def _name(self, sim: Simulator, topic: str) -> str:
        return topic if sim.layer is None else f"{topic}/{sim.layer}"

    def _where(self, name: str) -> tuple[Simulator, str]:
        topic = name.partition("/")[0]
        for sim in self._sims:
            if topic in sim.nodes and self._name(sim, topic) == name:
                return sim, topic
        raise TranscriptError(f"no node {name!r}; nodes: {' '.join(self._names())}")

    def _live(self, name: str) -> tuple[Simulator, str]:
        where = self._where(name)
        if name in self._down:
            raise TranscriptError(f"{name} is down: recover it first")
        return where

    def _node_argument(self, cmd: Command) -> str:
        names = cmd.positional()
        if len(names) != 1:
            raise TranscriptError(f"{cmd.name} takes one node name")
        return names[0]

    def _logs(self) -> dict[str, Log]:
        """Every input log by node name, and every control log by the node's name and
        ``.ctl``."""
        out = {self._name(s, t): log for s in self._sims for t, log in s.inputs.items()}
        for sim in self._sims:
            out.update({f"{self._name(sim, t)}.ctl": log for t, log in sim.controls.items()})
        return out

    # ------------------------------------------------------------------ clients

    def _send(self, cmd: Command) -> list[str]:
        sim = self._sims[0]
        mid = cmd.require("id")
        destinations = cmd.values("to")
        for topic in destinations:
            if topic not in sim.topics:
                raise TranscriptError(f"no topic {topic!r}")
        via = cmd.get("via")
        only = cmd.values("only", ())
        lane = cmd.values("lane", ())
        if lane and not sim.control_logs:
            raise TranscriptError("lane= is for clusters with control logs (setup logs=control)")
        layer = cmd.integer("layer", 0 if self._layered is not None else None)
        count = cmd.integer("count")
        value = cmd.get("value")
        client = cmd.get("client", "c") or "c"
        entry = self._entry(destinations, via, only)
        ids = [mid] if count is None else [f"{mid}-{i}" for i in range(count)]
        logs = self._logs()
        before = {name: len(log) for name, log in logs.items()}
        for message_id in ids:
            sent_value = message_id if value is None else value
            self._sims[0].clock.advance()
            if self._layered is not None:
                assert layer is not None
                send = LayerSend(client, message_id, destinations, sent_value, entry, layer)
                self._layered.send(send, only=only or None)
            else:
                plain = Send(client, message_id, destinations, sent_value, entry)
                sim.send(plain, only=only or None, lane=lane)
        where = []
        for name, log in logs.items():
            if len(log) > before[name]:
                first, last = before[name], len(log) - 1
                where.append(f"{name}[{first}]" if first == last else f"{name}[{first}..{last}]")
        shown = mid if count is None else f"{ids[0]}..{ids[-1]}"
        return [f"{shown} -> {' '.join(where)}"]

    def _entry(self, destinations: Sequence[str], via: str | None, only: Sequence[str]) -> str:
        """The topic the client writes to (``direct``: the first destination, standing
        for all of them)."""
        sim = self._sims[0]
        if via is not None and via not in sim.topics:
            raise TranscriptError(f"no topic {via!r}")
        if via is not None and via not in destinations:
            if only:
                raise TranscriptError("a relayed message goes to its relay only")
            return via
        if sim.algorithm is not Algorithm.DIRECT:
            if only:
                raise TranscriptError(f"only= is for direct; {sim.algorithm.value} takes via=")
            return via or sorted(destinations)[0]
        if via is not None:
            raise TranscriptError("direct writes to every destination: use only=(...)")
        stray = [t for t in only if t not in destinations]
        if stray:
            raise TranscriptError(f"only= names {', '.join(stray)}, not a destination")
        return sorted(destinations)[0]

    # ------------------------------------------------------------------ nodes

    def _step(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        count = cmd.integer("n")
        try:
            hold = Hold(cmd.get("hold") or "nothing")
        except ValueError:
            raise TranscriptError(f"hold= is acks or writes, not {cmd.get('hold')!r}") from None
        sim, _ = self._where(name)
        if sim.control_logs:
            log = cmd.get("log") or "ctl"
            if log not in ("ctl", "in"):
                raise TranscriptError(f"log= is ctl or in, not {log!r}")
            return self._step_two_logs(name, log, count) or [f"{name} has nothing to read"]
        return self._step_node(name, count, hold) or [f"{name} has nothing to read"]

    def _step_node(self, name: str, count: int | None, hold: Hold) -> list[str]:
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        batch: NodeBatch = node.batch  # the production batch layer decides, not a model
        log = sim.inputs[topic]
        records = log.read(batch.position, len(log) if count is None else count)
        if not records:
            return []
        sim.clock.advance()
        engine = batch.engine
        assert isinstance(engine, TracedEngine)
        committed = node.committed
        ready = batch.step(records, wall_s=sim.clock.wall_s)
        parts = engine.take_steps()
        decoded = _log_records(records)
        lines: list[str] = []
        cut = ready.replayed
        if cut:
            replayed = parts.pop(0)
            lines.extend(_reads(name, decoded[:cut]))
            body = self._effects(replayed)
            body.append(f"below the committed offset {batch.replay_until}: outputs dropped")
            body.extend(_dropped(replayed.step.outputs))
            if replayed.duplicates:
                body.append(f"duplicates {replayed.duplicates}")
            body.append(f"{replayed.state}; committed {node.committed}")
            lines.extend("  " + line for line in body)
            if cut == len(records):
                return lines
        queued = bool(node.queued)
        effective = Hold.WRITES if queued else hold
        (written,) = parts
        lines.extend(_reads(name, decoded[cut:]))
        body = self._effects(written)
        seq = node.newest_seq()
        if effective is Hold.WRITES:
            sim.write(topic, ready, hold)
            body.extend(self._describe(sim, topic, ready.outputs(), verb="queue"))
        else:
            body.extend(self._written(sim, topic, ready, hold))
        body.extend(self._written_members(sim, topic))
        body.extend(self._snapshot_note(sim, topic, seq, ready.snapshot_offset))
        if written.duplicates:
            body.append(f"duplicates {written.duplicates}")
        if effective is Hold.WRITES:
            body.append("held in the producer's queue: nothing written, not committed")
        elif hold is Hold.ACKS:
            body.append("written, not acknowledged: not committed")
        elif node.committed == committed and sim.unacknowledged(topic):
            body.append("not committed: an earlier batch is not acknowledged")
        body.append(f"{_engine_state(engine)}; committed {node.committed}")
        lines.extend("  " + line for line in body)
        return lines

    def _step_two_logs(self, name: str, which: str, count: int | None) -> list[str]:
        """A node with a control log reads its next ``count`` records (default: all) of
        one log (``ctl``: its control log, applied in order, each marker's range of its
        input log in place; ``in``: its input log, buffered and marked)."""
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        batch: NodeBatch = node.batch  # the production batch layer decides, not a model
        log = sim.controls[topic] if which == "ctl" else sim.inputs[topic]
        start = batch.control_fetch_from if which == "ctl" else batch.read_until
        records = log.read(start, len(log) if count is None else count)
        if not records:
            return []
        sim.clock.advance()
        engine = batch.engine
        assert isinstance(engine, TracedEngine)
        applied, void, refused = batch.applied, batch.markers_void, batch.markers_refused
        wall = sim.clock.wall_s
        if which == "ctl":
            ready = batch.step(records, wall_s=wall)
        else:
            ready = batch.step_input(records, wall_s=wall)
        parts = engine.take_steps()
        where = f"{name}.ctl" if which == "ctl" else name
        lines = [f"read {where}[{o}] {text}" for o, text in _log_texts(records)]
        body = self._marker_effects(name, applied, void, refused, batch)
        for part in parts:
            body.extend(self._effects(part))
            if part.duplicates:
                body.append(f"duplicates {part.duplicates}")
        if ready.replayed:
            body.append(
                f"{ready.replayed} below the committed offset {batch.replay_until}: their "
                "outputs dropped"
            )
        seq = node.newest_seq()
        body.extend(self._written(sim, topic, ready, Hold.NOTHING))
        body.extend(self._written_members(sim, topic))
        body.extend(self._snapshot_note(sim, topic, seq, ready.snapshot_offset))
        waits = " (waits for the input log)" if batch.waiting else ""
        state = f"{_engine_state(engine)}; committed {name}.ctl {node.committed}{waits}"
        body.append(state)
        lines.extend("  " + line for line in body)
        return lines

    @staticmethod
    def _marker_effects(
        name: str, applied: int, void: int, refused: int, batch: NodeBatch
    ) -> list[str]:
        """What the markers read did: the input records applied, those applying nothing,
        those set aside."""
        lines = []
        if batch.applied > applied:
            lines.append(f"apply {name}[{applied}..{batch.applied - 1}]")
        if batch.markers_void > void:
            lines.append(f"{batch.markers_void - void} marker(s) apply nothing")
        if batch.markers_refused > refused:
            lines.append(f"{batch.markers_refused - refused} marker(s) set aside")
        return lines

    def _effects(self, part: EngineStep) -> list[str]:
        """What one engine step decided: proposals, refusals, aborts."""
        lines: list[str] = []
        if part.proposals:
            lines.append("propose " + ", ".join(_runs(part.proposals)))
        for rejection in part.step.rejected:
            lines.append(f"refuse {_message(rejection.message)}: {rejection.reason}")
        for aborted in part.step.aborted:
            lines.append(f"abort {aborted.messageID}: {aborted.reason}")
        return lines

    def _written(self, sim: Simulator, topic: str, ready: Ready, hold: Hold) -> list[str]:
        """Write ``ready`` as the shell does and describe what went where."""
        lengths = self._lengths(sim, topic)
        sim.write(topic, ready, hold)
        return self._describe(sim, topic, ready.outputs(), lengths=lengths)

    def _written_members(self, sim: Simulator, topic: str) -> list[str]:
        """The shell's members record after a round, if it writes one (§4.9.5)."""
        lengths = self._lengths(sim, topic)
        log = sim.committed_log(topic)
        before = len(log)
        sim.write_members(topic)
        if len(log) == before:
            return []
        records = [
            OutRecord(OutKind.TICK, log.topic, r.value(), log.partition)
            for r in log.records[before:]
        ]
        return self._describe(sim, topic, records, lengths=lengths)

    def _snapshot_note(
        self, sim: Simulator, topic: str, seq: int, taken_at: int | None
    ) -> list[str]:
        """A snapshot written to the store since it held ``seq`` as its newest, or one
        taken at ``taken_at`` that waits for the commit to pass it (at-least-once)."""
        node = sim.nodes[topic]
        name = self._name(sim, topic)
        newest = node.newest_seq()
        if newest != seq:
            found = node.newest_snapshot(len(sim.committed_log(topic)))
            at = found.offsets.get(node.spec.input_partition, 0) if found is not None else "?"
            return [f"snapshot {newest} of {name}[..{at}) written"]
        if taken_at is not None:
            return [
                f"snapshot {node.batch.snapshot_seq} of {name}[..{taken_at}): written once "
                f"{taken_at} is committed"
            ]
        return []

    def _lengths(self, sim: Simulator, topic: str) -> dict[str, int]:
        """Where each record a node writes will land: its input logs' and streams'
        lengths now."""
        out = {name: len(log) for name, log in self._logs().items()}
        out["stream"] = len(sim.streams[topic])
        return out

    def _describe(
        self,
        sim: Simulator,
        topic: str,
        records: Sequence[OutRecord],
        *,
        verb: str = "send",
        lengths: dict[str, int] | None = None,
    ) -> list[str]:
        """One line per log record, one for the deliveries, one for the layer stream
        (positions from ``lengths``, when written)."""
        lines: list[str] = []
        delivered: list[tuple[str, int | None]] = []
        repeats: set[int] = set()
        layered: list[str] = []
        seen: set[str] = set()
        if lengths is not None:  # the ids the stream held before these records
            seen = {m.messageID for m in self._stream(sim, topic, lengths["stream"])}
        layer = sim.layer
        for record in records:
            messages = _decoded(record.value, record.key, list(record.headers))
            if record.kind in (OutKind.CONTROL, OutKind.TICK):
                target = record.topic.removeprefix(INPUT_PREFIX)
                suffix = ""
                if record.topic.startswith(CONTROL_PREFIX):
                    target, suffix = record.topic.removeprefix(CONTROL_PREFIX), ".ctl"
                name = (target if layer is None else f"{target}/{layer}") + suffix
                where = name
                if lengths is not None:
                    where = f"{name}[{lengths[name]}]"
                    lengths[name] += 1
                marker = decode_marker(record.value)
                if marker is not None:
                    lines.append(f"mark {where} {target}[{marker.start}..{marker.end - 1}]")
                    continue
                lines.append(f"{verb} {where} " + ", ".join(_message(m) for m in messages))
            elif record.kind is OutKind.DELIVERY and layer is None:
                for message in messages:
                    if message.messageID in seen:
                        repeats.add(len(delivered))
                    seen.add(message.messageID)
                    delivered.append((message.messageID, message.timeStamp))
            elif record.kind in (OutKind.DELIVERY, OutKind.WATERMARK):
                layered.extend(_layer_item(m) for m in messages)
        if delivered:
            prefix = "deliver" if verb == "send" else f"{verb} deliver"
            lines.append(f"{prefix} " + ", ".join(_runs(delivered, frozenset(repeats))))
        if layered:
            prefix = "to merger" if verb == "send" else f"{verb} to merger"
            lines.append(f"{prefix}: " + ", ".join(layered))
        return lines

    def _stream(self, sim: Simulator, topic: str, end: int | None = None) -> list[Message]:
        """The deliveries ``topic``'s node wrote (in its stream's records before
        ``end``), repeats included."""
        out = []
        for record in sim.streams[topic].records[:end]:
            message = read_delivery(record, at=topic)
            if message is not None:
                out.append(message)
        return out

    def _drain(self, cmd: Command) -> list[str]:
        lines: list[str] = []
        for _ in range(_DRAIN_ROUNDS):
            stepped = False
            for name in sorted(self._names()):
                if name in self._down:
                    continue
                sim, topic = self._where(name)
                if not sim.unread(topic):
                    continue
                stepped = True
                if not sim.control_logs:
                    lines.extend(self._step_node(name, None, Hold.NOTHING))
                    continue
                for which in ("in", "ctl"):
                    lines.extend(self._step_two_logs(name, which, None))
                if sim.unread(topic) and not sim.nodes[topic].batch.waiting:
                    lines.extend(self._idle(name))
            if not stepped:
                return lines or ["nothing to read"]
        raise TranscriptError(f"still records to read after {_DRAIN_ROUNDS} rounds")

    def _dup(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        index = cmd.integer("at")
        sim, topic = self._where(name)
        log = sim.inputs[topic]
        if index is None or not 0 <= index < len(log):
            raise TranscriptError(f"dup needs a node and at= a position of its log ({name})")
        sim.duplicate(topic, index)
        record = _log_records([log.records[index]])[0][1]
        return [f"{name}[{len(log) - 1}] = {name}[{index}] {_record(record)}"]

    def _replay(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        offset = cmd.integer("from", node.committed)
        assert offset is not None
        if not 0 <= offset <= node.batch.position:
            raise TranscriptError(f"{name} can re-read from 0..{node.batch.position}, not {offset}")
        node.batch.position = offset  # the consumer redelivers: the state is kept
        return [f"{name} will re-read from {name}[{offset}], state kept"]

    def _flush(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        queued, unacked = len(node.queued), sim.unacknowledged(topic)
        committed, seq = node.committed, node.newest_seq()
        lengths = self._lengths(sim, topic)
        written = sim.acknowledge(topic)
        lines = self._describe(sim, topic, written, lengths=lengths)
        lines.extend(self._snapshot_note(sim, topic, seq, None))
        lines.append(f"acknowledged: {queued} queued writes, {unacked} batches")
        moved = node.committed != committed
        lines.append(f"commit {node.committed}" if moved else "commit unchanged")
        return lines

    def _snapshot(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        seq = node.newest_seq()
        sim.checkpoint(topic)
        return self._snapshot_note(sim, topic, seq, node.batch.position)

    def _crash(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        position, lost = node.batch.position, len(node.queued)
        sim.crash(topic)  # restarted at once; the script steps it after `recover`
        self._down.add(name)
        return [
            f"{name} crashes at {name}[{position}]: state lost, {lost} queued writes lost, "
            f"committed offset {node.committed} kept"
        ]

    def _recover(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._where(name)
        if name not in self._down:
            raise TranscriptError(f"{name} is not down")
        self._down.discard(name)
        node = sim.nodes[topic]
        batch = node.batch
        found = node.newest_snapshot(len(sim.committed_log(topic)))
        start = "nothing" if found is None else f"snapshot {found.seq}"
        return [
            f"{name} restarts from {start} at {name}[{batch.position}], committed offset "
            f"{node.committed}"
        ]

    def _idle(self, name: str) -> list[str]:
        """An idle round: what a step's budget left queued, a tick, a marker or an
        input tick when due."""
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        batch = node.batch
        engine = batch.engine
        assert isinstance(engine, TracedEngine)
        applied, void, refused = batch.applied, batch.markers_void, batch.markers_refused
        ready = batch.idle(wall_s=sim.clock.wall_s)
        body = self._marker_effects(name, applied, void, refused, batch)
        for part in engine.take_steps():
            body.extend(self._effects(part))
        body.extend(self._written(sim, topic, ready, Hold.NOTHING))
        if not body:
            return []
        return [f"{name} idle", *("  " + line for line in body)]

    # ------------------------------------------------------------------ standbys

    def _standby(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        node.standby = node.new_standby(len(sim.committed_log(topic)))
        batch = node.standby.batch
        self._untraced(batch)
        return [f"{name}'s standby starts at {self._positions(sim, name, batch)}"]

    @staticmethod
    def _untraced(batch: NodeBatch) -> None:
        """Forget a standby's engine steps: it replays, and writes nothing a trace shows."""
        engine = batch.engine
        if isinstance(engine, TracedEngine):
            engine.take_steps()

    def _positions(self, sim: Simulator, name: str, batch: NodeBatch) -> str:
        if not sim.control_logs:
            return f"{name}[{batch.position}]"
        return f"{name}.ctl[{batch.position}], {name}[{batch.read_until}]"

    def _follow(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        standby = node.standby
        if standby is None:
            raise TranscriptError(f"{name} has no standby: standby {name} first")
        count = cmd.integer("n")
        which = cmd.get("log") or "ctl"
        applied_before = standby.position
        standby.commit_seen(node.committed)
        if which == "in":
            log, at = sim.inputs[topic], standby.input_fetch_from
        else:
            log, at = sim.committed_log(topic), standby.fetch_from
        records = log.read(at, len(log) if count is None else count)
        if which == "in":
            standby.take_input(records)
        else:
            standby.take(records)
        self._untraced(standby.batch)
        where = f"{name}.ctl" if sim.control_logs and which == "ctl" else name
        shown = f"{where}[{at}..{at + len(records) - 1}]" if records else "nothing"
        batch = standby.batch
        return [
            f"{name}'s standby reads {shown} (committed {node.committed}): applied "
            f"{name}{'.ctl' if sim.control_logs else ''}[{applied_before}..{batch.position}), "
            f"{batch.buffered} input records buffered, {standby.pending} past the committed "
            "offset held",
        ]

    def _takeover(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        if node.standby is None:
            raise TranscriptError(f"{name} has no standby: standby {name} first")
        old = node.batch
        dead_at = self._positions(sim, name, old)
        sim.takeover(topic)
        batch = node.batch
        unmarked = f", {batch.unmarked} read and not marked" if batch.unmarked else ""
        return [
            f"{name} dies at {dead_at}; its standby takes over at "
            f"{self._positions(sim, name, batch)}, replays to {node.committed}{unmarked}",
        ]

    def _mark(self, cmd: Command) -> list[str]:
        """A marker in the node's name for its input log's ``[from..to]``, written into
        its control log as another instance of the node (a zombie, a restart) writes
        one."""
        name = self._node_argument(cmd)
        sim, topic = self._where(name)
        first, last = cmd.integer("from"), cmd.integer("to")
        if not sim.control_logs or first is None or last is None or last < first:
            raise TranscriptError("mark NODE from=I to=J, in a cluster with control logs")
        spec = sim.nodes[topic].spec
        log = sim.controls[topic]
        log.append(encode_marker(spec.node_id, topic, first, last + 1, spec.layer))
        return [f"mark {name}.ctl[{len(log) - 1}] {name}[{first}..{last}]"]

    def _restart(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        try:
            algorithm = Algorithm(cmd.require("protocol"))
        except ValueError:
            raise TranscriptError(f"unknown protocol {cmd.get('protocol')!r}") from None
        node = sim.nodes[topic]
        wrong = replace(node.spec, algorithm=algorithm)
        snapshot = node.newest_snapshot(len(sim.committed_log(topic)))
        try:
            batch = NodeBatch.recover(wrong, snapshot, node.committed, engine_class=TracedEngine)
            sim.replay(topic, batch, node.committed)
        except SettingsChangedError as exc:
            verdict = f"refused: {str(exc).split(': ', 1)[1].split(': ', 1)[0]}"
        else:
            verdict = "not refused"
        sim.crash(topic)  # and restarted as it was
        return [
            f"{name} restarted with {algorithm.value}: {verdict}",
            f"{name} restarts as before ({node.spec.algorithm.value}) at "
            f"{self._positions(sim, name, node.batch)}, replays to {node.committed}",
        ]

    # ------------------------------------------------------------------ mergers

    def _merge(self, cmd: Command) -> list[str]:
        topic = self._node_argument(cmd)
        layered = self._layered
        if layered is None or topic not in layered.mergers:
            raise TranscriptError(f"{topic} has no merger (setup layers=N)")
        only = cmd.integer("layer")
        merger = layered.mergers[topic]
        records: list[PlainRecord] = []
        lines: list[str] = []
        for layer, sim in enumerate(layered.sims):
            if only is not None and layer != only:
                continue
            stream = sim.streams[topic]
            taken = stream.read(merger.batch.positions.get(layer, 0), len(stream))
            if taken:
                items = [_layer_item(m) for r in taken for m in _decoded(r.value())]
                lines.append(f"read layers {topic}/{layer}: " + ", ".join(items))
                records.extend(taken)
        if not records:
            lines.append("nothing new from the layers")
        layered.clock.advance()
        ticks = {s.layer: len(s.inputs[topic]) for s in layered.sims}
        seen = {m.messageID for m in self._merged(topic)}
        ready = layered.merge(topic, records)
        for rejected in merger.batch.merger.rejected:
            lines.append(f"  refuse {rejected.record}: {rejected.reason.value}")
        released = []
        for record in ready.outputs():
            if record.kind is not OutKind.DELIVERY:
                continue
            for message in _decoded(record.value, record.key, list(record.headers)):
                text = f"{message.messageID}@{message.timeStamp}/{message.partitionID}"
                released.append(text + (" (repeat)" if message.messageID in seen else ""))
                seen.add(message.messageID)
        if released:
            lines.append("  release " + ", ".join(released))
        for record in ready.outputs():
            if record.kind is OutKind.TICK:
                layer = record.partition or 0
                (tick,) = _decoded(record.value)
                lines.append(f"  tick {topic}/{layer}[{ticks[layer]}] Tick@{tick.timeStamp}")
                ticks[layer] += 1
        lines.append("  " + _merger_state(merger.batch.merger))
        return lines

    def _merged(self, topic: str) -> list[Message]:
        assert self._layered is not None
        out = []
        for record in self._layered.mergers[topic].target.records:
            message = read_delivery(record, at=topic)
            if message is not None:
                out.append(message)
        return out

    # ------------------------------------------------------------------ views

    def _delivered(self) -> dict[str, list[Message]]:
        """Per topic, every delivery written to its stream, repeats included."""
        topics = self._sims[0].topics
        if self._layered is not None:
            return {t: self._merged(t) for t in topics}
        return {t: self._stream(self._sims[0], t) for t in topics}

    def _show_deliveries(self, cmd: Command) -> list[str]:
        lines = []
        for topic, stream in self._delivered().items():
            seen: set[str] = set()
            repeats: set[int] = set()
            for index, message in enumerate(stream):
                if message.messageID in seen:
                    repeats.add(index)
                seen.add(message.messageID)
            items = _runs([(m.messageID, m.timeStamp) for m in stream], frozenset(repeats))
            lines.append(f"{topic}: {', '.join(items) if items else '-'}")
        return lines

    def _show_log(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._where(name)
        if cmd.get("log") == "ctl":
            texts = _log_texts(sim.controls[topic].records)
            return [f"{name}.ctl[{o}] {text}" for o, text in texts] or [f"{name}.ctl: empty"]
        records = _log_records(sim.inputs[topic].records)
        return [line.removeprefix("read ") for line in _reads(name, records)] or [f"{name}: empty"]

    def _show_state(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        sim, topic = self._live(name)
        node = sim.nodes[topic]
        batch = node.batch
        if sim.control_logs:
            return [
                f"{name}: applied {name}.ctl {batch.position} of {len(sim.controls[topic])} "
                f"and {name} {batch.applied} (read {batch.read_until}) of "
                f"{len(sim.inputs[topic])}, committed {name}.ctl {node.committed}",
                _engine_state(batch.engine),
            ]
        return [
            f"{name}: read {node.batch.position} of {len(sim.inputs[topic])}, committed "
            f"{node.committed}, {len(node.queued)} writes queued, "
            f"{sim.unacknowledged(topic)} batches not acknowledged",
            _engine_state(node.batch.engine),
        ]

    def _check(self, cmd: Command) -> list[str]:
        readers = {topic: _first_each(stream) for topic, stream in self._delivered().items()}
        sent = [s for sim in self._sims for s in sim.sent]
        complete = self._quiet()
        report = check(sent, deliveries_from_wire(readers), complete=complete)
        if report.ok:
            delivered = ", ".join(f"{t} {len(ms)}" for t, ms in readers.items())
            scope = "complete" if complete else "prefix: not all read yet"
            return [f"ok ({scope}): {len({s.messageID for s in sent})} sent; {delivered}"]
        return [f"VIOLATION {v.kind.value}: {v.text}" for v in report.violations[:5]]

    def _quiet(self) -> bool:
        if self._down:
            return False
        for sim in self._sims:
            for topic, node in sim.nodes.items():
                if sim.unread(topic) or node.queued or sim.unacknowledged(topic):
                    return False
        layered = self._layered
        if layered is None:
            return True
        return all(
            merger.batch.positions.get(layer, 0) == len(sim.streams[topic])
            and merger.batch.merger.pending_count == 0
            for topic, merger in layered.mergers.items()
            for layer, sim in enumerate(layered.sims)
        )
