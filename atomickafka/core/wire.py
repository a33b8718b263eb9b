"""The AtomicKafka wire format (``docs/DESIGN.md`` §3) and its codec.

Three kinds of Kafka record carry AtomicKafka messages; the field names are the
thesis's (Listings 4.3 and 4.4):

ClientMessage
    One JSON object, written by a client (or copied by a relaying node) into a
    topic's input log: ``messageID``, ``senderID``, ``messageType``, ``value`` (any
    JSON value), ``topic`` (the destination list), ``formatVersion`` and, for copies,
    ``sentFromTopic``.
DeliveryMessage
    One JSON object per delivered message, in final order, with ``timeStamp`` (the
    final timestamp), ``sentFromTopic`` (the delivering topic) and ``protocol``; any
    plain Kafka consumer can read it.
Bundle
    The control messages (``NotifyMessage``, ``AckMessage``, ``DecidedMessage``,
    ``AbortMessage``, relayed ``ClientMessage`` copies) that one batch of one node
    addresses to one topic, in one record: a first line holding a JSON header
    ``{"messageType": "Bundle", "senderID", "sentFromTopic", "protocol",
    "formatVersion", "messages": [...]}`` and, after the newline, the raw JSON values
    of the messages that carry one, back to back; each such message gives its
    ``valueBytes``. Values travel as opaque bytes: no hop parses or re-encodes them.

A ``MembersMessage`` (one JSON object with ``topic``: the topics that have a node),
written by a node into its own input log, says which destinations exist (§4.9.5).
A ``TickMessage`` (one JSON object with ``timeStamp``) moves a partition layer's
clock; the merger writes it. A ``WatermarkMessage`` is a layer's promise to its merger
that it delivers nothing below its ``timeStamp`` any more (§8).

Inside the core a value is ``bytes``: the JSON text of the payload (``b"null"`` is
JSON null); ``None`` means "not carried here". A node turns a ClientMessage's value
into bytes once, on first hearing, with orjson: numbers then read as orjson reads them
(integers beyond 64 bits become floats). The ``digest`` of a value names the message
version: records about one ``messageID`` with another digest or destination list are
about a different message that reuses the id (§4.9.4).

:func:`decode_record` validates strictly and names the offending field; unknown fields
are tolerated, so newer writers do not break older readers, but a ``formatVersion``
newer than :data:`FORMAT_VERSION` is refused. Destination lists are sets, normalised to
a sorted tuple without repeats, which is also what makes every node iterate them in the
same order.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any, Final, NamedTuple, Protocol

import orjson

from atomickafka.errors import AtomicKafkaError

__all__ = [
    "CONTROL_TYPES",
    "FORMAT_VERSION",
    "MAX_ID_LENGTH",
    "MAX_RECORD_BYTES",
    "MAX_TIMESTAMP",
    "MAX_VALUE_BYTES",
    "BundleEncoder",
    "Message",
    "MessageError",
    "MessageType",
    "b64decode_field",
    "check_json_value",
    "client_message",
    "client_value",
    "decode_record",
    "encode_bundle",
    "encode_client",
    "encode_delivery",
    "encode_members",
    "encode_tick",
    "encode_watermark",
    "envelope_bytes",
    "is_valid_topic_name",
    "message_digest",
    "pack_bundles",
    "parse_destinations",
    "value_bytes",
    "value_digest",
    "with_arrived",
    "with_seq",
]


class MessageType(StrEnum):
    """The ``messageType`` field: what a message is for."""

    CLIENT = "ClientMessage"
    NOTIFY = "NotifyMessage"
    ACK = "AckMessage"
    DECIDED = "DecidedMessage"
    ABORT = "AbortMessage"
    DELIVERY = "DeliveryMessage"
    PARTITION_DELIVERY = "PartitionDeliveryMessage"
    TICK = "TickMessage"
    WATERMARK = "WatermarkMessage"
    MEMBERS = "MembersMessage"
    BUNDLE = "Bundle"


#: Messages exchanged between nodes only; a filtering client never shows them.
CONTROL_TYPES: Final = frozenset(
    {MessageType.NOTIFY, MessageType.ACK, MessageType.DECIDED, MessageType.ABORT}
)
#: What a bundle may hold.
BUNDLED_TYPES: Final = CONTROL_TYPES | {MessageType.CLIENT}
#: Types whose ``timeStamp`` is mandatory.
_TIMESTAMPED: Final = frozenset(
    {
        MessageType.NOTIFY,
        MessageType.ACK,
        MessageType.DECIDED,
        MessageType.DELIVERY,
        MessageType.PARTITION_DELIVERY,
        MessageType.TICK,
        MessageType.WATERMARK,
    }
)

#: The format this code writes. Version 1 is the thesis's (no ``formatVersion`` field,
#: one record per control message); its ClientMessages are still read.
FORMAT_VERSION: Final = 2
#: Largest timestamp on the wire: the largest integer every JSON reader holds exactly.
MAX_TIMESTAMP: Final = 2**53 - 1
MAX_ID_LENGTH: Final = 512
#: Default limit on a value's JSON text. Its Notify, bundle and Delivery copies then fit
#: the producer's default ``message.max.bytes`` (1,000,000) with room for the fields.
MAX_VALUE_BYTES: Final = 900_000
#: Largest record a node produces: librdkafka's default ``message.max.bytes``.
MAX_RECORD_BYTES: Final = 1_000_000
_TOPIC_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SHOWN: Final = 60
_BUNDLE_PREFIX: Final = b'{"messageType":"Bundle"'
#: ``Message.encoding`` of a value that is not JSON (raw form, §3.8).
BYTES_ENCODING: Final = "bytes"


class MessageError(AtomicKafkaError, ValueError):
    """A record that is not a valid AtomicKafka message.

    ``field`` names the offending field (``None`` when the record is not a JSON object at
    all) and ``reason`` says what was wrong; ``str(error)`` shows both and the offending
    value, shortened. ``index``: the message's place in a batch
    (:meth:`~atomickafka.client.AtomicKafkaClient.send_batch`), which ``str(error)``
    starts with (``values[3]: ...``); ``None`` otherwise.
    """

    def __init__(
        self, field: str | None, reason: str, value: object = None, *, index: int | None = None
    ) -> None:
        self.field = field
        self.reason = reason
        self.index = index
        shown = repr(value)
        if len(shown) > _SHOWN:
            shown = shown[: _SHOWN - 3] + "..."
        where = f"field {field!r}" if field else "record"
        text = f"{where}: {reason}"
        if value is not None:
            text += f" (got {shown})"
        if index is not None:
            text = f"values[{index}]: {text}"
        super().__init__(text)


class Message(NamedTuple):
    """One AtomicKafka message, as the core sees it.

    ``topic`` is the destination set (sorted, no repeats). ``value`` is the payload's
    JSON text, or ``None`` when this message does not carry it. ``timeStamp`` is a
    Lamport timestamp: a proposal on Notify/Ack, the final one on Decided/Delivery.
    ``digest`` names the message version (:func:`value_digest` of the value).
    ``protocol`` is the ordering protocol of the node that wrote a control message.
    A message's place in the final order is ``(timeStamp, messageID)``.
    """

    messageID: str
    messageType: MessageType
    topic: tuple[str, ...]
    value: bytes | None = None
    senderID: str = ""
    sentFromTopic: str | None = None
    timeStamp: int | None = None
    partitionID: int | None = None
    digest: str | None = None
    protocol: str | None = None
    #: When the client sent the message (its wall clock, milliseconds since the epoch);
    #: part of the message's version (the digest covers it). ``None``: not stated.
    sentAt: int | None = None
    #: A control message's place in its sender's output stream to this topic: the offset
    #: of the input record that caused it and its index among that record's outputs
    #: (§4.12). Strictly increasing per sending node, so a receiver drops repeats.
    seq: tuple[int, int] | None = None
    #: Local annotations, never written: the log append time (ms) and offset of the
    #: input record this message came in (§4.11, §4.12).
    logTime: int | None = None
    origin: int | None = None
    #: The Kafka key the client gave, and its own headers: carried to every destination
    #: and delivered unchanged (raw delivery form, §3.8).
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: ``None``: the value is one JSON text; ``"bytes"``: any bytes (raw form, §3.8).
    encoding: str | None = None
    #: On an Abort written in answer to a peer's record: that record's ``seq``. Only
    #: such an answer to its own proposal makes a destination drop a version it has
    #: proposed for (§4.9.4).
    answers: tuple[int, int] | None = None
    #: Local annotation, never written: for an input-log record a control log's marker
    #: applies (§7.1), the log append time at which it reached the input log (its
    #: ``logTime`` is the marker's, when it is applied). ``None``: it is applied where it
    #: stands in the log it reached.
    arrived: int | None = None


_new_tuple = tuple.__new__
_SEQ: Final = Message._fields.index("seq")
_ARRIVED: Final = Message._fields.index("arrived")


def with_seq(message: Message, seq: tuple[int, int]) -> Message:
    """``message._replace(seq=seq)``, without NamedTuple's keyword handling: a node
    numbers every control message it writes (§4.12), so this is on the hot path."""
    return _new_tuple(Message, (*message[:_SEQ], seq, *message[_SEQ + 1 :]))


def with_arrived(message: Message, arrived: int) -> Message:
    """``message._replace(arrived=arrived)``, the same way as :func:`with_seq`: the batch
    layer stamps every input-log record's messages with their arrival (§7.1)."""
    return _new_tuple(Message, (*message[:_ARRIVED], arrived, *message[_ARRIVED + 1 :]))


# ---------------------------------------------------------------------------- values


def value_bytes(value: Any) -> bytes:
    """The JSON text of a Python value, as a node carries it; raises :class:`MessageError`
    for what JSON cannot hold (e.g. integers beyond 64 bits, non-string keys)."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise MessageError("value", f"not a JSON value: {exc}", value) from None


def value_digest(value: bytes, sent_at: int | None = None) -> str:
    """A short, stable name for a message version's content: 16 hex digits of BLAKE2b
    over the value and, when stated, the send time (§3.2)."""
    if sent_at is None:
        return hashlib.blake2b(value, digest_size=8).hexdigest()
    return hashlib.blake2b(value + b"\0" + str(sent_at).encode(), digest_size=8).hexdigest()


def message_digest(
    value: bytes,
    sent_at: int | None = None,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
    encoding: str | None = None,
) -> str:
    """The digest of a message version's content: its value, send time, key, headers and
    encoding (§3.2); the same as :func:`value_digest` when there is no key, header or
    encoding."""
    if key is None and not headers and encoding is None:
        return value_digest(value, sent_at)
    parts = [value, str(sent_at).encode(), encoding.encode() if encoding else b"", key or b"-"]
    for name, data in headers:
        parts += [name.encode(), data]
    blob = b"".join(len(part).to_bytes(4, "big") + part for part in parts)
    return hashlib.blake2b(blob, digest_size=8).hexdigest()


def check_json_value(value: bytes, field: str = "value") -> bytes:
    """``value`` itself when it is one valid UTF-8 JSON text, else :class:`MessageError`
    (§3.1: every value a node carries is JSON, whatever path it came by)."""
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise MessageError(field, f"not a valid UTF-8 JSON value: {exc}", value[:60]) from None
    return value


def client_message(
    message_id: str,
    destinations: Iterable[str],
    value: Any,
    sender_id: str = "",
    partition: int | None = None,
    *,
    sent_at: int | None = None,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> Message:
    """A validated ClientMessage for ``value`` to ``destinations``, sent at ``sent_at``
    (the client's wall clock, ms) when given. ``value`` as ``bytes`` is carried as it is
    (raw form, any encoding); anything else is a JSON value."""
    data, encoding = client_value(message_id, value, sent_at)
    carried = tuple((str(n), bytes(v)) for n, v in headers)
    return Message(
        messageID=message_id,
        messageType=MessageType.CLIENT,
        topic=parse_destinations(destinations),
        value=data,
        senderID=sender_id,
        partitionID=partition,
        digest=message_digest(data, sent_at, key, carried, encoding),
        sentAt=sent_at,
        key=key,
        headers=carried,
        encoding=encoding,
    )


def client_value(message_id: str, value: Any, sent_at: int | None) -> tuple[bytes, str | None]:
    """What a ClientMessage carries of ``value``, and its encoding: ``bytes`` as they
    are (raw form, encoding ``bytes``), anything else as its JSON text (encoding
    ``None``); :class:`MessageError` for an invalid id, send time or JSON value."""
    _check_id("messageID", message_id)
    encoding = BYTES_ENCODING if isinstance(value, bytes | bytearray) else None
    data = bytes(value) if encoding else value_bytes(value)
    if sent_at is not None:
        _check_time("sentAt", sent_at)
    return data, encoding


# ---------------------------------------------------------------------------- names


def is_valid_topic_name(name: object) -> bool:
    """True when ``name`` is a legal Kafka topic name."""
    return (
        isinstance(name, str)
        and _TOPIC_NAME.fullmatch(name) is not None
        and name
        not in {
            ".",
            "..",
        }
    )


def parse_destinations(raw: object) -> tuple[str, ...]:
    """A destination list as the sorted tuple every node uses; :class:`MessageError` if
    it is empty or names something that is not a legal topic name. A lone string is a
    list of one."""
    if type(raw) is list or type(raw) is tuple:  # the hot path: a list seen before
        try:
            known = _KNOWN_DESTINATIONS.get(tuple(raw))
        except TypeError:  # an unhashable element: the checks below name it
            known = None
        if known is not None:
            return known
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, Mapping | bytes | bytearray) or not isinstance(raw, Iterable):
        raise MessageError("topic", "must be a list of topic names", raw)
    names: list[str] = []
    for name in raw:
        if not isinstance(name, str):
            raise MessageError("topic", "destination is not a valid Kafka topic name", name)
        names.append(name)
    key = tuple(names)
    known = _KNOWN_DESTINATIONS.get(key)
    if known is not None:
        return known
    if not key:
        raise MessageError("topic", "must name at least one destination topic", list(key))
    for name in key:
        if not is_valid_topic_name(name):
            raise MessageError("topic", "destination is not a valid Kafka topic name", name)
    normalised = tuple(sorted(set(key)))
    if len(_KNOWN_DESTINATIONS) >= _KNOWN_DESTINATIONS_MAX:
        _KNOWN_DESTINATIONS.clear()
    _KNOWN_DESTINATIONS[key] = normalised
    return normalised


#: Destination lists already validated and normalised; a node sees the same few sets
#: over and over, so this spares a regex match per topic per message.
_KNOWN_DESTINATIONS: dict[tuple[str, ...], tuple[str, ...]] = {}
_KNOWN_DESTINATIONS_MAX = 4096


def _check_id(field: str, value: object) -> str:
    if type(value) is str and 0 < len(value) <= MAX_ID_LENGTH:
        return value
    if not isinstance(value, str):
        raise MessageError(field, "must be a string", value)
    if not value or len(value) > MAX_ID_LENGTH:
        raise MessageError(field, f"must have 1 to {MAX_ID_LENGTH} characters", value)
    return value


def _timestamp(obj: dict[str, Any], required: bool, what: str) -> int | None:
    value = obj.get("timeStamp")
    if type(value) is int and 0 <= value <= MAX_TIMESTAMP:
        return value
    if value is None:
        if required:
            raise MessageError("timeStamp", f"required on {what}")
        return None
    if type(value) is not int or not 0 <= value <= MAX_TIMESTAMP:
        raise MessageError("timeStamp", f"must be an integer from 0 to {MAX_TIMESTAMP}", value)
    return value


def _check_time(field: str, value: object) -> int:
    if type(value) is int and 0 <= value <= MAX_TIMESTAMP:
        return value
    raise MessageError(field, f"must be an integer from 0 to {MAX_TIMESTAMP}", value)


def _optional_time(obj: dict[str, Any], field: str) -> int | None:
    value = obj.get(field)
    return None if value is None else _check_time(field, value)


def _optional_seq(obj: dict[str, Any], field: str) -> tuple[int, int] | None:
    value = obj.get(field)
    if value is None:
        return None
    if (
        type(value) is list
        and len(value) == 2
        and all(type(v) is int and 0 <= v <= MAX_TIMESTAMP for v in value)
    ):
        return (value[0], value[1])
    raise MessageError(field, "must be a list of two non-negative integers", value)


def _optional_partition(obj: dict[str, Any]) -> int | None:
    value = obj.get("partitionID")
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < 1 << 31:
        raise MessageError("partitionID", "must be a non-negative 32-bit integer", value)
    return value


def _optional_str(obj: dict[str, Any], field: str) -> str | None:
    value = obj.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MessageError(field, "must be a string", value)
    return value


def _sender(obj: dict[str, Any]) -> str:
    sender = obj.get("senderID", "")
    if isinstance(sender, int) and not isinstance(sender, bool):
        return str(sender)  # the thesis examples use numeric sender ids
    if not isinstance(sender, str):
        raise MessageError("senderID", "must be a string", sender)
    return sender


def _format_version(obj: dict[str, Any]) -> int:
    version = obj.get("formatVersion", 1)
    if type(version) is not int or version < 1:
        raise MessageError("formatVersion", "must be a positive integer", version)
    if version > FORMAT_VERSION:
        raise MessageError(
            "formatVersion",
            f"format {version} is newer than this node reads ({FORMAT_VERSION}); upgrade it",
            version,
        )
    return version


_TYPE_BY_NAME: Final = {str(t): t for t in MessageType}


def _message_type(obj: dict[str, Any], allowed: frozenset[MessageType]) -> MessageType:
    raw = obj.get("messageType")
    kind = _TYPE_BY_NAME.get(raw) if type(raw) is str else None
    if kind is None or kind not in allowed:
        names = ", ".join(sorted(allowed))
        raise MessageError("messageType", f"must be one of {names}", raw)
    return kind


# ---------------------------------------------------------------------------- decoding

_RECORD_TYPES: Final = frozenset(
    {
        MessageType.CLIENT,
        MessageType.DELIVERY,
        MessageType.PARTITION_DELIVERY,
        MessageType.TICK,
        MessageType.WATERMARK,
        MessageType.MEMBERS,
        MessageType.NOTIFY,
        MessageType.ACK,
        MessageType.DECIDED,
        MessageType.BUNDLE,
    }
)


def decode_record(
    data: bytes | str, *, log_time: int | None = None, origin: int | None = None
) -> list[Message]:
    """The messages one Kafka record value holds; :class:`MessageError` if it is invalid.

    A ClientMessage, Delivery or Tick record holds one message, a Bundle several. A
    format-1 (thesis) control record holds one message without a protocol; the engine
    sets such messages aside. ``log_time`` (the record's log append time, ms) and
    ``origin`` (its offset) annotate every message (§4.11, §4.12).
    """
    raw = data.encode() if isinstance(data, str) else data
    if raw.startswith(_BUNDLE_PREFIX):
        return _decode_bundle(raw, log_time, origin)
    obj = _json_object(raw)
    kind = _message_type(obj, _RECORD_TYPES)
    if kind is MessageType.BUNDLE:
        raise MessageError(None, "a Bundle must start with its header line")
    _format_version(obj)
    if kind in (MessageType.TICK, MessageType.WATERMARK):
        return [_tick_message(obj, kind, log_time, origin)]
    if kind is MessageType.MEMBERS:
        return [_members_message(obj, kind, log_time, origin)]
    return [_addressed_message(obj, kind, log_time, origin)]


def _tick_message(
    obj: dict[str, Any], kind: MessageType, log_time: int | None, origin: int | None
) -> Message:
    """A Tick or Watermark of a JSON record."""
    return Message(
        messageID=_check_id("messageID", obj.get("messageID", str(kind))),
        messageType=kind,
        topic=(),
        senderID=_sender(obj),
        timeStamp=_timestamp(obj, True, kind),
        partitionID=_optional_partition(obj),
        logTime=log_time,
        origin=origin,
    )


def _members_message(
    obj: dict[str, Any], kind: MessageType, log_time: int | None, origin: int | None
) -> Message:
    """A members record (§4.9.5) of a JSON record."""
    return Message(
        messageID=_check_id("messageID", obj.get("messageID", str(kind))),
        messageType=kind,
        topic=parse_destinations(obj.get("topic")),
        senderID=_sender(obj),
        protocol=_optional_str(obj, "protocol"),
        logTime=log_time,
        origin=origin,
    )


def _addressed_message(
    obj: dict[str, Any], kind: MessageType, log_time: int | None, origin: int | None
) -> Message:
    """A message of a JSON record that names an id and its destinations: a
    ClientMessage, Delivery or control message."""
    if "messageID" not in obj:
        raise MessageError("messageID", "is missing")
    message_id = _check_id("messageID", obj["messageID"])
    if "topic" not in obj:
        raise MessageError("topic", "is missing")
    destinations = parse_destinations(obj["topic"])
    extras = _extras(obj, "")
    if extras.encoding == BYTES_ENCODING:
        value: bytes | None = b64decode_field("valueBase64", obj.get("valueBase64"))
    else:
        value = value_bytes(obj["value"]) if "value" in obj else None
    if kind is MessageType.CLIENT and value is None:
        raise MessageError("value", "is missing (use null for no value)")
    sent_from = _optional_str(obj, "sentFromTopic")
    if kind in CONTROL_TYPES and sent_from is None:
        raise MessageError("sentFromTopic", f"required on {kind}")
    sent_at = _optional_time(obj, "sentAt")
    digest = (
        message_digest(value, sent_at, extras.key, extras.headers, extras.encoding)
        if value is not None
        else _optional_str(obj, "digest")
    )
    return Message(
        messageID=message_id,
        messageType=kind,
        topic=destinations,
        value=value,
        senderID=_sender(obj),
        sentFromTopic=sent_from,
        timeStamp=_timestamp(obj, kind in _TIMESTAMPED, kind),
        partitionID=_optional_partition(obj),
        digest=digest,
        protocol=_optional_str(obj, "protocol"),
        sentAt=sent_at,
        logTime=log_time,
        origin=origin,
        key=extras.key,
        headers=extras.headers,
        encoding=extras.encoding,
    )


class _Extras(NamedTuple):
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    encoding: str | None


def b64decode_field(field: str, text: object) -> bytes:
    """Bytes from a base64 field; :class:`MessageError` when it is not base64 text."""
    if not isinstance(text, str):
        raise MessageError(field, "must be base64 text", text)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MessageError(field, "is not valid base64", text) from None


def _extras(obj: dict[str, Any], where: str) -> _Extras:
    """A message's key, headers and encoding, from the JSON fields carrying them."""
    encoding = obj.get("encoding")
    if encoding not in (None, BYTES_ENCODING):
        raise MessageError(f"{where}encoding", "must be bytes (or absent: JSON)", encoding)
    key = b64decode_field(f"{where}key", obj["key"]) if obj.get("key") is not None else None
    raw_headers = obj.get("headers") or []
    if not isinstance(raw_headers, list):
        raise MessageError(f"{where}headers", "must be a list of [name, base64] pairs", raw_headers)
    headers = []
    for pair in raw_headers:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise MessageError(f"{where}headers", "must be a list of [name, base64] pairs", pair)
        headers.append((pair[0], b64decode_field(f"{where}headers", pair[1])))
    return _Extras(key, tuple(headers), encoding)


def _put_extras(out: dict[str, Any], message: Message) -> None:
    """Add a message's key, headers and encoding to a JSON record (when it has them)."""
    if message.encoding is not None:
        out["encoding"] = message.encoding
    if message.key is not None:
        out["key"] = base64.b64encode(message.key).decode()
    if message.headers:
        out["headers"] = [[n, base64.b64encode(v).decode()] for n, v in message.headers]


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MessageError(None, f"not valid JSON: {exc}", raw) from None
    if not isinstance(obj, dict):
        raise MessageError(None, "must be a JSON object", obj)
    return obj


def _decode_bundle(raw: bytes, log_time: int | None, origin: int | None) -> list[Message]:
    end = raw.find(b"\n")
    header = _json_object(raw if end < 0 else raw[:end])
    _format_version(header)
    sender = _sender(header)
    sent_from = _optional_str(header, "sentFromTopic")
    if sent_from is None:
        raise MessageError("sentFromTopic", "required on a Bundle")
    protocol = _optional_str(header, "protocol")
    partition = _optional_partition(header)
    entries = header.get("messages")
    if not isinstance(entries, list) or not entries:
        raise MessageError("messages", "must be a non-empty list", entries)
    body = memoryview(raw)[end + 1 :] if end >= 0 else memoryview(b"")
    position = 0
    out: list[Message] = []
    common = (sender, sent_from, protocol, partition, log_time, origin)
    for index, entry in enumerate(entries):
        fast = _fast_entry(entry, body, position, common)
        if fast is None:  # anything unusual: the checked path names what is wrong
            message, position = _checked_entry(entry, index, body, position, common)
        else:
            message, position = fast
        out.append(message)
    if position != len(body):
        raise MessageError("messages", f"{len(body) - position} bytes of the body are unclaimed")
    return out


#: What a bundle's messages share: sender, sending topic, protocol, layer, and the
#: record's log time and offset.
_Common = tuple[str, str, str | None, int | None, int | None, int | None]
_NO_HEADERS: Final[tuple[tuple[str, bytes], ...]] = ()


def _fast_entry(
    entry: object, body: memoryview, position: int, common: _Common
) -> tuple[Message, int] | None:
    """A bundle entry as this code writes it (no key, headers or encoding; every field
    of the expected type), decoded without building an error context per field: the
    hot path of a node's input. ``None`` for anything else, which
    :func:`_checked_entry` then decodes or refuses, naming the problem; the two agree
    on every entry both take."""
    if type(entry) is not dict:
        return None
    get = entry.get
    raw_kind = get("messageType")
    kind = _TYPE_BY_NAME.get(raw_kind) if type(raw_kind) is str else None
    if kind is None or kind not in BUNDLED_TYPES:
        return None
    if get("encoding") is not None or get("key") is not None or get("headers"):
        return None
    size = get("valueBytes")
    value: bytes | None = None
    if size is not None:
        value = _plain_value(size, body, position)
        if value is None:
            return None
    elif kind is MessageType.CLIENT:
        return None
    fields = _plain_fields(entry, kind, value)
    if fields is None or "topic" not in entry:
        return None
    message_id, ts, digest, sent_at, seq = fields
    answers = get("answers")
    if answers is not None:
        answers = _plain_seq(answers)
        if answers is None:
            return None
    sender, sent_from, protocol, partition, log_time, origin = common
    message = _new_tuple(
        Message,
        (
            message_id,
            kind,
            parse_destinations(entry["topic"]),  # its errors are the checked path's
            value,
            sender,
            sent_from,
            ts,
            partition,
            digest,
            protocol,
            sent_at,
            seq,
            log_time,
            origin,
            None,
            _NO_HEADERS,
            None,
            answers,
            None,  # arrived: set by the batch layer (§7.1)
        ),
    )
    return message, position + (size or 0)


def _plain_fields(
    entry: dict[str, Any], kind: MessageType, value: bytes | None
) -> tuple[str, int | None, str, int | None, tuple[int, int] | None] | None:
    """A bundle entry's id, timestamp, digest, send time and seq when each is of the
    expected type, or ``None``."""
    get = entry.get
    sent_at = get("sentAt")
    if sent_at is not None and not (type(sent_at) is int and 0 <= sent_at <= MAX_TIMESTAMP):
        return None
    digest = get("digest")
    if digest is None:
        if value is None:
            return None
        digest = message_digest(value, sent_at)
    elif type(digest) is not str:
        return None
    message_id = get("messageID")
    if type(message_id) is not str or not 0 < len(message_id) <= MAX_ID_LENGTH:
        return None
    ts = get("timeStamp")
    if ts is None:
        if kind in _TIMESTAMPED:
            return None
    elif type(ts) is not int or not 0 <= ts <= MAX_TIMESTAMP:
        return None
    seq = get("seq")
    if seq is not None:
        seq = _plain_seq(seq)
        if seq is None:
            return None
    return message_id, ts, digest, sent_at, seq


def _plain_value(size: object, body: memoryview, position: int) -> bytes | None:
    """The JSON value of ``size`` bytes at ``position`` of a bundle's body, or ``None``
    when it does not fit or is not JSON."""
    if type(size) is not int or size < 0 or position + size > len(body):
        return None
    value = bytes(body[position : position + size])
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return value


def _plain_seq(seq: object) -> tuple[int, int] | None:
    """A ``seq`` field of two integers in range as a tuple, or ``None``."""
    if type(seq) is not list or len(seq) != 2:
        return None
    first, second = seq
    if (
        type(first) is int
        and type(second) is int
        and 0 <= first <= MAX_TIMESTAMP
        and 0 <= second <= MAX_TIMESTAMP
    ):
        return (first, second)
    return None


def _checked_entry(
    entry: object, index: int, body: memoryview, position: int, common: _Common
) -> tuple[Message, int]:
    """One bundle entry, every field checked in turn (:class:`MessageError` names the
    first that is wrong); with the body's position after its value."""
    sender, sent_from, protocol, partition, log_time, origin = common
    if not isinstance(entry, dict):
        raise MessageError(f"messages[{index}]", "must be a JSON object", entry)
    kind = _message_type(entry, BUNDLED_TYPES)
    size = entry.get("valueBytes")
    value: bytes | None = None
    if size is not None:
        if type(size) is not int or size < 0 or position + size > len(body):
            raise MessageError(
                f"messages[{index}].valueBytes", "does not fit the bundle's body", size
            )
        value = bytes(body[position : position + size])
        position += size
    elif kind is MessageType.CLIENT:
        raise MessageError(f"messages[{index}].valueBytes", "required on a ClientMessage")
    extras = _extras(entry, f"messages[{index}].")
    if value is not None and extras.encoding is None:
        check_json_value(value, f"messages[{index}].value")
    sent_at = _optional_time(entry, "sentAt")
    digest = _optional_str(entry, "digest")
    if digest is None:
        if value is None:
            raise MessageError(f"messages[{index}].digest", f"required on {kind}")
        digest = message_digest(value, sent_at, extras.key, extras.headers, extras.encoding)
    if "topic" not in entry:
        raise MessageError(f"messages[{index}].topic", "is missing")
    message = Message(
        messageID=_check_id(f"messages[{index}].messageID", entry.get("messageID")),
        messageType=kind,
        topic=parse_destinations(entry["topic"]),
        value=value,
        senderID=sender,
        sentFromTopic=sent_from,
        timeStamp=_timestamp(entry, kind in _TIMESTAMPED, kind),
        partitionID=partition,
        digest=digest,
        protocol=protocol,
        sentAt=sent_at,
        seq=_optional_seq(entry, "seq"),
        logTime=log_time,
        origin=origin,
        key=extras.key,
        headers=extras.headers,
        encoding=extras.encoding,
        answers=_optional_seq(entry, "answers"),
    )
    return message, position


# ---------------------------------------------------------------------------- encoding


def encode_client(message: Message) -> bytes:
    """A ClientMessage record (a client's, or a relay's copy when ``sentFromTopic``)."""
    out: dict[str, Any] = {
        "messageID": message.messageID,
        "senderID": message.senderID,
        "messageType": MessageType.CLIENT,
    }
    _put_value(out, message)
    out["topic"] = list(message.topic)
    out["formatVersion"] = FORMAT_VERSION
    _put_extras(out, message)
    if message.sentFromTopic is not None:
        out["sentFromTopic"] = message.sentFromTopic
    if message.partitionID is not None:
        out["partitionID"] = message.partitionID
    if message.sentAt is not None:
        out["sentAt"] = message.sentAt
    return orjson.dumps(out)


def encode_delivery(message: Message) -> bytes:
    """A DeliveryMessage (or PartitionDeliveryMessage) record, thesis fields first."""
    assert message.value is not None and message.timeStamp is not None
    out: dict[str, Any] = {
        "messageID": message.messageID,
        "senderID": message.senderID,
        "messageType": message.messageType,
    }
    _put_value(out, message)
    out |= {
        "topic": list(message.topic),
        "sentFromTopic": message.sentFromTopic,
        "timeStamp": message.timeStamp,
        "formatVersion": FORMAT_VERSION,
        "digest": message.digest,
    }
    if message.protocol is not None:
        out["protocol"] = message.protocol
    if message.partitionID is not None:
        out["partitionID"] = message.partitionID
    if message.sentAt is not None:
        out["sentAt"] = message.sentAt
    _put_extras(out, message)
    return orjson.dumps(out)


def _put_value(out: dict[str, Any], message: Message) -> None:
    """The value: JSON text as it is, other bytes (raw form) as base64 (§3.8)."""
    if message.encoding == BYTES_ENCODING:
        out["valueBase64"] = base64.b64encode(message.value or b"").decode()
    else:
        out["value"] = orjson.Fragment(message.value if message.value is not None else b"null")


def encode_tick(sender_id: str, timestamp: int, partition: int | None = None) -> bytes:
    """A TickMessage record: moves a layer's clock to at least ``timestamp``."""
    out: dict[str, Any] = {
        "messageID": f"tick-{timestamp}",
        "senderID": sender_id,
        "messageType": MessageType.TICK,
        "timeStamp": timestamp,
        "formatVersion": FORMAT_VERSION,
    }
    if partition is not None:
        out["partitionID"] = partition
    return orjson.dumps(out)


def encode_members(sender_id: str, topics: Iterable[str], protocol: str | None = None) -> bytes:
    """A MembersMessage record: the topics that have a node, as ``sender_id`` knows them
    (§4.9.5), and the protocol the node runs; a node writes it into its own input log,
    so the log itself says which protocol processed what follows (§6.6)."""
    out: dict[str, Any] = {
        "messageID": "members",
        "senderID": sender_id,
        "messageType": MessageType.MEMBERS,
        "topic": sorted(set(topics)),
        "formatVersion": FORMAT_VERSION,
    }
    if protocol is not None:
        out["protocol"] = protocol
    return orjson.dumps(out)


def encode_watermark(sender_id: str, timestamp: int, partition: int) -> bytes:
    """A WatermarkMessage record: layer ``partition`` delivers nothing below
    ``timestamp`` from now on (§8)."""
    return orjson.dumps(
        {
            "messageID": f"watermark-{timestamp}",
            "senderID": sender_id,
            "messageType": MessageType.WATERMARK,
            "timeStamp": timestamp,
            "partitionID": partition,
            "formatVersion": FORMAT_VERSION,
        }
    )


def _bundle_entry(message: Message) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "messageID": message.messageID,
        "messageType": message.messageType,
        "topic": message.topic,
        "digest": message.digest,
    }
    if message.timeStamp is not None:
        entry["timeStamp"] = message.timeStamp
    if message.value is not None:
        entry["valueBytes"] = len(message.value)
    if message.sentAt is not None:
        entry["sentAt"] = message.sentAt
    if message.seq is not None:
        entry["seq"] = message.seq
    if message.answers is not None:
        entry["answers"] = message.answers
    if message.encoding is not None or message.key is not None or message.headers:
        _put_extras(entry, message)
    return entry


def encode_bundle(
    messages: Sequence[Message],
    *,
    sender_id: str,
    sent_from: str,
    protocol: str | None,
    partition: int | None = None,
) -> bytes:
    """One Bundle record holding ``messages`` (header line, then the values).
    ``protocol`` ``None`` is written as JSON null: a writer that names none, as the
    simulators' hostile records do (nodes refuse their control messages)."""
    header: dict[str, Any] = {
        "messageType": MessageType.BUNDLE,
        "senderID": sender_id,
        "sentFromTopic": sent_from,
        "protocol": protocol,
        "formatVersion": FORMAT_VERSION,
    }
    if partition is not None:
        header["partitionID"] = partition
    header["messages"] = [_bundle_entry(m) for m in messages]
    values = [m.value for m in messages if m.value is not None]
    return b"\n".join((orjson.dumps(header), b"".join(values)))


def envelope_bytes(message_id: str, destinations: Sequence[str]) -> int:
    """An upper bound of what a record adds to a message's value: its fields, ids and
    names (escaped JSON can be six times the text), and the Kafka record's overhead."""
    return 1000 + 6 * len(message_id) + _names_bytes(tuple(destinations))


@functools.lru_cache(maxsize=4096)
def _names_bytes(destinations: tuple[str, ...]) -> int:
    return sum(len(t) + 3 for t in destinations)


class BundleEncoder(Protocol):
    """What writes one Bundle record: :func:`encode_bundle` (JSON) or
    :func:`~atomickafka.core.compact.encode_compact_bundle`."""

    def __call__(
        self,
        messages: Sequence[Message],
        *,
        sender_id: str,
        sent_from: str,
        protocol: str | None,
        partition: int | None = None,
    ) -> bytes: ...


def pack_bundles(
    messages: Sequence[Message],
    *,
    sender_id: str,
    sent_from: str,
    protocol: str,
    partition: int | None = None,
    max_bytes: int = MAX_RECORD_BYTES,
    encode: BundleEncoder = encode_bundle,
) -> Iterator[bytes]:
    """``messages`` as few Bundle records as fit ``max_bytes`` each, in order, each
    written by ``encode`` (the JSON form by default; :func:`envelope_bytes` bounds
    what either form adds to a value).

    A message too large for a record of its own still gets one (the engine refuses
    values that could not fit, so this only happens with a too small ``max_bytes``);
    the producer then reports it and the node sets it aside.
    """
    start = 0
    size = 200 + len(sender_id) + len(sent_from)
    for index, message in enumerate(messages):
        cost = envelope_bytes(message.messageID, message.topic) + len(message.value or b"")
        if index > start and size + cost > max_bytes:
            yield encode(
                messages[start:index],
                sender_id=sender_id,
                sent_from=sent_from,
                protocol=protocol,
                partition=partition,
            )
            start = index
            size = 200 + len(sender_id) + len(sent_from)
        size += cost
    if start < len(messages):
        yield encode(
            messages[start:],
            sender_id=sender_id,
            sent_from=sent_from,
            protocol=protocol,
            partition=partition,
        )
