"""The simulated cluster's state (:class:`SimState`): the base of the simulator's parts."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping, Sequence

from atomickafka.client.plan import (
    DEFAULT_DIRECT_BURST,
    DEFAULT_DIRECT_RATE,
    DEFAULT_MAX_LAG_S,
    DirectLane,
)
from atomickafka.core.compact import BINARY, CONTROL_FORMATS
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.placement import misplaced
from atomickafka.core.protocols import CARRIER, NOTIFY_VALUES
from atomickafka.core.raw import decode_any
from atomickafka.core.signing import Signer
from atomickafka.core.wire import Message, MessageError
from atomickafka.errors import ConfigError
from atomickafka.node.batch import NodeBatch, NodeSpec, OutRecord
from atomickafka.verify.checker import SentMessage
from atomickafka.verify.choosers import Chooser, RandomChooser, pick
from atomickafka.verify.sim.chaos import CALM, Chaos
from atomickafka.verify.sim.node import MEMBERS_AGAIN_MS, SNAPSHOT_EVERY, SimNode
from atomickafka.verify.streams import (
    CONTROL_PREFIX,
    INPUT_PREFIX,
    Log,
    SimClock,
    StreamReader,
    encode_message,
)

__all__ = ["EngineFactory", "SimState"]

#: Builds a node's first engine; the simulator keeps its class across crashes (the
#: mutation tests' seam) and puts its limits in the node's spec.
EngineFactory = Callable[[str, Algorithm], Engine]


class SimState:
    """What the parts of :class:`~atomickafka.verify.simulator.Simulator` share: the
    topics and settings of the run (its parameters are described there), each node with
    its logs and its delivery stream, and what the run keeps account of; what the
    scheduler asks of it (who has work, what is due); and the writing of a record to a
    node's logs as its writer would."""

    def __init__(
        self,
        topics: Sequence[str],
        *,
        algorithm: Algorithm | str = Algorithm.DIRECT,
        chooser: Chooser | None = None,
        chaos: Chaos = CALM,
        engine_factory: EngineFactory | None = None,
        exactly_once: bool = True,
        commit_lag: int = 2,
        protocols: Mapping[str, Algorithm | str] | None = None,
        signer: Signer | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
        record_trace: bool = False,
        layer: int | None = None,
        clock: SimClock | None = None,
        gapless: bool = True,
        members_known: bool = False,
        views: Mapping[str, Collection[str]] | None = None,
        delivery_format: str = "json",
        control_format: str = BINARY,
        control_formats: Mapping[str, str] | None = None,
        notify_values: str = CARRIER,
        notify_values_by_topic: Mapping[str, str] | None = None,
        control_logs: bool = True,
        direct_lane: tuple[float, int] = (DEFAULT_DIRECT_RATE, DEFAULT_DIRECT_BURST),
        max_lag_s: float | None = DEFAULT_MAX_LAG_S,
        hosts: Sequence[Sequence[str]] = (),
    ) -> None:
        if len(set(topics)) != len(topics) or not topics:
            raise ConfigError("topics must be distinct and not empty")
        self.topics = tuple(topics)
        #: Each topic's host process (§6.7): the topics whose nodes share it, which crash
        #: together and commit in one transaction (a topic in no host: itself alone).
        self.host_of: dict[str, tuple[str, ...]] = {t: (t,) for t in self.topics}
        for host in hosts:
            if not exactly_once or not set(host) <= set(self.topics):
                raise ConfigError("hosts group topics of the run, in exactly-once mode")
            for topic in host:
                self.host_of[topic] = tuple(host)
        self.algorithm = Algorithm(algorithm)
        self.chooser: Chooser = chooser if chooser is not None else RandomChooser(0)
        self.chaos = chaos
        self.exactly_once = exactly_once
        self.commit_lag = commit_lag
        self.signer = signer
        self.gapless = gapless
        self.layer = layer
        self.clock = clock if clock is not None else SimClock()
        self.delivery_format = delivery_format
        self.protocols = {
            t: Algorithm(value)
            for t, value in self._per_topic(
                self.algorithm, protocols, self.chaos.mixed_protocols, tuple(Algorithm)
            ).items()
        }
        self.control_formats = self._per_topic(
            control_format, control_formats, self.chaos.mixed_formats, CONTROL_FORMATS
        )
        self.notify_values = self._per_topic(
            notify_values, notify_values_by_topic, self.chaos.mixed_notify_values, NOTIFY_VALUES
        )
        self.views = {t: tuple((views or {}).get(t, self.topics)) for t in self.topics}
        factory = engine_factory or (lambda topic, alg: Engine(topic, f"node-{topic}", alg))
        part = layer or 0
        #: Each node's input log, and its control log (§7) when it has one.
        self.inputs, self.controls = self._logs(control_logs, part)
        #: The clients decide as the client library does (:mod:`atomickafka.client.plan`):
        #: each copy takes its destination's direct lane (rate, burst per client and
        #: destination, in the log's time) while its node is not behind, and a client
        #: holds back while a destination's node is more than ``max_lag_s`` behind.
        self.direct_lane, self.max_lag_s = direct_lane, max_lag_s
        self._set_up_streams(part)
        self._set_up_nodes(factory, snapshot_every, members_known)
        self._set_up_records(record_trace)

    def _set_up_nodes(
        self, factory: EngineFactory, snapshot_every: int, members_known: bool
    ) -> None:
        """Each topic's node, its first engine built by ``factory``, and (with
        ``Chaos.takeover``) its standby."""
        self.nodes: dict[str, SimNode] = {}
        #: The members each node started knowing (``members_known``), for rule 8's replay.
        self.starting_members = {t: self.views[t] for t in self.topics} if members_known else {}
        for topic in self.topics:
            engine = factory(topic, self.protocols[topic])
            spec = self._spec(engine, snapshot_every)
            if (engine.node_id, engine.partition) != (spec.node_id, spec.layer):
                engine = NodeBatch.fresh_engine(spec, type(engine))  # one of a layer
            if members_known:  # as restarted from a snapshot that knows every member
                engine.know_members(self.views[topic])
            elif engine.members is None:  # as a node starts: nothing taken on trust
                engine.state.members = frozenset({topic})
            self.nodes[topic] = node = SimNode(spec, engine)
            if members_known:  # that snapshot is in its store: a crash restarts from it
                ready = node.batch.snapshot_now(wall_s=self.clock.wall_s)
                node.snapshot_rows.extend((r.key, r.value) for r in ready.snapshot_records())
            if self.chaos.takeover:
                node.standby = node.new_standby(0)

    def _set_up_records(self, record_trace: bool) -> None:
        """What the run keeps account of: dead letters, what was sent (and what must
        be delivered nowhere), events, the trace, and what the chaos kinds remember."""
        self.dead_letters: dict[str, list[OutRecord]] = {t: [] for t in self.topics}
        self.unrouted: list[OutRecord] = []
        self.sent: list[SentMessage] = []
        self.doomed: set[str] = set()
        self.paused_until: dict[str, int] = dict.fromkeys(self.topics, 0)
        self.events: Counter[str] = Counter()
        self.determinism_errors: list[str] = []
        self.trace: list[str] | None = [] if record_trace else None
        self._sent_at: dict[tuple[str, str], int] = {}
        #: (topic, id) -> the node's log time when it wrote the Delivery (when it began to
        #: remember the id as delivered, §4.13).
        self._settled_at: dict[tuple[str, str], int] = {}
        #: Offsets of the stray Acks and Notifies about a delivered message, per topic.
        self._about_ids: dict[str, set[int]] = {t: set() for t in self.topics}
        #: (log, offset) of every stray record (MISPLACED copies honest records only),
        #: and how many forged bundles were written.
        self._hostile, self._forged = set[tuple[str, int]](), 0
        #: Recent multicasts (as their client wrote them), what STRAY IN FLIGHT picks from.
        self._in_flight: deque[Message] = deque(maxlen=20)
        self._stray_hit: set[str] = set()
        self._misaddressed: dict[str, bool] = {}
        self._lanes: dict[str, DirectLane] = {}  # each client's token buckets

    def _set_up_streams(self, part: int) -> None:
        """Each topic's delivery (or layer) stream and its reader; exactly-once, beside
        it every transactional record in write order, aborted ones included, and a
        reader of that with the client's repeat filter."""
        layer, signer = self.layer, self.signer
        self.streams: dict[str, Log] = {
            t: Log(t if layer is None else f"atomickafka-layers.{t}", part, self.clock)
            for t in self.topics
        }
        self.readers = {t: StreamReader(t, self.streams[t], signer) for t in self.topics}
        self.uncommitted: dict[str, Log] = {
            t: Log(self.streams[t].topic, part, self.clock) for t in self.topics
        }
        self.uncommitted_readers = {
            t: StreamReader(t, self.uncommitted[t], signer) for t in self.topics
        }

    def _logs(self, control_logs: bool, part: int) -> tuple[dict[str, Log], dict[str, Log]]:
        inputs = {t: Log(INPUT_PREFIX + t, part, self.clock) for t in self.topics}
        if not control_logs:
            return inputs, {}
        return inputs, {t: Log(CONTROL_PREFIX + t, part, self.clock) for t in self.topics}

    @property
    def control_logs(self) -> bool:
        """Each node has a control log (§7) beside its input log."""
        return bool(self.controls)

    def _per_topic(
        self, default: str, given: Mapping[str, str] | None, drawn: bool, choices: Sequence[str]
    ) -> dict[str, str]:
        """A per-topic setting (protocol, control format, Notify values): as ``given``
        (``default`` for a topic it leaves out), else drawn from ``choices`` for each topic
        when the chaos says ``drawn``, else ``default`` everywhere."""
        if given is not None:
            return {t: given.get(t, default) for t in self.topics}
        if drawn:
            return {t: pick(self.chooser, choices) for t in self.topics}
        return dict.fromkeys(self.topics, default)

    def _spec(self, engine: Engine, snapshot_every: int) -> NodeSpec:
        """The spec of ``engine``'s node: its settings are the engine's."""
        layer, topic = self.layer, engine.topic
        return NodeSpec(
            topic=topic,
            node_id=f"node-{topic}" if layer is None else f"node-{topic}/{layer}",
            role=topic if layer is None else f"{topic}/{layer}",
            algorithm=engine.algorithm,
            input_topic=INPUT_PREFIX + topic,
            input_partition=layer or 0,
            delivery_topic=topic,
            dead_letter_topic=f"atomickafka-dlq.{topic}",
            snapshot_topic=f"atomickafka-snap.{topic}",
            input_prefix=INPUT_PREFIX,
            control_prefix=CONTROL_PREFIX if self.control_logs else None,
            control_topic=CONTROL_PREFIX + topic if self.control_logs else None,
            layer=layer,
            layers_topic=None if layer is None else f"atomickafka-layers.{topic}",
            max_value_bytes=engine.max_value_bytes,
            max_record_bytes=engine.max_record_bytes,
            window_ms=engine.window.window_ms,
            snapshot_every_records=snapshot_every,
            tick_every_s=0.001,
            signer=self.signer,
            delivery_format=self.delivery_format,
            control_format=self.control_formats[topic],
            notify_values=self.notify_values[topic],
        )

    # ------------------------------------------------------------------ introspection

    @property
    def step_count(self) -> int:
        """Scheduler steps so far (shared with the other layers of a layered run)."""
        return self.clock.step

    @property
    def positions(self) -> dict[str, int]:
        """Per topic, the next input offset its node reads."""
        return {t: n.batch.position for t, n in self.nodes.items()}

    @property
    def engines(self) -> dict[str, Engine]:
        """Per topic, its node's engine now."""
        return {t: n.batch.engine for t, n in self.nodes.items()}

    @property
    def deliveries(self) -> dict[str, list[Message]]:
        """Per topic, what a client has read of its delivery stream: every delivery
        record exactly-once, repeats dropped at-least-once (see the result)."""
        for reader in self.readers.values():
            reader.poll()
        if self.exactly_once:
            return {t: list(r.raw) for t, r in self.readers.items()}
        return {t: list(r.read) for t, r in self.readers.items()}

    def unread(self, topic: str | None = None) -> int:
        """Records not yet read by ``topic``'s node (or by every node)."""
        topics = self.topics if topic is None else (topic,)
        unread = 0
        for t in topics:
            batch = self.nodes[t].batch
            for log, at in self._fetches(t, batch):
                unread += len(log) - at
            # read, but no marker names them yet (a standby took over with them
            # buffered): its next step, even an idle one, writes that marker
            unread += batch.unmarked
            if not batch.waiting:  # left queued by a step's budget: still to apply
                unread += batch.queued
        return unread

    def _fetches(self, topic: str, batch: NodeBatch) -> list[tuple[Log, int]]:
        """The logs ``batch`` of ``topic``'s node reads, and from where (its committed
        log, and with a control log its input log)."""
        logs = self._logs_of(topic)
        return [(logs[name], at) for name, at in batch.fetches()]

    def _logs_of(self, topic: str) -> dict[str, Log]:
        """``topic``'s node's logs by name: its input log, and its control log if any."""
        logs = {self.inputs[topic].topic: self.inputs[topic]}
        control = self.controls.get(topic)
        if control is not None:
            logs[control.topic] = control
        return logs

    def holding(self) -> bool:
        """True while some node holds a message for the log's time to catch up (or an
        Ack's entry for a message it never heard of, until abandoned), has a transaction
        open, goes on as a zombie, or waits at a marker for input offsets
        nobody wrote yet (§7.1: it ticks its input log when the marker is old enough)."""
        return any(
            n.batch.engine.held_count
            or n.batch.engine.next_orphan_due_ms is not None
            or n.txn
            or n.txn_commit is not None
            or n.zombie
            or n.batch.waiting
            for n in self.nodes.values()
        )

    def has_work(self, topic: str) -> bool:
        """``topic``'s node has records to read, a held message that is due, or a
        members record to write."""
        if self.unread(topic):
            return True
        node = self.nodes[topic]
        if node.txn or node.txn_commit is not None or node.zombie is not None:
            return True
        due = self.next_due_ms(topic)
        return due is not None and self.clock.now_ms >= due

    def next_due_ms(self, topic: str) -> int | None:
        """When ``topic``'s node next has something to do without new input: a held
        message comes due (§4.11) or an Ack's entry is abandoned (rule 9), its shell
        writes its members record (after its first round, and every second while
        messages wait for members, §4.9.5), or it ticks its input log (§7.1)."""
        node = self.nodes[topic]
        dues = [node.batch.engine.next_due_ms, node.batch.engine.next_orphan_due_ms]
        if not node.batch.replaying:
            dues.append(node.batch.next_input_tick_ms)  # (wall time: the simulated clock's)
        if not node.batch.replaying:
            awaited = bool(node.batch.engine.awaiting_members)
            if node.members_at is None:
                if awaited or not node.batch.knows_members(self.views[topic]):
                    dues.append(self.clock.now_ms)
            elif awaited:
                dues.append(node.members_at + MEMBERS_AGAIN_MS)
        return min((d for d in dues if d is not None), default=None)

    # ------------------------------------------------------------------ logs

    def committed_log(self, topic: str) -> Log:
        """The log whose offsets ``topic``'s node commits, its committed log: its control
        log, if it has one (§7.1), else its input log."""
        control = self.controls.get(topic)
        return self.inputs[topic] if control is None else control

    def append(self, topic: str, record: Message) -> None:
        """Append any message to ``topic``'s log, encoded as its writer would (for
        handcrafted scenarios; a member's, so signed when signing is on)."""
        self.append_input(topic, encode_message(record), signed=True)
        self._note(f"inject {record.messageType.value} {record.messageID} into {topic}")

    def append_input(
        self,
        topic: str,
        value: bytes,
        *,
        signed: bool,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Append a record to the log of ``topic``'s node its writer would write it to
        (with control logs, a control message or members record to the control log, a
        client's copy or a relay to the input log, §7.1; what does not decode to the
        input log), signed by a member when ``signed``. Records in the wrong log are the
        ``misplaced`` chaos kind's, not this."""
        if topic not in self.inputs:
            raise KeyError(f"no topic {topic!r} in this simulation")
        log = self._writers_log(topic, value, headers)
        if signed and not headers:
            self._append_signed(log, value)
        else:
            log.append(value, headers=headers)

    def _writers_log(self, topic: str, value: bytes, headers: Sequence[tuple[str, bytes]]) -> Log:
        control = self.controls.get(topic)
        if control is None:
            return self.inputs[topic]
        try:
            messages = decode_any(value, None, list(headers))
        except MessageError:
            return self.inputs[topic]
        return control if misplaced(messages, from_input=True) else self.inputs[topic]

    def _append_signed(self, log: Log, value: bytes) -> None:
        """Append a member's record to ``log``, signed for that log when signing is on."""
        headers = self.signer.signed_headers(log.topic, None, value) if self.signer else ()
        log.append(value, headers=headers)

    def _note(self, text: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.clock.step:5d} {text}")
