"""The merger: one topic's layer streams merged into its one delivery stream, with no I/O.

Theory of operation
-------------------
A partitioned AtomicKafka topic has one partition per *layer*: partitions with the same
number across topics form a layer, and each layer runs the ordering protocol on its own
(its own engines, its own Lamport clocks). At a topic ``T`` every layer yields the
messages it decided in increasing ``(timeStamp, messageID)`` order. ``T``'s merger
merges those streams into ``T``'s one delivery stream (docs/DESIGN.md §8; thesis 3.1.3,
Alg. 5/6, which the thesis never implemented).

The shell feeds :meth:`Merger.handle_batch` two kinds of records, each layer's in that
layer's order: :class:`LayerDelivery` (layer ``l`` decided a message at final timestamp
``t``) and :class:`LayerWatermark` (layer ``l`` promises that every later delivery has
a timestamp ``>= W``; a delivery at ``t`` makes the same promise for ``t``). It gets
back :class:`Release` records, to write to the topic's delivery stream in the order
given, and :class:`TickRequest` records, to write into a layer's input log. Records the
merger refuses are in :attr:`Merger.rejected` after the batch. The merger never touches
Kafka, a clock or a random source: its outputs are a function of its inputs.

Rules (the tests cite them by number):

1. Release order is the key ``(timeStamp, layer, messageID)`` (:class:`MergeKey`),
   strictly increasing. A message belongs to exactly one layer and has the same final
   timestamp at every destination, so every topic's merger orders the messages it
   shares with another topic the same way.
2. Release condition. The smallest buffered item ``(t, l, id)`` is released only when
   every other layer ``l'`` with an empty buffer has promised nothing smaller:
   ``W_l' > t``, or ``W_l' == t and l' > l``; that is ``(W_l', l') > (t, l)``.
   Watermarks start at 0 (timestamps are non-negative). Layers with a buffered item are
   past it already (the global minimum was chosen and each layer's stream is
   increasing), and layer ``l``'s own later items are larger for the same reason. So
   each layer has one *frontier* entry ``(timeStamp, layer)`` in a sorted list: its
   oldest buffered item's timestamp, or its watermark when its buffer is empty. The
   head is released exactly when the smallest entry belongs to a layer with a buffered
   item; layers are distinct, so entries never tie.
3. Idle layers. While the head ``(t, l, id)`` is blocked, every blocking layer ``l'``
   (empty buffer, ``(W_l', l') < (t, l)``) is sent ``TickRequest(l', T)`` with ``T``
   the highest buffered timestamp: "move your clock to at least ``T``". The shell
   writes it into that layer's input log; the layer's engine moves its clock and its
   watermark rises past ``T``: an idle layer stops blocking, deterministically, through
   the log, and one round trip clears everything buffered so far rather than one head
   (a tick only moves a clock, so any timestamp is safe). A tick is never requested at
   or below one already requested for that layer, so ticks do not flood -- unless the
   shell, seeing the head still blocked after a while, calls :meth:`Merger.retry_ticks`
   (a tick refused or lost on its way is asked for again).
4. Duplicates and violations. A delivery of a ``(layer, messageID)`` already taken in,
   at the same timestamp, and a watermark at or below the layer's, change nothing
   (Kafka redelivers; the shell replays the layers after a restart). A delivery that
   breaks its layer's order or promises (:class:`RejectReason`) is a protocol
   violation: it is not applied, it is counted, and it is listed in
   :attr:`Merger.rejected` for the shell to dead-letter. The merger never raises on a
   record.
5. Determinism. A record's fate (taken in, duplicate, rejected) is decided against its
   own layer's earlier records only, and rule 2 releases the accepted items in sorted
   order. So the Releases depend only on the per-layer streams, not on how they were
   interleaved or batched; only the timing of TickRequests may differ.
6. Recovery. After a restart the shell replays the layer streams from their beginning
   into a fresh merger, having told it with :meth:`Merger.resume_after` the key of the
   last Delivery already written. By rules 1, 2 and 5 the earlier run released exactly
   the accepted items up to that key, so those are taken in (they move their layer's
   watermark) but not released again: nothing is lost or repeated.
   :meth:`Merger.snapshot` and :meth:`Merger.restore` save and rebuild the whole state.

Costs: a layer's buffer is a deque (its items arrive in order); the frontier is a
:class:`sortedcontainers.SortedList` of one entry per layer, so taking in or releasing
an item is O(log L) for L layers. Memory is bounded: a layer's stream is strictly
increasing, so an item at or below the layer's last one is a repeat or goes backwards;
to tell the two apart the merger remembers the last :data:`RECENT` ids of each layer
(an older repeat is counted as going backwards, and set aside: nothing is lost).
"""

from __future__ import annotations

import builtins
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, fields
from enum import StrEnum
from operator import attrgetter
from typing import Any, Final, NamedTuple, TypeGuard, cast

from mypy_extensions import mypyc_attr
from sortedcontainers import SortedList

from atomickafka.core.engine_state import SnapshotError
from atomickafka.errors import ConfigError

__all__ = [
    "LayerDelivery",
    "LayerRecord",
    "LayerWatermark",
    "MergeKey",
    "Merger",
    "MergerOutput",
    "MergerStats",
    "RejectReason",
    "Rejected",
    "Release",
    "TickRequest",
]

SNAPSHOT_VERSION = 2
#: Accepted ids remembered per layer to tell a repeat from an item going backwards.
RECENT = 10_000


class MergeKey(NamedTuple):
    """A message's place in a topic's merged order (rule 1)."""

    timeStamp: int
    layer: int
    messageID: str


# The records the merger takes in stay Python classes when compiled: it checks their
# fields' types itself and sets aside what is wrong (rule 4), where a compiled class
# would refuse them at construction instead.
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class LayerDelivery:
    """Layer ``layer`` decided ``messageID`` at final timestamp ``timeStamp``.

    ``payload`` is opaque to the merger and passed through to the :class:`Release`.
    """

    layer: int
    timeStamp: int
    messageID: str
    payload: builtins.object = None  # builtins.: mypyc's dataclasses miss a bare `object`

    @property
    def key(self) -> MergeKey:
        """The item's place in the merged order."""
        return MergeKey(self.timeStamp, self.layer, self.messageID)


@mypyc_attr(native_class=False)  # (see LayerDelivery)
@dataclass(frozen=True, slots=True)
class LayerWatermark:
    """Layer ``layer`` promises: every later delivery of it has a timestamp ``>= timeStamp``."""

    layer: int
    timeStamp: int


@dataclass(frozen=True, slots=True)
class Release:
    """Deliver this message now: the next record of the topic's delivery stream."""

    layer: int
    timeStamp: int
    messageID: str
    payload: builtins.object  # (see LayerDelivery)

    @property
    def key(self) -> MergeKey:
        """The message's place in the merged order."""
        return MergeKey(self.timeStamp, self.layer, self.messageID)


@dataclass(frozen=True, slots=True)
class TickRequest:
    """Move layer ``layer``'s clock to at least ``timeStamp`` (rule 3).

    The shell writes a tick record into that layer's input log.
    """

    layer: int
    timeStamp: int


class RejectReason(StrEnum):
    """Why a record was refused (rule 4)."""

    MALFORMED = "malformed"  # not a layer record, or a field of the wrong type
    UNKNOWN_LAYER = "unknown_layer"  # layer outside 0 .. layers-1
    CONFLICTING_TIMESTAMP = "conflicting_timestamp"  # a seen (layer, id) at another timestamp
    BACKWARDS = "backwards"  # at or below the layer's last delivery, and not a replay of one
    BELOW_WATERMARK = "below_watermark"  # below a watermark the layer promised


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record the merger refused, and why."""

    record: builtins.object  # (see LayerDelivery)
    reason: RejectReason


@dataclass(slots=True)
class MergerStats:
    """Counters since the merger started (or since the snapshot it was restored from)."""

    records_in: int = 0
    releases: int = 0
    duplicates: int = 0  # replayed deliveries and stale watermarks
    rejected: int = 0
    suppressed: int = 0  # items at or below the resume key, not released again (rule 6)
    ticks: int = 0


LayerRecord = LayerDelivery | LayerWatermark
MergerOutput = Release | TickRequest


#: A layer record's fields as they are, whatever their type (a compiled read of a field
#: declared ``int`` would check it, and raise where rule 4 sets the record aside).
_DELIVERY_FIELDS: Final = attrgetter("layer", "timeStamp", "messageID")
_WATERMARK_FIELDS: Final = attrgetter("layer", "timeStamp")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class Merger:
    """The merger of topic ``topic``'s ``layers`` layer streams.

    >>> m = Merger("T1", layers=2)
    >>> m.handle_batch([LayerDelivery(1, 3, "b"), LayerDelivery(0, 3, "a")])
    [Release(layer=0, timeStamp=3, messageID='a', payload=None), TickRequest(layer=0, timeStamp=3)]
    >>> m.blocked_by()
    (0,)
    >>> [r.messageID for r in m.handle_batch([LayerWatermark(0, 4)])]
    ['b']
    """

    def __init__(self, topic: str, layers: int) -> None:
        if not _is_int(layers) or layers < 1:
            raise ConfigError(f"a merger needs at least one layer, not {layers!r}")
        self.topic = topic
        self.layers = layers
        self.stats = MergerStats()
        self._buffers: list[deque[LayerDelivery]] = [deque() for _ in range(layers)]
        self._buffered = 0
        self._watermarks = [0] * layers
        self._last: list[tuple[int, str] | None] = [None] * layers  # last accepted item
        self._seen: list[OrderedDict[str, int]] = [OrderedDict() for _ in range(layers)]
        self._ticked = [-1] * layers  # highest tick requested (rule 3)
        self._fronts = [(0, layer) for layer in range(layers)]  # each layer's entry
        self._frontier: SortedList = SortedList(self._fronts)
        self._last_released: MergeKey | None = None
        self._resume: MergeKey | None = None
        self._rejected: list[Rejected] = []

    # ------------------------------------------------------------------ public API

    def handle_batch(self, records: Iterable[object]) -> list[MergerOutput]:
        """Take in a batch of layer records (:data:`LayerRecord`); return the Releases,
        then the TickRequests.

        Records refused in this batch (anything else among them too) are in
        :attr:`rejected` afterwards.
        """
        self._rejected = []
        for record in records:
            self.stats.records_in += 1
            if isinstance(record, LayerDelivery):
                self._on_delivery(record)
            elif isinstance(record, LayerWatermark):
                self._on_watermark(record)
            else:
                self._reject(record, RejectReason.MALFORMED)
        out: list[MergerOutput] = []
        out.extend(self._release_ready())
        out.extend(self._request_ticks())
        return out

    def retry_ticks(self) -> list[TickRequest]:
        """Rule 3, again: the head is still blocked, so ask every blocking layer for a
        tick once more (the last one may have been refused or lost). The shell calls
        this when the head has stayed blocked for a while."""
        for layer in self.blocked_by():
            self._ticked[layer] = -1
        return self._request_ticks()

    @property
    def rejected(self) -> tuple[Rejected, ...]:
        """The records the last :meth:`handle_batch` refused (rule 4), in input order."""
        return tuple(self._rejected)

    def resume_after(self, key: MergeKey | tuple[int, int, str]) -> None:
        """Rule 6: items at or below ``key`` were released before a restart; never again.

        Call it on a fresh merger before replaying the layer streams from their
        beginning, with the key of the last Delivery already written to the topic.
        """
        ts, layer, mid = cast(tuple[object, object, object], key)  # checked here
        if not (_is_int(ts) and _is_int(layer) and isinstance(mid, str)):
            raise ValueError(f"not a (timeStamp, layer, messageID) key: {key!r}")
        key = MergeKey(ts, layer, mid)
        if self._resume is None or key > self._resume:
            self._resume = key
        if self._last_released is None or key > self._last_released:
            self._last_released = key
        for index, buffer in enumerate(self._buffers):
            if buffer and buffer[0].key <= key:
                while buffer and buffer[0].key <= key:
                    buffer.popleft()
                    self._buffered -= 1
                    self.stats.suppressed += 1
                self._refront(index)

    # ------------------------------------------------------------------ introspection

    @property
    def pending_count(self) -> int:
        """Items taken in and not yet released."""
        return self._buffered

    @property
    def watermarks(self) -> tuple[int, ...]:
        """Each layer's watermark: no later delivery of it has a smaller timestamp."""
        return tuple(self._watermarks)

    def watermark(self, layer: int) -> int:
        """Layer ``layer``'s watermark."""
        return self._watermarks[layer]

    @property
    def last_released(self) -> MergeKey | None:
        """The key of the last Release (or of the resume point), ``None`` before any."""
        return self._last_released

    @property
    def head(self) -> MergeKey | None:
        """The key of the next item to release, ``None`` when nothing is buffered."""
        item, _ = self._head_and_blockers()
        return None if item is None else item.key

    def buffered(self) -> list[LayerDelivery]:
        """Every item waiting to be released, layer by layer (for tests and status)."""
        return [item for buffer in self._buffers for item in buffer]

    def blocked_by(self) -> tuple[int, ...]:
        """The layers the head waits for (rule 2), in merged order; empty when it can go."""
        return self._head_and_blockers()[1]

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data, JSON-serialisable if the payloads are."""
        return {
            "version": SNAPSHOT_VERSION,
            "topic": self.topic,
            "layers": self.layers,
            "watermarks": list(self._watermarks),
            "ticked": list(self._ticked),
            "last": [None if last is None else list(last) for last in self._last],
            "seen": [list(seen.items()) for seen in self._seen],
            "buffers": [
                [[item.timeStamp, item.messageID, item.payload] for item in buffer]
                for buffer in self._buffers
            ],
            "last_released": _key_data(self._last_released),
            "resume": _key_data(self._resume),
            "stats": {f.name: getattr(self.stats, f.name) for f in fields(MergerStats)},
        }

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> Merger:
        """Rebuild a merger from :meth:`snapshot` output."""
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise SnapshotError(f"unsupported merger snapshot version {snapshot.get('version')!r}")
        merger = cls(str(snapshot["topic"]), int(snapshot["layers"]))
        merger._watermarks = [int(w) for w in snapshot["watermarks"]]
        merger._ticked = [int(t) for t in snapshot["ticked"]]
        merger._last = [
            None if last is None else (int(last[0]), str(last[1])) for last in snapshot["last"]
        ]
        merger._seen = [OrderedDict((str(k), int(v)) for k, v in seen) for seen in snapshot["seen"]]
        for layer, items in enumerate(snapshot["buffers"]):
            merger._buffers[layer].extend(
                LayerDelivery(layer, int(ts), str(mid), payload) for ts, mid, payload in items
            )
            merger._buffered += len(items)
            merger._refront(layer)
        merger._last_released = _key_from(snapshot["last_released"])
        merger._resume = _key_from(snapshot["resume"])
        merger.stats = MergerStats(**snapshot["stats"])
        return merger

    # ------------------------------------------------------------------ records

    def _on_delivery(self, item: LayerDelivery) -> None:
        layer, ts, mid = _DELIVERY_FIELDS(item)  # of any type (rule 4): checked here
        if not (_is_int(layer) and _is_int(ts) and isinstance(mid, str)):
            self._reject(item, RejectReason.MALFORMED)
            return
        if not 0 <= layer < self.layers:
            self._reject(item, RejectReason.UNKNOWN_LAYER)
            return
        seen = self._seen[layer]
        earlier = seen.get(mid)
        if earlier is not None:
            if earlier == ts:
                self.stats.duplicates += 1
            else:
                self._reject(item, RejectReason.CONFLICTING_TIMESTAMP)
            return
        last = self._last[layer]
        if last is not None and (ts, mid) <= last:
            self._reject(item, RejectReason.BACKWARDS)
            return
        if ts < self._watermarks[layer]:
            self._reject(item, RejectReason.BELOW_WATERMARK)
            return
        seen[mid] = ts
        if len(seen) > RECENT:
            seen.popitem(last=False)
        self._last[layer] = (ts, mid)
        self._watermarks[layer] = ts  # a delivery at ts promises ts (rule 2)
        buffer = self._buffers[layer]
        if self._resume is not None and item.key <= self._resume:
            self.stats.suppressed += 1  # released before the restart (rule 6)
        else:
            buffer.append(item)
            self._buffered += 1
        if len(buffer) <= 1:  # the frontier moves only when this item heads the buffer
            self._refront(layer)

    def _on_watermark(self, mark: LayerWatermark) -> None:
        layer, ts = _WATERMARK_FIELDS(mark)  # (as above)
        if not (_is_int(layer) and _is_int(ts)):
            self._reject(mark, RejectReason.MALFORMED)
            return
        if not 0 <= layer < self.layers:
            self._reject(mark, RejectReason.UNKNOWN_LAYER)
            return
        if ts <= self._watermarks[layer]:
            self.stats.duplicates += 1  # stale or replayed: promises only grow
            return
        self._watermarks[layer] = ts
        if not self._buffers[layer]:
            self._refront(layer)

    def _reject(self, record: object, reason: RejectReason) -> None:
        self.stats.rejected += 1
        self._rejected.append(Rejected(record, reason))

    # ------------------------------------------------------------------ release

    def _release_ready(self) -> list[Release]:
        """Rule 2: release while the smallest frontier entry heads a non-empty buffer."""
        out: list[Release] = []
        frontier = self._frontier
        buffers = self._buffers
        while self._buffered:
            _, layer = frontier[0]
            buffer = buffers[layer]
            if not buffer:
                break
            item = buffer.popleft()
            self._buffered -= 1
            self._refront(layer)
            self._last_released = item.key
            out.append(Release(item.layer, item.timeStamp, item.messageID, item.payload))
        self.stats.releases += len(out)
        return out

    def _request_ticks(self) -> list[TickRequest]:
        """Rule 3: one tick per blocking layer, to the highest buffered timestamp, above
        any requested before."""
        item, blockers = self._head_and_blockers()
        if item is None:
            return []
        ts = max(buffer[-1].timeStamp for buffer in self._buffers if buffer)
        out: list[TickRequest] = []
        for layer in blockers:
            if ts > self._ticked[layer]:
                self._ticked[layer] = ts
                out.append(TickRequest(layer, ts))
        self.stats.ticks += len(out)
        return out

    def _head_and_blockers(self) -> tuple[LayerDelivery | None, tuple[int, ...]]:
        """The smallest buffered item and the empty layers whose entries sort before it."""
        if not self._buffered:
            return None, ()
        blockers: list[int] = []
        for _, layer in self._frontier:
            buffer = self._buffers[layer]
            if buffer:
                return buffer[0], tuple(blockers)
            blockers.append(layer)
        raise AssertionError("items are buffered but no layer holds one")  # pragma: no cover

    def _refront(self, layer: int) -> None:
        """Put layer ``layer``'s frontier entry where its buffer and watermark say."""
        buffer = self._buffers[layer]
        entry = (buffer[0].timeStamp if buffer else self._watermarks[layer], layer)
        old = self._fronts[layer]
        if entry != old:
            self._frontier.remove(old)
            self._frontier.add(entry)
            self._fronts[layer] = entry


def _key_data(key: MergeKey | None) -> list[Any] | None:
    return None if key is None else list(key)


def _key_from(data: list[Any] | None) -> MergeKey | None:
    return None if data is None else MergeKey(int(data[0]), int(data[1]), str(data[2]))
