"""An in-memory cluster of batch-layer nodes, joined by logs of records, any interleaving.

Each topic has an input log (a :class:`~atomickafka.verify.streams.Log` of encoded
records with offsets and log append times, standing in for ``atomickafka-in.T``) and
one node: the production batch layer, a :class:`~atomickafka.node.batch.NodeBatch`,
stepped with the records it has not read yet. What its ``Ready`` holds goes where the
node's shell writes it: control bundles and the node's own ticks to the end of the
target topic's input log, deliveries to the topic's delivery stream, dead letters to
a per-topic list, snapshots to a per-topic snapshot store. So
the code under test is the code that runs: decoding, signatures, bundling, dead
letters, replay cuts and snapshots included. Clients append ClientMessages (stamped
``sentAt`` with the simulated clock) to any topic -- a destination, or another topic,
which then relays; with ``direct`` a client writes to every destination.

Two delivery modes, as in production (``exactly_once``):

- exactly-once (§6.3): a step's control records (bundles into the peers' logs, the
  node's own ticks and members records) are written at once, outside any transaction,
  by a gapless producer; its other records (deliveries, watermarks, dead letters,
  snapshots) join the node's open transaction, which commits with the input offset a
  few steps later (drawn), as the node's writer commits on an interval. A crash aborts
  the open transaction; the restart writes the control records of the replayed steps
  again (receivers drop the repeats). Delivery streams hold what a ``read_committed``
  reader sees; beside each, an *uncommitted view* holds every transactional record in
  the order it was written, aborted ones included, which a reader with the client's
  repeat filter reads as the filtering client reads ``read_uncommitted``: it must show
  exactly the committed stream. With ``Chaos.zombie`` a node that lost its role to its
  standby goes on for a while as a zombie: it writes control records (and records to
  its transaction, which is fenced: aborted).
- at-least-once: a step's records are written at once (a gapless producer), and its
  commit takes effect ``commit_lag`` steps later; a snapshot is written only once the
  commit has passed its offset. A crash replays from the last commit and writes what
  came after it again, so delivery streams get repeats, which the reader of a stream
  drops as the filtering client does (:class:`~atomickafka.verify.streams.StreamReader`).
  A scripted run (the golden transcripts, ``tests/unit/transcript_commands.py``) can
  hold a step's acknowledgements back or its writes in the producer's queue
  (:class:`Hold`, :meth:`Simulator.acknowledge`): no later commit takes effect first.

A crash is what production does on a restart: :meth:`NodeBatch.recover
<atomickafka.node.batch.NodeBatch.recover>` from the newest readable snapshot in the
store and the committed offset, then a replay. Snapshots are taken every
``snapshot_every`` records, and by the chaos's ``checkpoint``.

With ``Chaos.takeover``, every node has a hot standby, the production
:class:`~atomickafka.node.standby.NodeStandby`: it fetches its topic's log in drawn
batches, reads the committed offset now and then, applies only what is below it and
jumps to a newer snapshot when far behind. A TAKEOVER kills the active node (its
uncommitted work is lost, as in a crash) and its standby continues from its own state
(:meth:`NodeStandby.take_over`); the killed node comes back as the new standby, from
the newest snapshot.

A *scheduler* decides, step by step, what happens next: a client sends its next
message, or a node consumes a batch of the next 1..``max_batch`` records of its log (or
ticks it while it holds a message, §4.11). One step is one millisecond of log time;
when nothing is left to do but wait for a held message, time jumps to when it is due.
It can misbehave the way Kafka, crashes and careless writers do (:class:`Chaos`):

- DELAY: a node does not step for a while;
- DUPLICATE: a record already in a log is appended again, later (a writer's retry),
  byte for byte or (UNSEQUENCED) without the ``seq`` of its messages;
- PARTIAL WRITE (``direct``): a client dies after writing to some destinations only;
- CHECKPOINT, CRASH: a snapshot now; a node restarts as above;
- TAKEOVER: a node dies and its following standby takes over (above);
- PRODUCER GAP: a step's write fails at one of its records -- those before it are
  written, none after (the producer is gapless) -- and the node restarts;
- STRAY: a Tick, Ack or Notify with a timestamp at an edge of the §4.11 bounds is
  appended to an input log (:mod:`atomickafka.verify.hostile`);
- BAD VALUE: a forged Bundle whose ClientMessage value is not JSON;
- MIXED PROTOCOLS: each topic's node runs a drawn protocol, and clients write as if
  their entry topic's protocol were everyone's (a stale view of the statuses);
- STRAY IN FLIGHT: a Notify or Ack naming another protocol (or none: format 1), or an
  Abort (answering nothing, or a guess), about a message in flight, "from" one of its
  destinations, appended to another's log at any point of the message's life
  (:func:`~atomickafka.verify.hostile.stray_in_flight`); the message may then be
  aborted, but only everywhere (the checker's ``all_or_none``);
- ABSENT: a client names a topic that has no node too (such a message must be refused
  everywhere; nodes read it before or after their first members record);
- WRONG RESTART: a node is restarted with another protocol; it must refuse (§6.6),
  from its snapshot or from its own members record in the replay, unless nothing
  protocol-specific was committed yet; then it is restarted as it should be;
- DOWNTIME, LATE MEMBERS: the log's time jumps on by more than half the memory window
  (the nodes were down), at any step or before a node's first members record after it
  starts (what it read waits for it that long, §4.9.5); copies that reached their logs
  in time must still be delivered, and nothing twice (§4.13, §7.1);
- MISPLACED: a copy of a recent relay or bundle in the other log of its node (§7.1);
- FORGED MARKER: an unsigned apply marker in a node's name naming input offsets
  nobody wrote yet (§7.1): the topic stops for a bounded time at most.

Messages that must not be delivered (a forged one; one whose destinations run
different protocols, which every destination aborts) are kept out of what the checker
is told was sent, so the checker flags any delivery of them as invented.

All choices come from a :class:`Chooser`: :class:`RandomChooser` wraps a
:class:`random.Random` (the run is a pure function of the seed) and
:class:`DataChooser` draws every choice from Hypothesis's ``data`` object, so a
failing schedule shrinks. Misbehaviour is only scheduled while clients are still
sending and for ``Chaos.tail_steps`` steps after; then the nodes are left to drain
until the system is quiescent (every log read to its end, nothing held) or the step
limit is hit.

>>> sim = Simulator(["A", "B", "C"], chooser=RandomChooser(7))
>>> workload = random_workload(random.Random(7), ["A", "B", "C"], messages=20)
>>> result = sim.run(workload)
>>> result.quiescent, result.check().ok
(True, True)
"""

from __future__ import annotations

import random  # noqa: F401  (the module doctest uses it)
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final, TypeVar

from atomickafka.client.plan import (
    DEFAULT_DIRECT_BURST,
    DEFAULT_DIRECT_RATE,
    DEFAULT_MAX_LAG_S,
    DirectLane,
    NodeView,
    lagging,
    lane_targets,
)
from atomickafka.core.compact import BINARY, CONTROL_FORMATS
from atomickafka.core.compact import JSON as JSON_CONTROL
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.marker import MAX_MARKER_RANGE, decode_marker, encode_marker
from atomickafka.core.placement import misplaced
from atomickafka.core.protocols import route
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import (
    DeadLetter,
    PlainRecord,
    peek,
    read_dead_letter,
    read_messages,
)
from atomickafka.core.reasons import Reason
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    encode_bundle,
    encode_client,
)
from atomickafka.errors import ConfigError
from atomickafka.node.batch import (
    NodeBatch,
    NodeSpec,
    OutKind,
    OutRecord,
    Ready,
    SettingsChangedError,
)
from atomickafka.node.snapshots import LoadedSnapshot, newest_snapshots
from atomickafka.node.standby import NodeStandby
from atomickafka.verify.checker import CheckReport, SentMessage, check, deliveries_from_wire
from atomickafka.verify.choosers import Chooser, DataChooser, RandomChooser, pick
from atomickafka.verify.hostile import (
    INTRUDER,
    StrayBound,
    bad_value_bundle,
    stray_control,
    stray_in_flight,
    stray_tick,
    stray_timestamp,
)
from atomickafka.verify.streams import (
    CONTROL_PREFIX,
    INPUT_PREFIX,
    Log,
    SimClock,
    StreamReader,
    decoded_log,
    encode_message,
    stated_protocol,
)
from atomickafka.verify.workload import (
    Send,
    Workload,
    client_ids,
    integer_ids,
    random_workload,
)

__all__ = [
    "CALM",
    "Chaos",
    "Chooser",
    "DataChooser",
    "EngineFactory",
    "Hold",
    "RandomChooser",
    "Send",
    "SimulationResult",
    "Simulator",
    "Workload",
    "client_ids",
    "integer_ids",
    "random_workload",
    "replayed_deliveries",
]

#: Records between automatic snapshots of a node (small, so that crashes use them).
SNAPSHOT_EVERY: Final = 12
#: A standby this far behind a committed snapshot loads it (small, so that runs do).
STANDBY_JUMP: Final = 4
#: Records a standby buffers past the committed offset.
STANDBY_PENDING: Final = 8
#: How often (log time) a node's shell writes its members record again while messages
#: wait for members (node/runtime.py's ``MEMBERS_AGAIN_S``, §4.9.5).
MEMBERS_AGAIN_MS: Final = 1000
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

# ---------------------------------------------------------------------------- chaos


@dataclass(frozen=True, slots=True)
class Chaos:
    """How hostile the schedule is; the probabilities are per step.

    ``max_batch`` bounds how many records a node consumes in one step. Misbehaviour is
    only scheduled while clients are sending and ``tail_steps`` steps after.
    ``duplicate`` appends a copy of a recent record; ``unsequenced`` a copy of a recent
    bundle without its messages' ``seq`` (as a node of a release before §4.12 wrote
    them), so that rule 5 is tested beneath the de-duplication by ``seq``. The
    hostile inputs of issue 15 (``stray``, ``producer_gap``, ``bad_value``,
    ``mixed_protocols``) are off by default; ``producer_gap`` is per node step.
    ``takeover`` gives every node a hot standby, which follows its log (``follow``:
    the chance per step that a standby reads), and is the chance per step that an
    active node dies and its standby takes over.
    """

    max_batch: int = 4
    partial_write: float = 0.0
    duplicate: float = 0.05
    delay: float = 0.03
    crash: float = 0.0
    checkpoint: float = 0.1
    max_delay: int = 20
    duplicate_window: int = 20
    tail_steps: int = 50
    unsequenced: float = 0.0
    stray: float = 0.0
    producer_gap: float = 0.0
    bad_value: float = 0.0
    mixed_protocols: bool = False
    #: Each node's control format drawn at random (binary or JSON, §3.9) instead of the
    #: simulator's; ``upgrade`` is the chance per step that a node restarts writing the
    #: other one (a rolling upgrade, or its rollback, with messages in flight).
    mixed_formats: bool = False
    upgrade: float = 0.0
    takeover: float = 0.0
    follow: float = 0.5
    stray_in_flight: float = 0.0
    absent: float = 0.0
    wrong_restart: float = 0.0
    #: Exactly-once: the chance per node step that its open transaction commits (1:
    #: every step, as scripted runs expect; below 1: on a drawn interval, as the
    #: node's writer commits).
    commit: float = 1.0
    #: The chance that a node that lost its role to its standby goes on as a zombie.
    zombie: float = 0.0
    #: Issue 35's hazards (docs/DESIGN.md §4.9.5, §4.13, §7.1). ``late_members``: the
    #: chance that a node's first members record after it starts comes only once more
    #: than half the memory window of log time has passed (a fresh node down before it
    #: wrote it, its peers' proposals read and waiting for it).
    late_members: float = 0.0
    #: The chance per step that the log's time jumps on by more than half the memory
    #: window: the nodes were down (what was written before is read after).
    downtime: float = 0.0
    #: The chance per step that a copy of a recent record lands in the other log of its
    #: node (a relay in the control log, a peer's bundle in the input log); with one log,
    #: in that log again.
    misplaced: float = 0.0
    #: The chance per step that an unsigned apply marker in a node's name, naming input
    #: offsets from its next unapplied one on (most of them not written yet), reaches
    #: its control log (its input log, with one log).
    forged_marker: float = 0.0


_S = TypeVar("_S", bound=Send)
#: What a node writes outside its transaction in exactly-once mode (§6.3).
_CONTROL_KINDS: Final = frozenset({OutKind.CONTROL, OutKind.TICK})
#: The topic a client names by mistake (ABSENT): no node serves it.
ABSENT_TOPIC: Final = "no-such-topic"
#: The strays of STRAY IN FLIGHT: (kind, the protocol named, answers).
_IN_FLIGHT_STRAYS: Final = (
    (MessageType.NOTIFY, "other", None),
    (MessageType.ACK, "other", None),
    (MessageType.NOTIFY, None, None),
    (MessageType.ABORT, "own", None),
    (MessageType.ABORT, "own", (10**9, 0)),  # answers nothing a node wrote
)

#: A commit whose batch's writes are not acknowledged yet takes effect at no step.
_UNACKNOWLEDGED: Final = 2**62


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


#: No misbehaviour at all, just interleavings.
CALM = Chaos(duplicate=0.0, delay=0.0, crash=0.0, checkpoint=0.0, partial_write=0.0)

#: Builds a node's first engine; the simulator keeps its class across crashes (the
#: mutation tests' seam) and puts its limits in the node's spec.
EngineFactory = Callable[[str, Algorithm], Engine]


# ---------------------------------------------------------------------------- result


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

    def replayed(self, topic: str) -> list[Message]:
        """Rule 8 for ``topic``: what a fresh node delivers reading its final logs
        (:func:`replayed_deliveries`, with its control log where it has one)."""
        if topic in self.controls:
            return replayed_deliveries(self.specs[topic], self.controls[topic], self.records[topic])
        return replayed_deliveries(self.specs[topic], self.records[topic])

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
            reasons = [d.reason for d in map(_dead_letter, letters) if d.code is not Reason.ABORTED]
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
                for letter in map(_dead_letter, letters)
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


def _dead_letter(letter: OutRecord) -> DeadLetter:
    """A dead letter the simulated node wrote, as core/reader reads it."""
    return read_dead_letter(PlainRecord(letter.value, headers=list(letter.headers)))


def replayed_deliveries(
    spec: NodeSpec,
    committed: Sequence[PlainRecord],
    inputs: Sequence[PlainRecord] = (),
) -> list[Message]:
    """Rule 8 through the batch layer: what a fresh node of ``spec`` delivers (or writes
    to its merger) reading its final logs, each in one batch -- with a control log its
    input log first (buffered), then its committed log (the markers it writes
    meanwhile are not appended: the committed log is the input order)."""
    batch = NodeBatch(spec, NodeBatch.fresh_engine(spec))
    records = batch.step_input(inputs, wall_s=0.0).records if inputs else []
    records += batch.step(committed, wall_s=0.0).records
    out: list[Message] = []
    for record in records:
        if record.kind is OutKind.DELIVERY and record.value is not None:
            out.extend(decode_any(record.value, record.key, list(record.headers)))
    return out


# ---------------------------------------------------------------------------- nodes


class _Node:
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


# ---------------------------------------------------------------------------- simulator


class Simulator:
    """N batch-layer nodes, one per topic, joined by in-memory logs (see the module).

    ``algorithm`` is every node's protocol unless ``protocols`` maps topics to others
    (or ``chaos.mixed_protocols`` draws one per topic). ``engine_factory(topic,
    algorithm)`` builds each node's first engine (its node id is the spec's): its
    class is kept across crashes (the mutation tests pass subclasses) and its limits
    go into the node's spec. ``signer``: every member (clients, nodes) signs what it
    writes and nodes set aside what is not signed. ``layer``, ``clock``: set by
    :class:`~atomickafka.verify.layered.LayeredSimulator` for one layer of partitioned
    topics, whose nodes write to the layer streams of ``atomickafka-layers.T``.
    ``gapless=False`` is the negative control of the at-least-once producer gaps: the
    producer of issue 15's item 6, which writes what follows a failed record.
    Each node's shell writes its members record (every topic of the run has a node)
    after its first round, as a starting node does, so what a node reads before that
    waits (§4.9.5); ``members_known`` starts every node knowing them instead (as a node
    restarted from a snapshot does), for scripted runs that count records. ``views``
    maps a topic to the topics its node's shell sees in the statuses, when that is not
    every topic (a view that lags, §4.9.5). ``delivery_format`` is the nodes' (§3.8):
    ``json``, production's default, or ``raw``. ``control_format`` is how the nodes
    write bundles and ticks (§3.9): ``binary``, production's default, or ``json``;
    ``control_formats`` maps topics to others (a cluster amid a rolling upgrade).
    """

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
        control_logs: bool = True,
        direct_lane: tuple[float, int] = (DEFAULT_DIRECT_RATE, DEFAULT_DIRECT_BURST),
        max_lag_s: float | None = DEFAULT_MAX_LAG_S,
    ) -> None:
        if len(set(topics)) != len(topics) or not topics:
            raise ConfigError("topics must be distinct and not empty")
        self.topics = tuple(topics)
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
        self.protocols = self._protocols(protocols)
        self.control_formats = self._control_formats(control_format, control_formats)
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
        self.nodes: dict[str, _Node] = {}
        for topic in self.topics:
            engine = factory(topic, self.protocols[topic])
            spec = self._spec(engine, snapshot_every)
            if (engine.node_id, engine.partition) != (spec.node_id, spec.layer):
                engine = NodeBatch.fresh_engine(spec, type(engine))  # one of a layer
            if members_known:  # as restarted from a snapshot that knows every member
                engine.know_members(self.views[topic])
            elif engine.members is None:  # as a node starts: nothing taken on trust
                engine.state.members = frozenset({topic})
            self.nodes[topic] = _Node(spec, engine)
            if chaos.takeover:
                self.nodes[topic].standby = self.nodes[topic].new_standby(0)
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

    def _protocols(self, given: Mapping[str, Algorithm | str] | None) -> dict[str, Algorithm]:
        if given is not None:
            return {t: Algorithm(given.get(t, self.algorithm)) for t in self.topics}
        if self.chaos.mixed_protocols:
            return {t: pick(self.chooser, list(Algorithm)) for t in self.topics}
        return dict.fromkeys(self.topics, self.algorithm)

    def _control_formats(self, default: str, given: Mapping[str, str] | None) -> dict[str, str]:
        if given is not None:
            return {t: given.get(t, default) for t in self.topics}
        if self.chaos.mixed_formats:
            return {t: pick(self.chooser, list(CONTROL_FORMATS)) for t in self.topics}
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
        """True while some node holds a message for the log's time to catch up, has a
        transaction open, goes on as a zombie, or waits at a marker for input offsets
        nobody wrote yet (§7.1: it ticks its input log when the marker is old enough)."""
        return any(
            n.batch.engine.held_count
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
        message comes due (§4.11), its shell writes its members record (after its
        first round, and every second while messages wait for members, §4.9.5), or it
        ticks its input log (§7.1)."""
        node = self.nodes[topic]
        dues = [node.batch.engine.next_due_ms]
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

    # ------------------------------------------------------------------ clients

    def send(
        self,
        send: Send,
        *,
        partial: bool = False,
        only: Collection[str] | None = None,
        lane: Collection[str] | None = None,
    ) -> None:
        """A client appends a ClientMessage to ``send.via``'s log (``direct``: to every
        destination's, or with ``partial`` to a non-empty subset chosen by the chooser,
        or with ``only`` to those destinations a script names). With control logs a copy
        takes the direct lane (its destination's control log) as the client's plan says
        (:func:`~atomickafka.client.plan.lane_targets`, its token bucket), or, when a
        script names them, for the topics in ``lane``.

        A client believes every node runs its entry topic's protocol. A message whose
        destinations run different protocols must be aborted everywhere: it is not
        handed to the checker as sent.
        """
        destinations = send.destinations
        if not set(destinations) <= set(self.topics):  # a topic with no node: refused
            self.doomed.add(send.messageID)
            self.events["absent_destination"] += 1
        elif len({self.protocols.get(t, self.algorithm) for t in destinations}) > 1:
            self.doomed.add(send.messageID)
            self.events["mixed_message"] += 1
        else:
            self.sent.append(SentMessage(send.messageID, frozenset(destinations), send.value))
        sent_at = self._sent_at.setdefault((send.client, send.messageID), self.clock.now_ms)
        message = send.to_message(sent_at)
        if self.layer is not None:
            message = message._replace(partitionID=self.layer)
        if len(destinations) > 1:
            self._in_flight.append(message)
        value = encode_client(message)
        routed, _ = route(destinations, send.via, self.protocols[send.via])  # as a client
        targets = list(routed)
        if len(targets) > 1:  # direct: every destination's log (that has a node)
            targets = [t for t in targets if t in self.inputs]
        if only is not None:  # a partial write the script names
            targets = [t for t in targets if t in only]
            self.events["partial_write"] += len(targets) < len(destinations)
        elif partial and len(targets) > 1:
            keep = self.chooser.integer(1, len(targets) - 1)
            for _ in range(len(targets) - keep):
                targets.pop(self.chooser.integer(0, len(targets) - 1))
            self.events["partial_write"] += 1
        direct = self._lane_copies(send.client, targets, lane)
        for topic in targets:
            if topic in direct:
                self._append_signed(self.controls[topic], value)
                self.events["direct_copy"] += 1
            else:
                self.append_input(topic, value, signed=True)
        self.events["send"] += 1
        self._note(f"{send.client} sends {send.messageID} to {destinations} via {targets}")

    def _lane_copies(
        self, client: str, targets: Sequence[str], lane: Collection[str] | None
    ) -> set[str]:
        """The targets whose copies take the direct lane: those a script names, or as
        the client's plan decides (each node's view and the client's token bucket)."""
        if not self.controls:
            return set()
        if lane is not None:
            return {t for t in targets if t in lane}
        allowed = lane_targets(targets, self.node_views(targets))
        bucket = self._lanes.get(client)
        if bucket is None:
            bucket = self._lanes[client] = DirectLane(*self.direct_lane)
        now = self.clock.now_ms / 1000
        return {t for t in targets if t in allowed and bucket.take(t, now)}

    def node_views(self, topics: Iterable[str]) -> dict[str, list[NodeView]]:
        """What the clients know of ``topics``' nodes, as their statuses would say: live,
        with a control log or not, and how far behind (the log time the oldest record
        they have not applied has waited, read or not)."""
        control = bool(self.controls)
        return {
            t: [NodeView(t, True, control, self.behind_s(t))] for t in topics if t in self.nodes
        }

    def behind_s(self, topic: str) -> float:
        """How long (s, in the log's time) the oldest record ``topic``'s node has not
        applied has waited: one queued or buffered, or the first unread of a log."""
        batch = self.nodes[topic].batch
        stamps = [batch.oldest_unapplied_ms]
        for log, at in self._fetches(topic, batch):
            if len(log) > at:
                stamps.append(log.records[at].timestamp()[1])
        oldest = min((s for s in stamps if s is not None), default=None)
        return 0.0 if oldest is None else max(0.0, (self.clock.now_ms - oldest) / 1000)

    def held_back(self, send: Send) -> bool:
        """Back-pressure: the client of ``send`` waits while a node of its destinations
        (or its relay) is more than ``max_lag_s`` behind (the client's plan,
        :func:`~atomickafka.client.plan.lagging`)."""
        if self.max_lag_s is None:
            return False
        topics = [*send.destinations, send.via]
        return lagging(topics, self.node_views(topics), self.max_lag_s) is not None

    def misaddressed(self, send: _S) -> _S:
        """ABSENT: by chance, ``send`` also names a topic that has no node."""
        if not self.chaos.absent:
            return send
        drawn = self._misaddressed.get(send.messageID)
        if drawn is None:  # a client's retry of a message names what the first send did
            drawn = self._misaddressed[send.messageID] = self.chooser.chance(self.chaos.absent)
        if not drawn:
            return send
        return replace(send, destinations=tuple(sorted({*send.destinations, ABSENT_TOPIC})))

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

    # ------------------------------------------------------------------ nodes

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

    def crash(self, topic: str, *, zombie: bool = False) -> None:
        """``topic``'s node restarts: from the newest readable snapshot and the committed
        offset (uncommitted work of the at-least-once mode is lost)."""
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

    def committed_log(self, topic: str) -> Log:
        """The log whose offsets ``topic``'s node commits, its committed log: its control
        log, if it has one (§7.1), else its input log."""
        control = self.controls.get(topic)
        return self.inputs[topic] if control is None else control

    def upgrade(self, topic: str) -> None:
        """``topic``'s node restarts writing the other control format (§3.9): one step
        of a rolling upgrade (binary) or of its rollback (JSON)."""
        node = self.nodes[topic]
        other = BINARY if node.spec.control_format == JSON_CONTROL else JSON_CONTROL
        node.spec = replace(node.spec, control_format=other)
        self.control_formats[topic] = other
        self._note(f"{topic} restarts writing {other} control records")
        self.events["upgrade"] += 1
        self.crash(topic)

    def _lose_uncommitted(self, node: _Node, event: str) -> None:
        """A node's process ended: its commits in flight and a snapshot waiting for
        them are lost (at-least-once)."""
        node.commits.clear()
        node.snapshot = None
        node.members_at = None
        node.queued = []  # the producer's queue dies with the process
        node.txn, node.txn_commit = [], None  # the open transaction aborts
        self.events[event] += 1

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
        when it has none to continue), and the dead node comes back as the standby."""
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

    def delay(self, topic: str, steps: int) -> None:
        """``topic``'s node does not step for the next ``steps`` steps."""
        self.paused_until[topic] = self.clock.step + steps
        self.events["delay"] += 1
        self._note(f"{topic} paused for {steps} steps")

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

    # ------------------------------------------------------------------ running

    def run(self, workload: Workload, *, max_steps: int = 100_000) -> SimulationResult:
        """Send ``workload`` under the scheduler until quiescent or ``max_steps``."""
        for send in workload.preload:
            self.send(send)
        queues = {client: deque(sends) for client, sends in workload.clients.items()}
        chooser = self.chooser
        chaos = self.chaos
        chaos_until: int | None = None
        while self.clock.step < max_steps:
            waiting = [c for c, q in queues.items() if q]
            if not waiting and chaos_until is None:
                chaos_until = self.clock.step + chaos.tail_steps
            if not waiting and self.quiet():
                break
            senders = [c for c in waiting if not self.held_back(queues[c][0])]
            self.events["held_back"] += len(waiting) - len(senders)
            step = self.clock.advance()
            self.settle()
            if chaos_until is None or step <= chaos_until:
                self.misbehave()
            runnable = [t for t in self.topics if self.paused_until[t] < step and self.has_work(t)]
            n_choices = len(senders) + len(runnable)
            if n_choices == 0:
                self.wait_for_held()
                continue  # every node with work is paused: time passes
            pick = chooser.integer(0, n_choices - 1)
            if pick < len(senders):
                partial = chaos_until is None and chooser.chance(chaos.partial_write)
                self.send(self.misaddressed(queues[senders[pick]].popleft()), partial=partial)
            else:
                topic = runnable[pick - len(senders)]
                self.step_node(topic, chooser.integer(1, chaos.max_batch), budgeted=True)
        return self.result()

    def drain(self, *, max_steps: int = 100_000) -> SimulationResult:
        """Step every node round-robin with large batches until quiescent."""
        while not self.quiet() and self.clock.step < max_steps:
            worked = False
            for topic in self.topics:
                self.clock.advance()
                self.settle()
                if self.has_work(topic):
                    worked = True
                    self.step_node(topic, 1_000_000)
            if not worked:
                self.wait_for_held()
        return self.result()

    def quiet(self) -> bool:
        """Every log read to its end and nothing held."""
        return not self.unread() and not self.holding()

    def wait_for_held(self) -> None:
        """Nothing to read anywhere: let time pass until the first held message is due
        (its node then ticks its log, §4.11)."""
        if self.unread():
            return
        dues = [self.next_due_ms(t) for t in self.topics]
        due = min((d for d in dues if d is not None), default=None)
        if due is not None and due > self.clock.now_ms:
            self.clock.jump_to(due)
            self.events["time_jump"] += 1
            self._note(f"time jumps to {due} ms")

    def settle(self) -> None:
        """At-least-once: commits in flight take effect when their time has come."""
        if not self.exactly_once:
            for node in self.nodes.values():
                self._settle(node)

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

    def downtime(self) -> None:
        """The log's time jumps on by more than half the memory window (DOWNTIME)."""
        window = min(n.spec.window_ms for n in self.nodes.values())
        self.clock.jump_to(self.clock.now_ms + window // 2 + self.chooser.integer(1, window // 4))
        self.events["downtime"] += 1
        self._note(f"downtime: time jumps to {self.clock.now_ms} ms")

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

    def result(self) -> SimulationResult:
        """The run so far."""
        deliveries = self.deliveries
        errors = list(self.determinism_errors)
        for reader in self.readers.values():
            errors.extend(reader.anomalies)
            if self.exactly_once and reader.repeats:
                errors.append(f"{reader.topic}: {reader.repeats} deliveries written twice")
        if self.exactly_once and self.quiet():
            errors.extend(self._uncommitted_errors())
        return SimulationResult(
            topics=self.topics,
            algorithm=self.algorithm,
            protocols=dict(self.protocols),
            exactly_once=self.exactly_once,
            sent=list(self.sent),
            doomed=set(self.doomed),
            deliveries=deliveries,
            raw={t: list(r.raw) for t, r in self.readers.items()},
            streams={t: list(s.records) for t, s in self.streams.items()},
            records={t: list(log.records) for t, log in self.inputs.items()},
            specs={t: n.spec for t, n in self.nodes.items()},
            dead_letters={t: list(d) for t, d in self.dead_letters.items()},
            engines=self.engines,
            steps=self.clock.step,
            quiescent=self.quiet(),
            events=Counter(self.events),
            determinism_errors=errors,
            trace=list(self.trace or ()),
            all_or_none=frozenset(self._stray_hit),
            controls={t: list(log.records) for t, log in self.controls.items()},
        )

    def _uncommitted_errors(self) -> list[str]:
        """What a ``read_uncommitted`` reader with the client's repeat filter shows that
        a ``read_committed`` one does not (§6.3): nothing, once every transaction ended."""
        errors: list[str] = []
        for topic, reader in self.uncommitted_readers.items():
            reader.poll()
            errors.extend(f"uncommitted view: {a}" for a in reader.anomalies)
            shown = [(m.messageID, m.timeStamp) for m in reader.read]
            committed = [(m.messageID, m.timeStamp) for m in self.readers[topic].raw]
            if shown != committed:
                errors.append(
                    f"{topic}: read_uncommitted with the repeat filter shows {shown[:8]}..., "
                    f"read_committed {committed[:8]}..."
                )
        return errors

    # ------------------------------------------------------------------ writing

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

    def _write_held(self, node: _Node, topic: str, ready: Ready, hold: Hold) -> None:
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
        """Exactly-once: ``topic``'s node commits its open transaction -- its records
        become visible, its input offset committed -- or, by chance, the commit fails
        (the transaction aborts and the node restarts)."""
        node = self.nodes[topic]
        if self.chooser.chance(self.chaos.producer_gap):
            self.events["producer_gap"] += 1
            self._note(f"{topic}: a commit fails")
            self.crash(topic)
            return
        for record in node.txn:
            self._route(topic, record)
        if node.txn_commit is not None:
            node.committed = node.txn_commit
        node.txn, node.txn_commit = [], None
        self.events["commit"] += 1

    def _settle(self, node: _Node) -> None:
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
            self._note(f"{source} SETS ASIDE: {_dead_letter(record).reason}")
        else:
            self.nodes[source].snapshot_rows.append((record.key, record.value))

    def _note_late_relays(self, target: str, value: bytes) -> None:
        """A relay's copies that reach ``target``'s log more than half the memory
        window after their clients sent them (their relay was down, DOWNTIME) are late
        there (§4.13): such a message may be delivered nowhere, but only everywhere or
        nowhere."""
        window = self.nodes[target].spec.window_ms
        if decode_marker(value) is not None:
            return
        for message in decode_any(value):
            sent_at = message.sentAt
            client = message.messageType is MessageType.CLIENT
            if client and sent_at is not None and self.clock.now_ms - sent_at > window // 2:
                self._stray_hit.add(message.messageID)

    def _note(self, text: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.clock.step:5d} {text}")
