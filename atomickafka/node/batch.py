"""The node's batch layer: records in, what to write and commit out (docs/DESIGN.md §6,
§7.1).

Like etcd-io/raft's ``RawNode``, this layer owns every decision between the node's
logs and the broker and performs none of the I/O: the shell (:mod:`atomickafka.node.runtime`)
consumes records, hands them to :class:`NodeBatch`, and gets back a :class:`Ready` --
the records to write, in order (control bundles per destination, deliveries, the
layer's watermark, dead letters with their reasons, apply markers and ticks, a snapshot
when one is due), and the offsets that become committed with them. In exactly-once
mode the shell writes all of it and the offsets in Kafka transactions; in at-least-once
mode it writes it with a gapless idempotent producer and commits once the broker has
acknowledged it (:mod:`atomickafka.node.offsets`). The simulators drive this same layer
and crash a node the way production recovers: :meth:`NodeBatch.recover` from the
newest snapshot, then a replay.

The input order (§7.1). A node applies one log in order, its *committed log*, whose
offsets it commits: with a control log (the default) that is ``atomickafka-ctl.T``,
where its peers' proposals, its own ticks, members records and *apply markers* go, and
client records stay in the input log ``atomickafka-in.T`` until the node's marker
"apply in.T [a, b)" comes back through the control log; without one (``--no-control-log``)
the committed log is the input log itself, and no marker is ever written. It is one
path: :meth:`NodeBatch.step` takes records of the committed log (applying each where it
stands, each marker's range in its place), :meth:`NodeBatch.step_input` records of a
separate input log (buffering them and marking what it read). What differs between the
two is what :class:`~atomickafka.node.batch_types.NodeSpec` says about the logs, read
once, in :class:`Ordering`.

A marker applies only when ``a`` is the next unapplied input offset, so a zombie's, a
restart's or a second one for the same range applies nothing, or exactly what the first
did, and every instance and every replay applies the same records in the same place,
whatever it read of the input log when. A marker names what was written before it: one
whose range holds a record appended more than ``MARKER_LEAD_MS`` after it is not the
node's (a stray's, a forgery) and is set aside; a node whose committed log waits at such
a marker ticks its input log, so a forgery stops it for about that long. Input-log
records carry their arrival time (``Message.arrived``): a copy is judged late by it,
and the engine forgets by the earlier of the two logs' times; an idle input log is
ticked now and then so that its time moves on. A relay only comes from the input log
and a peer's control message only from the control log
(:func:`~atomickafka.core.placement.misplaced`).

Numbering (§4.12): a control output's ``seq`` is (offset in the committed log of the
record or marker that caused it, index). With a control log the ``k``-th input-log
record a marker applies has the origin ``(offset << ORIGIN_SHIFT) | k`` and its outputs
the index ``k << 24 | i`` (``Engine.origin_shift``); with one log the origin is the
record's offset.

Recovery (§6). A node starts from the newest readable snapshot (or the empty state)
covering committed-log offset ``S`` (and, with a control log, the next unapplied input
offset in its state, ``ordering.applied``), and from the committed offset ``C >= S``.
Records from ``S`` to ``C`` are replayed: they rebuild the state, and their outputs --
written before the restart -- are dropped. From ``C`` on, outputs are written.

Signed records (§4.14). With a :class:`~atomickafka.core.signing.Signer`, an input
record without a valid signature is set aside with the reason, and every record
written is signed.

No I/O and no clock: the caller passes the wall time that paces snapshots, markers and
the node's own ticks (§4.11); what is decided is a pure function of the committed log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from mypy_extensions import mypyc_attr

from atomickafka.core.compact import control_encoders
from atomickafka.core.engine import Engine, Output, Step
from atomickafka.core.marker import (
    MARKER_LEAD_MS,
    MAX_MARKER_RANGE,
    Marker,
    MarkerError,
    decode_marker,
    encode_marker,
)
from atomickafka.core.placement import misplaced
from atomickafka.core.protocols import CARRIER
from atomickafka.core.raw import decode_any, encode_raw_delivery
from atomickafka.core.reader import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_ERROR_HEADER,
    DEAD_LETTER_MESSAGES_HEADER,
    DEAD_LETTER_OFFSET_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEAD_LETTER_TRUNCATED_HEADER,
    TYPE_HEADER,
    KafkaRecord,
    header_value,
)
from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    encode_delivery,
    encode_members,
    encode_watermark,
    pack_bundles,
    with_arrived,
)
from atomickafka.node.batch_support import (
    DeferredRecords,
    claimed_sender,
    log_time,
    original_headers,
    settings_of,
    take_settings,
)
from atomickafka.node.batch_types import (
    HOW_TO_RECONFIGURE,
    JSON,
    RAW,
    NodeSpec,
    NodeStartError,
    OutKind,
    OutRecord,
    Place,
    Ready,
    SettingsChangedError,
    SnapshotTaker,
    signed,
)
from atomickafka.node.snapshots import LoadedSnapshot, SnapshotSchedule

__all__ = [
    "JSON",
    "RAW",
    "NodeBatch",
    "NodeSpec",
    "NodeStartError",
    "Ordering",
    "OutKind",
    "OutRecord",
    "Place",
    "Ready",
    "SettingsChangedError",
    "signed",
]

#: How much of a set-aside record a dead letter keeps (all of any record a producer
#: with the default limits can write).
DEAD_LETTER_KEEP: Final = 990_000
#: The input records of held or waiting messages are kept (up to this many bytes, the
#: oldest dropped first) so that a later refusal sets the record aside verbatim.
DEFERRED_KEEP_BYTES: Final = 64 * 1024 * 1024
_DELIVERY_TYPE: Final = b"DeliveryMessage"
#: With a control log, a record's origin is ``(committed-log offset << ORIGIN_SHIFT) |
#: k``, ``k`` its place in its marker's range (``Engine.origin_shift``): a marker names
#: fewer offsets than this.
ORIGIN_SHIFT: Final = 20
assert 1 << ORIGIN_SHIFT >= MAX_MARKER_RANGE
#: While its input log's time lags its control log's by more than this, a node whose
#: input log is idle ticks it (§7.1, "A copy is timed by its arrival"): settled ids are
#: forgotten by the earlier of the two times, and the tick moves the input log's on.
INPUT_TICK_MS: Final = 5_000
#: While the control log waits at a marker for input offsets not read, ticks of the
#: input log (once the marker is older than ``MARKER_LEAD_MS``) are this far apart.
WAITING_TICK_MS: Final = 1_000


@dataclass(frozen=True, slots=True)
class Ordering:
    """Where a node's input order comes from (§7.1), read from its spec in one place:
    the *committed log* it applies in order and commits the offsets of, and the input
    log clients write to. With a control log they are two logs, client records apply
    where the node's markers place them, and what the node reads from either log is
    checked against where its writer puts it; with one log the committed log is the
    input log, no marker is written and each record applies where it stands."""

    committed_topic: str
    input_topic: str

    @classmethod
    def of(cls, spec: NodeSpec) -> Ordering:
        """The node's logs, as its spec names them (``control_topic``: the one value)."""
        return cls(spec.control_topic or spec.input_topic, spec.input_topic)

    @property
    def marked(self) -> bool:
        """Client records apply where the node's markers place them (a control log)."""
        return self.committed_topic != self.input_topic

    @property
    def origin_shift(self) -> int:
        """Bits of an origin that number the records one marker applies (§4.12)."""
        return ORIGIN_SHIFT if self.marked else 0


# the simulators' mutation tests subclass it (a compiled class's methods cannot be patched)
@mypyc_attr(allow_interpreted_subclasses=True)
class NodeBatch(SnapshotTaker):
    """One node's engine with the bookkeeping between its logs and the broker (see the
    module): :meth:`step` takes records of the committed log, :meth:`step_input`
    records of a separate input log, :meth:`idle` a round with nothing read."""

    spec: NodeSpec

    def __init__(
        self,
        spec: NodeSpec,
        engine: Engine,
        *,
        position: int = 0,
        replay_until: int = 0,
        snapshot_seq: int = 0,
        applied: int = 0,
    ) -> None:
        self.spec = spec
        self.engine = engine
        self.ordering = Ordering.of(spec)
        engine.origin_shift = self.ordering.origin_shift
        engine.lean_notifies = spec.notify_values == CARRIER
        if self.ordering.marked and engine.state.input_ms is None:
            engine.state.input_ms = 0  # a fresh engine, or an older snapshot's (§7.1)
        #: The next committed-log offset to process.
        self.position = position
        self._set_up_reading(applied)
        #: Outputs of records below this offset were written before a restart.
        self.replay_until = replay_until
        self.snapshot_seq = snapshot_seq
        self._set_up_counters()
        self._schedule = SnapshotSchedule(spec.snapshot_every_records, spec.snapshot_every_s)
        self._encode_bundle, self._encode_tick = control_encoders(spec.control_format)
        self._last_tick_s: float | None = None
        self._watermark_sent = -1
        # what the recovered state already knows needs no new record (§4.9.5)
        known = engine.members
        self._members_written: set[str] | None = None if known is None else set(known)
        self._deferred = DeferredRecords(DEFERRED_KEEP_BYTES)
        self._snapshot_due = False
        #: A node that writes again the outputs of records processed before (its last
        #: process could not: it held another secret) skips the deliveries at or below
        #: the last one its topic holds: those were written (§6.6).
        self.delivered_up_to: tuple[int, int, str] | None = None

    def _set_up_reading(self, applied: int) -> None:
        """Where the node reads its logs and what it holds of them: the input log's
        offsets, the records read and not applied, its markers, the step budget."""
        #: With a control log: the next unapplied input-log offset, and the next one to
        #: read (everything below it was read).
        self.applied = applied
        self.read_until = applied
        self._buffer: deque[KafkaRecord] = deque()  # input records read, not applied
        self._queue: deque[KafkaRecord] = deque()  # committed-log records to apply
        self._outstanding: deque[tuple[int, int]] = deque()  # markers written, not read back
        #: False while a standby follows (§6.4): it writes nothing, not even markers.
        self.writing = True
        self.markers_applied = 0
        self.markers_void = 0  # own markers that applied nothing (a != applied)
        self.markers_refused = 0
        self.input_ticks = 0
        #: At most about this many records (committed-log records and the input records
        #: their markers apply) per step; the rest stay queued for the next step (``None``:
        #: no bound). Where a step ends never changes what the node decides (rule 8): a
        #: shell bounds its steps so that a backlog of markers, each applying a whole
        #: read batch, is not applied in one step that writes nothing for seconds.
        self.step_budget: int | None = None
        #: The queue's head when it is a marker waiting for the input log.
        self._blocked: KafkaRecord | None = None
        #: When (wall time) the node last ticked its input log, or began to write.
        self._input_tick_ms: int | None = None

    def _set_up_counters(self) -> None:
        """The counts of what the node set aside, and why."""
        self.dead_letters = 0
        self.unsigned = 0
        #: Records set aside for being in a log their writer never writes them to (a
        #: node with a control log, §7.1).
        self.misplaced = 0
        #: Records set aside for their signature, by whom they claim to come from (a
        #: member's topic, or ``client <id>``): a member signing with a secret this node
        #: does not hold is named by ``status``, ``doctor``, the metrics and the log.
        self.bad_signatures: dict[str, int] = {}
        #: Records of a newer format than this node reads, by whom they come from: a
        #: member of a newer release writing a format this one cannot read (upgrade it).
        self.newer_formats: dict[str, int] = {}

    # ------------------------------------------------------------------ starting

    @classmethod
    def fresh_engine(cls, spec: NodeSpec, engine_class: type[Engine] = Engine) -> Engine:
        """The engine of a node that starts from the beginning of its log
        (``engine_class``: an :class:`Engine` subclass, for the mutation tests)."""
        return engine_class(
            spec.topic,
            spec.node_id,
            spec.algorithm,
            partition=spec.layer,
            max_value_bytes=spec.max_value_bytes,
            max_record_bytes=spec.max_record_bytes,
            window_ms=spec.window_ms,
            # no destination is taken on trust: a message naming another topic waits for
            # the node's first members record, which the shell writes at once (§4.9.5)
            members=frozenset(),
        )

    @classmethod
    def recover(
        cls,
        spec: NodeSpec,
        snapshot: LoadedSnapshot | None,
        committed: int,
        *,
        engine_class: type[Engine] = Engine,
    ) -> NodeBatch:
        """A node restarting from ``snapshot`` (or from nothing) with ``committed`` the
        committed offset of its committed log: it replays from the snapshot's offset,
        dropping outputs below ``committed`` (with a control log, reading the input log
        from the snapshot's ``ordering.applied``). ``engine_class`` is what the engine is
        rebuilt as (the simulators' mutation tests keep their mutant across a crash)."""
        reconfigured = False
        applied = 0
        if snapshot is None or snapshot.state is None:
            start = 0
            engine = cls.fresh_engine(spec, engine_class)
            seq = snapshot.seq if snapshot is not None else 0
        else:
            start = snapshot.offsets.get(spec.input_partition, 0)
            engine = engine_class.restore(snapshot.state["engine"])
            seq = snapshot.seq
            reconfigured = take_settings(spec, snapshot, engine, committed)
            applied = int((snapshot.state.get("ordering") or {}).get("applied", 0))
        batch = cls(
            spec,
            engine,
            position=start,
            replay_until=max(committed, start),
            snapshot_seq=seq,
            applied=applied,
        )
        batch._snapshot_due = reconfigured  # the new settings' first state, at once
        return batch

    @property
    def replaying(self) -> bool:
        """Still re-reading records whose outputs were written before a restart."""
        return self.position < self.replay_until

    @property
    def buffered(self) -> int:
        """Input-log records read and not yet applied (a shell stops reading the input
        log past a bound)."""
        return len(self._buffer)

    @property
    def unmarked(self) -> int:
        """Input-log records read that no marker this process wrote names (a standby's
        buffer when it takes over, until its next step, even an idle one, marks it)."""
        start = max(self.applied, self._outstanding[-1][1] if self._outstanding else 0)
        return max(0, self.read_until - start)

    @property
    def oldest_unapplied_ms(self) -> int | None:
        """The log time of the oldest record of either log read and not yet applied:
        how long client records and peers' proposals have waited for the node (a node
        that keeps up with its input log can still be seconds behind on its control
        log, and its peers' queues wait for it there)."""
        heads = (log_time(waiting[0]) for waiting in (self._buffer, self._queue) if waiting)
        return min((stamp for stamp in heads if stamp is not None), default=None)

    @property
    def control_fetch_from(self) -> int:
        """The next committed-log offset to read (past the records queued, not applied)."""
        return (self._queue[-1].offset() or 0) + 1 if self._queue else self.position

    def fetches(self) -> list[tuple[str, int]]:
        """The logs the node reads and from where: its committed log past what it applied
        or queued, and a separate input log past what it read (a control log's node)."""
        plan = [(self.ordering.committed_topic, self.control_fetch_from)]
        if self.ordering.marked:
            plan.append((self.ordering.input_topic, self.read_until))
        return plan

    @property
    def waiting(self) -> bool:
        """The next control record is a marker naming input-log offsets not read yet."""
        return self._blocked is not None and bool(self._queue)

    @property
    def queued(self) -> int:
        """Control records read and not yet applied (waiting for the input log, or past
        a step's budget: :meth:`step` with no records goes on with them)."""
        return len(self._queue)

    # ------------------------------------------------------------------ steps

    def step_input(
        self, records: Sequence[KafkaRecord], *, wall_s: float, until: int | None = None
    ) -> Ready:
        """Records read from a separate input log (a control log's node), in offset order
        (``until``: the read position after them, when offsets were skipped -- aborted
        transactions' records): buffer them, apply what markers wait for, and write a
        marker for what is unmarked."""
        for record in records:
            offset = record.offset() or 0
            if offset >= self.read_until:
                self._buffer.append(record)
                self.read_until = offset + 1
        if until is not None and until > self.read_until:
            self.read_until = until
        ready = self._pump(wall_s)
        self._mark(ready, wall_s)
        return ready

    def step(self, records: Sequence[KafkaRecord], *, wall_s: float) -> Ready:
        """Records of the committed log (with one log, the input log), in offset order
        from :attr:`control_fetch_from`: applied in order, each marker's range of the
        input log in its place, as far as what was read of the input log allows."""
        if not records and not self._queue:
            return self.idle(wall_s=wall_s)
        self._queue.extend(records)
        ready = self._pump(wall_s)
        self._mark(ready, wall_s)
        return ready

    def idle(self, *, wall_s: float) -> Ready:
        """Nothing was read: go on with the records a step's budget left queued, if
        any; else tick the node's log while messages are held (§4.11), take a snapshot
        if one is due, and mark or tick the input log when due."""
        if self._queue and not self.waiting:
            return self.step((), wall_s=wall_s)
        ready = Ready()
        if not self.replaying:
            self._maybe_tick(ready, wall_s)
            self._maybe_snapshot(ready, wall_s)
        self._mark(ready, wall_s)
        return ready

    def _maybe_snapshot(self, ready: Ready, wall_s: float) -> None:
        if self._snapshot_due:
            self._snapshot_due = False
            self._snapshot(ready, wall_s)
            return
        super()._maybe_snapshot(ready, wall_s)

    def knows_members(self, topics: Iterable[str]) -> bool:
        """True when this node's last members record named every one of ``topics``
        (:meth:`members` would write nothing new)."""
        written = self._members_written
        return written is not None and (set(topics) | {self.spec.topic}) <= written

    def members(self, topics: Iterable[str], *, again: bool = False) -> Ready:
        """The topics that have a node, as the shell learnt them from the statuses: when
        that adds to what this node last wrote, or ``again`` (messages wait for members:
        only a members record refuses them), a MembersMessage into its own log (§4.9.5;
        it takes effect, deterministically, when the node reads it back)."""
        known = set(topics) | {self.spec.topic}
        ready = Ready()
        grown = self._members_written is None or not known <= self._members_written
        if not grown and not again:
            return ready
        self._members_written = known | (self._members_written or set())
        spec = self.spec
        value = encode_members(spec.node_id, self._members_written, self.engine.algorithm.value)
        ready.records.append(self._own_log_record(value))
        return ready

    def snapshot_now(self, *, wall_s: float) -> Ready:
        """A snapshot of the state at :attr:`position`, whether due or not."""
        ready = Ready()
        self._snapshot(ready, wall_s)
        return ready

    # ------------------------------------------------------------------ the batch

    def _pump(self, wall_s: float) -> Ready:
        """Apply the queued control records in order, as far as the input log read
        allows; outputs of records below :attr:`replay_until` are dropped."""
        ready = Ready()
        run: list[KafkaRecord] = []
        placed: list[Place] = []
        run_replayed = True  # whether ``run``'s outputs are dropped
        live: list[OutRecord] = []
        taken = 0
        queue = self._queue
        budget = self.step_budget
        applied = 0
        self._blocked = None
        while queue:
            if budget is not None and applied >= budget:
                break  # the rest in the next step
            record = queue[0]
            offset = record.offset() or 0
            if offset < self.position:  # read again
                queue.popleft()
                continue
            replay = offset < self.replay_until
            if run and replay != run_replayed:
                self._flush(run, placed, run_replayed, live)
            run_replayed = replay
            items, problem = self._control_record(record)
            if items is None:
                self._blocked = record
                break  # a marker waits for input-log records not read yet
            queue.popleft()
            self.position = offset + 1
            if problem is not None:  # its dead letter comes after what came before
                self._flush(run, placed, run_replayed, live)
                dead = self._signed(self._dead_letter(record.value(), problem, record))
                if not replay:
                    live.append(dead)
            applied += 1 + len(items)
            for item, place in items:
                run.append(item)
                placed.append(place)
            if replay:
                ready.replayed += 1
            else:
                taken += 1
        self._flush(run, placed, run_replayed, live)
        if taken:
            ready.records = live
            self._schedule.took(taken)
            ready.commit = self.position
            if self.ordering.marked:
                ready.commit_input = self.applied
            self._maybe_tick(ready, wall_s)
            self._maybe_snapshot(ready, wall_s)
        return ready

    def _flush(
        self,
        run: list[KafkaRecord],
        placed: list[Place],
        replayed: bool,
        live: list[OutRecord],
    ) -> None:
        """Apply ``run`` (emptied), keeping its outputs in ``live`` unless ``replayed``."""
        if not run:
            return
        out = self._apply_placed(run, placed)
        run.clear()
        placed.clear()
        if not replayed:
            live.extend(out)

    def _control_record(
        self, record: KafkaRecord
    ) -> tuple[list[tuple[KafkaRecord, Place]] | None, Refusal | None]:
        """What one committed-log record applies: itself (any record but a marker), the
        input-log records its marker names, or nothing (a marker set aside, with the
        reason, or one whose range does not start at :attr:`applied`); ``None``: wait
        for the input log. (With one log no record is a marker.)"""
        origin = (record.offset() or 0) << self.ordering.origin_shift
        at = log_time(record)
        try:
            marker = decode_marker(record.value()) if self.ordering.marked else None
        except MarkerError as exc:
            self.markers_refused += 1
            return [], refusal(Reason.INVALID_RECORD, str(exc))
        if marker is None:
            return [(record, (origin, at, None))], None
        problem = self._marker_problem(record, marker)
        if problem is not None:
            self.markers_refused += 1
            return [], problem
        if marker.start != self.applied:
            self.markers_void += 1
            self._read_back(marker.start, marker.end)
            return [], None
        problem = self._written_after(marker, at)
        if problem is not None:
            self.markers_refused += 1
            self._read_back(marker.start, marker.end)  # its own? then it marks them again
            return [], problem
        if self.read_until < marker.end:
            return None, None
        applied: list[tuple[KafkaRecord, Place]] = []
        buffer = self._buffer
        while buffer and (buffer[0].offset() or 0) < marker.end:
            record = buffer.popleft()
            arrived = log_time(record)
            place = origin | ((record.offset() or 0) - marker.start)
            applied.append((record, (place, at, at if arrived is None else arrived)))
        self.applied = marker.end
        self.markers_applied += 1
        self._read_back(marker.start, marker.end)
        return applied, None

    def _written_after(self, marker: Marker, marked_at: int | None) -> Refusal | None:
        """Why ``marker`` (appended at ``marked_at``) cannot be the node's: an input-log
        record in its range reached the log more than ``MARKER_LEAD_MS`` after it (§7.1,
        "A marker names what was written before it": the node marks what it has read,
        so every record its marker names was appended before the marker). Decided by the
        records in the range alone, whatever was read of them when: while the range is
        not all read, by the newest record read (a later one only adds to the range),
        and once it is, by all of them."""
        if marked_at is None:
            return None
        bound = marked_at + MARKER_LEAD_MS
        buffer = self._buffer
        if self.read_until < marker.end:
            newest = log_time(buffer[-1]) if buffer else None
            late = newest is not None and newest > bound
        else:
            late = False
            for record in buffer:
                if (record.offset() or 0) >= marker.end:
                    break
                stamp = log_time(record)
                if stamp is not None and stamp > bound:
                    late = True
                    break
        if not late:
            return None
        return refusal(
            Reason.STRAY,
            f"an apply marker naming input-log offsets [{marker.start}, {marker.end}), some "
            f"written more than {MARKER_LEAD_MS // 1000} s after the marker: a node marks "
            "only what it has read, so this one is a stray's or a forgery (§7.1)",
        )

    def _marker_problem(self, record: KafkaRecord, marker: Marker) -> Refusal | None:
        """Why a marker is not this node's own (only its own markers apply: anyone else's
        is a stray's or a forgery), or ``None``."""
        spec = self.spec
        signature = self._signature_problem(record)
        if signature is not None:
            self.unsigned += 1
            return signature
        if marker.sender != spec.node_id or marker.topic != spec.topic:
            return refusal(
                Reason.STRAY,
                f"an apply marker from {marker.sender} of {marker.topic}: only the node's "
                "own markers apply (§7)",
            )
        if marker.partition != spec.layer:
            return refusal(Reason.WRONG_LAYER, f"an apply marker of layer {marker.partition}")
        return None

    def _read_back(self, start: int, end: int) -> None:
        """A marker came back: it is no longer outstanding, nor is any ending at or below
        :attr:`applied` (those can apply nothing any more)."""
        outstanding = self._outstanding
        if (start, end) in outstanding:
            outstanding.remove((start, end))
        while outstanding and outstanding[0][1] <= self.applied:
            outstanding.popleft()

    def _mark(self, ready: Ready, wall_s: float) -> None:
        """Write a marker for what was read and is not yet named by a marker this
        process wrote and has not read back (none while replaying: the control log may
        hold the last process's markers further on); tick the input log when due."""
        if self.replaying or not self.writing:
            return
        if self._input_tick_ms is None:  # counted from when the node starts writing
            self._input_tick_ms = int(wall_s * 1000)
        due = self.next_input_tick_ms
        if due is not None and wall_s * 1000 >= due:
            self._tick_input(ready, wall_s)
        start = max(self.applied, self._outstanding[-1][1] if self._outstanding else 0)
        spec = self.spec
        while start < self.read_until:  # (with one log nothing is read unmarked)
            end = min(self.read_until, start + MAX_MARKER_RANGE)
            value = encode_marker(spec.node_id, spec.topic, start, end, spec.layer)
            ready.records.append(self._own_log_record(value))
            self._outstanding.append((start, end))
            start = end

    @property
    def next_input_tick_ms(self) -> int | None:
        """When (wall time, ms) the node next ticks its input log if nothing else comes
        (§7.1), or ``None``: while its control log waits at a marker for input offsets
        not read yet, once the marker is ``MARKER_LEAD_MS`` old and then every
        ``WAITING_TICK_MS`` (a marker in the node's name that no record of the node's
        stands behind is refuted by the tick, which comes after it in its range); and
        while its input log is idle and its time lags the control log's by more than
        ``INPUT_TICK_MS``, every ``INPUT_TICK_MS``."""
        last = self._input_tick_ms
        marked_at = None if self._blocked is None else log_time(self._blocked)
        if self.waiting and marked_at is not None:
            due = marked_at + MARKER_LEAD_MS
            return due if last is None else max(due, last + WAITING_TICK_MS)
        input_ms = self.engine.state.input_ms
        idle = self.read_until == self.applied and not self._outstanding
        if last is None or not idle or input_ms is None:
            return None
        if self.engine.now_ms - input_ms <= INPUT_TICK_MS:
            return None
        return last + INPUT_TICK_MS

    def _tick_input(self, ready: Ready, wall_s: float) -> None:
        """Write the node's own tick (timestamp 0: it moves nothing but the log's time)
        to its input log."""
        spec = self.spec
        value = self._encode_tick(spec.node_id, 0, spec.layer)
        tick = OutRecord(OutKind.TICK, spec.input_topic, value, spec.input_partition)
        ready.records.append(self._signed(tick))
        self._input_tick_ms = int(wall_s * 1000)
        self.input_ticks += 1

    def _apply_placed(
        self, records: Sequence[KafkaRecord], placed: Sequence[Place]
    ) -> list[OutRecord]:
        """Apply ``records``, each at its place in the node's input order (:data:`Place`)."""
        messages: list[Message] = []
        sources: list[KafkaRecord] = []
        out: list[OutRecord] = []
        for index, record in enumerate(records):
            decoded = self._decode(record, out, placed[index])
            if len(decoded) == 1:
                messages.append(decoded[0])
                sources.append(record)
            else:
                messages.extend(decoded)
                sources.extend([record] * len(decoded))
        origins = [m.origin for m in messages]
        step = self.engine.step(messages)
        logged = self.engine.logged_protocol
        if logged is not None:
            spec = self.spec
            raise SettingsChangedError(
                f"node {spec.role}: its input log was processed running protocol {logged} "
                f"(its own members record says so, before offset {self.position}), and it is "
                f"configured with {self.engine.algorithm.value}: {HOW_TO_RECONFIGURE}"
            )
        for position in step.deferred:  # kept by its origin
            self._deferred.keep(sources[position], origins[position])
        out.extend(self._refused(step, sources))
        for origin in step.released:
            self._deferred.pop(origin)  # taken up (or refused above): no longer needed
        out.extend(self._aborted(step))
        out.extend(self._outputs(step))
        if self.spec.signer is None:
            return out
        return [self._signed(r) for r in out]

    def _decode(self, record: KafkaRecord, out: list[OutRecord], place: Place) -> list[Message]:
        """The messages of one record at its place; a record that cannot be taken becomes
        a dead letter in ``out`` (with a control log, also one in the wrong log, §7.1)."""
        spec = self.spec
        if spec.shared_layout and header_value(record, TYPE_HEADER) == _DELIVERY_TYPE:
            return []  # our own output, in the shared layout
        raw = record.value()
        problem = self._signature_problem(record)
        if problem is not None:
            self.unsigned += 1
            claimed = claimed_sender(record)
            self.bad_signatures[claimed] = self.bad_signatures.get(claimed, 0) + 1
            why = Refusal(problem.code, f"{problem.text} (claims to come from {claimed})")
            out.append(self._dead_letter(raw, why, record))
            return []
        origin, applied_at, arrived = place
        try:
            messages = decode_any(
                raw, record.key(), record.headers(), log_time=applied_at, origin=origin
            )
        except MessageError as exc:
            if exc.field == "formatVersion":
                claimed = claimed_sender(record)
                self.newer_formats[claimed] = self.newer_formats.get(claimed, 0) + 1
            out.append(self._dead_letter(raw, refusal(Reason.INVALID_RECORD, str(exc)), record))
            return []
        if not self.ordering.marked:
            return messages
        problem = self._misplaced(messages, arrived is not None)
        if problem is not None:
            self.misplaced += 1
            out.append(self._dead_letter(raw, problem, record))
            return []
        if arrived is None:
            return messages
        return [with_arrived(m, arrived) for m in messages]

    def _misplaced(self, messages: list[Message], from_input: bool) -> Refusal | None:
        """Why ``messages`` do not belong in the log they were read from (§7.1), or
        ``None`` (a method: the simulators' mutation tests override it)."""
        return misplaced(messages, from_input=from_input)

    def _signature_problem(self, record: KafkaRecord) -> Refusal | None:
        signer = self.spec.signer
        if signer is None:
            return None
        return signer.refusal(
            record.topic() or self.spec.input_topic, record.key(), record.value(), record.headers()
        )

    def _refused(self, step: Step, sources: Sequence[KafkaRecord]) -> list[OutRecord]:
        """One dead letter per input record with refused messages: the record verbatim,
        the first reason, the ids of every refused message of it."""
        out: list[OutRecord] = []
        groups: dict[int, tuple[KafkaRecord, list[tuple[Message, Refusal]]]] = {}
        for rejection in step.rejected:
            why = Refusal(rejection.code, rejection.reason)
            if rejection.position is None:  # kept in an earlier batch (§4.11, §4.9.5)
                out.append(self._refused_later(rejection.message, why))
                continue
            source = sources[rejection.position]
            groups.setdefault(id(source), (source, []))[1].append((rejection.message, why))
        for source, refused in groups.values():
            why = refused[0][1]
            if len(refused) > 1:
                why = Refusal(
                    why.code, f"{why.text} (and {len(refused) - 1} more messages of this record)"
                )
            ids = ",".join(m.messageID for m, _ in refused)[:2000]
            out.append(
                self._dead_letter(
                    source.value(), why, source, ((DEAD_LETTER_MESSAGES_HEADER, ids),)
                )
            )
        return out

    def _refused_later(self, message: Message, reason: Refusal) -> OutRecord:
        """The dead letter of a message refused after it was held or waited: its record
        verbatim while kept, else a note naming the record's offset in the input log."""
        origin = message.origin
        kept = self._deferred.pop(origin)
        if kept is not None:
            ids = ((DEAD_LETTER_MESSAGES_HEADER, message.messageID),)
            return self._dead_letter(kept.value(), reason, kept, ids)
        note = {"messageID": message.messageID, "held": True, "offset": origin}
        return self._dead_letter(orjson.dumps(note), reason, None)

    def _aborted(self, step: Step) -> list[OutRecord]:
        return [
            self._dead_letter(
                orjson.dumps({"messageID": a.messageID, "topic": list(a.destinations)}),
                refusal(Reason.ABORTED, a.reason),
                None,
            )
            for a in step.aborted
        ]

    def _outputs(self, step: Step) -> list[OutRecord]:
        spec = self.spec
        # by the log they go to: a peer's input log, or its control log (§7)
        control: dict[str, list[Message]] = {}
        deliveries: list[Output] = []
        prefix = spec.input_prefix
        control_prefix = prefix if spec.control_prefix is None else spec.control_prefix
        for output in step.outputs:
            kind = output.message.messageType
            if kind is MessageType.DELIVERY or kind is MessageType.PARTITION_DELIVERY:
                deliveries.append(output)
            elif kind is MessageType.CLIENT:  # a relayed copy: to the input log
                control.setdefault(prefix + output.topic, []).append(output.message)
            else:
                control.setdefault(control_prefix + output.topic, []).append(output.message)
        out: list[OutRecord] = []
        bundle_headers = self._type_headers(MessageType.BUNDLE)
        for target, messages in control.items():
            for value in pack_bundles(
                messages,
                sender_id=spec.node_id,
                sent_from=spec.topic,
                protocol=self.engine.algorithm.value,  # what the engine runs (§4.9.6)
                partition=spec.layer,
                encode=self._encode_bundle,
            ):
                out.append(
                    OutRecord(
                        OutKind.CONTROL,
                        target,
                        value,
                        spec.input_partition,
                        headers=bundle_headers,
                    )
                )
        for output in deliveries:
            if self.delivered_up_to is not None:
                message = output.message
                key = (message.timeStamp or 0, message.partitionID or 0, message.messageID)
                if key <= self.delivered_up_to:
                    continue  # written by an earlier process
                self.delivered_up_to = None  # deliveries only go up from here
            out.append(self._sized(self._delivery(output.message)))
        out.extend(self._watermark())
        return out

    def _delivery(self, message: Message) -> OutRecord:
        """A delivery as the topic's format says (§3.8): raw (the user's bytes, key and
        headers, our metadata in headers) or the JSON envelope; a layer's deliveries
        always go to its merger as JSON envelopes."""
        spec = self.spec
        if spec.layers_topic is not None:
            value = encode_delivery(message)
            return OutRecord(OutKind.DELIVERY, spec.layers_topic, value, spec.input_partition)
        if spec.delivery_format == RAW:
            key, value, headers = encode_raw_delivery(message)
            return OutRecord(
                OutKind.DELIVERY,
                spec.delivery_topic,
                value,
                None,
                key,
                tuple(headers),
                message.sentAt,
            )
        headers_json = self._type_headers(MessageType.DELIVERY)
        value = encode_delivery(message)
        return OutRecord(
            OutKind.DELIVERY, spec.delivery_topic, value, None, None, headers_json, message.sentAt
        )

    def _watermark(self) -> list[OutRecord]:
        spec = self.spec
        if spec.layers_topic is None or spec.layer is None:
            return []
        watermark = self.engine.watermark()
        if watermark == self._watermark_sent:
            return []
        self._watermark_sent = watermark
        value = encode_watermark(spec.node_id, watermark, spec.layer)
        return [OutRecord(OutKind.WATERMARK, spec.layers_topic, value, spec.layer)]

    def _type_headers(self, kind: MessageType) -> tuple[tuple[str, bytes], ...]:
        if not self.spec.shared_layout:
            return ()
        return ((TYPE_HEADER, kind.value.encode()),)

    def _sized(self, record: OutRecord) -> OutRecord:
        """A record too large to be written becomes a dead letter: the broker would
        refuse it, and with it the batch (§6.3; the engine's size checks make this a
        last resort)."""
        if record.value is None or len(record.value) <= self.spec.max_record_bytes:
            return record
        too_large = f"an output to {record.topic} of {len(record.value)} bytes"
        return self._dead_letter(record.value, refusal(Reason.TOO_LARGE, too_large), None)

    def dead_letter(self, value: bytes | None, reason: Refusal) -> OutRecord:
        """A signed dead letter for something the shell sets aside (an output the broker
        refused for good, at-least-once mode)."""
        return self._signed(self._dead_letter(value, reason, None))

    def _dead_letter(
        self,
        value: bytes | None,
        reason: Refusal,
        source: KafkaRecord | None,
        extra: Iterable[tuple[str, str]] = (),
    ) -> OutRecord:
        self.dead_letters += 1
        headers: list[tuple[str, bytes]] = [
            (DEAD_LETTER_ERROR_HEADER, reason.text.encode()),
            (DEAD_LETTER_CODE_HEADER, reason.code.value.encode()),
        ]
        headers += [(name, text.encode()) for name, text in extra]
        key = None
        if source is not None:
            headers.append(
                (DEAD_LETTER_SOURCE_HEADER, f"{source.topic()}/{source.partition()}".encode())
            )
            headers.append((DEAD_LETTER_OFFSET_HEADER, str(source.offset()).encode()))
            headers += original_headers(source)
            raw_key = source.key()
            key = raw_key.encode() if isinstance(raw_key, str) else raw_key
        if value is not None and len(value) > DEAD_LETTER_KEEP:
            headers.append((DEAD_LETTER_TRUNCATED_HEADER, str(len(value)).encode()))
            value = value[:DEAD_LETTER_KEEP]
        return OutRecord(
            OutKind.DEAD_LETTER,
            self.spec.dead_letter_topic,
            value,
            None,
            key,
            tuple(headers),
            reason=reason.code,
        )

    def _signed(self, record: OutRecord) -> OutRecord:
        return signed(record, self.spec.signer)

    # ------------------------------------------------------------------ ticks, snapshots

    def _own_log_record(self, value: bytes) -> OutRecord:
        """A record the node writes to its own log -- a tick, a members record, an apply
        marker: its control log with one (§7.1), else its input log -- signed."""
        spec = self.spec
        topic = spec.control_topic or spec.input_topic
        return self._signed(OutRecord(OutKind.TICK, topic, value, spec.input_partition))

    def _maybe_tick(self, ready: Ready, wall_s: float) -> None:
        """§4.11: while messages are held until the log's time reaches their timestamp,
        the node ticks its own log so that the log's time moves on even when nothing else
        is written to it. (Messages waiting for members need no tick: the shell writes
        its members record every second while they wait, §4.9.5.) And once the log's
        time should have reached the deadline of an entry a peer's Ack made for a message
        this node never heard of (``poc``, rule 9): nothing else may come to move the time
        on, and the entry holds the other destinations' later messages until abandoned."""
        if self.engine.next_due_ms is None:
            orphan_due = self.engine.next_orphan_due_ms
            if orphan_due is None or wall_s * 1000 < orphan_due:
                return
        if self._last_tick_s is not None and wall_s - self._last_tick_s < self.spec.tick_every_s:
            return
        self._last_tick_s = wall_s
        spec = self.spec
        value = self._encode_tick(spec.node_id, 0, spec.layer)
        ready.records.append(self._own_log_record(value))

    def _snapshot_spec(self) -> NodeSpec:
        return self.spec

    def _snapshot_content(self) -> tuple[Mapping[int, int], dict[str, Any], int]:
        offsets = {self.spec.input_partition: self.position}
        state: dict[str, Any] = {"engine": self.engine.snapshot(), "node": settings_of(self.spec)}
        if self.ordering.marked:  # and the next unapplied input offset (§7.1)
            state["ordering"] = {"applied": self.applied}
        return offsets, state, self.position
