"""The node's batch layer: records in, what to write and commit out (docs/DESIGN.md §6).

Like etcd-io/raft's ``RawNode``, this layer owns every decision between the input log
and the broker and performs none of the I/O: the shell (:mod:`atomickafka.node.runtime`)
consumes a batch of input records, hands them to :meth:`NodeBatch.step`, and gets back
a :class:`Ready` -- the records to write, in order (control bundles per destination,
deliveries, the layer's watermark, dead letters with their reasons, a snapshot when one
is due), and the input offset that becomes committed with them. In exactly-once mode
the shell writes all of it and the offset in one Kafka transaction; in at-least-once
mode it writes it with a gapless idempotent producer and commits once the broker has
acknowledged it (:mod:`atomickafka.node.offsets`). The simulators drive this same
layer and crash a node the way production recovers: :meth:`NodeBatch.recover` from
the newest snapshot, then a replay.

Recovery (§6). A node starts from the newest readable snapshot (or the empty state)
covering input offset ``S``, and from the committed offset ``C >= S``. Records from ``S``
to ``C`` are replayed: they rebuild the state, and their outputs -- written before the
restart -- are dropped. From ``C`` on, outputs are written.

Signed records (§4.14). With a :class:`~atomickafka.core.signing.Signer`, an input
record without a valid signature is set aside with the reason, and every record
written is signed.

No I/O and no clock: the caller passes the wall time that paces snapshots and the
node's own clock ticks (§4.11); what is written is a pure function of the input log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol

import orjson

from atomickafka.core.compact import BINARY, compact_writer, control_encoders
from atomickafka.core.engine import Algorithm, Engine, Output, Step
from atomickafka.core.placement import misplaced
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
from atomickafka.core.signing import SIGNATURE_HEADER, Signer
from atomickafka.core.wire import (
    MAX_RECORD_BYTES,
    Message,
    MessageError,
    MessageType,
    encode_delivery,
    encode_members,
    encode_watermark,
    pack_bundles,
)
from atomickafka.errors import AtomicKafkaError
from atomickafka.node.snapshots import LoadedSnapshot, SnapshotSchedule, encode_snapshot

__all__ = [
    "NodeBatch",
    "NodeSpec",
    "NodeStartError",
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
#: What a refusal to go on with changed settings tells the operator to do (§6.6).
HOW_TO_RECONFIGURE: Final = (
    "a node cannot change these while messages may be in flight. To change them "
    "safely: stop the clients, wait until `atomickafka status` shows nothing pending, "
    "stop every node (a clean stop takes a snapshot), then start each with the new "
    "settings and --reconfigure"
)
_LOG_APPEND_TIME: Final = 2  # confluent-kafka's TIMESTAMP_LOG_APPEND_TIME
#: A record's place in the input order of a node with a control log (§7.1): the origin
#: its messages are numbered with (§4.12), the log time they are applied at, and, for
#: an input-log record a marker applies, when it reached the input log (``None``: a
#: control-log record, applied where it stands).
Place = tuple[int, int | None, int | None]
#: The delivery formats (§3.8).
RAW: Final = "raw"
JSON: Final = "json"


class OutKind(StrEnum):
    """What a record written by a node is."""

    CONTROL = "control"
    DELIVERY = "delivery"
    WATERMARK = "watermark"
    DEAD_LETTER = "dead-letter"
    TICK = "tick"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to write (``reason``: why, for a dead letter)."""

    kind: OutKind
    topic: str
    value: bytes | None
    partition: int | None = None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: A delivery's send time (ms since the epoch), as its message said: the metrics'
    #: latency, without reading it back from the bytes (``None``: read them).
    sent_at: int | None = None
    reason: Reason | None = None


@dataclass(slots=True)
class Ready:
    """What one step decided: write ``records`` (in order), then commit ``commit`` (the
    next input offset). ``snapshot_offset`` is the offset a snapshot among ``records``
    covers; in at-least-once mode its records are written only once ``commit`` has
    passed it (:meth:`snapshot_records`)."""

    records: list[OutRecord] = field(default_factory=list)
    commit: int | None = None
    snapshot_offset: int | None = None
    replayed: int = 0  # input records replayed (outputs dropped)
    #: With a control log (§7): the next unapplied input-log offset, committed beside
    #: ``commit`` (the control log's).
    commit_input: int | None = None

    def outputs(self) -> list[OutRecord]:
        """Everything but the snapshot."""
        return [r for r in self.records if r.kind is not OutKind.SNAPSHOT]

    def snapshot_records(self) -> list[OutRecord]:
        """The snapshot's records, if one is due."""
        return [r for r in self.records if r.kind is OutKind.SNAPSHOT]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What the batch layer needs to know about its node (names resolved by the shell)."""

    topic: str
    node_id: str
    role: str  # the node's key: T, or T/layer
    algorithm: Algorithm
    input_topic: str
    input_partition: int
    delivery_topic: str
    dead_letter_topic: str
    snapshot_topic: str
    #: Where each peer's input log is: the prefix before its topic ("" in the shared
    #: layout, where the input log is the topic itself).
    input_prefix: str
    #: With control logs (§7, the default): the prefix of each peer's control log, where
    #: this node's bundles go (relayed client copies still go to the peer's input log),
    #: and this node's own control log, where its ticks, members records and apply
    #: markers go. ``None``: no control logs, everything goes to the input logs.
    control_prefix: str | None = None
    control_topic: str | None = None
    layer: int | None = None
    layers_topic: str | None = None
    shared_layout: bool = False
    max_value_bytes: int = 900_000
    max_record_bytes: int = MAX_RECORD_BYTES
    window_ms: int = 60_000
    snapshot_every_records: int = 50_000
    snapshot_every_s: float = 30.0
    tick_every_s: float = 0.1
    signer: Signer | None = None
    #: How deliveries are written to the topic: ``raw`` (the value as sent, metadata in
    #: headers) or ``json`` (the JSON envelope, the node's default), §3.8.
    delivery_format: str = JSON
    #: Take up settings (protocol, delivery format, signing) other than those the node's
    #: state was built with, when it is drained (§6.6); otherwise such a start is refused.
    reconfigure: bool = False
    #: How control records (bundles, ticks) are written (§3.9): ``binary`` (the compact
    #: form) or ``json`` (what releases before it read). Both are read either way.
    control_format: str = BINARY


class NodeStartError(AtomicKafkaError):
    """The node cannot start safely; the message says why and what to do."""


class SettingsChangedError(NodeStartError):
    """The node is configured with another protocol, delivery format or signing than
    its state was built with (§6.6): going on would run two protocols under one state.
    The message says what differs and how to change it safely."""


def signed(record: OutRecord, signer: Signer | None) -> OutRecord:
    """``record`` with its signature headers (§4.14), or as it is without a secret."""
    if signer is None:
        return record
    headers = signer.signed_headers(record.topic, record.key, record.value, record.headers)
    return OutRecord(
        record.kind,
        record.topic,
        record.value,
        record.partition,
        record.key,
        tuple(headers),
        record.sent_at,
        record.reason,
    )


class _SnapshotSpec(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def snapshot_topic(self) -> str: ...
    @property
    def signer(self) -> Signer | None: ...


class SnapshotTaker:
    """What the node's and the merger's batch layers share of taking snapshots (§6):
    when one is due, its sequence number, its signed records and the mark on
    :class:`Ready`; each layer says what its state and offsets are."""

    spec: _SnapshotSpec
    snapshot_seq: int
    _schedule: SnapshotSchedule

    def _snapshot_content(self) -> tuple[Mapping[int, int], dict[str, Any], int]:
        """The input offsets the snapshot covers, its state, and the mark for
        :attr:`Ready.snapshot_offset`."""
        raise NotImplementedError

    def _maybe_snapshot(self, ready: Ready, wall_s: float) -> None:
        if self._schedule.due(wall_s):
            self._snapshot(ready, wall_s)

    def _snapshot(self, ready: Ready, wall_s: float) -> None:
        spec = self.spec
        self.snapshot_seq += 1
        self._schedule.taken(wall_s)
        offsets, state, mark = self._snapshot_content()
        records = encode_snapshot(
            spec.role, self.snapshot_seq, offsets, state, created_ms=int(wall_s * 1000)
        )
        ready.records.extend(
            signed(OutRecord(OutKind.SNAPSHOT, spec.snapshot_topic, r.value, 0, r.key), spec.signer)
            for r in records
        )
        ready.snapshot_offset = mark


class NodeBatch(SnapshotTaker):
    """One node's engine with the bookkeeping between its input log and the broker."""

    spec: NodeSpec

    def __init__(
        self,
        spec: NodeSpec,
        engine: Engine,
        *,
        position: int = 0,
        replay_until: int = 0,
        snapshot_seq: int = 0,
    ) -> None:
        self.spec = spec
        self.engine = engine
        #: The next input offset to process.
        self.position = position
        #: Outputs of records below this offset were written before a restart.
        self.replay_until = replay_until
        self.snapshot_seq = snapshot_seq
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
        committed input offset: it replays from the snapshot's offset, dropping outputs
        below ``committed``. ``engine_class`` is what the engine is rebuilt as (the
        simulators' mutation tests keep their mutant across a crash)."""
        reconfigured = False
        if snapshot is None or snapshot.state is None:
            start = 0
            engine = cls.fresh_engine(spec, engine_class)
            seq = snapshot.seq if snapshot is not None else 0
        else:
            start = snapshot.offsets.get(spec.input_partition, 0)
            engine = engine_class.restore(snapshot.state["engine"])
            seq = snapshot.seq
            reconfigured = _take_settings(spec, snapshot, engine, committed)
        batch = cls(
            spec, engine, position=start, replay_until=max(committed, start), snapshot_seq=seq
        )
        batch._snapshot_due = reconfigured  # the new settings' first state, at once
        return batch

    @property
    def replaying(self) -> bool:
        """Still re-reading records whose outputs were written before a restart."""
        return self.position < self.replay_until

    # ------------------------------------------------------------------ steps

    def step(self, records: Sequence[KafkaRecord], *, wall_s: float) -> Ready:
        """Take a batch of input records (in offset order, from :attr:`position`)."""
        if not records:
            return self.idle(wall_s=wall_s)
        until = self.replay_until
        if (records[0].offset() or 0) >= until:  # the common case: nothing to replay
            cut = 0
        else:
            offsets = [r.offset() or 0 for r in records]
            cut = next((i for i, o in enumerate(offsets) if o >= until), len(records))
        ready = Ready()
        if cut:
            self._apply(records[:cut])
            ready.replayed = cut
        if cut < len(records):
            ready.records = self._apply(records[cut:])
            self._schedule.took(len(records) - cut)
            ready.commit = self.position
            self._maybe_tick(ready, wall_s)
            self._maybe_snapshot(ready, wall_s)
        return ready

    def _maybe_snapshot(self, ready: Ready, wall_s: float) -> None:
        if self._snapshot_due:
            self._snapshot_due = False
            self._snapshot(ready, wall_s)
            return
        super()._maybe_snapshot(ready, wall_s)

    def idle(self, *, wall_s: float) -> Ready:
        """Nothing new in the log: tick it while messages are held (§4.11), and take a
        snapshot if one is due."""
        ready = Ready()
        if self.replaying:
            return ready
        self._maybe_tick(ready, wall_s)
        self._maybe_snapshot(ready, wall_s)
        return ready

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

    def _apply(self, records: Sequence[KafkaRecord]) -> list[OutRecord]:
        self.position = (records[-1].offset() or 0) + 1
        return self._apply_placed(records, None)

    def _apply_placed(
        self, records: Sequence[KafkaRecord], placed: Sequence[Place] | None
    ) -> list[OutRecord]:
        """Apply ``records``; ``placed``, when given, is each record's place in the
        node's input order instead of its own offset and log time (a control log's
        marker applying input-log records, §7.1): see :data:`Place`."""
        messages: list[Message] = []
        sources: list[KafkaRecord] = []
        out: list[OutRecord] = []
        for index, record in enumerate(records):
            place = None if placed is None else placed[index]
            decoded = self._decode(record, out, place)
            if len(decoded) == 1:
                messages.append(decoded[0])
                sources.append(record)
            else:
                messages.extend(decoded)
                sources.extend([record] * len(decoded))
        origins = None if placed is None else [m.origin for m in messages]
        step = self.engine.step(messages)
        logged = self.engine.logged_protocol
        if logged is not None:
            spec = self.spec
            raise SettingsChangedError(
                f"node {spec.role}: its input log was processed running protocol {logged} "
                f"(its own members record says so, before offset {self.position}), and it is "
                f"configured with {self.engine.algorithm.value}: {HOW_TO_RECONFIGURE}"
            )
        for position in step.deferred:  # kept by its origin (its offset, unless placed)
            key = None if origins is None else origins[position]
            self._deferred.keep(sources[position], key)
        out.extend(self._refused(step, sources))
        for origin in step.released:
            self._deferred.pop(origin)  # taken up (or refused above): no longer needed
        out.extend(self._aborted(step))
        out.extend(self._outputs(step))
        if self.spec.signer is None:
            return out
        return [self._signed(r) for r in out]

    def _decode(
        self,
        record: KafkaRecord,
        out: list[OutRecord],
        place: Place | None = None,
    ) -> list[Message]:
        """The messages of one input record; a record that cannot be taken becomes a
        dead letter in ``out`` (with a control log, also one in the wrong log, §7.1)."""
        spec = self.spec
        if spec.shared_layout and header_value(record, TYPE_HEADER) == _DELIVERY_TYPE:
            return []  # our own output, in the shared layout
        raw = record.value()
        problem = self._signature_problem(record)
        if problem is not None:
            self.unsigned += 1
            claimed = _claimed_sender(record)
            self.bad_signatures[claimed] = self.bad_signatures.get(claimed, 0) + 1
            why = Refusal(problem.code, f"{problem.text} (claims to come from {claimed})")
            out.append(self._dead_letter(raw, why, record))
            return []
        arrived = None
        if place is None:
            kind, stamp = record.timestamp()
            log_time = stamp if kind == _LOG_APPEND_TIME or stamp > 0 else None
            origin = record.offset()
        else:
            origin, log_time, arrived = place
        try:
            messages = decode_any(
                raw, record.key(), record.headers(), log_time=log_time, origin=origin
            )
        except MessageError as exc:
            if exc.field == "formatVersion":
                claimed = _claimed_sender(record)
                self.newer_formats[claimed] = self.newer_formats.get(claimed, 0) + 1
            out.append(self._dead_letter(raw, refusal(Reason.INVALID_RECORD, str(exc)), record))
            return []
        if place is None:
            return messages
        problem = misplaced(messages, from_input=arrived is not None)
        if problem is not None:
            self.misplaced += 1
            out.append(self._dead_letter(raw, problem, record))
            return []
        if arrived is None:
            return messages
        return [m._replace(arrived=arrived) for m in messages]

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
            headers += _original_headers(source)
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
        its members record every second while they wait, §4.9.5.)"""
        if self.engine.next_due_ms is None:
            return
        if self._last_tick_s is not None and wall_s - self._last_tick_s < self.spec.tick_every_s:
            return
        self._last_tick_s = wall_s
        spec = self.spec
        value = self._encode_tick(spec.node_id, 0, spec.layer)
        ready.records.append(self._own_log_record(value))

    def _snapshot_content(self) -> tuple[Mapping[int, int], dict[str, Any], int]:
        offsets = {self.spec.input_partition: self.position}
        state = {"engine": self.engine.snapshot(), "node": _settings(self.spec)}
        return offsets, state, self.position


def _claimed_sender(record: KafkaRecord) -> str:
    """Whom a record claims to come from (it may lie: its signature failed): the topic
    of the node that wrote a control record, else the writer's id as a client."""
    try:
        messages = decode_any(record.value(), record.key(), record.headers())
    except MessageError:
        return _named_in_header(record.value())
    if not messages:
        return "an empty record"
    first = messages[0]
    if first.sentFromTopic is not None:
        return first.sentFromTopic
    return f"client {first.senderID}" if first.senderID else "a client"


def _named_in_header(raw: bytes | None) -> str:
    """Who a record this node cannot decode says it comes from (a newer format's, say):
    the writer a compact record's prefix names, or the ``sentFromTopic`` or ``senderID``
    of its first line, if that is a JSON object."""
    writer = compact_writer(raw)
    if writer is not None:
        return writer
    try:
        head = orjson.loads((raw or b"").split(b"\n", 1)[0])
    except orjson.JSONDecodeError:
        return "an unreadable record"
    if isinstance(head, dict):
        for field_name in ("sentFromTopic", "senderID"):
            value = head.get(field_name)
            if isinstance(value, str) and value:
                return value
    return "an unreadable record"


def _settings(spec: NodeSpec) -> dict[str, Any]:
    """What a snapshot records of the settings its state was built with (§6.6)."""
    return {"deliveryFormat": spec.delivery_format, "signed": spec.signer is not None}


def _take_settings(
    spec: NodeSpec, snapshot: LoadedSnapshot, engine: Engine, committed: int
) -> bool:
    """Compare the settings ``snapshot``'s state was built with to ``spec``'s (§6.6): the
    same, False; different and ``spec.reconfigure`` with the snapshot drained at the
    committed offset, take them up (True); otherwise :class:`SettingsChangedError`."""
    assert snapshot.state is not None
    recorded = snapshot.state.get("node") or {}  # absent in older snapshots: not compared
    now = _settings(spec)
    changes = []
    if engine.algorithm is not spec.algorithm:
        changes.append(f"protocol {engine.algorithm.value} -> {spec.algorithm.value}")
    for name, label in (("deliveryFormat", "delivery format"), ("signed", "signing")):
        if name in recorded and recorded[name] != now[name]:
            old, new = recorded[name], now[name]
            if name == "signed":
                old, new = ("on" if old else "off"), ("on" if new else "off")
            changes.append(f"{label} {old} -> {new}")
    if not changes:
        return False
    what = f"node {spec.role}: its state (snapshot {snapshot.seq}) differs from its settings: "
    what += ", ".join(changes)
    if not spec.reconfigure:
        raise SettingsChangedError(f"{what}; {HOW_TO_RECONFIGURE}")
    start = snapshot.offsets.get(spec.input_partition, 0)
    if start != committed or engine.held_count or engine.pending_count:
        raise SettingsChangedError(
            f"{what}; --reconfigure needs the node's newest snapshot at its committed "
            f"offset with nothing in flight (snapshot at {start}, committed {committed}, "
            f"{engine.pending_count} pending, {engine.held_count} held): stop the node "
            "cleanly once `atomickafka status` shows nothing pending, then start it again"
        )
    engine.reconfigure(spec.algorithm)
    return True


def _original_headers(source: KafkaRecord) -> list[tuple[str, bytes]]:
    """The set-aside record's own headers, after the dead letter's (so that a reader
    taking a header's first value gets the dead letter's reason, never a forged one):
    a raw record's ``atomickafka-id``, ``-to``, ``-sender`` and the user's headers say
    which message was refused. Its signature is left out (it covered the input log,
    and the dead letter carries its own)."""
    headers = source.headers()
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [
        (name, value.encode() if isinstance(value, str) else value or b"")
        for name, value in pairs
        if name != SIGNATURE_HEADER
    ]


class DeferredRecords:
    """Input records of messages the engine kept for later, by offset, within a byte
    budget (oldest dropped first): only for verbatim dead letters, never for state."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._records: dict[int, KafkaRecord] = {}  # insertion order = oldest first
        self._bytes = 0

    def keep(self, record: KafkaRecord, key: int | None = None) -> None:
        """Keep ``record`` under ``key`` (the origin of its messages; by default its
        offset)."""
        offset = record.offset() if key is None else key
        if offset is None or offset in self._records:
            return
        self._records[offset] = record
        self._bytes += len(record.value() or b"")
        while self._bytes > self._budget and self._records:
            oldest = next(iter(self._records))
            self._bytes -= len(self._records.pop(oldest).value() or b"")

    def pop(self, offset: int | None) -> KafkaRecord | None:
        record = self._records.pop(offset, None) if offset is not None else None
        if record is not None:
            self._bytes -= len(record.value() or b"")
        return record
