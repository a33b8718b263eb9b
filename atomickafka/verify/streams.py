"""What the simulators put in Kafka's place: one clock, partitions of records, and the
reader a client runs on a delivery stream.

- :class:`SimClock`: simulated time. One scheduler step is one millisecond of log time,
  from :data:`BASE_LOG_MS` on; when nothing is left to do but wait for a held message
  (§4.11), time jumps to when it is due.
- :class:`Log`: one Kafka partition. Every record appended gets the next offset and the
  clock's time as its log append time (input logs are ``LogAppendTime`` topics), so the
  engine's time bounds (§4.11) and its memory window (§4.13) see what they see on Kafka.
- :func:`encode_message`, :func:`decoded_log`: a message as its writer puts it in a
  log, and a log's messages as a node decodes them.
- :class:`StreamReader`: a client of one delivery stream (or a merger's view of a
  layer's stream). It takes only Deliveries of its topic (with a signer, only validly
  signed ones) and drops anything at or below the last ``(timeStamp, layer,
  messageID)`` it read: the repeats a node writes again after a crash in at-least-once
  mode. A dropped record that is not an exact repeat of one already read is an
  *anomaly*: the order the node wrote is not the order a client can read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, cast

from atomickafka.core.raw import decode_any
from atomickafka.core.reader import PlainRecord, delivery_order_key, read_delivery
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    encode_bundle,
    encode_client,
    encode_delivery,
    encode_tick,
)

__all__ = [
    "BASE_LOG_MS",
    "CONTROL_PREFIX",
    "INPUT_PREFIX",
    "Log",
    "SimClock",
    "StreamReader",
    "decoded_log",
    "encode_message",
    "stated_protocol",
]

#: Log time (ms since the epoch) at step 0: late 2026, a realistic magnitude for §4.11.
BASE_LOG_MS: Final = 1_795_000_000_000
#: The prefix of every input log's Kafka topic (the split layout).
INPUT_PREFIX: Final = "atomickafka-in."
#: Where a node's control log is (kafka/topics.py's, §7).
CONTROL_PREFIX: Final = "atomickafka-ctl."


class SimClock:
    """Simulated time shared by every log and node of a run."""

    def __init__(self, start_ms: int = BASE_LOG_MS) -> None:
        self.step = 0
        self.now_ms = start_ms

    def advance(self) -> int:
        """One more scheduler step, one millisecond later; returns the step number."""
        self.step += 1
        self.now_ms += 1
        return self.step

    def jump_to(self, ms: int) -> None:
        """Let time pass until ``ms`` (nothing happens meanwhile)."""
        self.now_ms = max(self.now_ms, ms)

    @property
    def wall_s(self) -> float:
        """The time in seconds, as a node's shell reads its wall clock."""
        return self.now_ms / 1000


class Log:
    """One partition of a Kafka topic: records with offsets and log append times."""

    def __init__(self, topic: str, partition: int, clock: SimClock) -> None:
        self.topic = topic
        self.partition = partition
        self.clock = clock
        self.records: list[PlainRecord] = []

    def __len__(self) -> int:
        return len(self.records)

    def append(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> PlainRecord:
        """Append a record now; returns it as a consumer will read it."""
        record = PlainRecord(
            value,
            topic=self.topic,
            partition=self.partition,
            offset=len(self.records),
            key=key,
            headers=list(headers),
            timestamp_ms=self.clock.now_ms,
        )
        self.records.append(record)
        return record

    def copy_of(self, index: int) -> PlainRecord:
        """Append record ``index`` again, byte for byte (a writer's retry)."""
        old = self.records[index]
        return self.append(old.value(), key=old.key(), headers=_pairs(old))

    def read(self, start: int, count: int) -> list[PlainRecord]:
        """Up to ``count`` records from offset ``start``."""
        return self.records[start : start + count]


def _pairs(record: PlainRecord) -> list[tuple[str, bytes]]:
    return [(k, v) for k, v in record.headers() or () if isinstance(v, bytes)]


class StreamReader:
    """A client reading ``topic``'s deliveries from a :class:`Log` (see the module)."""

    def __init__(self, topic: str, log: Log, signer: Signer | None = None) -> None:
        self.topic = topic
        self.log = log
        self.signer = signer
        self.position = 0
        #: Every delivery record of the topic, in the stream's order (repeats included).
        self.raw: list[Message] = []
        #: What the client shows: repeats dropped.
        self.read: list[Message] = []
        self.repeats = 0
        self.forged = 0
        #: Offsets of records copied in by chaos (a writer's retry): not the node's own.
        self.copies: set[int] = set()
        self.anomalies: list[str] = []
        self._last: tuple[int, int, str] | None = None
        self._seen: dict[str, tuple[int | None, bytes | None]] = {}

    def poll(self) -> list[Message]:
        """Read what was appended since the last poll; return the new deliveries."""
        new: list[Message] = []
        records = self.log.records
        while self.position < len(records):
            record = records[self.position]
            self.position += 1
            message = read_delivery(record, at=self.topic)
            if message is None:
                continue
            if self.signer is not None and self.signer.problem(
                record.topic(), record.key(), record.value(), record.headers()
            ):
                self.forged += 1
                continue
            copy = record.offset() in self.copies
            if not copy:
                self.raw.append(message)
            key = delivery_order_key(message)
            if self._last is not None and key <= self._last:
                self._dropped(message, record.offset(), copy)
                continue
            self._last = key
            self._seen[message.messageID] = (message.timeStamp, message.value)
            self.read.append(message)
            new.append(message)
        return new

    def _dropped(self, message: Message, offset: int, copy: bool) -> None:
        self.repeats += not copy
        if self._seen.get(message.messageID) != (message.timeStamp, message.value):
            self.anomalies.append(
                f"{self.topic}@{offset}: {message.messageID}@{message.timeStamp} is below "
                f"{self._last} and not a repeat of a delivery read before"
            )


def decoded_log(records: Sequence[PlainRecord]) -> list[Message]:
    """The messages of ``records`` as a node decodes them; undecodable ones left out."""
    out: list[Message] = []
    for record in records:
        raw = record.value()
        if raw is None:
            continue
        try:
            out.extend(
                decode_any(
                    raw,
                    record.key(),
                    record.headers(),
                    log_time=record.timestamp()[1],
                    origin=record.offset(),
                )
            )
        except MessageError:
            continue
    return out


def stated_protocol(protocol: str | None) -> str:
    """A bundle header's protocol as the writer stated it: ``None`` is written as JSON
    null, a writer that names none (the engine refuses its control messages)."""
    return cast(str, protocol)


def encode_message(message: Message) -> bytes:
    """``message`` as the record its writer puts in a log: a ClientMessage or Delivery
    as itself, a Tick as a Tick, a control message in a Bundle of one."""
    kind = message.messageType
    if kind is MessageType.CLIENT:
        return encode_client(message)
    if kind is MessageType.TICK:
        return encode_tick(message.senderID, message.timeStamp or 0, message.partitionID)
    if kind in (MessageType.DELIVERY, MessageType.PARTITION_DELIVERY):
        return encode_delivery(message)
    return encode_bundle(
        [message],
        sender_id=message.senderID,
        sent_from=message.sentFromTopic or "",
        protocol=stated_protocol(message.protocol),
        partition=message.partitionID,
    )
