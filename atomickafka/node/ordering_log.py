"""A node with a control log (docs/DESIGN.md §7, "proposals that never wait behind
client records"): the pure layer the Kafka shell drives when the node has one (the
default; ``node/control_log.py``).

A node reads two logs: its input log ``atomickafka-in.T`` (client records, relayed
copies) and its control log ``atomickafka-ctl.T`` (its peers' bundles, its own ticks,
members records and *apply markers*). The control log is the node's one input order
(rule 8): a record of the input log is applied only where the node's own marker
``apply in.T [a, b)`` (:mod:`atomickafka.core.marker`) stands in the control log, and a
marker applies only when ``a`` is the next unapplied offset of the input log. So a
second marker for a range (a zombie's, a restart's) applies nothing, or exactly what
the first did, and every instance and every replay applies the same records in the same
place, whatever it read of the input log when.

Numbering (§4.12): a control output's ``seq`` is (offset in the control log of the
record or marker that caused it, index). The ``k``-th input-log record a marker applies
has the origin ``(offset << ORIGIN_SHIFT) | k`` and its outputs the index ``k << 24 |
i`` (``Engine.origin_shift``): each record is numbered apart, so how many outputs one
has never shifts another's ``seq``. They are applied at the marker's log time, and carry
the time they reached the input log (``Message.arrived``): a copy is judged late by
that (§4.13), and the engine forgets settled ids by the earlier of the two logs' times,
so a copy that waited in the input log still finds its id remembered (§7.1, "A copy is
timed by its arrival").

What may come from which log (§7.1, "Records in the wrong log"): a relay only from the
input log, a peer's control message or the node's members record only from the control
log (:func:`~atomickafka.core.placement.misplaced`); anything else is set aside.

A marker names what was written before it (§7.1): one whose range holds an input-log
record appended more than ``MARKER_LEAD_MS`` after it is not the node's, and is set
aside. While the control log waits at a marker for offsets not read, the node ticks its
input log once the marker is that old (a forged marker's range then holds the tick),
and while its input log is idle it ticks it every few seconds (so that the input log's
time, and with it the memory's, moves on).

Positions: :attr:`position` is the next control-log offset to process,
:attr:`applied` the next unapplied input-log offset; a snapshot records both (the
control log's offset as the snapshot's offset, the input log's in its state under
``"ordering"``), and a :class:`~atomickafka.node.batch.Ready` names both
(``commit``, ``commit_input``). Recovery replays the control log from the snapshot's
offset and reads the input log from the snapshot's ``applied``.

Markers are not outputs of the input order: when a node writes one depends on when it
read the input log. Liveness: the node keeps the markers it wrote and has not read
back; when none is left and records it read are still unapplied (its markers applied
nothing: a restart's, or one behind another instance's), it writes a new one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final

from atomickafka.core.engine import Engine
from atomickafka.core.marker import (
    MARKER_LEAD_MS,
    MAX_MARKER_RANGE,
    Marker,
    MarkerError,
    decode_marker,
    encode_marker,
)
from atomickafka.core.reader import KafkaRecord
from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.errors import ConfigError
from atomickafka.node.batch import NodeBatch, NodeSpec, OutKind, OutRecord, Place, Ready
from atomickafka.node.snapshots import LoadedSnapshot

__all__ = ["OrderedNodeBatch", "OrderedStandby"]

_LOG_APPEND_TIME: Final = 2
#: A record's origin is ``(control-log offset << ORIGIN_SHIFT) | k``, ``k`` its place in
#: its marker's range (``Engine.origin_shift``): a marker names fewer offsets than this.
ORIGIN_SHIFT: Final = 20
assert 1 << ORIGIN_SHIFT >= MAX_MARKER_RANGE
#: While its input log's time lags its control log's by more than this, a node whose
#: input log is idle ticks it (§7.1, "A copy is timed by its arrival"): settled ids are
#: forgotten by the earlier of the two times, and the tick moves the input log's on.
INPUT_TICK_MS: Final = 5_000
#: While the control log waits at a marker for input offsets not read, ticks of the
#: input log (once the marker is older than ``MARKER_LEAD_MS``) are this far apart.
WAITING_TICK_MS: Final = 1_000


def _log_time(record: KafkaRecord) -> int | None:
    kind, stamp = record.timestamp()
    return stamp if kind == _LOG_APPEND_TIME or stamp > 0 else None


class OrderedNodeBatch(NodeBatch):
    """:class:`NodeBatch` over a control log and an input log. :meth:`step_input` takes
    input-log records (buffering them and writing a marker), :meth:`step_control`
    control-log records (applying them, and the input-log records their markers name,
    in control-log order). :meth:`step` is not used."""

    def __init__(self, *args: Any, applied: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.spec.control_topic is None:
            raise ConfigError("an OrderedNodeBatch needs spec.control_topic")
        self.engine.origin_shift = ORIGIN_SHIFT
        #: The next unapplied input-log offset.
        self.applied = applied
        #: The next input-log offset to read (everything below it was read).
        self.read_until = applied
        self._buffer: deque[KafkaRecord] = deque()  # read, at or above ``applied``
        self._queue: deque[KafkaRecord] = deque()  # control records waiting to be applied
        self._outstanding: deque[tuple[int, int]] = deque()  # markers written, not read back
        #: False while a standby follows (§6.4): it writes nothing, not even markers.
        self.writing = True
        self.markers_applied = 0
        self.markers_void = 0  # own markers that applied nothing (a != applied)
        self.markers_refused = 0
        #: At most about this many records (control records and the input records their
        #: markers apply) per step; the rest stay queued for the next step (``None``: no
        #: bound). Where a step ends never changes what the node decides (rule 8): a
        #: shell bounds its steps so that a backlog of markers, each applying a whole
        #: read batch, is not applied in one step that writes nothing for seconds.
        self.step_budget: int | None = None
        #: The queue's head when it is a marker waiting for the input log.
        self._blocked: KafkaRecord | None = None
        #: When (wall time) the node last ticked its input log, or began to write.
        self._input_tick_ms: int | None = None
        self.input_ticks = 0
        if self.engine.state.input_ms is None:  # a fresh engine, or an older snapshot's
            self.engine.state.input_ms = 0

    @classmethod
    def recover_ordered(
        cls,
        spec: NodeSpec,
        snapshot: LoadedSnapshot | None,
        committed: int,
        *,
        engine_class: type[Engine] = Engine,
    ) -> OrderedNodeBatch:
        """A node restarting from ``snapshot`` with ``committed`` the committed control-log
        offset: replay the control log from the snapshot's offset (outputs below
        ``committed`` dropped), reading the input log from the snapshot's ``applied``."""
        batch = cls.recover(spec, snapshot, committed, engine_class=engine_class)
        assert isinstance(batch, OrderedNodeBatch)
        applied = 0
        if snapshot is not None and snapshot.state is not None:
            applied = int((snapshot.state.get("ordering") or {}).get("applied", 0))
        batch.applied = batch.read_until = applied
        return batch

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
        heads = (_log_time(waiting[0]) for waiting in (self._buffer, self._queue) if waiting)
        return min((stamp for stamp in heads if stamp is not None), default=None)

    @property
    def control_fetch_from(self) -> int:
        """The next control-log offset to read (past the records queued, not applied)."""
        return (self._queue[-1].offset() or 0) + 1 if self._queue else self.position

    @property
    def waiting(self) -> bool:
        """The next control record is a marker naming input-log offsets not read yet."""
        return self._blocked is not None and bool(self._queue)

    @property
    def queued(self) -> int:
        """Control records read and not yet applied (waiting for the input log, or past
        a step's budget: :meth:`step_control` with no records goes on with them)."""
        return len(self._queue)

    # ------------------------------------------------------------------ steps

    def step_input(
        self, records: Sequence[KafkaRecord], *, wall_s: float, until: int | None = None
    ) -> Ready:
        """Records read from the input log, in offset order (``until``: the read position
        after them, when offsets were skipped -- aborted transactions' records): buffer
        them, apply what markers wait for, and write a marker for what is unmarked."""
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

    def step_control(self, records: Sequence[KafkaRecord], *, wall_s: float) -> Ready:
        """Records read from the control log, in offset order from :attr:`position`."""
        self._queue.extend(records)
        ready = self._pump(wall_s)
        self._mark(ready, wall_s)
        return ready

    def idle(self, *, wall_s: float) -> Ready:
        """Nothing was read: go on with the control records a step's budget left
        queued, if any; else as :meth:`NodeBatch.idle` (a tick when due)."""
        if self._queue and not self.waiting:
            return self.step_control((), wall_s=wall_s)
        ready = super().idle(wall_s=wall_s)
        self._mark(ready, wall_s)
        return ready

    # ------------------------------------------------------------------ the order

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
        """What one control record applies: itself (any record but a marker), the
        input-log records its marker names, or nothing (a marker set aside, with the
        reason, or one whose range does not start at :attr:`applied`); ``None``: wait
        for the input log."""
        offset = record.offset() or 0
        origin, log_time = offset << ORIGIN_SHIFT, _log_time(record)
        try:
            marker = decode_marker(record.value())
        except MarkerError as exc:
            self.markers_refused += 1
            return [], refusal(Reason.INVALID_RECORD, str(exc))
        if marker is None:
            return [(record, (origin, log_time, None))], None
        problem = self._marker_problem(record, marker)
        if problem is not None:
            self.markers_refused += 1
            return [], problem
        if marker.start != self.applied:
            self.markers_void += 1
            self._read_back(marker.start, marker.end)
            return [], None
        problem = self._written_after(marker, log_time)
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
            place = origin | ((record.offset() or 0) - marker.start)
            arrived = _log_time(record)
            applied.append((record, (place, log_time, log_time if arrived is None else arrived)))
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
            newest = _log_time(buffer[-1]) if buffer else None
            late = newest is not None and newest > bound
        else:
            late = False
            for record in buffer:
                if (record.offset() or 0) >= marker.end:
                    break
                stamp = _log_time(record)
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
        assert spec.control_topic is not None
        while start < self.read_until:
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
        marked_at = None if self._blocked is None else _log_time(self._blocked)
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

    # ------------------------------------------------------------------ snapshots

    def _snapshot_content(self) -> tuple[Mapping[int, int], dict[str, Any], int]:
        offsets, state, mark = super()._snapshot_content()
        state["ordering"] = {"applied": self.applied}
        return offsets, state, mark


class OrderedStandby:
    """A hot standby of a node with a control log (§6.4 over two logs): it applies the
    control log below the active instance's committed offset ``C`` (a replay, nothing
    written), reading the input log as far as the markers below ``C`` need and a
    bounded buffer beyond; records of the control log at or past ``C`` wait in a
    bounded buffer. The API of :class:`~atomickafka.node.standby.NodeStandby`, with
    the two logs apart: :meth:`take` and :attr:`fetch_from` for the control log,
    :meth:`take_input` and :attr:`input_fetch_from` for the input log."""

    def __init__(
        self,
        spec: NodeSpec,
        snapshot: LoadedSnapshot | None,
        *,
        committed: int = 0,
        max_pending: int = 10_000,
        jump_records: int = 10_000,
        engine_class: type[Engine] = Engine,
    ) -> None:
        self.spec = spec
        self.max_pending = max(1, max_pending)
        self.jump_records = jump_records
        self._engine_class = engine_class
        self.committed = committed
        self._pending: deque[KafkaRecord] = deque()
        self.jumps = 0
        self.batch = self._recover(snapshot)

    def _recover(self, snapshot: LoadedSnapshot | None) -> OrderedNodeBatch:
        batch = OrderedNodeBatch.recover_ordered(
            self.spec, snapshot, self.committed, engine_class=self._engine_class
        )
        batch.writing = False
        return batch

    @property
    def position(self) -> int:
        """The next control-log offset to apply."""
        return self.batch.position

    @property
    def room(self) -> int:
        """How many more control records the shell may fetch now."""
        return self.max_pending - len(self._pending)

    @property
    def input_room(self) -> int:
        """How many more input-log records the shell may fetch now (always some while a
        marker waits for them)."""
        room = self.max_pending - self.batch.buffered
        return max(room, 1) if self.batch.waiting else room

    @property
    def fetch_from(self) -> int:
        """The next control-log offset the shell fetches."""
        if self._pending:
            return (self._pending[-1].offset() or 0) + 1
        return self.batch.control_fetch_from

    @property
    def input_fetch_from(self) -> int:
        """The next input-log offset the shell fetches."""
        return self.batch.read_until

    def commit_seen(self, committed: int) -> int:
        """The active instance's committed control-log offset; apply what it released."""
        self.committed = max(self.committed, committed)
        return self._apply()

    def take(self, records: Sequence[KafkaRecord]) -> int:
        """Control-log records the shell fetched, in offset order from :attr:`fetch_from`."""
        start = self.batch.control_fetch_from
        self._pending.extend(r for r in records if (r.offset() or 0) >= start)
        return self._apply()

    def take_input(self, records: Sequence[KafkaRecord]) -> int:
        """Input-log records the shell fetched, in offset order from
        :attr:`input_fetch_from`; applies what markers waited for."""
        before = self.batch.position
        self._step(lambda b: b.step_input(records, wall_s=0.0))
        return self.batch.position - before

    def _apply(self) -> int:
        pending, committed = self._pending, self.committed
        ready: list[KafkaRecord] = []
        while pending and (pending[0].offset() or 0) < committed:
            ready.append(pending.popleft())
        if not ready:
            return 0
        before = self.batch.position
        self._step(lambda b: b.step_control(ready, wall_s=0.0))
        return self.batch.position - before

    def _step(self, step: Any) -> None:
        batch = self.batch
        batch.replay_until = max(batch.replay_until, self.committed)
        result = step(batch)
        # every control record applied was below the committed offset: a replay
        assert not result.records, "a standby wrote something"

    def wants(self, snapshot: LoadedSnapshot) -> bool:
        """As :meth:`NodeStandby.wants`, in control-log offsets."""
        if snapshot.state is None:
            return False
        offset = snapshot.offsets.get(self.spec.input_partition, 0)
        return offset <= self.committed and offset - self.position >= self.jump_records

    def jump(self, snapshot: LoadedSnapshot) -> None:
        """Load ``snapshot``: the shell fetches both logs again from :attr:`fetch_from`
        and :attr:`input_fetch_from` (the input log from the snapshot's ``applied``)."""
        self.batch = self._recover(snapshot)
        self._pending.clear()
        self.jumps += 1

    def take_over(self, committed: int, newest_seq: int) -> OrderedNodeBatch | None:
        """Become the active instance's batch layer (as :meth:`NodeStandby.take_over`):
        replay the control log from :attr:`position` to ``committed``, then live. The
        shell fetches the control log again from the batch's ``control_fetch_from`` and
        goes on reading the input log from its ``read_until``."""
        batch = self.batch
        if committed < batch.position:
            return None
        self.committed = max(self.committed, committed)
        batch.replay_until = committed
        batch.snapshot_seq = max(batch.snapshot_seq, newest_seq)
        batch.writing = True
        self._pending.clear()
        return batch
