"""The merger's batch layer: layer records in, merged deliveries and ticks out (§6, §8).

The counterpart of :mod:`atomickafka.node.batch` for a partitioned topic's merger. The
shell consumes records of every partition of ``atomickafka-layers.T`` and hands them
to :meth:`MergerBatch.step`, which returns a :class:`~atomickafka.node.batch.Ready`:
the Delivery records to append to ``T`` in merged order, the ticks to write into idle
layers' input logs, dead letters for layer records it refused, and a snapshot of the
merger when one is due.

Recovery: from the newest snapshot (the merger's state and the layer offsets it
covers), replaying the layers from there, and releasing nothing at or below the key
of the last Delivery *this merger* wrote to ``T`` (:meth:`MergerBatch.resume_after`):
the merged order is strictly increasing, so that key says exactly what was written.
Finding it is the shell's job, reading ``T`` backwards and taking only the merger's
own records (sender, type and -- with signing -- signature checked): anything else a
writer put into ``T`` is reported and ignored.

No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from atomickafka.core.compact import BINARY, control_encoders
from atomickafka.core.merger import (
    LayerDelivery,
    LayerRecord,
    LayerWatermark,
    MergeKey,
    Merger,
    Release,
    TickRequest,
)
from atomickafka.core.raw import decode_any, encode_raw_delivery
from atomickafka.core.reader import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_ERROR_HEADER,
    KafkaRecord,
    delivery_order_key,
)
from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    decode_record,
    encode_delivery,
)
from atomickafka.node.batch_types import OutKind, OutRecord, Ready, SnapshotTaker, signed
from atomickafka.node.snapshots import LoadedSnapshot, SnapshotSchedule

__all__ = ["MergerBatch", "MergerSpec", "merger_id", "own_delivery_key"]

_DELIVERY_PARTITION: Final = 0  # the merged stream is one partition: one total order


def merger_id(topic: str) -> str:
    """The sender id of ``topic``'s merger (what its records and ticks carry)."""
    return f"merger-{topic}"


class MergerSpec:
    """What the merger's batch layer needs (names resolved by the shell)."""

    def __init__(
        self,
        topic: str,
        layers: int,
        *,
        role: str,
        layers_topic: str,
        delivery_topic: str,
        input_topic: str,
        dead_letter_topic: str,
        snapshot_topic: str,
        snapshot_every_records: int = 50_000,
        snapshot_every_s: float = 30.0,
        signer: Signer | None = None,
        delivery_format: str = "json",  # the node's default (§3.8)
        control_format: str = BINARY,
    ) -> None:
        self.topic = topic
        self.layers = layers
        self.role = role
        self.sender_id = merger_id(topic)
        self.layers_topic = layers_topic
        self.delivery_topic = delivery_topic
        self.input_topic = input_topic
        self.dead_letter_topic = dead_letter_topic
        self.snapshot_topic = snapshot_topic
        self.snapshot_every_records = snapshot_every_records
        self.snapshot_every_s = snapshot_every_s
        self.signer = signer
        self.delivery_format = delivery_format
        #: How its ticks to the layers are written (§3.9): ``binary`` or ``json``.
        self.control_format = control_format

    def layer_node(self, layer: int) -> str:
        """The sender id of layer ``layer``'s node."""
        return f"node-{self.topic}/{layer}"


def own_delivery_key(spec: MergerSpec, record: KafkaRecord) -> MergeKey | None:
    """The merge key of ``record`` when it is a Delivery this merger wrote to ``T``
    (type, sender and -- with signing -- signature checked), else ``None``."""
    raw = record.value()
    if raw is None:
        return None
    signer = spec.signer
    if signer is not None and signer.problem(
        spec.delivery_topic, record.key(), raw, record.headers()
    ):
        return None
    try:
        messages = decode_any(raw, record.key(), record.headers())
    except MessageError:
        return None
    if len(messages) != 1:
        return None
    (message,) = messages
    if message.messageType is not MessageType.DELIVERY or message.timeStamp is None:
        return None
    if message.senderID != spec.sender_id or message.sentFromTopic != spec.topic:
        return None
    return MergeKey(*delivery_order_key(message))


class MergerBatch(SnapshotTaker):
    """A merger with the bookkeeping between the layer streams and the broker."""

    spec: MergerSpec

    def __init__(
        self,
        spec: MergerSpec,
        merger: Merger | None = None,
        *,
        positions: dict[int, int] | None = None,
        snapshot_seq: int = 0,
    ) -> None:
        self.spec = spec
        self.merger = merger if merger is not None else Merger(spec.topic, spec.layers)
        #: The next offset to read, per layer partition.
        self.positions = dict(positions or {})
        self.snapshot_seq = snapshot_seq
        self.released = 0
        self.dead_letters = 0
        self._schedule = SnapshotSchedule(spec.snapshot_every_records, spec.snapshot_every_s)

    @classmethod
    def recover(cls, spec: MergerSpec, snapshot: LoadedSnapshot | None) -> MergerBatch:
        """A merger restarting from ``snapshot`` (or from nothing)."""
        if snapshot is None or snapshot.state is None:
            return cls(spec, snapshot_seq=0 if snapshot is None else snapshot.seq)
        state = dict(snapshot.state["merger"])
        state["buffers"] = [  # payloads back from their Delivery record's JSON text
            [[ts, mid, decode_record(text.encode())[0]] for ts, mid, text in items]
            for items in state["buffers"]
        ]
        merger = Merger.restore(state)
        return cls(spec, merger, positions=snapshot.offsets, snapshot_seq=snapshot.seq)

    def resume_after(self, key: MergeKey) -> None:
        """Release nothing at or below ``key``: the last Delivery already in ``T``."""
        self.merger.resume_after(key)

    # ------------------------------------------------------------------ steps

    def step(self, records: Sequence[KafkaRecord], *, wall_s: float) -> Ready:
        """Take a batch of layer records (each partition's in offset order)."""
        ready = Ready()
        items: list[LayerRecord] = []
        for record in records:
            item = self._layer_record(record, ready)
            if item is not None:
                items.append(item)
            part = record.partition() or 0
            self.positions[part] = (record.offset() or 0) + 1
        outputs = self.merger.handle_batch(items)
        for rejected in self.merger.rejected:
            value = orjson.dumps(repr(rejected.record))
            why = refusal(Reason.MERGER_REFUSED, rejected.reason.value)
            ready.records.append(self._dead_letter(value, why))
        ready.records.extend(self._output(o) for o in outputs)
        self._schedule.took(len(records))
        ready.commit = None  # the merger's progress is its snapshot and the end of T
        self._maybe_snapshot(ready, wall_s)
        return ready

    def idle(self, *, wall_s: float) -> Ready:
        """Nothing new: take a snapshot if one is due."""
        ready = Ready()
        self._maybe_snapshot(ready, wall_s)
        return ready

    def retry_ticks(self) -> Ready:
        """Ask the layers that still block the head for a tick again (rule 3)."""
        return Ready(records=[self._output(t) for t in self.merger.retry_ticks()])

    def snapshot_now(self, *, wall_s: float) -> Ready:
        """A snapshot of the state at :attr:`positions`, whether due or not."""
        ready = Ready()
        self._snapshot(ready, wall_s)
        return ready

    # ------------------------------------------------------------------ records

    def _layer_record(self, record: KafkaRecord, ready: Ready) -> LayerRecord | None:
        spec = self.spec
        raw = record.value()
        layer = record.partition() or 0
        problem = self._problem(record, raw, layer)
        if problem is not None:
            ready.records.append(self._dead_letter(raw, problem))
            return None
        assert raw is not None
        (message,) = decode_record(raw)
        if message.messageType is MessageType.WATERMARK:
            return LayerWatermark(layer, message.timeStamp or 0)
        delivery = message._replace(messageType=MessageType.DELIVERY, senderID=spec.sender_id)
        return LayerDelivery(layer, message.timeStamp or 0, message.messageID, delivery)

    def _problem(self, record: KafkaRecord, raw: bytes | None, layer: int) -> Refusal | None:
        """Why a record of the layers topic is not taken in, or ``None``."""
        spec = self.spec
        if spec.signer is not None:
            problem = spec.signer.refusal(spec.layers_topic, record.key(), raw, record.headers())
            if problem is not None:
                return problem
        if raw is None:
            return refusal(Reason.NOT_A_LAYER_RECORD, "not a layer record: record has no value")
        try:
            messages = decode_record(raw)
        except MessageError as exc:
            return refusal(Reason.NOT_A_LAYER_RECORD, f"not a layer record: {exc}")
        if len(messages) != 1:
            return refusal(Reason.NOT_A_LAYER_RECORD, "not a layer record: a bundle")
        (message,) = messages
        if message.messageType not in (MessageType.WATERMARK, MessageType.PARTITION_DELIVERY):
            kind = message.messageType.value
            return refusal(Reason.NOT_A_LAYER_RECORD, f"{kind} is not a layer record")
        if message.partitionID is not None and message.partitionID != layer:
            return refusal(
                Reason.WRONG_LAYER, f"a record of layer {message.partitionID} in partition {layer}"
            )
        if message.senderID != spec.layer_node(layer):
            return refusal(
                Reason.NOT_A_LAYER_RECORD,
                f"a layer record from {message.senderID!r}, not {spec.layer_node(layer)}",
            )
        return None

    def _output(self, output: Release | TickRequest) -> OutRecord:
        spec = self.spec
        if isinstance(output, Release):
            message = output.payload
            assert isinstance(message, Message)
            self.released += 1
            if spec.delivery_format == "raw":
                key, value, headers = encode_raw_delivery(message)
                return self._signed(
                    OutRecord(
                        OutKind.DELIVERY,
                        spec.delivery_topic,
                        value,
                        _DELIVERY_PARTITION,
                        key,
                        tuple(headers),
                    )
                )
            return self._signed(
                OutRecord(
                    OutKind.DELIVERY,
                    spec.delivery_topic,
                    encode_delivery(message),
                    _DELIVERY_PARTITION,
                )
            )
        _, tick = control_encoders(spec.control_format)
        value = tick(spec.sender_id, output.timeStamp, output.layer)
        return self._signed(OutRecord(OutKind.TICK, spec.input_topic, value, output.layer))

    def _dead_letter(self, value: bytes | None, reason: Refusal) -> OutRecord:
        self.dead_letters += 1
        headers = (
            (DEAD_LETTER_ERROR_HEADER, reason.text.encode()),
            (DEAD_LETTER_CODE_HEADER, reason.code.value.encode()),
        )
        return self._signed(
            OutRecord(
                OutKind.DEAD_LETTER,
                self.spec.dead_letter_topic,
                value,
                None,
                None,
                headers,
                reason=reason.code,
            )
        )

    def _signed(self, record: OutRecord) -> OutRecord:
        return signed(record, self.spec.signer)

    # ------------------------------------------------------------------ snapshots

    def _snapshot_spec(self) -> MergerSpec:
        return self.spec

    def _snapshot_content(self) -> tuple[Mapping[int, int], dict[str, Any], int]:
        state = self.merger.snapshot()
        state["buffers"] = [  # payloads as their Delivery record's JSON text
            [[ts, mid, encode_delivery(payload).decode()] for ts, mid, payload in items]
            for items in state["buffers"]
        ]
        # the mark only says that the records hold a snapshot
        return self.positions, {"merger": state}, self.snapshot_seq
