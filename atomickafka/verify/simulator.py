"""An in-memory simulator: N engines joined by per-topic input logs, any interleaving.

Each topic has an input log (a list of records standing in for the Kafka topic) and
one node, an :class:`~atomickafka.core.engine.Engine`, that reads it in order. Clients
append ClientMessages to any topic -- a destination, or another topic, which then
relays. A node's outputs go where the real shell would put them: a Delivery to the
topic's delivery stream, anything else to the end of the named topic's input log.

A *scheduler* decides, step by step, what happens next: a client sends its next
message, or a node consumes a batch of the next 1..``max_batch`` records of its log.
It can also misbehave the way Kafka and crashes do:

- DELAY: a node does not step for a while;
- DUPLICATE: a record already in a log is appended again, later (a producer retry);
- REPLAY: a node re-reads part of its log from an earlier position and re-feeds
  records it already processed (a restart with uncommitted offsets, state kept);
- PARTIAL WRITE (``direct``): a client that writes a message to every destination
  dies after writing it to only some of them;
- CRASH: a node loses its state and restarts from its last checkpoint (an engine
  snapshot plus the log position it was taken at) and re-reads from there. Control
  records it produces again are appended again (at-least-once); deliveries it
  produces again are compared with the ones already in its delivery stream (rule 8:
  replaying the log reproduces the same outputs) and not repeated, as a delivery
  writer that knows its stream's end would do. Mismatches are kept in
  ``determinism_errors``.

All choices come from a :class:`Chooser`: :class:`RandomChooser` wraps a
:class:`random.Random` (the run is a pure function of the seed) and
:class:`DataChooser` draws every choice from Hypothesis's ``data`` object, so a
failing schedule shrinks. Misbehaviour is only scheduled while clients are still
sending and for ``Chaos.tail_steps`` steps after; then the nodes are left to drain
until the system is quiescent (every log read to its end) or the step limit is hit.

>>> sim = Simulator(["A", "B", "C"], chooser=RandomChooser(7))
>>> workload = random_workload(random.Random(7), ["A", "B", "C"], messages=20)
>>> result = sim.run(workload)
>>> result.quiescent, result.check().ok
(True, True)
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from atomickafka.core.engine import Algorithm, Engine, Output, Rejection
from atomickafka.core.wire import (
    Message,
    MessageType,
    client_message,
    decode_record,
    encode_client,
    encode_delivery,
    pack_bundles,
)
from atomickafka.verify.checker import CheckReport, SentMessage, check, deliveries_from_wire

__all__ = [
    "CALM",
    "Chaos",
    "Chooser",
    "DataChooser",
    "EngineFactory",
    "RandomChooser",
    "Send",
    "SimulationResult",
    "Simulator",
    "Workload",
    "client_ids",
    "deliveries_by_id",
    "integer_ids",
    "random_workload",
    "run_workload",
]


#: What a node writes to a delivery stream (a layer's node: partition deliveries).
_DELIVERIES = frozenset({MessageType.DELIVERY, MessageType.PARTITION_DELIVERY})

# ---------------------------------------------------------------------------- choices


class Chooser(Protocol):
    """Where the scheduler's choices come from."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]`` (both included)."""
        ...

    def chance(self, probability: float) -> bool:
        """True with ``probability``; a shrinking chooser prefers False."""
        ...


class RandomChooser:
    """Choices from a :class:`random.Random` (or a seed): deterministic given the seed."""

    def __init__(self, rng: random.Random | int) -> None:
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        return self.rng.randint(low, high)

    def chance(self, probability: float) -> bool:
        """True with ``probability``."""
        return probability > 0 and self.rng.random() < probability


class DataChooser:
    """Choices drawn from Hypothesis's ``data`` object (``st.data()``).

    Every choice is a draw, so Hypothesis can shrink a failing schedule towards fewer
    misbehaviours (``chance`` shrinks to False) and smaller batches and indices.
    """

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st  # noqa: PLC0415 (tests only)

        self._data = data
        self._st = st

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``, drawn."""
        if low == high:
            return low
        value: int = self._data.draw(self._st.integers(low, high))
        return value

    def chance(self, probability: float) -> bool:
        """True with roughly ``probability``; shrinks to False."""
        if probability <= 0:
            return False
        threshold = 1000 - max(1, round(probability * 1000))
        drawn: int = self._data.draw(self._st.integers(0, 999))
        return drawn >= threshold


# ---------------------------------------------------------------------------- workload


@dataclass(frozen=True, slots=True)
class Send:
    """One ClientMessage a client appends to topic ``via`` (a destination, or a relay).

    With the ``direct`` protocol a client writes a message to every destination; the
    simulator does so for a send whose ``via`` is a destination.
    """

    client: str
    messageID: str
    destinations: tuple[str, ...]
    value: Any
    via: str

    def to_message(self) -> Message:
        """The ClientMessage record."""
        return client_message(self.messageID, self.destinations, self.value, self.client)


@dataclass(slots=True)
class Workload:
    """What the clients send: ``preload`` is in the logs before the run starts, and
    each client's list in ``clients`` is sent in order, when the scheduler says so."""

    clients: dict[str, list[Send]] = field(default_factory=dict)
    preload: list[Send] = field(default_factory=list)

    @property
    def sends(self) -> list[Send]:
        """Every send, preload first."""
        out = list(self.preload)
        for sends in self.clients.values():
            out.extend(sends)
        return out


def client_ids(client: str, seq: int) -> str:
    """Globally unique ids, ``<clientId>-<seq>`` (docs/DESIGN.md §3)."""
    return f"{client}-{seq}"


def integer_ids(client: str, seq: int) -> str:
    """The 2019 defect: per-client integer ids, which collide across clients."""
    return str(seq)


_VALUES: tuple[Any, ...] = (
    "",
    "x",
    "héllo wörld",
    "😀 emoji",
    None,
    0,
    -1.5,
    True,
    [],
    [1, "two", None],
    {"nested": {"list": [1, 2, {"k": "v"}]}},
)


def random_workload(
    rng: random.Random,
    topics: Sequence[str],
    *,
    clients: int = 2,
    messages: int = 30,
    multicast: float = 0.5,
    relay: float = 0.1,
    retry: float = 0.0,
    skew: int = 0,
    all_topics: bool = False,
    ids: Callable[[str, int], str] = client_ids,
) -> Workload:
    """A random workload over ``topics``.

    ``messages`` messages in all, spread over ``clients`` clients. A share
    ``multicast`` has 2..all destinations (all of them with ``all_topics``), the rest
    one. A share ``relay`` is sent via a topic that is not a destination. A share
    ``retry`` is sent a second time, later, via another topic (a client retrying after
    a timeout). ``skew`` preloads that many single-topic messages for ``topics[0]``
    from client ``skew`` so that its clock runs ahead. ``ids`` makes message ids.
    """
    names = [f"c{i}" for i in range(clients)]
    workload = Workload(clients={name: [] for name in names})
    seq: Counter[str] = Counter()
    for _ in range(skew):
        seq["skew"] += 1
        workload.preload.append(
            Send("skew", ids("skew", seq["skew"]), (topics[0],), "skew", topics[0])
        )
    for _ in range(messages):
        client = names[rng.randrange(clients)]
        seq[client] += 1
        if len(topics) > 1 and rng.random() < multicast:
            size = len(topics) if all_topics else rng.randint(2, len(topics))
            destinations = tuple(sorted(rng.sample(list(topics), size)))
        else:
            destinations = (rng.choice(list(topics)),)
        others = [t for t in topics if t not in destinations]
        via = rng.choice(others) if others and rng.random() < relay else rng.choice(destinations)
        value = rng.choice(_VALUES)
        send = Send(client, ids(client, seq[client]), destinations, value, via)
        sends = workload.clients[client]
        sends.append(send)
        if rng.random() < retry:
            again = Send(client, send.messageID, destinations, value, rng.choice(list(topics)))
            sends.insert(rng.randint(len(sends), len(sends) + 3), again)
    return workload


# ---------------------------------------------------------------------------- chaos


@dataclass(frozen=True, slots=True)
class Chaos:
    """How hostile the schedule is; the probabilities are per step.

    ``max_batch`` bounds how many records a node consumes in one step. Misbehaviour is
    only scheduled while clients are sending and ``tail_steps`` steps after.
    """

    max_batch: int = 4
    partial_write: float = 0.0
    duplicate: float = 0.05
    replay: float = 0.03
    delay: float = 0.03
    crash: float = 0.0
    checkpoint: float = 0.1
    max_delay: int = 20
    max_replay: int = 10
    duplicate_window: int = 20
    tail_steps: int = 50


#: No misbehaviour at all, just interleavings.
CALM = Chaos(duplicate=0.0, replay=0.0, delay=0.0, crash=0.0, checkpoint=0.0, partial_write=0.0)

EngineFactory = Callable[[str, Algorithm], Engine]


# ---------------------------------------------------------------------------- result


@dataclass(slots=True, repr=False)
class SimulationResult:
    """What a run produced: what was sent, what each topic delivered, and how it went."""

    topics: tuple[str, ...]
    algorithm: Algorithm
    sent: list[SentMessage]
    deliveries: dict[str, list[Message]]
    logs: dict[str, list[Message]]
    engines: dict[str, Engine]
    rejected: dict[str, list[Rejection]]
    aborted: dict[str, list[str]]
    steps: int
    quiescent: bool
    events: Counter[str]
    determinism_errors: list[str]
    trace: list[str]

    def check(self, *, complete: bool | None = None, **options: Any) -> CheckReport:
        """Run the independent checker; validity is checked when the run is quiescent."""
        if complete is None:
            complete = self.quiescent
        return check(self.sent, deliveries_from_wire(self.deliveries), complete=complete, **options)

    def rejected_reasons(self) -> dict[str, list[str]]:
        """Per topic, the reasons its node gave for setting input aside (when any)."""
        return {t: [r.reason for r in rs] for t, rs in self.rejected.items() if rs}

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
        lengths = ", ".join(f"{t}:{len(self.logs[t])}" for t in self.topics)
        return (
            f"{self.algorithm.value} run over {len(self.topics)} topics: {self.steps} steps, "
            f"quiescent={self.quiescent}, {len(self.sent)} sends; log lengths {lengths}; "
            f"events {events}; stuck {self.stuck()}"
        )


# ---------------------------------------------------------------------------- simulator


class Simulator:
    """N engines, one per topic, joined by in-memory input logs.

    ``engine_factory(topic, algorithm)`` builds each node's engine (default
    :class:`Engine`; the mutation tests pass subclasses). With ``through_codec`` every
    record is encoded and decoded on its way into a log, as on the wire.
    """

    def __init__(
        self,
        topics: Sequence[str],
        *,
        algorithm: Algorithm | str = Algorithm.OPTIMIZED,
        chooser: Chooser | None = None,
        chaos: Chaos = CALM,
        engine_factory: EngineFactory | None = None,
        through_codec: bool = False,
        bundle_bytes: int = 1_000_000,
        record_trace: bool = False,
    ) -> None:
        if len(set(topics)) != len(topics) or not topics:
            raise ValueError("topics must be distinct and not empty")
        self.topics = tuple(topics)
        self.algorithm = Algorithm(algorithm)
        self.chooser: Chooser = chooser if chooser is not None else RandomChooser(0)
        self.chaos = chaos
        self._factory: EngineFactory = engine_factory or (
            lambda topic, algorithm: Engine(topic, f"node-{topic}", algorithm)
        )
        self.through_codec = through_codec
        self.bundle_bytes = bundle_bytes
        self.engines: dict[str, Engine] = {t: self._factory(t, self.algorithm) for t in topics}
        self.logs: dict[str, list[Message]] = {t: [] for t in topics}
        self.positions: dict[str, int] = dict.fromkeys(topics, 0)
        self.deliveries: dict[str, list[Message]] = {t: [] for t in topics}
        self.rejected: dict[str, list[Rejection]] = {t: [] for t in topics}
        self.aborted: dict[str, list[str]] = {t: [] for t in topics}
        self.sent: list[SentMessage] = []
        self.paused_until: dict[str, int] = dict.fromkeys(topics, 0)
        self.checkpoints: dict[str, tuple[dict[str, Any], int, int]] = {}
        self.events: Counter[str] = Counter()
        self.determinism_errors: list[str] = []
        self.trace: list[str] | None = [] if record_trace else None
        self.step_count = 0
        self._cursor: dict[str, int] = dict.fromkeys(topics, 0)  # delivery stream position

    # ------------------------------------------------------------------ actions

    def send(self, send: Send, *, partial: bool = False) -> None:
        """A client appends a ClientMessage to ``send.via``'s log (``direct``: to every
        destination's, or with ``partial`` to a non-empty subset chosen by the chooser)."""
        self.sent.append(SentMessage(send.messageID, frozenset(send.destinations), send.value))
        message = send.to_message()
        targets = [send.via]
        if self.algorithm is Algorithm.DIRECT and send.via in send.destinations:
            targets = list(send.destinations)
            if partial and len(targets) > 1:
                keep = self.chooser.integer(1, len(targets) - 1)
                for _ in range(len(targets) - keep):
                    targets.pop(self.chooser.integer(0, len(targets) - 1))
                self.events["partial_write"] += 1
        for topic in targets:
            self._append(topic, message)
        self.events["send"] += 1
        self._note(f"{send.client} sends {send.messageID} to {send.destinations} via {targets}")

    def append(self, topic: str, record: Message) -> None:
        """Append any record to ``topic``'s log (for handcrafted scenarios)."""
        self._append(topic, record)
        self._note(f"inject {record.messageType.value} {record.messageID} into {topic}")

    def step_node(self, topic: str, batch: int) -> int:
        """``topic``'s node consumes up to ``batch`` records; returns how many it read."""
        start = self.positions[topic]
        records = self.logs[topic][start : start + batch]
        if not records:
            return 0
        self.positions[topic] = start + len(records)
        self.events["batch"] += 1
        step = self.engines[topic].step(records)
        self._note(
            f"{topic} reads [{start}:{start + len(records)}] "
            + " ".join(f"{r.messageType.value[:3]}:{r.messageID}" for r in records)
        )
        self.rejected[topic].extend(step.rejected)
        self.aborted[topic].extend(a.messageID for a in step.aborted)
        for rejection in step.rejected:
            self._note(f"{topic} REFUSES {rejection.message.messageID}: {rejection.reason}")
        self._route(topic, step.outputs)
        return len(records)

    def duplicate(self, topic: str, index: int) -> None:
        """Append record ``index`` of ``topic``'s log again (a producer retry)."""
        record = self.logs[topic][index]
        self.logs[topic].append(record)
        self.events["duplicate"] += 1
        self._note(f"duplicate {topic}[{index}] {record.messageType.value} {record.messageID}")

    def replay(self, topic: str, count: int) -> None:
        """``topic``'s node re-reads its last ``count`` records, state kept."""
        self.positions[topic] = max(0, self.positions[topic] - count)
        self.events["replay"] += 1
        self._note(f"{topic} rewinds to {self.positions[topic]}")

    def delay(self, topic: str, steps: int) -> None:
        """``topic``'s node does not step for the next ``steps`` steps."""
        self.paused_until[topic] = self.step_count + steps
        self.events["delay"] += 1
        self._note(f"{topic} paused for {steps} steps")

    def checkpoint(self, topic: str) -> None:
        """Remember ``topic``'s engine state and log position (a committed offset)."""
        engine = self.engines[topic]
        self.checkpoints[topic] = (
            engine.snapshot(),
            self.positions[topic],
            self._cursor[topic],
        )
        self.events["checkpoint"] += 1

    def crash(self, topic: str) -> None:
        """``topic``'s node restarts from its last checkpoint (or from scratch)."""
        saved = self.checkpoints.get(topic)
        engine_type = type(self.engines[topic])
        if saved is None:
            self.engines[topic] = self._factory(topic, self.algorithm)
            self.positions[topic] = 0
            self._cursor[topic] = 0
        else:
            snapshot, position, cursor = saved
            self.engines[topic] = engine_type.restore(snapshot)
            self.positions[topic] = position
            self._cursor[topic] = cursor
        self.events["crash"] += 1
        self._note(f"{topic} crashes, restarts at {self.positions[topic]}")

    # ------------------------------------------------------------------ running

    def unread(self) -> int:
        """Records not yet read, over all logs."""
        return sum(len(self.logs[t]) - self.positions[t] for t in self.topics)

    def run(self, workload: Workload, *, max_steps: int = 100_000) -> SimulationResult:
        """Send ``workload`` under the scheduler until quiescent or ``max_steps``."""
        for send in workload.preload:
            self.send(send)
        queues = {client: deque(sends) for client, sends in workload.clients.items()}
        chooser = self.chooser
        chaos = self.chaos
        topics = self.topics
        chaos_until: int | None = None
        while self.step_count < max_steps:
            senders = [c for c, q in queues.items() if q]
            if not senders and chaos_until is None:
                chaos_until = self.step_count + chaos.tail_steps
            if not senders and not self.unread():
                break
            self.step_count += 1
            step = self.step_count
            if chaos_until is None or step <= chaos_until:
                self._misbehave()
            runnable = [
                t
                for t in topics
                if self.positions[t] < len(self.logs[t]) and self.paused_until[t] < step
            ]
            n_choices = len(senders) + len(runnable)
            if n_choices == 0:
                continue  # every node with work is paused: time passes
            pick = chooser.integer(0, n_choices - 1)
            if pick < len(senders):
                partial = chaos_until is None and chooser.chance(chaos.partial_write)
                self.send(queues[senders[pick]].popleft(), partial=partial)
            else:
                topic = runnable[pick - len(senders)]
                self.step_node(topic, chooser.integer(1, chaos.max_batch))
        return self.result()

    def drain(self, *, max_steps: int = 100_000) -> SimulationResult:
        """Step every node round-robin with large batches until nothing is unread."""
        while self.unread() and self.step_count < max_steps:
            for topic in self.topics:
                self.step_count += 1
                self.step_node(topic, 1_000_000)
        return self.result()

    def result(self) -> SimulationResult:
        """The run so far."""
        return SimulationResult(
            topics=self.topics,
            algorithm=self.algorithm,
            sent=list(self.sent),
            deliveries={t: list(d) for t, d in self.deliveries.items()},
            logs=self.logs,
            engines=self.engines,
            rejected={t: list(r) for t, r in self.rejected.items()},
            aborted={t: list(a) for t, a in self.aborted.items()},
            steps=self.step_count,
            quiescent=self.unread() == 0,
            events=Counter(self.events),
            determinism_errors=list(self.determinism_errors),
            trace=list(self.trace or ()),
        )

    # ------------------------------------------------------------------ internals

    def _misbehave(self) -> None:
        chooser = self.chooser
        chaos = self.chaos
        topics = self.topics
        if chooser.chance(chaos.duplicate):
            nonempty = [t for t in topics if self.logs[t]]
            if nonempty:
                topic = nonempty[chooser.integer(0, len(nonempty) - 1)]
                size = len(self.logs[topic])
                low = max(0, size - chaos.duplicate_window)
                self.duplicate(topic, chooser.integer(low, size - 1))
        if chooser.chance(chaos.replay):
            started = [t for t in topics if self.positions[t] > 0]
            if started:
                topic = started[chooser.integer(0, len(started) - 1)]
                limit = min(self.positions[topic], chaos.max_replay)
                self.replay(topic, chooser.integer(1, limit))
        if chooser.chance(chaos.delay):
            self.delay(
                topics[chooser.integer(0, len(topics) - 1)], chooser.integer(1, chaos.max_delay)
            )
        if chooser.chance(chaos.checkpoint):
            self.checkpoint(topics[chooser.integer(0, len(topics) - 1)])
        if chooser.chance(chaos.crash):
            self.crash(topics[chooser.integer(0, len(topics) - 1)])

    def _append(self, topic: str, record: Message) -> None:
        if topic not in self.logs:
            raise KeyError(f"no topic {topic!r} in this simulation")
        if self.through_codec and record.messageType is MessageType.CLIENT:
            (record,) = decode_record(encode_client(record))
        self.logs[topic].append(record)

    def _route(self, source: str, outputs: Iterable[Output]) -> None:
        """Deliveries to the delivery stream; the control messages of one batch to one
        topic in order (with ``through_codec`` packed into bundles and decoded again)."""
        control: dict[str, list[Message]] = {}
        for topic, message in outputs:
            if message.messageType in _DELIVERIES:
                if self.through_codec:
                    (delivered,) = decode_record(encode_delivery(message))
                    self._deliver(source, topic, delivered)
                else:
                    self._deliver(source, topic, message)
            else:
                control.setdefault(topic, []).append(message)
        for topic, messages in control.items():
            if topic not in self.logs:
                raise KeyError(f"no topic {topic!r} in this simulation")
            if self.through_codec:
                engine = self.engines[source]
                for record in pack_bundles(
                    messages,
                    sender_id=engine.node_id,
                    sent_from=source,
                    protocol=engine.algorithm.value,
                    partition=engine.partition,
                    max_bytes=self.bundle_bytes,
                ):
                    self.logs[topic].extend(decode_record(record))
            else:
                self.logs[topic].extend(messages)

    def _deliver(self, source: str, topic: str, message: Message) -> None:
        if topic != source:
            self.determinism_errors.append(
                f"node {source} produced a delivery for topic {topic}: {message.messageID}"
            )
        stream = self.deliveries[topic]
        cursor = self._cursor[topic]
        self._cursor[topic] = cursor + 1
        if cursor < len(stream):  # re-produced after a crash: must be what was written
            before = stream[cursor]
            if (before.messageID, before.timeStamp, before.value) != (
                message.messageID,
                message.timeStamp,
                message.value,
            ):
                self.determinism_errors.append(
                    f"{topic} re-delivered {message.messageID}@{message.timeStamp} at "
                    f"position {cursor} after a restart, where {before.messageID}@"
                    f"{before.timeStamp} had been delivered"
                )
            return
        stream.append(message)
        self._note(f"{topic} DELIVERS {message.messageID}@{message.timeStamp}")

    def _note(self, text: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.step_count:5d} {text}")


def run_workload(
    topics: Sequence[str],
    workload: Workload,
    *,
    seed: int = 0,
    algorithm: Algorithm | str = Algorithm.OPTIMIZED,
    chaos: Chaos = CALM,
    engine_factory: EngineFactory | None = None,
    max_steps: int = 100_000,
    **options: Any,
) -> SimulationResult:
    """Convenience: one run of ``workload`` with a :class:`RandomChooser` seeded ``seed``."""
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=RandomChooser(seed),
        chaos=chaos,
        engine_factory=engine_factory,
        **options,
    )
    return sim.run(workload, max_steps=max_steps)


def deliveries_by_id(result: SimulationResult) -> Mapping[str, list[str]]:
    """Per topic, the delivered ids in order (handy in assertions)."""
    return {t: result.delivered_ids(t) for t in result.topics}
