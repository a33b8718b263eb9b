"""One lenient reader of AtomicKafka's records, for every tool that reads them.

A node decodes its own input strictly (:func:`~atomickafka.core.wire.decode_record`)
and sets aside what it cannot take, with the reason. Everything else that reads
AtomicKafka's topics -- the filtering client, ``tail``, ``status``, the merger when it
resumes, the bench and the evaluation -- reads records that someone else wrote, and
must never fail on one: it takes what it understands and skips the rest. This module is
the one place that knows how to find, in a Kafka record,

- a Delivery (:func:`read_delivery`), the message a delivery topic holds, and whether
  the topic's own node or merger can have written it (:func:`delivery_of`);
- what any record holds, cheaply (:func:`peek`): its type, writer and inner messages
  (a Bundle's header line only; its values are not parsed);
- a dead letter's reason and origin (:func:`read_dead_letter`).

None of these raises on a record's contents. A wire-format change is an edit here and in
:mod:`~atomickafka.core.wire`, nowhere else. (The order checker and the Spark job keep
their own, independent parsers on purpose; contract tests hold them to this format.)

Records are read through :class:`KafkaRecord`, the part of confluent-kafka's ``Message``
interface a reader needs, so a consumed message is passed as it is; :class:`PlainRecord`
is the same thing as plain data, for tests and simulators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

import orjson

from atomickafka.core.compact import compact_writer, decode_compact, is_compact
from atomickafka.core.raw import H_FROM, H_ID, H_SENDER, H_TS, decode_any, is_raw
from atomickafka.core.reasons import Reason
from atomickafka.core.signing import Signer
from atomickafka.core.timebounds import CLOCK_LEAD_US
from atomickafka.core.wire import Message, MessageError, MessageType

__all__ = [
    "DEAD_LETTER_CODE_HEADER",
    "DEAD_LETTER_ERROR_HEADER",
    "DEAD_LETTER_MESSAGES_HEADER",
    "DEAD_LETTER_OFFSET_HEADER",
    "DEAD_LETTER_SOURCE_HEADER",
    "DEAD_LETTER_TRUNCATED_HEADER",
    "DELIVERY_LEAD_US",
    "TYPE_HEADER",
    "UNDECODABLE",
    "DeadLetter",
    "Header",
    "Headers",
    "InnerMessage",
    "KafkaRecord",
    "Peek",
    "PlainRecord",
    "Unaccepted",
    "declares_delivery",
    "delivery_of",
    "delivery_order_key",
    "delivery_writers",
    "header_value",
    "peek",
    "read_dead_letter",
    "read_delivery",
    "read_messages",
]

#: Record header naming the record's ``messageType`` (set in the shared layout, where
#: one topic holds every kind), so that readers skip records without parsing them.
TYPE_HEADER: Final = "atomickafka-type"
#: Headers of a dead letter (``atomickafka-dlq.T``): why (as prose, and as the code of
#: its :class:`~atomickafka.core.reasons.Reason`), from where, which messages.
DEAD_LETTER_ERROR_HEADER: Final = "atomickafka-error"
DEAD_LETTER_CODE_HEADER: Final = "atomickafka-error-code"
DEAD_LETTER_SOURCE_HEADER: Final = "atomickafka-source"
DEAD_LETTER_OFFSET_HEADER: Final = "atomickafka-offset"
DEAD_LETTER_MESSAGES_HEADER: Final = "atomickafka-messages"
DEAD_LETTER_TRUNCATED_HEADER: Final = "atomickafka-truncated-from"
#: :attr:`Peek.kind` of a record whose value is not a JSON object (nor a Bundle).
UNDECODABLE: Final = "<undecodable>"

_DELIVERY_KINDS: Final = frozenset({MessageType.DELIVERY, MessageType.PARTITION_DELIVERY})
_DELIVERY_HEADER_VALUES: Final = frozenset(
    {MessageType.DELIVERY.value.encode(), MessageType.PARTITION_DELIVERY.value.encode()}
)

Header = tuple[str, str | bytes | None]
#: Headers as confluent-kafka gives them: a list of pairs (or, when produced, a dict).
Headers = Sequence[Header] | Mapping[str, str | bytes | None]


class KafkaRecord(Protocol):
    """What a reader needs of a consumed Kafka record (confluent-kafka's ``Message``
    has all of it)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> Headers | None: ...
    def timestamp(self) -> tuple[int, int]: ...


class PlainRecord:
    """A Kafka record as plain data, read through the :class:`KafkaRecord` interface."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        value: bytes | None,
        *,
        topic: str = "",
        partition: int = 0,
        offset: int = 0,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        self._value = value
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._headers = list(headers) if headers else None
        self._timestamp = timestamp_ms

    def topic(self) -> str:
        """The Kafka topic."""
        return self._topic

    def partition(self) -> int:
        """The partition."""
        return self._partition

    def offset(self) -> int:
        """The offset within the partition."""
        return self._offset

    def key(self) -> bytes | None:
        """The Kafka key."""
        return self._key

    def value(self) -> bytes | None:
        """The record's value."""
        return self._value

    def headers(self) -> list[Header] | None:
        """The record's headers, ``None`` when it has none (as confluent-kafka)."""
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """``(type, milliseconds)``: type 1 (create time) when known, else ``(0, -1)``."""
        return (0, -1) if self._timestamp is None else (1, self._timestamp)

    def __repr__(self) -> str:
        return (
            f"PlainRecord({self._topic}[{self._partition}]@{self._offset}, "
            f"{(self._value or b'')[:60]!r})"
        )


def header_value(record: KafkaRecord, name: str) -> bytes | None:
    """The value of header ``name`` of ``record`` (the first one), or ``None``."""
    headers = record.headers()
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in pairs:
        if key == name:
            return value if isinstance(value, bytes) else None
    return None


# ---------------------------------------------------------------------------- messages


def read_messages(record: KafkaRecord) -> list[Message] | None:
    """Every message ``record`` holds, strictly decoded (the raw form or JSON), or
    ``None`` when it is not a valid AtomicKafka record (a node would set it aside)."""
    try:
        return decode_any(record.value(), record.key(), _header_list(record))
    except (MessageError, ValueError):
        return None


def _header_list(record: KafkaRecord) -> list[tuple[str, str | bytes | None]] | None:
    headers = record.headers()
    if not headers:
        return None
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def declares_delivery(record: KafkaRecord) -> bool:
    """True when ``record``'s type header names a Delivery. Only the shared layout sets
    the header; there a node's input log holds its own deliveries, which it skips unread."""
    return header_value(record, TYPE_HEADER) in _DELIVERY_HEADER_VALUES


def read_delivery(record: KafkaRecord, *, at: str | None = None) -> Message | None:
    """The Delivery (or a layer's PartitionDelivery) ``record`` holds, else ``None``.

    ``None`` for everything else: control traffic and client records (the shared
    layout), watermarks, records that are not AtomicKafka's, malformed ones. With
    ``at``, only a delivery written by topic ``at``'s own node or merger counts (its
    ``sentFromTopic`` is ``at``): nothing else may deliver into ``at``.
    """
    kind = header_value(record, TYPE_HEADER)
    if kind is not None and kind not in _DELIVERY_HEADER_VALUES:
        return None  # a client record or a bundle, in the shared layout
    messages = read_messages(record)
    if messages is None or len(messages) != 1:
        return None
    (message,) = messages
    if message.messageType not in _DELIVERY_KINDS or message.timeStamp is None:
        return None
    if message.value is None or (at is not None and message.sentFromTopic != at):
        return None
    return message


#: How far a genuine delivery's timestamp can be ahead of its record's Kafka time (µs).
#: A node applies a timestamp at most :data:`~atomickafka.core.timebounds.CLOCK_LEAD_US`
#: ahead of its log's time (§4.11), its proposals are Lamport counters above that, and
#: the delivery is written after the log's records that decided it; an hour more allows
#: for the skew between the brokers' clock (the log's time) and the clock that stamped
#: the delivery record (its writer's host, unless the topic is stamped by the broker).
DELIVERY_LEAD_US: Final = CLOCK_LEAD_US + 3_600_000_000


class Unaccepted(StrEnum):
    """Why a record of a delivery topic is not one of its deliveries (:func:`delivery_of`)."""

    #: It holds no delivery of the topic at all (a control record of the shared layout,
    #: a record that is not AtomicKafka's).
    SKIPPED = "skipped"
    #: A delivery its topic's node or merger cannot have written: another writer's id,
    #: a destination list without the topic, or a timestamp further ahead of the record's
    #: time than any node's clock can be (:data:`DELIVERY_LEAD_US`).
    FOREIGN = "foreign"
    #: With signing on: not validly signed (§4.14).
    FORGED = "forged"


def delivery_of(
    record: KafkaRecord,
    topic: str,
    *,
    writers: frozenset[str] | None = None,
    signer: Signer | None = None,
    addressed: bool = True,
) -> Message | Unaccepted:
    """The delivery of ``topic`` that ``record`` holds, or why it holds none that
    ``topic``'s node or merger (``writers``: their ids, by default
    :func:`delivery_writers`) wrote. Without a signer a writer that copies the node's
    id and a plausible timestamp passes: only signing authenticates (§4.14).
    ``addressed=False`` keeps a delivery whose destinations do not name ``topic``
    (the live audit reports it as a violation, §10.1 rule 2)."""
    message = read_delivery(record, at=topic)
    if message is None:
        return Unaccepted.SKIPPED
    if message.senderID not in (delivery_writers(topic) if writers is None else writers):
        return Unaccepted.FOREIGN
    if signer is not None and signer.problem(
        record.topic() or topic, record.key(), record.value(), record.headers()
    ):
        return Unaccepted.FORGED
    if (addressed and topic not in message.topic) or _ahead_of_its_time(record, message):
        return Unaccepted.FOREIGN
    return message


def _ahead_of_its_time(record: KafkaRecord, message: Message) -> bool:
    """True when the delivery's timestamp is further ahead of its record's Kafka time
    than :data:`DELIVERY_LEAD_US` (a record without a time is not judged)."""
    _, time_ms = record.timestamp()
    stamp = message.timeStamp
    return time_ms > 0 and stamp is not None and stamp > time_ms * 1000 + DELIVERY_LEAD_US


def delivery_writers(topic: str) -> frozenset[str]:
    """The sender ids that write deliveries into ``topic``: its node (unpartitioned)
    and its merger (partitioned). A delivery from anyone else is not AtomicKafka's."""
    return frozenset({f"node-{topic}", f"merger-{topic}"})


def delivery_order_key(message: Message) -> tuple[int, int, str]:
    """A delivery's place in the final order: ``(timeStamp, layer, messageID)``; the
    layer of an unpartitioned topic's delivery is 0 (docs/DESIGN.md §8.1)."""
    assert message.timeStamp is not None
    return (message.timeStamp, message.partitionID or 0, message.messageID)


# ---------------------------------------------------------------------------- peeking


@dataclass(frozen=True, slots=True)
class InnerMessage:
    """One message of a record as :func:`peek` sees it (values are not parsed)."""

    kind: str
    message_id: str | None
    timestamp: int | None
    sent_from: str | None


@dataclass(frozen=True, slots=True)
class Peek:
    """What a record holds, read cheaply: for a Bundle only its header line.

    ``kind`` is the ``messageType`` as found (``Bundle`` for a bundle), ``"<none>"``
    for a JSON object without one, :data:`UNDECODABLE` for anything else.
    """

    kind: str
    sender_id: str | None
    sent_from: str | None
    message_id: str | None  # of a single-message record; None for a bundle
    inner: tuple[InnerMessage, ...]
    size: int

    @property
    def is_bundle(self) -> bool:
        """True for a Bundle record."""
        return self.kind == MessageType.BUNDLE.value


def peek(record: KafkaRecord) -> Peek:
    """Type, writer and inner messages of ``record``, without decoding values; never
    raises."""
    raw = record.value()
    size = len(raw) if raw else 0
    headers = _header_list(record)
    if headers and is_raw(headers):
        return _peek_raw(record, size)
    if is_compact(raw):
        return _peek_compact(raw, size)
    obj = _json_object(raw)
    if obj is None:
        return Peek(UNDECODABLE, None, None, None, (), size)
    kind = _text(obj.get("messageType")) or "<none>"
    sender = _text(obj.get("senderID"))
    sent_from = _text(obj.get("sentFromTopic"))
    if kind == MessageType.BUNDLE.value:
        entries = obj.get("messages")
        items = entries if isinstance(entries, list) else []
        inner = tuple(_inner(item, sent_from) for item in items)
        return Peek(kind, sender, sent_from, None, inner, size)
    one = _inner(obj, sent_from)
    return Peek(kind, sender, sent_from, one.message_id, (one,), size)


def _peek_raw(record: KafkaRecord, size: int) -> Peek:
    """What a raw-form record holds, from its headers (its value is the user's)."""

    def text(name: str) -> str | None:
        value = header_value(record, name)
        return None if value is None else value.decode(errors="replace")

    kind = text(TYPE_HEADER) or "<none>"
    sent_from = text(H_FROM)
    stamp = text(H_TS)
    inner = InnerMessage(
        kind, text(H_ID), int(stamp) if stamp and _digits(stamp) else None, sent_from
    )
    return Peek(kind, text(H_SENDER), sent_from, inner.message_id, (inner,), size)


def _peek_compact(raw: bytes | None, size: int) -> Peek:
    """What a compact control record holds (§3.9): a Bundle's messages or one Tick;
    :data:`UNDECODABLE`, with the writer its prefix names, when it is not valid."""
    try:
        messages = decode_compact(raw or b"")
    except MessageError:
        return Peek(UNDECODABLE, None, compact_writer(raw), None, (), size)
    first = messages[0]
    inner = tuple(
        InnerMessage(m.messageType.value, m.messageID, m.timeStamp, m.sentFromTopic)
        for m in messages
    )
    if first.messageType is MessageType.TICK:
        return Peek(first.messageType.value, first.senderID, None, first.messageID, inner, size)
    return Peek(MessageType.BUNDLE.value, first.senderID, first.sentFromTopic, None, inner, size)


def _inner(item: object, sent_from: str | None) -> InnerMessage:
    if not isinstance(item, dict):
        return InnerMessage(UNDECODABLE, None, None, sent_from)
    stamp = item.get("timeStamp")
    return InnerMessage(
        kind=_text(item.get("messageType")) or "<none>",
        message_id=_text(item.get("messageID")),
        timestamp=stamp if type(stamp) is int else None,
        sent_from=sent_from,
    )


def _json_object(raw: bytes | None) -> dict[str, object] | None:
    """The record's JSON object; of a bundle, its header line (the values follow the
    newline as raw bytes)."""
    if not raw:
        return None
    end = raw.find(b"\n")
    try:
        obj = orjson.loads(raw if end < 0 else raw[:end])
    except orjson.JSONDecodeError:
        try:  # a single JSON object whose text holds a newline
            obj = orjson.loads(raw) if end >= 0 else None
        except orjson.JSONDecodeError:
            return None
    return obj if isinstance(obj, dict) else None


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # the thesis's numeric sender ids
    return None


# ---------------------------------------------------------------------------- dead letters


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record a node or merger set aside (``atomickafka-dlq.T``), and why."""

    reason: str
    source: str | None  # "<kafka topic>/<partition>" of the record set aside, if any
    source_offset: int | None
    #: The refused messages of that record, when known: its messages header, else the
    #: ``messageID`` of the note a node writes in place of a record (an aborted or
    #: held message).
    message_ids: tuple[str, ...]
    truncated_from: int | None  # the original size, when the value was cut
    value: bytes | None
    #: Why, as a code: ``None`` when the letter carries no code this release knows (an
    #: older writer's, or a newer one's).
    code: Reason | None = None


def _digits(text: str) -> bool:
    """True when ``int(text)`` reads ``text`` as ASCII digits (``"²".isdigit()`` is
    true too, and ``int("²")`` raises)."""
    return text.isascii() and text.isdigit()


def read_dead_letter(record: KafkaRecord) -> DeadLetter:
    """The dead letter ``record`` holds; fields it lacks are empty, never an error."""

    def text(name: str) -> str | None:
        raw = header_value(record, name)
        return None if raw is None else raw.decode(errors="replace")

    def number(name: str) -> int | None:
        raw = text(name)
        return int(raw) if raw is not None and _digits(raw.removeprefix("-")) else None

    ids = text(DEAD_LETTER_MESSAGES_HEADER)
    message_ids = tuple(i for i in (ids or "").split(",") if i)
    if ids is None:
        note = _json_object(record.value())
        noted = None if note is None else note.get("messageID")
        message_ids = (noted,) if isinstance(noted, str) and noted else ()
    return DeadLetter(
        reason=text(DEAD_LETTER_ERROR_HEADER) or "(no reason given)",
        source=text(DEAD_LETTER_SOURCE_HEADER),
        source_offset=number(DEAD_LETTER_OFFSET_HEADER),
        message_ids=message_ids,
        truncated_from=number(DEAD_LETTER_TRUNCATED_HEADER),
        value=record.value(),
        code=_reason(text(DEAD_LETTER_CODE_HEADER)),
    )


def _reason(code: str | None) -> Reason | None:
    """The :class:`Reason` a dead letter's code header names, if any."""
    try:
        return None if code is None else Reason(code)
    except ValueError:
        return None
