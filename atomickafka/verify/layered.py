"""A simulator of partitioned topics: N ordering layers joined per topic by a merger.

The model (DESIGN.md §8)
------------------------
Partitions with the same number across topics form a *layer*. Each layer runs the
ordering protocol on its own, so each layer here is a whole single-layer
:class:`~atomickafka.verify.simulator.Simulator` whose nodes are the production batch
layer for layer ``l`` (``NodeBatch`` with node id ``node-<topic>/<l>``): its own input
logs (partition ``l`` of ``atomickafka-in.T``), clocks, chaos (duplicates, delays,
crashes recovered from snapshots, producer gaps, partial client writes for ``direct``,
stray records) and its own *layer streams*: partition ``l`` of
``atomickafka-layers.T``, where the node writes its ``PartitionDeliveryMessage`` records
and watermarks. A client message goes to one layer (:class:`LayerSend`), the same at
every destination and at a relay: its ClientMessage carries ``partitionID = layer``.

One merger per topic -- the production merger batch layer,
:class:`~atomickafka.node.merger_batch.MergerBatch` -- reads its topic's layer streams
(each in order, interleaved and batched as the chooser says) and what it returns goes
where its shell writes it: Delivery records to the topic's delivery stream ``T`` (read
by a client that drops repeats and, with signing, forged records), TickMessages into
the blocking layers' input logs, dead letters, snapshots to its snapshot store. In
exactly-once mode a merger step's records are one transaction; at-least-once, they are
written in order by a gapless producer and a snapshot only after them. When the
system has gone quiet with a merger's head still blocked, the merger asks the
blocking layers for a tick again, as its shell does after ``TICK_RETRY_S``.

Chaos on top of the layers' own (:class:`MergerChaos`, scheduled in the same window
as the layers' misbehaviour): a layer record written again later, a paused merger,
merger snapshots, producer gaps, merger crashes and foreign records appended to ``T``
before a crash. A crashed merger restarts as the shell does: ``MergerBatch.recover``
from the newest snapshot in its store (or, half of the time, as if that snapshot could
not be read: from nothing, replaying every layer stream from the start), then
``resume_after`` the key of the last Delivery in ``T`` that is its own -- found by
reading ``T`` backwards and skipping records of other writers, as the shell does.

Workloads are the single-layer ones (:class:`Workload` of :class:`Send`) with a layer
assigned to every message by :func:`assign_layers`: round-robin, by a key, or drawn,
with layers that never get a message (``silent``) and *idle stretches* (``phases``:
each client's sends are cut into consecutive phases, and in each phase only a drawn
subset of the layers gets messages).

Every choice comes from one :class:`Chooser`, shared with the layer simulators, so a run
is a pure function of the chooser (a seed, or Hypothesis's ``data``). A step is one
scheduler action: a client send, one layer node's batch, or one merger's batch; every
log shares one clock. :meth:`LayeredSimulator.result` returns a :class:`LayeredResult`:
the merged streams, what was sent, the checker's verdict on the merged streams, what is
stuck, the ticks, and, per merged delivery, when it was written to its layer stream,
first read by a merger and released (:class:`MergeDelay`; the merge-delay benchmark,
:mod:`atomickafka.evaluation.bench.merge_delay`, sums them up).

>>> topics = ["A", "B", "C"]
>>> workload = assign_layers(random_workload(random.Random(3), topics, messages=20), 3)
>>> result = LayeredSimulator(topics, 3, chooser=RandomChooser(3)).run(workload)
>>> result.quiescent, result.check().ok, result.stuck(), result.order_errors()
(True, True, {}, [])
"""

from __future__ import annotations

import random  # noqa: F401  (the module doctest uses it)
from collections import Counter, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Any, Final

from atomickafka.client.plan import (
    DEFAULT_DIRECT_BURST,
    DEFAULT_DIRECT_RATE,
    DEFAULT_MAX_LAG_S,
)
from atomickafka.core.engine import Algorithm
from atomickafka.core.merger import (
    LayerDelivery,
    LayerRecord,
    LayerWatermark,
    MergeKey,
    Merger,
    Rejected,
)
from atomickafka.core.reader import PlainRecord, delivery_order_key
from atomickafka.core.signing import Signer
from atomickafka.core.wire import Message, MessageError, MessageType, decode_record
from atomickafka.errors import ConfigError
from atomickafka.node.batch import OutKind, OutRecord, Ready
from atomickafka.node.merger_batch import MergerBatch, MergerSpec, own_delivery_key
from atomickafka.node.snapshots import LoadedSnapshot, newest_snapshots
from atomickafka.verify.checker import CheckReport, SentMessage, check, deliveries_from_wire
from atomickafka.verify.hostile import foreign_delivery_records
from atomickafka.verify.sim.chaos import FaultWindow
from atomickafka.verify.simulator import (
    CALM,
    SNAPSHOT_EVERY,
    Chaos,
    Chooser,
    EngineFactory,
    RandomChooser,
    Send,
    SimulationResult,
    Simulator,
    Workload,
    random_workload,  # noqa: F401  (the module doctest uses it)
)
from atomickafka.verify.streams import Log, SimClock, StreamReader
from atomickafka.verify.workload import LayerPolicy, LayerSend, assign_layers

__all__ = [
    "MERGER_CALM",
    "LayerPolicy",
    "LayerSend",
    "LayeredResult",
    "LayeredSimulator",
    "MergeDelay",
    "MergerChaos",
    "assign_layers",
]

#: How often a merger whose head stays blocked once everything went quiet asks again.
MAX_TICK_RETRIES: Final = 3


# ---------------------------------------------------------------------------- chaos


@dataclass(frozen=True, slots=True)
class MergerChaos:
    """How hostile the mergers' side of the schedule is; probabilities are per step.

    A merger batch takes up to ``max_picks`` runs of 1..``max_batch`` records, each run
    from one layer stream with unread records. ``duplicate``: a record of a layer
    stream (among its last ``duplicate_window``) is appended again. ``delay``: a merger
    does not step for 1..``max_delay`` steps. ``checkpoint``: a merger takes a snapshot.
    ``crash``: a merger restarts (see the module). ``producer_gap`` (per merger step):
    its write fails at one record -- none after it is written -- and it restarts.
    ``foreign``: records of another writer are appended to ``T`` (not JSON, a
    ClientMessage and, on a signed run, a forged Delivery under the merger's id with a
    huge timestamp), then the merger restarts and must find its own last record.
    """

    max_batch: int = 4
    max_picks: int = 3
    duplicate: float = 0.05
    delay: float = 0.03
    crash: float = 0.0
    checkpoint: float = 0.0
    duplicate_window: int = 10
    max_delay: int = 20
    producer_gap: float = 0.0
    foreign: float = 0.0


#: No merger misbehaviour, just interleavings and batchings.
MERGER_CALM = MergerChaos(duplicate=0.0, delay=0.0, crash=0.0, checkpoint=0.0)


# ---------------------------------------------------------------------------- result


@dataclass(frozen=True, slots=True)
class MergeDelay:
    """When one merged delivery was written to its layer stream, first read by a merger
    of its topic (any incarnation) and released, in simulated steps."""

    topic: str
    messageID: str
    layer: int
    written: int
    arrived: int
    released: int

    @property
    def wait(self) -> int:
        """Steps the item waited in the merger: release step - arrival step."""
        return self.released - self.arrived


@dataclass(slots=True, repr=False)
class LayeredResult:
    """What a layered run produced: the merged streams and how they came about.

    ``merged`` is what a client reads from each topic's delivery stream (forged and
    foreign records skipped); ``written`` every Delivery the topic's mergers wrote there,
    in order, which :meth:`order_errors` holds to the merged order.
    """

    topics: tuple[str, ...]
    layers: int
    algorithm: Algorithm
    exactly_once: bool
    sent: list[SentMessage]
    doomed: set[str]
    layer_of: dict[str, int]  # messageID -> the layer its client sent it to
    merged: dict[str, list[Message]]  # per topic, its merged delivery stream
    keys: dict[str, list[MergeKey]]  # per topic, the merge keys of ``merged``
    written: dict[str, list[MergeKey]]  # per topic, the keys of its mergers' records
    streams: dict[str, list[list[LayerRecord]]]  # per topic, per layer: the layer stream
    layer_results: list[SimulationResult]  # per layer, its single-layer simulation
    mergers: dict[str, Merger]
    merger_rejected: dict[str, list[Rejected]]
    ticks: dict[str, int]  # per topic, TickRequests its mergers made (all incarnations)
    tick_budget: dict[str, int]  # per topic, the most ticks the merger rules allow
    delays: list[MergeDelay]
    steps: int
    quiescent: bool
    events: Counter[str]
    errors: list[str]  # the layers' determinism errors, prefixed with their layer

    def check(self, *, complete: bool | None = None, **options: Any) -> CheckReport:
        """The independent checker on the merged streams (validity when quiescent).

        Merged deliveries carry their layer (``partitionID``), so the checker's
        timestamp diagnostics order them by ``(timeStamp, layer, messageID)`` too.
        """
        if complete is None:
            complete = self.quiescent
        hit = frozenset().union(*(r.all_or_none for r in self.layer_results))
        options.setdefault("all_or_none", hit)
        return check(self.sent, deliveries_from_wire(self.merged), complete=complete, **options)

    def order_errors(self) -> list[str]:
        """What breaks the merged order: what each topic's mergers wrote strictly
        increasing in ``(timeStamp, layer, messageID)`` (across restarts: nothing written
        twice, nothing out of order); a message at the same ``(timeStamp, layer)`` at
        every topic, in the layer its client chose; no merger refused a record."""
        errors: list[str] = []
        placed: dict[str, tuple[str, int, int]] = {}
        for topic in self.topics:
            errors.extend(
                f"{topic}: {b} written after {a}"
                for a, b in pairwise(self.written[topic])
                if not a < b
            )
            for key in self.keys[topic]:
                first = placed.setdefault(key.messageID, (topic, key.timeStamp, key.layer))
                if first[1:] != (key.timeStamp, key.layer):
                    errors.append(
                        f"{key.messageID}: (timeStamp, layer) {first[1:]} at {first[0]} but "
                        f"{(key.timeStamp, key.layer)} at {topic}"
                    )
                expected = self.layer_of.get(key.messageID)
                if expected is not None and expected != key.layer:
                    errors.append(f"{key.messageID} sent to layer {expected}, merged from {key}")
        for topic, rejected in self.merger_rejected.items():
            errors.extend(f"merger {topic} refused {r.record!r}: {r.reason}" for r in rejected)
        return errors

    def stuck(self) -> dict[str, int]:
        """What is held and not delivered: ``"<topic>/<layer>"`` for a layer's engine,
        ``"merger <topic>"`` for a merger's buffer (only entries above zero)."""
        out: dict[str, int] = {}
        for layer, sim in enumerate(self.layer_results):
            for topic, engine in sim.engines.items():
                if engine.pending_count:
                    out[f"{topic}/{layer}"] = engine.pending_count
        for topic, merger in self.mergers.items():
            if merger.pending_count:
                out[f"merger {topic}"] = merger.pending_count
        return out

    def merged_ids(self, topic: str) -> list[str]:
        """The ids ``topic``'s merged stream delivered, in order."""
        return [m.messageID for m in self.merged[topic]]

    def tick_records(self) -> int:
        """Tick records of the mergers in the layers' input logs (duplicates included)."""
        return sum(
            1
            for sim in self.layer_results
            for topic, log in sim.logs.items()
            for record in log
            if record.messageType is MessageType.TICK and record.senderID == f"merger-{topic}"
        )

    def __repr__(self) -> str:
        return f"<LayeredResult: {self.describe()}>"

    def describe(self) -> str:
        """A one-paragraph account of the run, for assertion messages."""
        events = ", ".join(f"{k}={v}" for k, v in sorted(self.events.items()))
        merged = ", ".join(f"{t}:{len(self.merged[t])}" for t in self.topics)
        mode = "exactly-once" if self.exactly_once else "at-least-once"
        return (
            f"{self.algorithm.value} {mode} run over {len(self.topics)} topics x "
            f"{self.layers} layers: {self.steps} steps, quiescent={self.quiescent}, "
            f"{len(self.sent)} sends; merged {merged}; ticks {sum(self.ticks.values())}; "
            f"events {events}; stuck {self.stuck()}"
        )


# ---------------------------------------------------------------------------- mergers


class _Merger:
    """One topic's merger: its batch layer, its snapshot store, its delivery stream."""

    def __init__(self, spec: MergerSpec, target: Log) -> None:
        self.spec = spec
        self.batch = MergerBatch(spec)
        self.target = target
        self.snapshot_rows: list[tuple[bytes | None, bytes | None]] = []
        self.retries = 0

    def newest_snapshot(self) -> LoadedSnapshot | None:
        """The newest readable snapshot (as the shell)."""
        for found in newest_snapshots(self.snapshot_rows, self.spec.role):
            if found.state is not None:
                return found
        return None

    def last_own_key(self) -> tuple[MergeKey | None, int]:
        """The key of the last Delivery in ``T`` this merger wrote, reading backwards
        (as the shell), and how many records of other writers it passed."""
        foreign = 0
        for record in reversed(self.target.records):
            key = own_delivery_key(self.spec, record)
            if key is not None:
                return key, foreign
            foreign += 1
        return None, foreign


def _layer_record(record: PlainRecord) -> LayerRecord | None:
    raw = record.value()
    try:
        (message,) = decode_record(raw or b"")
    except (MessageError, ValueError):
        return None
    layer = record.partition()
    if message.messageType is MessageType.WATERMARK:
        return LayerWatermark(layer, message.timeStamp or 0)
    if message.messageType is MessageType.PARTITION_DELIVERY:
        return LayerDelivery(layer, message.timeStamp or 0, message.messageID, message)
    return None


# ---------------------------------------------------------------------------- simulator


class LayeredSimulator:
    """``layers`` single-layer simulators over ``topics`` and one merger per topic.

    ``chaos`` applies to every layer (one drawn layer misbehaves per step), and
    ``merger_chaos`` to the mergers. ``write_ticks=False`` drops every tick a merger
    writes (to show what ticks are for). ``exactly_once``, ``commit_lag``,
    ``protocols`` and ``signer`` are those of :class:`Simulator`, for every layer and
    the mergers alike, and so is ``engine_factory`` (its engines become each layer's,
    of the class it returns). ``delivery_format`` is the mergers' (§3.8): ``json``,
    production's default, or ``raw`` (a layer's node always writes JSON envelopes to
    its merger).

    Use :meth:`run`, or :meth:`load` and :meth:`advance` to act between steps (e.g.
    :meth:`restart_merger`).
    """

    def __init__(
        self,
        topics: Sequence[str],
        layers: int,
        *,
        algorithm: Algorithm | str = Algorithm.DIRECT,
        chooser: Chooser | None = None,
        chaos: Chaos = CALM,
        merger_chaos: MergerChaos = MERGER_CALM,
        write_ticks: bool = True,
        record_trace: bool = False,
        exactly_once: bool = True,
        commit_lag: int = 2,
        protocols: Mapping[str, Algorithm | str] | None = None,
        signer: Signer | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
        members_known: bool = False,
        delivery_format: str = "json",
        engine_factory: EngineFactory | None = None,
        control_logs: bool = True,
        direct_lane: tuple[float, int] = (DEFAULT_DIRECT_RATE, DEFAULT_DIRECT_BURST),
        max_lag_s: float | None = DEFAULT_MAX_LAG_S,
    ) -> None:
        if layers < 1:
            raise ConfigError(f"at least one layer, not {layers}")
        self.chooser: Chooser = chooser if chooser is not None else RandomChooser(0)
        self.clock = SimClock()
        layer_of_topics = partial(  # a layer's simulator, given its number and protocols
            Simulator,
            topics,
            algorithm=algorithm,
            chooser=self.chooser,
            chaos=chaos,
            exactly_once=exactly_once,
            commit_lag=commit_lag,
            signer=signer,
            snapshot_every=snapshot_every,
            record_trace=record_trace,
            clock=self.clock,
            members_known=members_known,
            delivery_format=delivery_format,
            engine_factory=engine_factory,
            control_logs=control_logs,
            direct_lane=direct_lane,
            max_lag_s=max_lag_s,
        )
        first = layer_of_topics(layer=0, protocols=protocols)
        others = range(1, layers)  # a topic's layers all run one protocol: the first's
        self.sims = [first] + [layer_of_topics(layer=n, protocols=first.protocols) for n in others]
        self.topics = first.topics
        self.layers = layers
        self.algorithm = Algorithm(algorithm)
        self.chaos = chaos
        self.merger_chaos = merger_chaos
        self.exactly_once = exactly_once
        self.write_ticks = write_ticks
        self.signer = signer
        self._set_up_mergers(first.control_formats, snapshot_every, delivery_format)
        self._set_up_records(record_trace)

    def _set_up_mergers(
        self, control_formats: Mapping[str, str], snapshot_every: int, delivery_format: str
    ) -> None:
        """One merger per topic (its ticks to the layers in ``control_formats``, the
        form the first layer's node writes), and a client's reader of what it delivers."""
        topics, layers, signer = self.topics, self.layers, self.signer
        self.mergers: dict[str, _Merger] = {}
        for topic in topics:
            spec = MergerSpec(
                topic,
                layers,
                role=f"{topic}/merger",
                layers_topic=f"atomickafka-layers.{topic}",
                delivery_topic=topic,
                input_topic=f"atomickafka-in.{topic}",
                dead_letter_topic=f"atomickafka-dlq.{topic}",
                snapshot_topic=f"atomickafka-snap.{topic}",
                snapshot_every_records=snapshot_every,
                signer=signer,
                delivery_format=delivery_format,
                # its ticks to the layers: in the form the first layer's node writes
                control_format=control_formats[topic],
            )
            self.mergers[topic] = _Merger(spec, Log(topic, 0, self.clock))
        self.readers = {t: StreamReader(t, self.mergers[t].target, signer) for t in topics}

    def _set_up_records(self, record_trace: bool) -> None:
        """What the run keeps account of: the mergers' set-asides, pauses, ticks and
        losses, events, the trace, when each copy was written and arrived, the merge
        delays, and the clients' queues."""
        topics = self.topics
        self.merger_rejected: dict[str, list[Rejected]] = {t: [] for t in topics}
        self.merger_dead_letters: dict[str, int] = dict.fromkeys(topics, 0)
        self.merger_paused_until: dict[str, int] = dict.fromkeys(topics, 0)
        self.ticks: dict[str, int] = dict.fromkeys(topics, 0)
        self.lost_on_crash: dict[str, int] = dict.fromkeys(topics, 0)
        self.events: Counter[str] = Counter()
        self.trace: list[str] | None = [] if record_trace else None
        self.layer_of: dict[str, int] = {}
        self._written: dict[tuple[str, str], int] = {}
        self._arrived: dict[tuple[str, str], int] = {}
        self._stream_seen: dict[tuple[str, int], int] = {}
        self.delays: list[MergeDelay] = []
        self._queues: dict[str, deque[LayerSend]] = {}
        self._faults = FaultWindow(self.chaos)

    @property
    def step_count(self) -> int:
        """Scheduler steps so far."""
        return self.clock.step

    @property
    def keys(self) -> dict[str, list[MergeKey]]:
        """Per topic, the merge keys of what a client has read of it so far."""
        self._poll()
        return {
            t: [MergeKey(*delivery_order_key(m)) for m in r.read] for t, r in self.readers.items()
        }

    # ------------------------------------------------------------------ actions

    def send(
        self, send: LayerSend, *, partial: bool = False, only: Collection[str] | None = None
    ) -> None:
        """A client sends ``send`` into its layer (see :meth:`Simulator.send`)."""
        if not 0 <= send.layer < self.layers:
            raise ConfigError(f"{send.messageID}: no layer {send.layer} in this simulation")
        self.layer_of.setdefault(send.messageID, send.layer)
        self.sims[send.layer].send(send, partial=partial, only=only)

    def step_node(self, layer: int, topic: str, batch: int, *, budgeted: bool = False) -> int:
        """Layer ``layer``'s node for ``topic`` reads up to ``batch`` records (or ticks
        its log while it holds a message); returns records read (``budgeted``: as
        :meth:`Simulator.step_node`)."""
        count = self.sims[layer].step_node(topic, batch, budgeted=budgeted)
        self._note_written(layer, topic)
        return count

    def step_merger(self, topic: str) -> int:
        """``topic``'s merger takes a chooser-made batch of its unread layer records and
        its shell writes what comes back. Returns the number of records taken."""
        chooser = self.chooser
        chaos = self.merger_chaos
        merger = self.mergers[topic]
        positions = dict(merger.batch.positions)
        records: list[PlainRecord] = []
        for _ in range(chooser.integer(1, chaos.max_picks)):
            ready = [
                layer
                for layer in range(self.layers)
                if positions.get(layer, 0) < len(self.sims[layer].streams[topic])
            ]
            if not ready:
                break
            layer = ready[chooser.integer(0, len(ready) - 1)]
            start = positions.get(layer, 0)
            taken = self.sims[layer].streams[topic].read(start, chooser.integer(1, chaos.max_batch))
            positions[layer] = start + len(taken)
            records.extend(taken)
        if not records:
            return 0
        self.merge(topic, records)
        return len(records)

    def merge(self, topic: str, records: Sequence[PlainRecord]) -> Ready:
        """``topic``'s merger takes ``records`` (layer records, each layer's in order
        from where it stands) as one batch and its shell writes what comes back, which
        is returned."""
        merger = self.mergers[topic]
        for record in records:
            item = _layer_record(record)
            if isinstance(item, LayerDelivery):
                self._arrived.setdefault((topic, item.messageID), self.clock.step)
        ready = merger.batch.step(records, wall_s=self.clock.wall_s)
        self.merger_rejected[topic].extend(merger.batch.merger.rejected)
        self.events["merger_batch"] += 1
        self._write_merger(topic, ready)
        return ready

    def restart_merger(self, topic: str, *, from_checkpoint: bool = False) -> None:
        """``topic``'s merger crashes and restarts as the shell does: from the newest
        snapshot in its store (``from_checkpoint``, when there is one) or from nothing
        (no snapshot readable: every layer stream replayed), told to resume after the
        last Delivery in ``T`` that is its own."""
        old = self.mergers[topic]
        self.lost_on_crash[topic] += old.batch.merger.pending_count
        snapshot = old.newest_snapshot() if from_checkpoint else None
        old.batch = MergerBatch.recover(old.spec, snapshot)
        key, foreign = old.last_own_key()
        if key is not None:
            old.batch.resume_after(key)
        old.retries = 0
        self.events["merger_restore" if snapshot is not None else "merger_restart"] += 1
        if foreign:
            self.events["foreign_passed"] += foreign
        self._note(f"merger {topic} restarts at {old.batch.positions}, after {key}")

    def checkpoint_merger(self, topic: str) -> None:
        """``topic``'s merger takes a snapshot now."""
        merger = self.mergers[topic]
        ready = merger.batch.snapshot_now(wall_s=self.clock.wall_s)
        merger.snapshot_rows.extend((r.key, r.value) for r in ready.snapshot_records())
        self.events["merger_checkpoint"] += 1

    def duplicate_record(self, topic: str, layer: int, index: int) -> None:
        """Append record ``index`` of the ``(topic, layer)`` stream again (a retry)."""
        self.sims[layer].copy_stream_record(topic, index)
        self.events["stream_duplicate"] += 1
        self._note(f"duplicate stream {topic}/{layer}[{index}]")

    def foreign_records(self, topic: str) -> None:
        """Another writer appends records to ``T`` (a forged Delivery only when the run
        is signed: unsigned, nothing can tell it from the merger's own), then the merger
        restarts and must resume after its own last record."""
        merger = self.mergers[topic]
        for value in foreign_delivery_records(
            topic, merger.spec.sender_id, forged=self.signer is not None
        ):
            merger.target.append(value)
        self.events["foreign"] += 1
        self.restart_merger(topic, from_checkpoint=True)

    # ------------------------------------------------------------------ running

    def unread(self) -> int:
        """Records not yet read: in the layers' input logs and the layer streams."""
        logs = sum(sim.unread() for sim in self.sims)
        return logs + sum(self._merger_unread(t) for t in self.topics)

    def load(self, workload: Workload) -> None:
        """Write ``workload``'s preload and queue its clients' sends."""
        for send in workload.preload:
            self.send(_layered(send))
        for client, sends in workload.clients.items():
            queue = self._queues.setdefault(client, deque())
            queue.extend(_layered(send) for send in sends)
        self._faults = FaultWindow(self.chaos)

    def advance(self, max_steps: int) -> bool:
        """Schedule until quiescent (every send made, every log and stream read to its
        end, nothing held) or until step ``max_steps``; True when quiescent."""
        chooser = self.chooser
        chaos = self.chaos
        while self.clock.step < max_steps:
            waiting = [c for c, q in self._queues.items() if q]
            if not waiting and self._quiet() and not self._retry_blocked():
                return True
            # back-pressure: a client waits while a node of its next message's layer lags
            senders = [
                c
                for c in waiting
                if not self.sims[self._queues[c][0].layer].held_back(self._queues[c][0])
            ]
            self._faults.observe(self.clock.step, len(waiting), len(waiting) - len(senders))
            step = self.clock.advance()
            for sim in self.sims:
                sim.settle()
            if self._faults.active(step):
                self._misbehave()
            nodes = [
                (layer, t)
                for layer, sim in enumerate(self.sims)
                for t in self.topics
                if sim.paused_until[t] < step and sim.has_work(t)
            ]
            mergers = [
                t
                for t in self.topics
                if self._merger_unread(t) and self.merger_paused_until[t] < step
            ]
            choices = len(senders) + len(nodes) + len(mergers)
            if choices == 0:
                self._wait_for_held()
                continue  # everything with work is paused: time passes
            pick = chooser.integer(0, choices - 1)
            if pick < len(senders):
                partial = self._faults.sending() and chooser.chance(chaos.partial_write)
                send = self._queues[senders[pick]].popleft()
                self.send(self.sims[send.layer].misaddressed(send), partial=partial)
            elif pick < len(senders) + len(nodes):
                layer, topic = nodes[pick - len(senders)]
                self.step_node(layer, topic, chooser.integer(1, chaos.max_batch), budgeted=True)
            else:
                self.step_merger(mergers[pick - len(senders) - len(nodes)])
        return not any(self._queues.values()) and self._quiet()

    def run(self, workload: Workload, *, max_steps: int = 200_000) -> LayeredResult:
        """Send ``workload`` (its sends :class:`LayerSend`) until quiescent or
        ``max_steps``; return the result."""
        self.load(workload)
        self.advance(max_steps)
        return self.result()

    def result(self) -> LayeredResult:
        """The run so far."""
        self._poll()
        layer_results = [sim.result() for sim in self.sims]
        errors = [
            f"layer {layer}: {error}"
            for layer, result in enumerate(layer_results)
            for error in result.determinism_errors
        ]
        for reader in self.readers.values():
            errors.extend(reader.anomalies)
        keys = self.keys
        budget = {
            t: (self.layers - 1) * (len(keys[t]) + self.lost_on_crash[t]) for t in self.topics
        }
        merged = {
            t: [m._replace(messageType=MessageType.DELIVERY) for m in r.read]
            for t, r in self.readers.items()
        }
        return LayeredResult(
            topics=self.topics,
            layers=self.layers,
            algorithm=self.algorithm,
            exactly_once=self.exactly_once,
            sent=[sent for sim in self.sims for sent in sim.sent],
            doomed=set().union(*(sim.doomed for sim in self.sims)),
            layer_of=dict(self.layer_of),
            merged=merged,
            keys=keys,
            written={t: self._written_keys(t) for t in self.topics},
            streams={
                t: [
                    [item for r in sim.streams[t].records if (item := _layer_record(r))]
                    for sim in self.sims
                ]
                for t in self.topics
            },
            layer_results=layer_results,
            mergers={t: m.batch.merger for t, m in self.mergers.items()},
            merger_rejected={t: list(r) for t, r in self.merger_rejected.items()},
            ticks=dict(self.ticks),
            tick_budget=budget,
            delays=list(self.delays),
            steps=self.clock.step,
            quiescent=not any(self._queues.values()) and self._quiet(),
            events=Counter(self.events) + sum((r.events for r in layer_results), Counter()),
            errors=errors,
        )

    # ------------------------------------------------------------------ internals

    def _quiet(self) -> bool:
        return not self.unread() and not any(sim.holding() for sim in self.sims)

    def _wait_for_held(self) -> None:
        """Nothing to read anywhere: time passes until the first held message is due."""
        if any(sim.unread() for sim in self.sims):
            return
        dues = [sim.next_due_ms(t) for sim in self.sims for t in sim.topics]
        due = min((d for d in dues if d is not None), default=None)
        if due is not None and due > self.clock.now_ms:
            self.clock.jump_to(due)
            self.events["time_jump"] += 1

    def _retry_blocked(self) -> bool:
        """Everything is quiet but a merger's head is still blocked: its shell asks the
        blocking layers for a tick again (at most :data:`MAX_TICK_RETRIES` times in a
        row). True when something was written."""
        for topic, merger in self.mergers.items():
            if merger.batch.merger.blocked_by() and merger.retries < MAX_TICK_RETRIES:
                merger.retries += 1
                self.events["tick_retry"] += 1
                self._write_merger(topic, merger.batch.retry_ticks())
                return True
        return False

    def _merger_unread(self, topic: str) -> int:
        positions = self.mergers[topic].batch.positions
        return sum(
            len(sim.streams[topic]) - positions.get(layer, 0) for layer, sim in enumerate(self.sims)
        )

    def _note_written(self, layer: int, topic: str) -> None:
        """When each PartitionDelivery reached its layer stream (for :class:`MergeDelay`)."""
        stream = self.sims[layer].streams[topic]
        seen = self._stream_seen.get((topic, layer), 0)
        for record in stream.records[seen:]:
            item = _layer_record(record)
            if isinstance(item, LayerDelivery):
                self._written.setdefault((topic, item.messageID), self.clock.step)
        self._stream_seen[(topic, layer)] = len(stream)

    def _write_merger(self, topic: str, ready: Ready) -> None:
        """Write what a merger step decided, as its shell's writer of the mode would."""
        records = ready.records
        if records and self.chooser.chance(self.merger_chaos.producer_gap):
            self.events["merger_producer_gap"] += 1
            outputs = ready.outputs()
            written = 0
            if outputs and not self.exactly_once:  # gapless: what came before it is written
                written = self.chooser.integer(0, len(outputs) - 1)
                for record in outputs[:written]:
                    self._route_merger(topic, record)
            lost = sum(1 for r in outputs[written:] if r.kind is OutKind.DELIVERY)
            self.lost_on_crash[topic] += lost  # released, not written: merged again
            self.restart_merger(topic, from_checkpoint=True)
            return
        for record in records:
            self._route_merger(topic, record)
        self._poll()

    def _route_merger(self, topic: str, record: OutRecord) -> None:
        merger = self.mergers[topic]
        kind = record.kind
        if kind is OutKind.DELIVERY:
            merger.target.append(record.value, key=record.key, headers=record.headers)
            merger.retries = 0
        elif kind is OutKind.TICK:
            self.ticks[topic] += 1
            self.events["tick"] += 1
            if self.write_ticks:
                self.sims[record.partition or 0].inputs[topic].append(
                    record.value, key=record.key, headers=record.headers
                )
        elif kind is OutKind.DEAD_LETTER:
            self.merger_dead_letters[topic] += 1
        else:
            merger.snapshot_rows.append((record.key, record.value))

    def _poll(self) -> None:
        """Let each topic's client read what its merger wrote; note when it was released."""
        for topic, reader in self.readers.items():
            for message in reader.poll():
                mid = message.messageID
                arrived = self._arrived.get((topic, mid), self.clock.step)
                self.delays.append(
                    MergeDelay(
                        topic,
                        mid,
                        message.partitionID or 0,
                        self._written.get((topic, mid), arrived),
                        arrived,
                        self.clock.step,
                    )
                )

    def _written_keys(self, topic: str) -> list[MergeKey]:
        merger = self.mergers[topic]
        keys = (own_delivery_key(merger.spec, r) for r in merger.target.records)
        return [k for k in keys if k is not None]

    def _misbehave(self) -> None:
        chooser = self.chooser
        chaos = self.merger_chaos
        topics = self.topics
        self.sims[chooser.integer(0, self.layers - 1)].misbehave()
        if chooser.chance(chaos.duplicate):
            filled = [
                (t, layer)
                for t in topics
                for layer, sim in enumerate(self.sims)
                if len(sim.streams[t])
            ]
            if filled:
                topic, layer = filled[chooser.integer(0, len(filled) - 1)]
                size = len(self.sims[layer].streams[topic])
                low = max(0, size - chaos.duplicate_window)
                self.duplicate_record(topic, layer, chooser.integer(low, size - 1))
        if chooser.chance(chaos.delay):
            topic = topics[chooser.integer(0, len(topics) - 1)]
            self.merger_paused_until[topic] = self.clock.step + chooser.integer(1, chaos.max_delay)
            self.events["merger_delay"] += 1
        if chooser.chance(chaos.checkpoint):
            self.checkpoint_merger(topics[chooser.integer(0, len(topics) - 1)])
        if chooser.chance(chaos.crash):
            topic = topics[chooser.integer(0, len(topics) - 1)]
            self.restart_merger(topic, from_checkpoint=chooser.chance(0.5))
        if chooser.chance(chaos.foreign):
            self.foreign_records(topics[chooser.integer(0, len(topics) - 1)])

    def _note(self, text: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.clock.step:5d} {text}")


def _layered(send: Send) -> LayerSend:
    if not isinstance(send, LayerSend):
        raise TypeError(f"{send.messageID}: a send without a layer; use assign_layers first")
    return send
