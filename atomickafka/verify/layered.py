"""A simulator of partitioned topics: N ordering layers joined per topic by a merger.

The model (DESIGN.md §8)
------------------------
Partitions with the same number across topics form a *layer*. Each layer runs the
ordering protocol on its own, so each layer here is a whole single-layer
:class:`~atomickafka.verify.simulator.Simulator` whose engines are built with
``Engine(topic, f"node-{topic}/{layer}", algorithm, partition=layer)``: its own input
logs, clocks, chaos (duplicates, replays, delays, crashes with checkpoints, partial
client writes for ``direct``) and its own delivery streams of
``PartitionDeliveryMessage`` records. A client message goes to one layer
(:class:`LayerSend`), the same at every destination and at a relay: its ClientMessage
carries ``partitionID = layer`` and the layer's nodes carry it on.

After every batch of a layer's node at topic ``T`` this simulator appends to the
*layer stream* ``(T, layer)`` what the node's shell writes there: a
:class:`~atomickafka.core.merger.LayerDelivery` per new delivery, in order, then a
:class:`~atomickafka.core.merger.LayerWatermark` with ``engine.watermark()``. One
:class:`~atomickafka.core.merger.Merger` per topic reads its topic's layer streams
(each in order, interleaved and batched as the chooser says) and its Releases form the
topic's *merged* delivery stream. A :class:`~atomickafka.core.merger.TickRequest`
becomes a ``TickMessage`` record (``encode_tick``, decoded as a node would) appended to
that layer's input log at that topic through the layer simulator's ``append``: the
layer's engine moves its clock there, its next watermark rises above the tick, and an
idle layer stops blocking.

Chaos on top of the layers' own (:class:`MergerChaos`, scheduled in the same window
as the layers' misbehaviour): a layer record written again later (a producer retry),
a merger re-reading part of a stream with its state kept (consumer redelivery), a
paused merger, and merger crashes. A crashed merger restarts as the shell does: a
fresh :class:`Merger` told :meth:`Merger.resume_after` the key of the last merged
delivery, replaying every layer stream from the start; or, when a checkpoint exists
and the chooser says so, :meth:`Merger.restore` of the checkpoint with its stream
positions, then ``resume_after`` the same way.

Workloads are the single-layer ones (:class:`Workload` of :class:`Send`) with a layer
assigned to every message by :func:`assign_layers`: round-robin, by a key, or drawn,
with layers that never get a message (``silent``) and *idle stretches* (``phases``:
each client's sends are cut into consecutive phases, and in each phase only a drawn
subset of the layers gets messages).

Every choice comes from one :class:`Chooser`, shared with the layer simulators, so a run
is a pure function of the chooser (a seed, or Hypothesis's ``data``). A step is one
scheduler action: a client send, one layer node's batch, or one merger's batch.
:meth:`LayeredSimulator.result` returns a :class:`LayeredResult`: the merged streams,
what was sent, the checker's verdict on the merged streams, what is stuck, the ticks,
and, per merged delivery, when it was written to its layer stream, first read by a
merger and released (:class:`MergeDelay`; the merge-delay benchmark,
:mod:`atomickafka.evaluation.merge_delay`, sums them up).

>>> topics = ["A", "B", "C"]
>>> workload = assign_layers(random_workload(random.Random(3), topics, messages=20), 3)
>>> result = LayeredSimulator(topics, 3, chooser=RandomChooser(3)).run(workload)
>>> result.quiescent, result.check().ok, result.stuck(), result.order_errors()
(True, True, {}, [])
"""

from __future__ import annotations

import random  # noqa: F401  (the module doctest uses it)
import zlib
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from typing import Any

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.merger import (
    LayerDelivery,
    LayerRecord,
    LayerWatermark,
    MergeKey,
    Merger,
    Rejected,
    Release,
    TickRequest,
)
from atomickafka.core.wire import (
    Message,
    MessageType,
    client_message,
    decode_record,
    encode_tick,
)
from atomickafka.verify.checker import CheckReport, SentMessage, check, deliveries_from_wire
from atomickafka.verify.simulator import (
    CALM,
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

__all__ = [
    "MERGER_CALM",
    "LayerPolicy",
    "LayerSend",
    "LayeredResult",
    "LayeredSimulator",
    "MergeDelay",
    "MergerChaos",
    "assign_layers",
    "layer_engine_factory",
]


# ---------------------------------------------------------------------------- workload


@dataclass(frozen=True, slots=True)
class LayerSend(Send):
    """A :class:`Send` routed to layer ``layer``: its ClientMessage carries the layer."""

    layer: int = 0

    def to_message(self) -> Message:
        """The ClientMessage record, with ``partitionID = layer``."""
        return client_message(
            self.messageID, self.destinations, self.value, self.client, self.layer
        )


class LayerPolicy(StrEnum):
    """How :func:`assign_layers` picks a message's layer among the active ones."""

    ROUND_ROBIN = "round_robin"  # in order of first appearance
    KEY = "key"  # a hash of ``key(send)`` (by default the client: Kafka's keyed partitioning)
    DRAWN = "drawn"  # drawn by the chooser


def _by_client(send: Send) -> str:
    return send.client


def assign_layers(
    workload: Workload,
    layers: int,
    *,
    policy: LayerPolicy | str = LayerPolicy.ROUND_ROBIN,
    chooser: Chooser | None = None,
    key: Callable[[Send], str] = _by_client,
    silent: Sequence[int] = (),
    phases: int = 1,
) -> Workload:
    """``workload`` with every send turned into a :class:`LayerSend`.

    A message id gets one layer, at its first appearance; a client's retry of it (the
    same id, later) goes to the same layer. Layers in ``silent`` never get a message.
    With ``phases > 1`` each client's list is cut into ``phases`` consecutive stretches
    (the preload belongs to the first) and each stretch gets a drawn non-empty subset
    of the other layers: the rest are idle for that stretch. ``chooser`` (default
    ``RandomChooser(0)``) draws those subsets and, with ``DRAWN``, the layers.
    """
    policy = LayerPolicy(policy)
    if layers < 1:
        raise ValueError(f"at least one layer, not {layers}")
    usable = [layer for layer in range(layers) if layer not in set(silent)]
    if not usable:
        raise ValueError("every layer is silent: nothing could be sent")
    chooser = chooser if chooser is not None else RandomChooser(0)
    active: list[list[int]] = [usable]
    if phases > 1:
        active = []
        for _ in range(phases):
            subset = [layer for layer in usable if chooser.chance(0.5)]
            active.append(subset or [usable[chooser.integer(0, len(usable) - 1)]])
    layer_of: dict[str, int] = {}
    turn = 0

    def route(send: Send, phase: int) -> LayerSend:
        nonlocal turn
        layer = layer_of.get(send.messageID)
        if layer is None:
            candidates = active[phase]
            if policy is LayerPolicy.ROUND_ROBIN:
                layer = candidates[turn % len(candidates)]
                turn += 1
            elif policy is LayerPolicy.KEY:
                layer = candidates[zlib.crc32(key(send).encode()) % len(candidates)]
            else:
                layer = candidates[chooser.integer(0, len(candidates) - 1)]
            layer_of[send.messageID] = layer
        return LayerSend(
            send.client, send.messageID, send.destinations, send.value, send.via, layer
        )

    preload: list[Send] = [route(send, 0) for send in workload.preload]
    clients: dict[str, list[Send]] = {}
    for client, sends in workload.clients.items():
        count = len(sends)
        clients[client] = [
            route(send, index * len(active) // count) for index, send in enumerate(sends)
        ]
    return Workload(clients=clients, preload=preload)


# ---------------------------------------------------------------------------- chaos


@dataclass(frozen=True, slots=True)
class MergerChaos:
    """How hostile the mergers' side of the schedule is; probabilities are per step.

    A merger batch takes up to ``max_picks`` runs of 1..``max_batch`` records, each run
    from one layer stream with unread records. ``duplicate``: a record of a layer
    stream (among its last ``duplicate_window``) is appended again. ``redeliver``: a
    merger re-reads the last 1..``max_redeliver`` records of a stream, state kept.
    ``delay``: a merger does not step for 1..``max_delay`` steps. ``crash``: a merger
    restarts (from a checkpoint, taken with probability ``checkpoint`` per step, half
    of the time when there is one; otherwise fresh, replaying every stream).
    """

    max_batch: int = 4
    max_picks: int = 3
    duplicate: float = 0.05
    redeliver: float = 0.03
    delay: float = 0.03
    crash: float = 0.0
    checkpoint: float = 0.0
    duplicate_window: int = 10
    max_redeliver: int = 10
    max_delay: int = 20


#: No merger misbehaviour, just interleavings and batchings.
MERGER_CALM = MergerChaos(duplicate=0.0, redeliver=0.0, delay=0.0, crash=0.0, checkpoint=0.0)


def layer_engine_factory(layer: int) -> EngineFactory:
    """The engines of layer ``layer``: ``Engine(topic, "node-<topic>/<layer>", ...)``."""

    def make(topic: str, algorithm: Algorithm) -> Engine:
        return Engine(topic, f"node-{topic}/{layer}", algorithm, partition=layer)

    return make


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
    """What a layered run produced: the merged streams and how they came about."""

    topics: tuple[str, ...]
    layers: int
    algorithm: Algorithm
    sent: list[SentMessage]
    layer_of: dict[str, int]  # messageID -> the layer its client sent it to
    merged: dict[str, list[Message]]  # per topic, its merged delivery stream
    keys: dict[str, list[MergeKey]]  # per topic, the merge keys of ``merged``
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
        return check(self.sent, deliveries_from_wire(self.merged), complete=complete, **options)

    def order_errors(self) -> list[str]:
        """What breaks the merged order: each merged stream strictly increasing in
        ``(timeStamp, layer, messageID)``; a message at the same ``(timeStamp, layer)``
        at every topic, in the layer its client chose; no merger refused a record."""
        errors: list[str] = []
        placed: dict[str, tuple[str, int, int]] = {}
        for topic in self.topics:
            keys = self.keys[topic]
            errors.extend(
                f"{topic}: {b} released after {a}" for a, b in pairwise(keys) if not a < b
            )
            for key in keys:
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
        """Tick records in the layers' input logs (duplicates included)."""
        return sum(
            1
            for sim in self.layer_results
            for log in sim.logs.values()
            for record in log
            if record.messageType is MessageType.TICK
        )

    def __repr__(self) -> str:
        return f"<LayeredResult: {self.describe()}>"

    def describe(self) -> str:
        """A one-paragraph account of the run, for assertion messages."""
        events = ", ".join(f"{k}={v}" for k, v in sorted(self.events.items()))
        merged = ", ".join(f"{t}:{len(self.merged[t])}" for t in self.topics)
        return (
            f"{self.algorithm.value} run over {len(self.topics)} topics x {self.layers} "
            f"layers: {self.steps} steps, quiescent={self.quiescent}, {len(self.sent)} "
            f"sends; merged {merged}; ticks {sum(self.ticks.values())}; events {events}; "
            f"stuck {self.stuck()}"
        )


# ---------------------------------------------------------------------------- simulator


class LayeredSimulator:
    """``layers`` single-layer simulators over ``topics`` and one merger per topic.

    ``chaos`` applies to every layer (one drawn layer misbehaves per step), and
    ``merger_chaos`` to the mergers. ``write_ticks=False`` drops every TickRequest (to
    show what ticks are for).

    Use :meth:`run`, or :meth:`load` and :meth:`advance` to act between steps (e.g.
    :meth:`restart_merger`).
    """

    def __init__(
        self,
        topics: Sequence[str],
        layers: int,
        *,
        algorithm: Algorithm | str = Algorithm.OPTIMIZED,
        chooser: Chooser | None = None,
        chaos: Chaos = CALM,
        merger_chaos: MergerChaos = MERGER_CALM,
        through_codec: bool = False,
        write_ticks: bool = True,
        record_trace: bool = False,
    ) -> None:
        if layers < 1:
            raise ValueError(f"at least one layer, not {layers}")
        self.chooser: Chooser = chooser if chooser is not None else RandomChooser(0)
        self.sims = [
            Simulator(
                topics,
                algorithm=algorithm,
                chooser=self.chooser,
                chaos=chaos,
                engine_factory=layer_engine_factory(layer),
                through_codec=through_codec,
                record_trace=record_trace,
            )
            for layer in range(layers)
        ]
        self.topics = self.sims[0].topics
        self.layers = layers
        self.algorithm = Algorithm(algorithm)
        self.chaos = chaos
        self.merger_chaos = merger_chaos
        self.write_ticks = write_ticks
        topics = self.topics
        self.streams: dict[str, list[list[LayerRecord]]] = {
            t: [[] for _ in range(layers)] for t in topics
        }
        self.reads: dict[str, list[int]] = {t: [0] * layers for t in topics}
        self.mergers: dict[str, Merger] = {t: Merger(t, layers) for t in topics}
        self.merged: dict[str, list[Message]] = {t: [] for t in topics}
        self.keys: dict[str, list[MergeKey]] = {t: [] for t in topics}
        self.merger_rejected: dict[str, list[Rejected]] = {t: [] for t in topics}
        self.merger_paused_until: dict[str, int] = dict.fromkeys(topics, 0)
        self.merger_checkpoints: dict[str, tuple[dict[str, Any], list[int]]] = {}
        self.ticks: dict[str, int] = dict.fromkeys(topics, 0)
        self.lost_on_crash: dict[str, int] = dict.fromkeys(topics, 0)
        self.events: Counter[str] = Counter()
        self.trace: list[str] | None = [] if record_trace else None
        self.step_count = 0
        self.layer_of: dict[str, int] = {}
        self._written: dict[tuple[str, str], int] = {}
        self._arrived: dict[tuple[str, str], int] = {}
        self.delays: list[MergeDelay] = []
        self._queues: dict[str, deque[LayerSend]] = {}
        self._chaos_until: int | None = None

    # ------------------------------------------------------------------ actions

    def send(self, send: LayerSend, *, partial: bool = False) -> None:
        """A client sends ``send`` into its layer (see :meth:`Simulator.send`)."""
        if not 0 <= send.layer < self.layers:
            raise ValueError(f"{send.messageID}: no layer {send.layer} in this simulation")
        self.layer_of.setdefault(send.messageID, send.layer)
        self.sims[send.layer].send(send, partial=partial)

    def step_node(self, layer: int, topic: str, batch: int) -> int:
        """Layer ``layer``'s node for ``topic`` reads up to ``batch`` records; its new
        deliveries, then its watermark, go to the layer stream. Returns records read."""
        sim = self.sims[layer]
        stream = sim.deliveries[topic]
        before = len(stream)
        count = sim.step_node(topic, batch)
        if count:
            out = self.streams[topic][layer]
            for message in stream[before:]:
                assert message.timeStamp is not None
                out.append(LayerDelivery(layer, message.timeStamp, message.messageID, message))
                self._written.setdefault((topic, message.messageID), self.step_count)
            out.append(LayerWatermark(layer, sim.engines[topic].watermark()))
        return count

    def step_merger(self, topic: str) -> int:
        """``topic``'s merger takes a chooser-made batch of its unread layer records;
        Releases join the merged stream, TickRequests become tick records. Returns the
        number of records taken."""
        chooser = self.chooser
        chaos = self.merger_chaos
        streams = self.streams[topic]
        reads = self.reads[topic]
        batch: list[LayerRecord] = []
        for _ in range(chooser.integer(1, chaos.max_picks)):
            ready = [layer for layer in range(self.layers) if reads[layer] < len(streams[layer])]
            if not ready:
                break
            layer = ready[chooser.integer(0, len(ready) - 1)]
            start = reads[layer]
            taken = streams[layer][start : start + chooser.integer(1, chaos.max_batch)]
            reads[layer] = start + len(taken)
            batch.extend(taken)
        if not batch:
            return 0
        for record in batch:
            if isinstance(record, LayerDelivery):
                self._arrived.setdefault((topic, record.messageID), self.step_count)
        merger = self.mergers[topic]
        outputs = merger.handle_batch(batch)
        self.merger_rejected[topic].extend(merger.rejected)
        self.events["merger_batch"] += 1
        for output in outputs:
            if isinstance(output, Release):
                self._release(topic, output)
            elif isinstance(output, TickRequest):
                self.ticks[topic] += 1
                self.events["tick"] += 1
                if self.write_ticks:
                    self._tick(topic, output)
        return len(batch)

    def restart_merger(self, topic: str, *, from_checkpoint: bool = False) -> None:
        """``topic``'s merger crashes and restarts as the shell does: fresh, or restored
        from its checkpoint (when asked and there is one), told to resume after the
        last merged delivery, and reading the layer streams again from the start (or
        from the checkpoint's positions)."""
        old = self.mergers[topic]
        self.lost_on_crash[topic] += old.pending_count
        saved = self.merger_checkpoints.get(topic) if from_checkpoint else None
        if saved is None:
            merger = Merger(topic, self.layers)
            self.reads[topic] = [0] * self.layers
            self.events["merger_restart"] += 1
        else:
            snapshot, reads = saved
            merger = Merger.restore(snapshot)
            self.reads[topic] = list(reads)
            self.events["merger_restore"] += 1
        keys = self.keys[topic]
        if keys:
            merger.resume_after(keys[-1])
        self.mergers[topic] = merger
        self._note(f"merger {topic} restarts at {self.reads[topic]}, after {keys[-1:]}")

    def checkpoint_merger(self, topic: str) -> None:
        """Remember ``topic``'s merger state and its stream positions."""
        self.merger_checkpoints[topic] = (
            self.mergers[topic].snapshot(),
            list(self.reads[topic]),
        )
        self.events["merger_checkpoint"] += 1

    def duplicate_record(self, topic: str, layer: int, index: int) -> None:
        """Append record ``index`` of the ``(topic, layer)`` stream again (a retry)."""
        stream = self.streams[topic][layer]
        stream.append(stream[index])
        self.events["stream_duplicate"] += 1
        self._note(f"duplicate stream {topic}/{layer}[{index}] {stream[index]}")

    def redeliver(self, topic: str, layer: int, count: int) -> None:
        """``topic``'s merger re-reads the last ``count`` records of a stream."""
        self.reads[topic][layer] = max(0, self.reads[topic][layer] - count)
        self.events["stream_redeliver"] += 1
        self._note(f"merger {topic} rewinds {layer} to {self.reads[topic][layer]}")

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
        self._chaos_until = None

    def advance(self, max_steps: int) -> bool:
        """Schedule until quiescent (every send made, every log and stream read to its
        end) or until step ``max_steps``; True when quiescent."""
        chooser = self.chooser
        chaos = self.chaos
        while self.step_count < max_steps:
            senders = [c for c, q in self._queues.items() if q]
            if not senders and self._chaos_until is None:
                self._chaos_until = self.step_count + chaos.tail_steps
            if not senders and not self.unread():
                return True
            self.step_count += 1
            step = self.step_count
            for sim in self.sims:
                sim.step_count = step
            if self._chaos_until is None or step <= self._chaos_until:
                self._misbehave()
            nodes = [
                (layer, t)
                for layer, sim in enumerate(self.sims)
                for t in self.topics
                if sim.positions[t] < len(sim.logs[t]) and sim.paused_until[t] < step
            ]
            mergers = [
                t
                for t in self.topics
                if self._merger_unread(t) and self.merger_paused_until[t] < step
            ]
            choices = len(senders) + len(nodes) + len(mergers)
            if choices == 0:
                continue  # everything with work is paused: time passes
            pick = chooser.integer(0, choices - 1)
            if pick < len(senders):
                partial = self._chaos_until is None and chooser.chance(chaos.partial_write)
                self.send(self._queues[senders[pick]].popleft(), partial=partial)
            elif pick < len(senders) + len(nodes):
                layer, topic = nodes[pick - len(senders)]
                self.step_node(layer, topic, chooser.integer(1, chaos.max_batch))
            else:
                self.step_merger(mergers[pick - len(senders) - len(nodes)])
        return not any(self._queues.values()) and not self.unread()

    def run(self, workload: Workload, *, max_steps: int = 200_000) -> LayeredResult:
        """Send ``workload`` (its sends :class:`LayerSend`) until quiescent or
        ``max_steps``; return the result."""
        self.load(workload)
        self.advance(max_steps)
        return self.result()

    def result(self) -> LayeredResult:
        """The run so far."""
        layer_results = [sim.result() for sim in self.sims]
        errors = [
            f"layer {layer}: {error}"
            for layer, result in enumerate(layer_results)
            for error in result.determinism_errors
        ]
        budget = {
            t: (self.layers - 1) * (len(self.merged[t]) + self.lost_on_crash[t])
            for t in self.topics
        }
        return LayeredResult(
            topics=self.topics,
            layers=self.layers,
            algorithm=self.algorithm,
            sent=[sent for sim in self.sims for sent in sim.sent],
            layer_of=dict(self.layer_of),
            merged={t: list(m) for t, m in self.merged.items()},
            keys={t: list(k) for t, k in self.keys.items()},
            streams=self.streams,
            layer_results=layer_results,
            mergers=dict(self.mergers),
            merger_rejected={t: list(r) for t, r in self.merger_rejected.items()},
            ticks=dict(self.ticks),
            tick_budget=budget,
            delays=list(self.delays),
            steps=self.step_count,
            quiescent=not any(self._queues.values()) and not self.unread(),
            events=Counter(self.events) + sum((r.events for r in layer_results), Counter()),
            errors=errors,
        )

    # ------------------------------------------------------------------ internals

    def _merger_unread(self, topic: str) -> int:
        reads = self.reads[topic]
        return sum(len(s) - reads[i] for i, s in enumerate(self.streams[topic]))

    def _release(self, topic: str, release: Release) -> None:
        message = release.payload
        assert isinstance(message, Message)
        self.merged[topic].append(message._replace(messageType=MessageType.DELIVERY))
        self.keys[topic].append(release.key)
        mid = release.messageID
        arrived = self._arrived.get((topic, mid), self.step_count)
        self.delays.append(
            MergeDelay(
                topic,
                mid,
                release.layer,
                self._written.get((topic, mid), arrived),
                arrived,
                self.step_count,
            )
        )
        self._note(f"merger {topic} RELEASES {mid}@{release.timeStamp}/{release.layer}")

    def _tick(self, topic: str, request: TickRequest) -> None:
        (record,) = decode_record(encode_tick(f"merger-{topic}", request.timeStamp, request.layer))
        self.sims[request.layer].append(topic, record)

    def _misbehave(self) -> None:
        chooser = self.chooser
        chaos = self.merger_chaos
        topics = self.topics
        self.sims[chooser.integer(0, self.layers - 1)]._misbehave()
        if chooser.chance(chaos.duplicate):
            filled = [(t, i) for t in topics for i, s in enumerate(self.streams[t]) if s]
            if filled:
                topic, layer = filled[chooser.integer(0, len(filled) - 1)]
                size = len(self.streams[topic][layer])
                low = max(0, size - chaos.duplicate_window)
                self.duplicate_record(topic, layer, chooser.integer(low, size - 1))
        if chooser.chance(chaos.redeliver):
            started = [(t, i) for t in topics for i, r in enumerate(self.reads[t]) if r]
            if started:
                topic, layer = started[chooser.integer(0, len(started) - 1)]
                limit = min(self.reads[topic][layer], chaos.max_redeliver)
                self.redeliver(topic, layer, chooser.integer(1, limit))
        if chooser.chance(chaos.delay):
            topic = topics[chooser.integer(0, len(topics) - 1)]
            self.merger_paused_until[topic] = self.step_count + chooser.integer(1, chaos.max_delay)
            self.events["merger_delay"] += 1
        if chooser.chance(chaos.checkpoint):
            self.checkpoint_merger(topics[chooser.integer(0, len(topics) - 1)])
        if chooser.chance(chaos.crash):
            topic = topics[chooser.integer(0, len(topics) - 1)]
            restore = topic in self.merger_checkpoints and chooser.chance(0.5)
            self.restart_merger(topic, from_checkpoint=restore)

    def _note(self, text: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.step_count:5d} {text}")


def _layered(send: Send) -> LayerSend:
    if not isinstance(send, LayerSend):
        raise TypeError(f"{send.messageID}: a send without a layer; use assign_layers first")
    return send
