"""What a node's Kafka shell does around the engine, as a pure model for transcripts.

This is the one place where the transcripts model the shell's produce and commit
decisions (docs/DESIGN.md §6, ``atomickafka/node/runtime.py``): it turns a batch of
input records into the records the shell writes, and it decides with the shell's own
pure bookkeeping, :class:`~atomickafka.node.offsets.OffsetsTracker`, which outputs are
dropped on replay and which offset is committed. A future pure "batch layer" that owns
these decisions should replace the body of :class:`NodeShell`, and nothing else.

What the model keeps from the real shell:

- The engine rebuilds its state by re-reading the input log from offset 0 after a
  restart; outputs of records below the committed offset were written before and are
  dropped; a batch straddling that boundary is cut there (§6.1).
- A batch's control messages go one Bundle record per destination (in the order the
  engine first addresses them), then its deliveries one record each, then, for a
  layer's node, a watermark when it moved (§7, §8). Records go through the real codec.
- The committed offset is the one after the last batch whose outputs, and those of
  every batch before it, were acknowledged (§6.2).

What a transcript controls (:class:`Hold`): whether a batch's writes reach the broker
and are acknowledged at once (the usual case), reach it without the acknowledgements
coming back yet, or stay in the producer's queue. A crash loses the engine, the queue
and the acknowledgements still to come; the committed offset survives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from atomickafka.core.engine import Engine, Output, Step
from atomickafka.core.merger import LayerDelivery, LayerRecord, LayerWatermark
from atomickafka.core.wire import (
    Message,
    MessageType,
    decode_record,
    encode_delivery,
    pack_bundles,
)
from atomickafka.node.offsets import OffsetsTracker, Ticket

__all__ = [
    "Batch",
    "Hold",
    "LogRecord",
    "NodeShell",
    "ToDeliveries",
    "ToLayers",
    "ToLog",
    "Write",
    "node_name",
]

#: One record of an input log, decoded: a ClientMessage, a Tick, or a Bundle's messages.
LogRecord = tuple[Message, ...]


def node_name(topic: str, layer: int | None) -> str:
    """``T`` for a topic's node, ``T/1`` for the node of layer 1 of a partitioned topic."""
    return topic if layer is None else f"{topic}/{layer}"


@dataclass(frozen=True, slots=True)
class ToLog:
    """A record for a node's input log."""

    node: str
    record: LogRecord


@dataclass(frozen=True, slots=True)
class ToDeliveries:
    """A Delivery record for a topic's delivery stream."""

    topic: str
    message: Message


@dataclass(frozen=True, slots=True)
class ToLayers:
    """A layer node's record for its topic's merger (a delivery or a watermark)."""

    node: str
    record: LayerRecord


Write = ToLog | ToDeliveries | ToLayers


class Hold(StrEnum):
    """What happens to a batch's writes."""

    NOTHING = "nothing"  # written and acknowledged at once; the offset is committed
    ACKS = "acks"  # written; the broker's acknowledgements have not come back yet
    WRITES = "writes"  # still in the producer's queue: neither written nor acknowledged


@dataclass(slots=True)
class Batch:
    """What the shell did with one batch of its input log, records ``first..last``."""

    first: int
    last: int
    step: Step
    writes: list[Write]  # what the engine's outputs became, in order
    replayed: bool  # below the committed offset: ``writes`` were dropped
    written: list[Write] = field(default_factory=list)  # to apply to the streams now
    commit: int | None = None  # the offset committed after this batch, if it moved


class _Acknowledged:
    """The part of a delivery report :class:`Ticket` reads (only on errors)."""

    def topic(self) -> str | None:
        return None

    def value(self) -> bytes | None:
        return None


_ACK = _Acknowledged()


class NodeShell:
    """One node's engine with the shell's bookkeeping around it."""

    def __init__(self, name: str, engine: Engine, committed: int = 0) -> None:
        self.name = name
        self.engine = engine
        self.tracker = OffsetsTracker(committed)
        self._watermark_sent = -1
        self._unacked: list[Ticket] = []
        self._queued: list[tuple[Ticket, list[Write]]] = []

    @property
    def position(self) -> int:
        """The next offset to read."""
        return self.tracker.position

    @property
    def committed(self) -> int:
        """The committed offset: where a restart stops dropping outputs."""
        return self.tracker.committed

    def rewind(self, offset: int) -> None:
        """Re-read from ``offset`` with the state kept (the consumer redelivers)."""
        self.tracker.position = offset

    def held(self) -> tuple[int, int]:
        """(writes still queued, batches written but not acknowledged)."""
        return sum(len(w) for _, w in self._queued), len(self._unacked)

    @property
    def replay_until(self) -> int:
        """Outputs of records below this offset were written before the restart."""
        return self.tracker.replay_until

    def cut(
        self, records: Sequence[tuple[int, LogRecord]]
    ) -> list[Sequence[tuple[int, LogRecord]]]:
        """A batch of (offset, record), cut where it straddles the replay boundary:
        the parts to :meth:`process` in turn."""
        index = self.tracker.split([offset for offset, _ in records])
        if 0 < index < len(records):
            return [records[:index], records[index:]]
        return [records]

    def process(self, records: Sequence[tuple[int, LogRecord]], hold: Hold) -> Batch:
        """Read ``records`` (offset, record), one part of :meth:`cut`, as one batch."""
        messages = [message for _, record in records for message in record]
        step = self.engine.step(messages)
        ticket = self.tracker.processed(records[-1][0])
        batch = Batch(records[0][0], records[-1][0], step, [], replayed=ticket is None)
        if ticket is None:  # replay (§6.1): written before the restart
            batch.writes = self._writes(step.outputs, watermark=False)
            return batch
        batch.writes = writes = self._writes(step.outputs, watermark=True)
        ticket.sent(len(writes))
        if hold is Hold.WRITES:
            self._queued.append((ticket, writes))
            return batch
        batch.written = writes
        if hold is Hold.ACKS:
            self._unacked.append(ticket)
            return batch
        self._acknowledge(ticket, len(writes))
        batch.commit = self._commit()
        return batch

    def flush(self) -> tuple[list[Write], int | None]:
        """The producer writes its queue and every acknowledgement comes back: the
        writes to apply now, and the offset committed, if it moved."""
        written: list[Write] = []
        for ticket, writes in self._queued:
            written.extend(writes)
            self._acknowledge(ticket, len(writes))
        for ticket in self._unacked:
            self._acknowledge(ticket, ticket.outstanding)
        self._queued.clear()
        self._unacked.clear()
        return written, self._commit()

    def crash(self) -> int:
        """The process dies: how many queued writes are lost (the committed offset and
        the writes the broker has stay)."""
        lost = self.held()[0]
        self._queued.clear()
        self._unacked.clear()
        return lost

    # ------------------------------------------------------------------ internals

    def _acknowledge(self, ticket: Ticket, count: int) -> None:
        for _ in range(count):
            ticket.on_delivery(None, _ACK)

    def _commit(self) -> int | None:
        target = self.tracker.target()
        if target is not None:
            self.tracker.committed_at(target)
        return target

    def _writes(self, outputs: Sequence[Output], *, watermark: bool) -> list[Write]:
        """The records the shell writes for a batch's outputs, in the shell's order."""
        engine = self.engine
        layer = engine.partition
        control: dict[str, list[Message]] = {}
        writes: list[Write] = []
        deliveries: list[Write] = []
        for output in outputs:
            message = output.message
            if message.messageType is MessageType.DELIVERY:
                (delivered,) = decode_record(encode_delivery(message))
                deliveries.append(ToDeliveries(output.topic, delivered))
            elif message.messageType is MessageType.PARTITION_DELIVERY:
                assert layer is not None and message.timeStamp is not None
                item = LayerDelivery(layer, message.timeStamp, message.messageID, message)
                deliveries.append(ToLayers(self.name, item))
            else:
                control.setdefault(output.topic, []).append(message)
        for target, messages in control.items():
            for record in pack_bundles(
                messages,
                sender_id=engine.node_id,
                sent_from=engine.topic,
                protocol=engine.algorithm.value,
                partition=layer,
            ):
                writes.append(ToLog(node_name(target, layer), tuple(decode_record(record))))
        writes.extend(deliveries)
        if watermark and layer is not None:
            mark = engine.watermark()
            if mark != self._watermark_sent:
                writes.append(ToLayers(self.name, LayerWatermark(layer, mark)))
                self._watermark_sent = mark
        return writes
