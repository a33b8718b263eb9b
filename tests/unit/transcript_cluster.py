"""AtomicKafka as a transcript drives it: nodes, their logs and streams, mergers.

:class:`Cluster` holds what Kafka would: every node's input log (a list of decoded
records), every topic's delivery stream and, for partitioned topics, every layer's
stream to its merger. Each node is a :class:`~tests.unit.transcript_shell.NodeShell`
(the engine with the shell's produce/commit bookkeeping); each partitioned topic has a
:class:`~atomickafka.core.merger.Merger`. :meth:`Cluster.run` executes one transcript
command and returns its trace. The commands (arguments in ``[]`` are optional):

``setup topics=(A,B,C) [protocol=direct|optimized|poc] [layers=N]``
    A fresh cluster: one node per topic (``A``), or per topic and layer (``A/0``,
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
``crash NODE`` / ``recover NODE``
    The node loses its state, its producer queue and pending acknowledgements; on
    recovery it re-reads its log from offset 0 (§6).
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
from dataclasses import dataclass
from typing import Any

import orjson

from atomickafka.core.engine import Algorithm, Engine, Output
from atomickafka.core.merger import (
    LayerDelivery,
    LayerRecord,
    LayerWatermark,
    Merger,
    Release,
    TickRequest,
)
from atomickafka.core.wire import Message, MessageType, client_message, decode_record, encode_tick
from atomickafka.verify.checker import SentMessage, check, deliveries_from_wire
from tests.unit.transcript import Command, TranscriptError
from tests.unit.transcript_shell import (
    Batch,
    Hold,
    LogRecord,
    NodeShell,
    ToDeliveries,
    ToLog,
    Write,
    node_name,
)

__all__ = ["Cluster", "TracedEngine"]

_DRAIN_ROUNDS = 100  # a drain that needs more rounds than this is reported, not looped
_QUEUE_SHOWN = 4


class TracedEngine(Engine):
    """An :class:`Engine` that notes each proposal it makes (§4.1) for the trace.

    It wraps the handlers to know which message it is reading and the ``_propose``
    seam to note the value; everything else is the engine's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proposals: list[tuple[str, int]] = []
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
        self.proposals.append((self._reading, proposal))
        return proposal

    def take_proposals(self) -> list[tuple[str, int]]:
        """The proposals made since the last call, in order."""
        out, self.proposals = self.proposals, []
        return out

    def take_duplicates(self) -> int:
        """How many duplicates (§4.5) were read since the last call."""
        count = self.stats.duplicates - self._duplicates_shown
        self._duplicates_shown = self.stats.duplicates
        return count


# ---------------------------------------------------------------------------- formatting


def _short(kind: MessageType) -> str:
    return kind.value.removesuffix("Message")


def _message(message: Message) -> str:
    text = f"{_short(message.messageType)} {message.messageID}"
    if message.messageType is MessageType.TICK:
        text = "Tick"
    if message.timeStamp is not None:
        text += f"@{message.timeStamp}"
    if message.messageType is MessageType.CLIENT:
        text += " {" + ",".join(message.topic) + "}"
    return text


def _record(record: LogRecord) -> str:
    """A log record: ``Client m1 {A,B}``, ``Tick@7``, ``from B: Notify m1@4, ...``."""
    first = record[0]
    body = ", ".join(_message(m) for m in record)
    sender = first.sentFromTopic
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


def _plain_client(record: LogRecord) -> bool:
    return (
        len(record) == 1
        and record[0].messageType is MessageType.CLIENT
        and record[0].sentFromTopic is None
    )


@dataclass(frozen=True, slots=True)
class _Applied:
    """A write as applied: where it went (``B[3]``) and whether it repeats an id."""

    write: Write
    position: int
    repeat: bool


# ---------------------------------------------------------------------------- the cluster


class Cluster:
    """The nodes, logs, streams and mergers one transcript drives."""

    def __init__(self) -> None:
        self._reset()
        self._commands: dict[str, Callable[[Command], list[str]]] = {
            "setup": self._setup,
            "send": self._send,
            "step": self._step,
            "drain": self._drain,
            "dup": self._dup,
            "replay": self._replay,
            "flush": self._flush,
            "crash": self._crash,
            "recover": self._recover,
            "merge": self._merge,
            "deliveries": self._show_deliveries,
            "log": self._show_log,
            "state": self._show_state,
            "check": self._check,
        }

    def _reset(self) -> None:
        self.algorithm = Algorithm.DIRECT
        self.topics: tuple[str, ...] = ()
        self.layers: int | None = None
        self.shells: dict[str, NodeShell | None] = {}
        self.committed_when_down: dict[str, int] = {}
        self.logs: dict[str, list[LogRecord]] = {}
        self.deliveries: dict[str, list[Message]] = {}
        self.layer_streams: dict[str, list[LayerRecord]] = {}
        self.merged_positions: dict[str, int] = {}
        self.mergers: dict[str, Merger] = {}
        self.sent: list[SentMessage] = []

    def run(self, command: Command) -> str:
        """Execute one transcript command; its trace."""
        handler = self._commands.get(command.name)
        if handler is None:
            raise TranscriptError(
                f"unknown command {command.name!r}; known: {', '.join(self._commands)}"
            )
        if command.name != "setup" and not self.topics:
            raise TranscriptError("no cluster yet: start with setup")
        return "\n".join(handler(command))

    # ------------------------------------------------------------------ set up

    def _setup(self, cmd: Command) -> list[str]:
        self._reset()
        try:
            self.algorithm = Algorithm(cmd.get("protocol") or "direct")
        except ValueError:
            raise TranscriptError(f"unknown protocol {cmd.get('protocol')!r}") from None
        self.topics = cmd.values("topics")
        self.layers = cmd.integer("layers")
        for topic in self.topics:
            self.deliveries[topic] = []
            for layer in self._layer_range():
                name = node_name(topic, layer)
                self.logs[name] = []
                self.shells[name] = NodeShell(name, self._engine(topic, layer))
                if layer is not None:
                    self.layer_streams[name] = []
                    self.merged_positions[name] = 0
            if self.layers is not None:
                self.mergers[topic] = Merger(topic, self.layers)
        text = f"nodes {' '.join(self.shells)} ({self.algorithm.value})"
        if self.layers is not None:
            text += f"; mergers {' '.join(self.mergers)}"
        return [text]

    def _layer_range(self) -> Sequence[int | None]:
        return [None] if self.layers is None else range(self.layers)

    def _engine(self, topic: str, layer: int | None) -> TracedEngine:
        return TracedEngine(
            topic, f"node-{node_name(topic, layer)}", self.algorithm, partition=layer
        )

    def _shell(self, name: str) -> NodeShell:
        if name not in self.shells:
            raise TranscriptError(f"no node {name!r}; nodes: {' '.join(self.shells)}")
        shell = self.shells[name]
        if shell is None:
            raise TranscriptError(f"{name} is down: recover it first")
        return shell

    def _node_argument(self, cmd: Command) -> str:
        names = cmd.positional()
        if len(names) != 1:
            raise TranscriptError(f"{cmd.name} takes one node name")
        return names[0]

    # ------------------------------------------------------------------ clients

    def _send(self, cmd: Command) -> list[str]:
        mid = cmd.require("id")
        destinations = cmd.values("to")
        for topic in destinations:
            if topic not in self.deliveries:
                raise TranscriptError(f"no topic {topic!r}")
        via = cmd.get("via")
        only = cmd.values("only", ())
        layer = cmd.integer("layer", 0 if self.layers is not None else None)
        count = cmd.integer("count")
        value = cmd.get("value")
        client = cmd.get("client", "c") or "c"
        targets = self._targets(destinations, via, only)
        ids = [mid] if count is None else [f"{mid}-{i}" for i in range(count)]
        placed: dict[str, list[int]] = {}
        for message_id in ids:
            message = client_message(
                message_id, destinations, message_id if value is None else value, client, layer
            )
            self.sent.append(SentMessage(message_id, frozenset(destinations), _value(message)))
            for topic in targets:
                name = node_name(topic, layer)
                self.logs[name].append((message,))
                placed.setdefault(name, []).append(len(self.logs[name]) - 1)
        where = " ".join(
            f"{name}[{at[0]}]" if len(at) == 1 else f"{name}[{at[0]}..{at[-1]}]"
            for name, at in placed.items()
        )
        shown = mid if count is None else f"{ids[0]}..{ids[-1]}"
        return [f"{shown} -> {where}"]

    def _targets(
        self, destinations: Sequence[str], via: str | None, only: Sequence[str]
    ) -> list[str]:
        if via is not None and via not in self.deliveries:
            raise TranscriptError(f"no topic {via!r}")
        if via is not None and via not in destinations:
            if only:
                raise TranscriptError("a relayed message goes to its relay only")
            return [via]
        if self.algorithm is not Algorithm.DIRECT:
            if only:
                raise TranscriptError(f"only= is for direct; {self.algorithm.value} takes via=")
            return [via or sorted(destinations)[0]]
        if via is not None:
            raise TranscriptError("direct writes to every destination: use only=(...)")
        stray = [t for t in only if t not in destinations]
        if stray:
            raise TranscriptError(f"only= names {', '.join(stray)}, not a destination")
        return list(only) if only else sorted(destinations)

    # ------------------------------------------------------------------ nodes

    def _step(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        count = cmd.integer("n")
        try:
            hold = Hold(cmd.get("hold") or "nothing")
        except ValueError:
            raise TranscriptError(f"hold= is acks or writes, not {cmd.get('hold')!r}") from None
        return self._step_node(name, count, hold) or [f"{name} has nothing to read"]

    def _step_node(self, name: str, count: int | None, hold: Hold) -> list[str]:
        shell = self._shell(name)
        log = self.logs[name]
        start = shell.position
        end = len(log) if count is None else min(len(log), start + count)
        if start >= end:
            return []
        records = [(offset, log[offset]) for offset in range(start, end)]
        lines: list[str] = []
        for part in shell.cut(records):
            batch = shell.process(part, hold)
            lines.extend(_reads(name, part))
            lines.extend("  " + line for line in self._batch_effects(shell, batch, hold))
        return lines

    def _batch_effects(self, shell: NodeShell, batch: Batch, hold: Hold) -> list[str]:
        engine = shell.engine
        assert isinstance(engine, TracedEngine)
        step = batch.step
        lines: list[str] = []
        proposals = engine.take_proposals()
        if proposals:
            lines.append("propose " + ", ".join(_runs(proposals)))
        for rejection in step.rejected:
            lines.append(f"refuse {_message(rejection.message)}: {rejection.reason}")
        for aborted in step.aborted:
            lines.append(f"abort {aborted.messageID}: {aborted.reason}")
        if batch.replayed:
            lines.append(f"below the committed offset {shell.replay_until}: outputs dropped")
            lines.extend(_writes_text(batch.writes, verb="drop"))
        elif hold is Hold.WRITES:
            lines.extend(_writes_text(batch.writes, verb="queue"))
        else:
            lines.extend(_applied_text(self._apply(batch.written)))
        duplicates = engine.take_duplicates()
        if duplicates:
            lines.append(f"duplicates {duplicates}")
        if hold is Hold.WRITES and not batch.replayed:
            lines.append("held in the producer's queue: nothing written, not committed")
        elif hold is Hold.ACKS and not batch.replayed:
            lines.append("written, not acknowledged: not committed")
        elif batch.commit is None and not batch.replayed and any(shell.held()):
            lines.append("not committed: an earlier batch is not acknowledged")
        lines.append(f"{_engine_state(engine)}; committed {shell.committed}")
        return lines

    def _apply(self, writes: Iterable[Write]) -> list[_Applied]:
        applied: list[_Applied] = []
        for write in writes:
            if isinstance(write, ToLog):
                if write.node not in self.logs:
                    raise TranscriptError(f"an output for {write.node}, which has no node")
                self.logs[write.node].append(write.record)
                applied.append(_Applied(write, len(self.logs[write.node]) - 1, False))
            elif isinstance(write, ToDeliveries):
                stream = self.deliveries[write.topic]
                repeat = any(m.messageID == write.message.messageID for m in stream)
                stream.append(write.message)
                applied.append(_Applied(write, len(stream) - 1, repeat))
            else:
                self.layer_streams[write.node].append(write.record)
                applied.append(_Applied(write, len(self.layer_streams[write.node]) - 1, False))
        return applied

    def _drain(self, cmd: Command) -> list[str]:
        lines: list[str] = []
        for _ in range(_DRAIN_ROUNDS):
            stepped = False
            for name in sorted(self.shells):
                shell = self.shells[name]
                if shell is not None and shell.position < len(self.logs[name]):
                    lines.extend(self._step_node(name, None, Hold.NOTHING))
                    stepped = True
            if not stepped:
                return lines or ["nothing to read"]
        raise TranscriptError(f"still records to read after {_DRAIN_ROUNDS} rounds")

    def _dup(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        index = cmd.integer("at")
        log = self.logs.get(name)
        if log is None or index is None or not 0 <= index < len(log):
            raise TranscriptError(f"dup needs a node and at= a position of its log ({name})")
        log.append(log[index])
        return [f"{name}[{len(log) - 1}] = {name}[{index}] {_record(log[index])}"]

    def _replay(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        shell = self._shell(name)
        offset = cmd.integer("from", shell.committed)
        assert offset is not None
        if not 0 <= offset <= shell.position:
            raise TranscriptError(f"{name} can re-read from 0..{shell.position}, not {offset}")
        shell.rewind(offset)
        return [f"{name} will re-read from {name}[{offset}], state kept"]

    def _flush(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        shell = self._shell(name)
        queued, unacked = shell.held()
        written, commit = shell.flush()
        lines = _applied_text(self._apply(written))
        lines.append(f"acknowledged: {queued} queued writes, {unacked} batches")
        lines.append(f"commit {commit}" if commit is not None else "commit unchanged")
        return lines

    def _crash(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        shell = self._shell(name)
        lost = shell.crash()
        self.committed_when_down[name] = shell.committed
        self.shells[name] = None
        return [
            f"{name} crashes at {name}[{shell.position}]: state lost, {lost} queued writes lost, "
            f"committed offset {shell.committed} kept"
        ]

    def _recover(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        if name not in self.shells:
            raise TranscriptError(f"no node {name!r}; nodes: {' '.join(self.shells)}")
        if self.shells[name] is not None:
            raise TranscriptError(f"{name} is not down")
        committed = self.committed_when_down.pop(name)
        topic, _, layer = name.partition("/")
        engine = self._engine(topic, int(layer) if layer else None)
        self.shells[name] = NodeShell(name, engine, committed)
        return [f"{name} restarts: re-reads its log from {name}[0], committed offset {committed}"]

    # ------------------------------------------------------------------ mergers

    def _merge(self, cmd: Command) -> list[str]:
        topic = self._node_argument(cmd)
        merger = self.mergers.get(topic)
        if merger is None:
            raise TranscriptError(f"{topic} has no merger (setup layers=N)")
        only = cmd.integer("layer")
        records: list[LayerRecord] = []
        lines: list[str] = []
        for layer in range(merger.layers):
            if only is not None and layer != only:
                continue
            name = node_name(topic, layer)
            stream = self.layer_streams[name]
            taken = stream[self.merged_positions[name] :]
            self.merged_positions[name] = len(stream)
            if taken:
                lines.append(f"read layers {name}: " + ", ".join(_layer_records(taken)))
                records.extend(taken)
        if not records:
            lines.append("nothing new from the layers")
        outputs = merger.handle_batch(records)
        for rejected in merger.rejected:
            lines.append(f"  refuse {rejected.record}: {rejected.reason.value}")
        releases = [o for o in outputs if isinstance(o, Release)]
        if releases:
            written = []
            for release in releases:
                payload = release.payload
                assert isinstance(payload, Message)
                delivered = self.deliveries[topic]
                repeat = any(m.messageID == release.messageID for m in delivered)
                delivered.append(payload)
                written.append(f"{release.messageID}@{release.timeStamp}/{release.layer}")
                if repeat:
                    written[-1] += " (repeat)"
            lines.append("  release " + ", ".join(written))
        for tick in (o for o in outputs if isinstance(o, TickRequest)):
            lines.append("  " + self._tick(topic, tick))
        lines.append("  " + _merger_state(merger))
        return lines

    def _tick(self, topic: str, tick: TickRequest) -> str:
        name = node_name(topic, tick.layer)
        record = tuple(decode_record(encode_tick(f"merger-{topic}", tick.timeStamp, tick.layer)))
        self.logs[name].append(record)
        return f"tick {name}[{len(self.logs[name]) - 1}] Tick@{tick.timeStamp}"

    # ------------------------------------------------------------------ views

    def _show_deliveries(self, cmd: Command) -> list[str]:
        lines = []
        for topic, stream in self.deliveries.items():
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
        if name not in self.logs:
            raise TranscriptError(f"no node {name!r}")
        log = self.logs[name]
        return [line.removeprefix("read ") for line in _reads(name, list(enumerate(log)))] or [
            f"{name}: empty"
        ]

    def _show_state(self, cmd: Command) -> list[str]:
        name = self._node_argument(cmd)
        shell = self._shell(name)
        queued, unacked = shell.held()
        return [
            f"{name}: read {shell.position} of {len(self.logs[name])}, committed "
            f"{shell.committed}, {queued} writes queued, {unacked} batches not acknowledged",
            _engine_state(shell.engine),
        ]

    def _check(self, cmd: Command) -> list[str]:
        readers = {topic: _first_each(stream) for topic, stream in self.deliveries.items()}
        complete = self._quiet()
        report = check(self.sent, deliveries_from_wire(readers), complete=complete)
        if report.ok:
            delivered = ", ".join(f"{t} {len(ms)}" for t, ms in readers.items())
            scope = "complete" if complete else "prefix: not all read yet"
            return [f"ok ({scope}): {len(set(s.messageID for s in self.sent))} sent; {delivered}"]
        return [f"VIOLATION {v.kind.value}: {v.text}" for v in report.violations[:5]]

    def _quiet(self) -> bool:
        for name, shell in self.shells.items():
            if shell is None or shell.position < len(self.logs[name]) or any(shell.held()):
                return False
        return all(
            self.merged_positions[name] == len(stream)
            for name, stream in self.layer_streams.items()
        ) and all(merger.pending_count == 0 for merger in self.mergers.values())


def _first_each(stream: Sequence[Message]) -> list[Message]:
    """What a reader sees: the stream with repeated messageIDs dropped."""
    seen: set[str] = set()
    out = []
    for message in stream:
        if message.messageID not in seen:
            seen.add(message.messageID)
            out.append(message)
    return out


def _value(message: Message) -> Any:
    return orjson.loads(message.value or b"null")


def _engine_state(engine: Engine) -> str:
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


def _writes_text(writes: Sequence[Write], *, verb: str) -> list[str]:
    return _describe(((w, None, False) for w in writes), verb)


def _applied_text(applied: Sequence[_Applied]) -> list[str]:
    return _describe(((a.write, a.position, a.repeat) for a in applied), "send")


def _describe(items: Iterable[tuple[Write, int | None, bool]], verb: str) -> list[str]:
    """One line per log record, one for the deliveries, one for the layer stream."""
    lines: list[str] = []
    delivered: list[tuple[str, int | None]] = []
    repeats: set[int] = set()
    layered: list[str] = []
    for write, position, repeat in items:
        if isinstance(write, ToLog):
            where = write.node if position is None else f"{write.node}[{position}]"
            body = ", ".join(_message(m) for m in write.record)
            lines.append(f"{verb} {where} {body}")
        elif isinstance(write, ToDeliveries):
            if repeat:
                repeats.add(len(delivered))
            delivered.append((write.message.messageID, write.message.timeStamp))
        else:
            layered.extend(_layer_records([write.record]))
    if delivered:
        prefix = "deliver" if verb == "send" else f"{verb} deliver"
        lines.append(f"{prefix} " + ", ".join(_runs(delivered, frozenset(repeats))))
    if layered:
        prefix = "to merger" if verb == "send" else f"{verb} to merger"
        lines.append(f"{prefix}: " + ", ".join(layered))
    return lines


def _layer_records(records: Sequence[LayerRecord]) -> list[str]:
    out = []
    for record in records:
        if isinstance(record, LayerDelivery):
            out.append(f"{record.messageID}@{record.timeStamp}")
        elif isinstance(record, LayerWatermark):
            out.append(f"watermark {record.timeStamp}")
        else:  # pragma: no cover
            out.append(repr(record))
    return out


def _merger_state(merger: Merger) -> str:
    marks = "watermarks " + " ".join(str(w) for w in merger.watermarks)
    head = merger.head
    if head is None:
        return f"{marks}, nothing buffered"
    blockers = merger.blocked_by()
    waits = f" waits for layer {','.join(map(str, blockers))}" if blockers else ""
    return f"{marks}, head {head.messageID}@{head.timeStamp}/{head.layer}{waits}"
