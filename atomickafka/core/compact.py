"""The compact control form: binary Bundles and Ticks (docs/DESIGN.md §3.9).

What nodes write to each other -- the control messages of one batch to one topic (a
Bundle) and the ticks that move a log's time -- in a binary form instead of JSON: no
field names, integers as varints, each topic name, destination set and message version
written once per record and referenced by index, values carried as their bytes. The
JSON forms (:mod:`atomickafka.core.wire`) are still read everywhere; a node writes one
form or the other (``--control-format``), so a cluster moves from one to the other one
node at a time (docs/operators.md, *Upgrade*).

Client records and deliveries keep their forms: plain consumers read deliveries, and
clients of older releases write ClientMessages.

Layout (``varint``: unsigned LEB128 of at most 9 bytes, no more than ``MAX_TIMESTAMP``;
``text``: varint length, then UTF-8; ``blob``: varint length, then bytes; ``delta``: the
difference from the same field of the previous entry, or version, that has one (from 0
for the first), as a zigzag varint: 0, -1, 1, -2 ... as 0, 1, 2, 3 ...)::

    record   = MAGIC, version, text writer, kind, ...   (every version keeps this prefix)
    tick     = flags (bit 0: layer), varint timeStamp, [varint layer]
    bundle   = flags (bit 0: protocol, bit 1: layer), text senderID, [text protocol],
               [varint layer],
               varint T, topics (T bytes)
               varint V, V x version                   message versions
               varint E, E x entry                     (E >= 1)
    version  = text messageID, varint set, flags (bits 0-1: digest none / 8 bytes / text,
               bit 2: sentAt), [8 bytes | text digest], [delta sentAt]
    entry    = code (bits 0-2: Notify, Ack, Decided, Abort, ClientMessage; bit 3:
               timeStamp, 4: value, 5: seq, 6: answers, 7: key/headers/encoding),
               varint version, [delta timeStamp], [blob value],
               [delta seq offset, varint seq index], [varint, varint answers], [extras]
    topics   = varint N, N x text                      topic names
               varint S, S x (varint k, k x varint)    destination sets (name indices)
    extras   = flags (bit 0: encoding bytes, bit 1: key), [blob key],
               varint H, H x (text name, blob value)

``writer`` is a bundle's ``sentFromTopic`` and a tick's ``senderID``: a reader that
cannot read a newer version still names who wrote it. ``MAGIC`` (0xAC) can start no
UTF-8 text, so no JSON record is taken for a compact one or the other way round.

Decoding validates as strictly as the JSON decoder (the same bounds, the same checks on
values, ids and destination lists) and raises nothing but
:class:`~atomickafka.core.wire.MessageError`, whatever the bytes (§4.9: a node sets such
a record aside with the reason).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from atomickafka.core.wire import (
    BYTES_ENCODING,
    MAX_ID_LENGTH,
    MAX_TIMESTAMP,
    BundleEncoder,
    Message,
    MessageError,
    MessageType,
    check_json_value,
    encode_bundle,
    encode_tick,
    message_digest,
    parse_destinations,
)
from atomickafka.errors import ConfigError

__all__ = [
    "BINARY",
    "COMPACT_VERSION",
    "CONTROL_FORMATS",
    "JSON",
    "MAGIC",
    "compact_kind",
    "compact_writer",
    "control_encoders",
    "decode_compact",
    "encode_compact_bundle",
    "encode_compact_tick",
    "is_compact",
]

#: The first byte of every compact record: a UTF-8 continuation byte, which starts no
#: text, so no JSON record begins with it.
MAGIC: Final = 0xAC
#: The compact form this code writes and reads; a newer one is refused with "upgrade".
COMPACT_VERSION: Final = 1
#: The control formats a node can write (``--control-format``): the JSON forms of §3,
#: which every release reads, and this compact one.
JSON: Final = "json"
BINARY: Final = "binary"
CONTROL_FORMATS: Final = (JSON, BINARY)

_BUNDLE: Final = 1
_TICK: Final = 2
_MAX_VARINT_BYTES: Final = 9
_MAX_LAYER: Final = (1 << 31) - 1

# header flags
_HAS_PROTOCOL: Final = 0x01
_HAS_LAYER: Final = 0x02
# version flags
_DIGEST_MASK: Final = 0x03
_DIGEST_NONE: Final = 0
_DIGEST_HEX: Final = 1
_DIGEST_TEXT: Final = 2
_HAS_SENT_AT: Final = 0x04
# entry code
_TYPE_MASK: Final = 0x07
_HAS_TS: Final = 0x08
_HAS_VALUE: Final = 0x10
_HAS_SEQ: Final = 0x20
_HAS_ANSWERS: Final = 0x40
_HAS_EXTRAS: Final = 0x80
# extras flags
_ENCODING_BYTES: Final = 0x01
_HAS_KEY: Final = 0x02

#: Entry type codes, in code order.
_TYPES: Final = (
    MessageType.NOTIFY,
    MessageType.ACK,
    MessageType.DECIDED,
    MessageType.ABORT,
    MessageType.CLIENT,
)
_CODE_OF: Final = {kind: code for code, kind in enumerate(_TYPES)}
#: Bundled types whose timestamp is mandatory (as in the JSON form).
_NEEDS_TS: Final = frozenset({MessageType.NOTIFY, MessageType.ACK, MessageType.DECIDED})
_NO_HEADERS: Final[tuple[tuple[str, bytes], ...]] = ()
_new_tuple = tuple.__new__


def is_compact(raw: bytes | None) -> bool:
    """True when ``raw`` is (or claims to be) a compact record: it starts with
    :data:`MAGIC`."""
    return raw is not None and len(raw) > 0 and raw[0] == MAGIC


# ---------------------------------------------------------------------------- encoding


def _put_varint(out: bytearray, value: int) -> None:
    if value < 0x80:  # the common case: one byte
        out.append(value)
        return
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_blob(out: bytearray, data: bytes) -> None:
    _put_varint(out, len(data))
    out += data


def _put_text(out: bytearray, text: str) -> None:
    _put_blob(out, text.encode())


def _prefix(writer: str, kind: int) -> bytearray:
    out = bytearray((MAGIC, COMPACT_VERSION))
    _put_text(out, writer)
    out.append(kind)
    return out


def encode_compact_tick(sender_id: str, timestamp: int, partition: int | None = None) -> bytes:
    """A tick (:func:`~atomickafka.core.wire.encode_tick`) in the compact form."""
    out = _prefix(sender_id, _TICK)
    out.append(_HAS_LAYER if partition is not None else 0)
    _put_varint(out, timestamp)
    if partition is not None:
        _put_varint(out, partition)
    return bytes(out)


def encode_compact_bundle(
    messages: Sequence[Message],
    *,
    sender_id: str,
    sent_from: str,
    protocol: str | None,
    partition: int | None = None,
) -> bytes:
    """One Bundle record holding ``messages`` (control messages and relayed
    ClientMessages, as :func:`~atomickafka.core.wire.encode_bundle`) in the compact
    form; :class:`MessageError` for a message of a type a bundle cannot hold."""
    out = _prefix(sent_from, _BUNDLE)
    flags = _HAS_PROTOCOL if protocol is not None else 0
    out.append(flags | (_HAS_LAYER if partition is not None else 0))
    _put_text(out, sender_id)
    if protocol is not None:
        _put_text(out, protocol)
    if partition is not None:
        _put_varint(out, partition)
    tables = _Tables()
    entries = bytearray()
    previous = _Previous()
    for message in messages:
        _put_entry(entries, message, tables.version(message), previous)
    tables.write(out)
    _put_varint(out, len(messages))
    out += entries
    return bytes(out)


class _Tables:
    """A bundle's tables as it is written: topic names, destination sets and message
    versions, each given an index the first time it is seen."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.sets: dict[tuple[str, ...], int] = {}
        self.versions: dict[tuple[str, int, str | None, int | None], int] = {}
        self.version_bytes = bytearray()
        self.previous = _Previous()

    def version(self, message: Message) -> int:
        """The index of ``message``'s version (written into the table when new)."""
        destinations = message.topic
        set_index = self.sets.get(destinations)
        if set_index is None:
            set_index = self.sets[destinations] = len(self.sets)
            names = self.names
            for name in destinations:
                if name not in names:
                    names[name] = len(names)
        key = (message.messageID, set_index, message.digest, message.sentAt)
        index = self.versions.get(key)
        if index is None:
            index = self.versions[key] = len(self.versions)
            _put_version(self.version_bytes, message, set_index, self.previous)
        return index

    def write(self, out: bytearray) -> None:
        """The tables, in order: topic names and destination sets as one blob (the same
        between two nodes bundle after bundle: a reader keeps what it decoded of it),
        then the versions."""
        key = tuple(self.sets)
        topics = _TOPIC_BLOBS.get(key)
        if topics is None:
            topics = _topics_blob(self.names, key)
            if len(_TOPIC_BLOBS) >= _KNOWN_SETS_MAX:
                _TOPIC_BLOBS.clear()
            _TOPIC_BLOBS[key] = topics
        out += topics
        _put_varint(out, len(self.versions))
        out += self.version_bytes


class _Previous:
    """What the last entry (or version) of a bundle held, which the next one's
    timestamp, seq offset and send time are written relative to (zigzag varints of
    the difference: they are close within a bundle)."""

    __slots__ = ("offset", "sent_at", "timestamp")

    def __init__(self) -> None:
        self.timestamp = 0
        self.offset = 0
        self.sent_at = 0


def _put_delta(out: bytearray, value: int, previous: int) -> None:
    """``value - previous`` as a zigzag varint (0, -1, 1, -2, ... as 0, 1, 2, 3, ...)."""
    delta = value - previous
    _put_varint(out, delta << 1 if delta >= 0 else ((-delta) << 1) - 1)


def _topics_blob(names: dict[str, int], sets: tuple[tuple[str, ...], ...]) -> bytes:
    """The topics blob of a bundle whose destination sets are ``sets`` (in order of
    first use), with its length in front."""
    topics = bytearray()
    _put_varint(topics, len(names))
    for name in names:
        _put_text(topics, name)
    _put_varint(topics, len(sets))
    for destinations in sets:
        _put_varint(topics, len(destinations))
        for name in destinations:
            _put_varint(topics, names[name])
    out = bytearray()
    _put_blob(out, bytes(topics))
    return bytes(out)


#: The topics blobs written before, by destination sets (a node writes the same few to
#: each peer, bundle after bundle).
_TOPIC_BLOBS: dict[tuple[tuple[str, ...], ...], bytes] = {}


def _put_entry(out: bytearray, message: Message, version: int, previous: _Previous) -> None:
    """One bundle entry."""
    # (by position, not unpacked: a Message has fields a bundle never carries)
    kind, value, timestamp, seq = message[1], message[3], message[6], message[11]
    key, headers, encoding, answers = message[14], message[15], message[16], message[17]
    code = _CODE_OF.get(kind)
    if code is None:
        raise MessageError("messageType", "a bundle cannot hold it", kind)
    extras = encoding is not None or key is not None or bool(headers)
    out.append(
        code
        | (_HAS_TS if timestamp is not None else 0)
        | (_HAS_VALUE if value is not None else 0)
        | (_HAS_SEQ if seq is not None else 0)
        | (_HAS_ANSWERS if answers is not None else 0)
        | (_HAS_EXTRAS if extras else 0)
    )
    if version < 0x80:
        out.append(version)
    else:
        _put_varint(out, version)
    if timestamp is not None:
        _put_delta(out, timestamp, previous.timestamp)
        previous.timestamp = timestamp
    if value is not None:
        _put_blob(out, value)
    if seq is not None:
        _put_delta(out, seq[0], previous.offset)
        previous.offset = seq[0]
        _put_varint(out, seq[1])
    if answers is not None:
        _put_varint(out, answers[0])
        _put_varint(out, answers[1])
    if extras:
        _put_extras(out, message)


def _put_version(out: bytearray, message: Message, set_index: int, previous: _Previous) -> None:
    """A message version: its id, destination set, digest and send time (relative to
    the previous version's that states one)."""
    _put_text(out, message.messageID)
    _put_varint(out, set_index)
    digest, sent_at = message.digest, message.sentAt
    flags = _HAS_SENT_AT if sent_at is not None else 0
    raw = _hex_digest(digest)
    if raw is not None:
        out.append(flags | _DIGEST_HEX)
        out += raw
    elif digest is None:
        out.append(flags | _DIGEST_NONE)
    else:
        out.append(flags | _DIGEST_TEXT)
        _put_text(out, digest)
    if sent_at is not None:
        _put_delta(out, sent_at, previous.sent_at)
        previous.sent_at = sent_at


def _hex_digest(digest: str | None) -> bytes | None:
    """The 8 bytes a digest of 16 lowercase hex digits stands for (what this code
    writes), else ``None``: such a digest is written as text."""
    if digest is None or len(digest) != 16:
        return None
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    return raw if raw.hex() == digest else None


def _put_extras(out: bytearray, message: Message) -> None:
    """A message's key, headers and encoding (raw form, §3.8)."""
    flags = _ENCODING_BYTES if message.encoding == BYTES_ENCODING else 0
    if message.encoding is not None and message.encoding != BYTES_ENCODING:
        raise MessageError("encoding", "must be bytes (or absent: JSON)", message.encoding)
    if message.key is not None:
        flags |= _HAS_KEY
    out.append(flags)
    if message.key is not None:
        _put_blob(out, message.key)
    _put_varint(out, len(message.headers))
    for name, data in message.headers:
        _put_text(out, name)
        _put_blob(out, data)


#: What writes a tick record: ``(sender_id, timestamp, partition)``.
TickEncoder = Callable[[str, int, int | None], bytes]


def control_encoders(control_format: str) -> tuple[BundleEncoder, TickEncoder]:
    """The bundle and tick writers of a control format (:data:`CONTROL_FORMATS`);
    :class:`~atomickafka.errors.ConfigError` for another name."""
    if control_format == BINARY:
        return encode_compact_bundle, encode_compact_tick
    if control_format == JSON:
        return encode_bundle, encode_tick
    raise ConfigError(f"control format must be json or binary, not {control_format!r}")


# ---------------------------------------------------------------------------- decoding


class _Cursor:
    """A position in a compact record; every read checks the record's end and raises
    :class:`MessageError` naming ``field``."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.end = len(data)
        self.pos = 0

    def byte(self, field: str) -> int:
        """One byte."""
        pos = self.pos
        if pos >= self.end:
            raise MessageError(field, "the record ends before it")
        self.pos = pos + 1
        return self.data[pos]

    def varint(self, field: str, limit: int = MAX_TIMESTAMP) -> int:
        """An unsigned varint no larger than ``limit`` (which is at least 127)."""
        data, pos, end = self.data, self.pos, self.end
        if pos < end and data[pos] < 0x80:  # the common case: one byte
            self.pos = pos + 1
            return data[pos]
        result = 0
        shift = 0
        for _ in range(_MAX_VARINT_BYTES):
            if pos >= end:
                raise MessageError(field, "the record ends inside it")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                if result > limit:
                    raise MessageError(field, f"must be an integer from 0 to {limit}", result)
                self.pos = pos
                return result
            shift += 7
        raise MessageError(field, f"a varint of more than {_MAX_VARINT_BYTES} bytes")

    def delta(self, field: str, previous: int) -> int:
        """A value written as its difference from ``previous`` (a zigzag varint), from 0
        to ``MAX_TIMESTAMP``."""
        step = self.varint(field, 2 * MAX_TIMESTAMP + 1)
        value = previous + (-((step + 1) >> 1) if step & 1 else step >> 1)
        if not 0 <= value <= MAX_TIMESTAMP:
            raise MessageError(field, f"must be an integer from 0 to {MAX_TIMESTAMP}", value)
        return value

    def blob(self, field: str) -> bytes:
        """A varint length, then that many bytes."""
        size = self.varint(field)
        pos = self.pos
        if size > self.end - pos:
            raise MessageError(field, "does not fit the record", size)
        self.pos = pos + size
        return self.data[pos : pos + size]

    def text(self, field: str) -> str:
        """A blob of UTF-8 text."""
        raw = self.blob(field)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise MessageError(field, "is not UTF-8 text", raw[:60]) from None


def compact_writer(raw: bytes | None) -> str | None:
    """Who a compact record says wrote it (a bundle's sending topic, a tick's sender):
    the prefix every version keeps; ``None`` when ``raw`` is not one or has none."""
    if not is_compact(raw):
        return None
    assert raw is not None
    cursor = _Cursor(raw)
    cursor.pos = 2
    try:
        return cursor.text("writer") or None
    except MessageError:
        return None


def compact_kind(raw: bytes | None) -> str | None:
    """The ``messageType`` a compact record of this version holds (``Bundle`` or
    ``TickMessage``), read from its prefix alone; ``None`` for anything else (another
    version, not compact, cut short). For counting records by type cheaply: it
    validates nothing else."""
    if not is_compact(raw) or len(raw or b"") < 3:
        return None
    assert raw is not None
    if raw[1] != COMPACT_VERSION:
        return None
    cursor = _Cursor(raw)
    cursor.pos = 2
    try:
        cursor.text("writer")
        kind = cursor.byte("messageType")
    except MessageError:
        return None
    return _KIND_NAMES.get(kind)


_KIND_NAMES: Final = {_BUNDLE: MessageType.BUNDLE.value, _TICK: MessageType.TICK.value}


def decode_compact(
    raw: bytes, *, log_time: int | None = None, origin: int | None = None
) -> list[Message]:
    """The messages of a compact record (a Bundle's, or one Tick); :class:`MessageError`
    for anything else, whatever the bytes. ``log_time`` and ``origin`` annotate every
    message, as :func:`~atomickafka.core.wire.decode_record`."""
    cursor = _Cursor(raw)
    if cursor.byte("record") != MAGIC:
        raise MessageError(None, "not a compact record")
    version = cursor.byte("formatVersion")
    if version != COMPACT_VERSION:
        if version > COMPACT_VERSION:
            reason = (
                f"compact format {version} is newer than this node reads "
                f"({COMPACT_VERSION}); upgrade it"
            )
        else:
            reason = "must be a positive integer"
        raise MessageError("formatVersion", reason, version)
    writer = cursor.text("writer")
    kind = cursor.byte("messageType")
    if kind == _TICK:
        message = _tick(cursor, writer, log_time, origin)
        messages = [message]
    elif kind == _BUNDLE:
        messages = _bundle(cursor, writer, log_time, origin)
    else:
        raise MessageError("messageType", "must be a Bundle (1) or a Tick (2)", kind)
    if cursor.pos != cursor.end:
        raise MessageError(None, f"{cursor.end - cursor.pos} bytes follow the record's end")
    return messages


def _tick(cursor: _Cursor, sender: str, log_time: int | None, origin: int | None) -> Message:
    flags = cursor.byte("flags")
    timestamp = cursor.varint("timeStamp")
    layer = cursor.varint("partitionID", _MAX_LAYER) if flags & _HAS_LAYER else None
    return Message(
        messageID=f"tick-{timestamp}",
        messageType=MessageType.TICK,
        topic=(),
        senderID=sender,
        timeStamp=timestamp,
        partitionID=layer,
        logTime=log_time,
        origin=origin,
    )


#: A message version of a bundle: id, destinations, digest, send time.
_Version = tuple[str, tuple[str, ...], str | None, int | None]


def _bundle(
    cursor: _Cursor, sent_from: str, log_time: int | None, origin: int | None
) -> list[Message]:
    flags = cursor.byte("flags")
    sender = cursor.text("senderID")
    protocol = cursor.text("protocol") if flags & _HAS_PROTOCOL else None
    layer = cursor.varint("partitionID", _MAX_LAYER) if flags & _HAS_LAYER else None
    sets = _destination_sets(cursor.blob("topic"))
    previous = _Previous()
    versions = [_version(cursor, sets, previous) for _ in range(cursor.varint("messages"))]
    count = cursor.varint("messages")
    if count == 0:
        raise MessageError("messages", "must be a non-empty list", [])
    out: list[Message] = []
    previous = _Previous()
    common = (sender, sent_from, protocol, layer, log_time, origin)
    for index in range(count):
        try:
            message = _entry(cursor, versions, previous, common)
        except MessageError as exc:
            raise MessageError(f"messages[{index}].{exc.field or 'entry'}", exc.reason) from None
        out.append(message)
    return out


def _destination_sets(section: bytes) -> list[tuple[str, ...]]:
    """A bundle's destination sets from its topics blob (names, then sets of name
    indices): from :data:`_KNOWN_SETS` when the same blob was decoded before."""
    known = _KNOWN_SETS.get(section)
    if known is not None:
        return known
    cursor = _Cursor(section)
    names = [cursor.text("topic") for _ in range(cursor.varint("topic"))]
    sets = [_destinations(cursor, names) for _ in range(cursor.varint("topic"))]
    if cursor.pos != cursor.end:
        raise MessageError("topic", f"{cursor.end - cursor.pos} bytes follow the sets")
    if len(section) <= _KNOWN_SET_BYTES:  # a hostile writer's huge ones: not kept
        if len(_KNOWN_SETS) >= _KNOWN_SETS_MAX:
            _KNOWN_SETS.clear()
        _KNOWN_SETS[section] = sets
    return sets


#: Topics blobs decoded before, and their (valid) destination sets: between two nodes
#: the same few come bundle after bundle, so this spares decoding names per bundle.
_KNOWN_SETS: dict[bytes, list[tuple[str, ...]]] = {}
_KNOWN_SETS_MAX: Final = 4096
_KNOWN_SET_BYTES: Final = 2048


def _destinations(cursor: _Cursor, names: list[str]) -> tuple[str, ...]:
    size = cursor.varint("topic")
    picked: list[str] = []
    for _ in range(size):
        index = cursor.varint("topic")
        if index >= len(names):
            raise MessageError("topic", "names no topic of the record's table", index)
        picked.append(names[index])
    return parse_destinations(tuple(picked))


def _version(cursor: _Cursor, sets: list[tuple[str, ...]], previous: _Previous) -> _Version:
    message_id = cursor.text("messageID")
    if not 0 < len(message_id) <= MAX_ID_LENGTH:
        raise MessageError("messageID", f"must have 1 to {MAX_ID_LENGTH} characters", message_id)
    index = cursor.varint("topic")
    if index >= len(sets):
        raise MessageError("topic", "names no destination set of the record's table", index)
    flags = cursor.byte("digest")
    form = flags & _DIGEST_MASK
    digest: str | None = None
    if form == _DIGEST_HEX:
        pos = cursor.pos
        if cursor.end - pos < 8:
            raise MessageError("digest", "the record ends inside it")
        cursor.pos = pos + 8
        digest = cursor.data[pos : pos + 8].hex()
    elif form == _DIGEST_TEXT:
        digest = cursor.text("digest")
    elif form != _DIGEST_NONE:
        raise MessageError("digest", "unknown digest form", form)
    if flags & ~(_DIGEST_MASK | _HAS_SENT_AT):
        raise MessageError("digest", "unknown flags", flags)
    sent_at: int | None = None
    if flags & _HAS_SENT_AT:
        sent_at = previous.sent_at = cursor.delta("sentAt", previous.sent_at)
    return (message_id, sets[index], digest, sent_at)


#: What a bundle's messages share: sender, sending topic, protocol, layer, and the
#: record's log time and offset.
_Common = tuple[str, str, str | None, int | None, int | None, int | None]


def _entry(
    cursor: _Cursor, versions: list[_Version], previous: _Previous, common: _Common
) -> Message:
    """One entry of a bundle (``previous``: what the timestamp and seq offset are
    relative to, updated)."""
    code = cursor.byte("messageType")
    kind = _entry_type(code)
    index = cursor.varint("messageID")
    if index >= len(versions):
        raise MessageError("messageID", "names no message of the record's table", index)
    message_id, destinations, digest, sent_at = versions[index]
    timestamp: int | None = None
    if code & _HAS_TS:
        timestamp = previous.timestamp = cursor.delta("timeStamp", previous.timestamp)
    elif kind in _NEEDS_TS:
        raise MessageError("timeStamp", f"required on {kind}")
    value = cursor.blob("value") if code & _HAS_VALUE else None
    if value is None and kind is MessageType.CLIENT:
        raise MessageError("value", "required on a ClientMessage")
    seq, answers = _seq_and_answers(cursor, code, previous)
    key: bytes | None = None
    headers = _NO_HEADERS
    encoding: str | None = None
    if code & _HAS_EXTRAS:
        key, headers, encoding = _extras(cursor)
    if value is not None and encoding is None:
        check_json_value(value)
    if digest is None:
        if value is None:
            raise MessageError("digest", f"required on {kind}")
        digest = message_digest(value, sent_at, key, headers, encoding)
    sender, sent_from, protocol, layer, log_time, origin = common
    message = _new_tuple(
        Message,
        (
            message_id,
            kind,
            destinations,
            value,
            sender,
            sent_from,
            timestamp,
            layer,
            digest,
            protocol,
            sent_at,
            seq,
            log_time,
            origin,
            key,
            headers,
            encoding,
            answers,
            None,  # arrived: set by the batch layer (§7.1)
        ),
    )
    return message


def _entry_type(code: int) -> MessageType:
    """The message type an entry's first byte names."""
    type_code = code & _TYPE_MASK
    if type_code >= len(_TYPES):
        raise MessageError("messageType", "unknown type code", type_code)
    return _TYPES[type_code]


def _seq_and_answers(
    cursor: _Cursor, code: int, previous: _Previous
) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """An entry's ``seq`` (its offset relative to ``previous``, updated) and
    ``answers``, when its first byte says it has them."""
    seq: tuple[int, int] | None = None
    if code & _HAS_SEQ:
        offset = previous.offset = cursor.delta("seq", previous.offset)
        seq = (offset, cursor.varint("seq"))
    answers: tuple[int, int] | None = None
    if code & _HAS_ANSWERS:
        answers = (
            cursor.varint("answers"),
            cursor.varint("answers"),
        )
    return seq, answers


def _extras(cursor: _Cursor) -> tuple[bytes | None, tuple[tuple[str, bytes], ...], str | None]:
    """A message's key, headers and encoding."""
    flags = cursor.byte("encoding")
    if flags & ~(_ENCODING_BYTES | _HAS_KEY):
        raise MessageError("encoding", "unknown flags", flags)
    key = cursor.blob("key") if flags & _HAS_KEY else None
    headers = tuple(
        (cursor.text("headers"), cursor.blob("headers")) for _ in range(cursor.varint("headers"))
    )
    return key, headers, BYTES_ENCODING if flags & _ENCODING_BYTES else None
