"""The raw record form: the user's bytes as the record's value, AtomicKafka's metadata in
headers (docs/DESIGN.md §3.8).

A delivery topic in the raw form (``--delivery-format raw``) holds records
that any existing consumer reads as it reads any topic: the value is exactly the value
that was sent (bytes, any encoding), the Kafka key is the key that was sent, the user's
headers are carried, and the message id, final timestamp, layer, destinations, digest
and the rest travel in ``atomickafka-*`` headers. Clients write their ClientMessages in
the same form. Delivery topics hold the JSON envelope by default
(``--delivery-format json``), which costs the broker and the nodes less per record;
both forms are read everywhere.

Header names (values are UTF-8 text unless said otherwise):

==========================  ======================================================
``atomickafka-format``      ``3``: this record is in the raw form
``atomickafka-type``        ``ClientMessage`` or ``DeliveryMessage``
``atomickafka-id``          the messageID
``atomickafka-to``          the destinations, comma-separated (topic names hold none)
``atomickafka-sent``        when the client sent it (ms since the epoch)
``atomickafka-sender``      the writer's id (a client's, a node's, a merger's)
``atomickafka-layer``       the partition layer, when the topic is partitioned
``atomickafka-encoding``    ``bytes`` when the value is not JSON (absent: JSON)
``atomickafka-ts``          a delivery's final timestamp
``atomickafka-from``        the delivering topic
``atomickafka-digest``      the message version's digest
``atomickafka-protocol``    the delivering node's protocol
==========================  ======================================================

Any other header is the user's and is carried to every destination unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from atomickafka.core.compact import decode_compact, is_compact
from atomickafka.core.wire import (
    MAX_TIMESTAMP,
    Message,
    MessageError,
    MessageType,
    check_json_value,
    client_value,
    decode_record,
    is_valid_topic_name,
    message_digest,
    parse_destinations,
)

__all__ = [
    "BYTES",
    "H_DIGEST",
    "H_ENCODING",
    "H_FORMAT",
    "H_FROM",
    "H_ID",
    "H_LAYER",
    "H_PROTOCOL",
    "H_SENDER",
    "H_SENT",
    "H_TO",
    "H_TS",
    "H_TYPE",
    "RAW_FORMAT",
    "RESERVED_HEADER_PREFIX",
    "ClientRecords",
    "RawRecord",
    "decode_any",
    "decode_raw",
    "encode_raw_client",
    "encode_raw_delivery",
    "is_raw",
    "raw_client_record",
    "user_headers",
]

H_FORMAT: Final = "atomickafka-format"
H_TYPE: Final = "atomickafka-type"
H_ID: Final = "atomickafka-id"
H_TO: Final = "atomickafka-to"
H_SENT: Final = "atomickafka-sent"
H_SENDER: Final = "atomickafka-sender"
H_LAYER: Final = "atomickafka-layer"
H_ENCODING: Final = "atomickafka-encoding"
H_TS: Final = "atomickafka-ts"
H_FROM: Final = "atomickafka-from"
H_DIGEST: Final = "atomickafka-digest"
H_PROTOCOL: Final = "atomickafka-protocol"
#: The value of ``atomickafka-format`` on a raw record.
RAW_FORMAT: Final = b"3"
#: ``Message.encoding`` of a value that is not JSON.
BYTES: Final = "bytes"
#: Header names starting so are AtomicKafka's; a sender's own are refused.
RESERVED_HEADER_PREFIX: Final = "atomickafka-"

Header = tuple[str, bytes]
#: A record as written: (key, value, headers).
RawRecord = tuple[bytes | None, bytes, list[Header]]
HeaderInput = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


def _pairs(headers: HeaderInput | None) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in items]


def is_raw(headers: HeaderInput | None) -> bool:
    """True when a record's headers mark it as the raw form."""
    return any(k == H_FORMAT and v == RAW_FORMAT for k, v in _pairs(headers))


def user_headers(headers: HeaderInput | None) -> tuple[Header, ...]:
    """The user's headers of a record: every one but AtomicKafka's own."""
    return tuple(
        (k, v if v is not None else b"")
        for k, v in _pairs(headers)
        if not k.startswith(RESERVED_HEADER_PREFIX)
    )


def _common(message: Message, kind: bytes) -> list[Header]:
    out: list[Header] = [
        (H_FORMAT, RAW_FORMAT),
        (H_TYPE, kind),
        (H_ID, message.messageID.encode()),
        (H_TO, ",".join(message.topic).encode()),
    ]
    if message.sentAt is not None:
        out.append((H_SENT, str(message.sentAt).encode()))
    if message.senderID:
        out.append((H_SENDER, message.senderID.encode()))
    if message.partitionID is not None:
        out.append((H_LAYER, str(message.partitionID).encode()))
    if message.encoding == BYTES:
        out.append((H_ENCODING, BYTES.encode()))
    return out


def encode_raw_client(message: Message) -> RawRecord:
    """A ClientMessage in the raw form: the value, the key, the user's headers and ours."""
    assert message.value is not None
    headers = _common(message, MessageType.CLIENT.value.encode())
    return message.key, message.value, [*message.headers, *headers]


def raw_client_record(
    message_id: str,
    destinations: tuple[str, ...],
    value: Any,
    sender_id: str = "",
    partition: int | None = None,
    *,
    sent_at: int | None = None,
    key: bytes | None = None,
    headers: tuple[Header, ...] = (),
) -> RawRecord:
    """``encode_raw_client(client_message(...))`` of the same arguments (``destinations``
    as :func:`~atomickafka.core.wire.parse_destinations` returns them), built without
    the :class:`~atomickafka.core.wire.Message` and its digest, which the raw form does
    not carry (a node computes it from the record): a client's send path.
    :class:`~atomickafka.core.wire.MessageError` as :func:`client_message` raises it.
    One message's :class:`ClientRecords`."""
    records = ClientRecords(destinations, sender_id, sent_at=sent_at, key=key, headers=headers)
    return records.record(message_id, value, partition)


class ClientRecords:
    """The raw records of client messages that share their destinations, sender, send
    time, key and user headers (a client's batch): the headers they all carry are built
    once, so each record costs its value's encoding and its id header.

    :meth:`record` returns, byte for byte, what :func:`raw_client_record` of the same
    arguments returns (that function is this class with one message). The headers are
    ``[*user's, format, type, id, to, sent, sender, layer, encoding]``: all but the id
    are shared, and the last two depend on the message's layer and encoding, so the
    tail is built once per (layer, encoding) met.
    """

    __slots__ = ("_head", "_sent_at", "_shared", "_tails", "key")

    def __init__(
        self,
        destinations: tuple[str, ...],
        sender_id: str = "",
        *,
        sent_at: int | None = None,
        key: bytes | None = None,
        headers: tuple[Header, ...] = (),
    ) -> None:
        self.key = key
        self._sent_at = sent_at
        self._head: tuple[Header, ...] = (*headers, (H_FORMAT, RAW_FORMAT), (H_TYPE, _CLIENT_TYPE))
        shared: list[Header] = [(H_TO, ",".join(destinations).encode())]
        if sent_at is not None:
            shared.append((H_SENT, str(sent_at).encode()))
        if sender_id:
            shared.append((H_SENDER, sender_id.encode()))
        self._shared = tuple(shared)
        self._tails: dict[tuple[int | None, str | None], tuple[Header, ...]] = {}

    def record(self, message_id: str, value: Any, partition: int | None = None) -> RawRecord:
        """The record of message ``message_id`` carrying ``value`` in layer
        ``partition``; :class:`~atomickafka.core.wire.MessageError` for an invalid id,
        send time or JSON value."""
        data, encoding = client_value(message_id, value, self._sent_at)
        if partition is None and encoding is None:
            tail = self._shared  # the common case: unpartitioned JSON
        else:
            tail = self._tails.get((partition, encoding)) or self._tail(partition, encoding)
        return self.key, data, [*self._head, (H_ID, message_id.encode()), *tail]

    def _tail(self, partition: int | None, encoding: str | None) -> tuple[Header, ...]:
        tail = list(self._shared)
        if partition is not None:
            tail.append((H_LAYER, str(partition).encode()))
        if encoding == BYTES:
            tail.append((H_ENCODING, _BYTES_VALUE))
        made = self._tails[partition, encoding] = tuple(tail)
        return made


_CLIENT_TYPE: Final = MessageType.CLIENT.value.encode()
_BYTES_VALUE: Final = BYTES.encode()


def encode_raw_delivery(message: Message) -> RawRecord:
    """A Delivery in the raw form (what a plain consumer of the topic reads)."""
    assert message.value is not None and message.timeStamp is not None
    headers = _common(message, MessageType.DELIVERY.value.encode())
    headers.append((H_TS, str(message.timeStamp).encode()))
    if message.sentFromTopic is not None:
        headers.append((H_FROM, message.sentFromTopic.encode()))
    if message.digest is not None:
        headers.append((H_DIGEST, message.digest.encode()))
    if message.protocol is not None:
        headers.append((H_PROTOCOL, message.protocol.encode()))
    return message.key, message.value, [*message.headers, *headers]


def _text(ours: Mapping[str, bytes], name: str, *, required: bool = False) -> str | None:
    raw = ours.get(name)
    if raw is None:
        if required:
            raise MessageError(name, "header is missing")
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise MessageError(name, "header is not UTF-8 text", raw[:40]) from None


def _number(ours: Mapping[str, bytes], name: str, limit: int = MAX_TIMESTAMP) -> int | None:
    text = _text(ours, name)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > limit:  # "²".isdigit()
        raise MessageError(name, f"header must be an integer from 0 to {limit}", text)
    return int(text)


def decode_raw(
    value: bytes | None,
    key: str | bytes | None,
    headers: HeaderInput | None,
    *,
    log_time: int | None = None,
    origin: int | None = None,
) -> Message:
    """The message a raw-form record holds; :class:`MessageError` names what is wrong."""
    _, ours, user = _split(headers)
    return _raw_message(value, key, ours, user, log_time, origin)


def _split(
    headers: HeaderInput | None,
) -> tuple[bool, dict[str, bytes], tuple[Header, ...]]:
    """In one pass over a record's headers: whether they mark the raw form, ours by name
    (the last of a name wins) and the user's, in order (:func:`is_raw`,
    :func:`user_headers`)."""
    raw = False
    ours: dict[str, bytes] = {}
    user: list[Header] = []
    items = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, given in items:
        data = given.encode() if isinstance(given, str) else given
        if name.startswith(RESERVED_HEADER_PREFIX):
            if data is not None:
                ours[name] = data
                if name == H_FORMAT and data == RAW_FORMAT:
                    raw = True
        else:
            user.append((name, data if data is not None else b""))
    return raw, ours, tuple(user)


_KINDS: Final = {
    MessageType.CLIENT.value: MessageType.CLIENT,
    MessageType.DELIVERY.value: MessageType.DELIVERY,
}


def _raw_message(
    value: bytes | None,
    key: str | bytes | None,
    ours: Mapping[str, bytes],
    user: tuple[Header, ...],
    log_time: int | None,
    origin: int | None,
) -> Message:
    kind_text = _text(ours, H_TYPE, required=True)
    kind = _KINDS.get(kind_text or "")
    if kind is None:
        raise MessageError(H_TYPE, "must be ClientMessage or DeliveryMessage", kind_text)
    message_id = _text(ours, H_ID, required=True) or ""
    if not 0 < len(message_id) <= 512:
        raise MessageError(H_ID, "must have 1 to 512 characters", message_id)
    destinations = parse_destinations((_text(ours, H_TO, required=True) or "").split(","))
    if value is None:
        raise MessageError("value", "a raw record needs a value (empty bytes for none)")
    encoding = _text(ours, H_ENCODING)
    if encoding not in (None, BYTES):
        raise MessageError(H_ENCODING, "must be bytes (or absent: JSON)", encoding)
    if encoding is None:
        check_json_value(value)
    sent_at = _number(ours, H_SENT)
    layer = _number(ours, H_LAYER, (1 << 31) - 1)
    key_bytes = key.encode() if isinstance(key, str) else key
    sent_from = _text(ours, H_FROM)
    if sent_from is not None and not is_valid_topic_name(sent_from):
        raise MessageError(H_FROM, "not a valid topic name", sent_from)
    timestamp = _number(ours, H_TS)
    if kind is MessageType.DELIVERY and timestamp is None:
        raise MessageError(H_TS, "header is missing on a delivery")
    return Message(
        messageID=message_id,
        messageType=kind,
        topic=destinations,
        value=value,
        senderID=_text(ours, H_SENDER) or "",
        sentFromTopic=sent_from,
        timeStamp=timestamp,
        partitionID=layer,
        digest=message_digest(value, sent_at, key_bytes, user, encoding),
        protocol=_text(ours, H_PROTOCOL),
        sentAt=sent_at,
        logTime=log_time,
        origin=origin,
        key=key_bytes,
        headers=user,
        encoding=encoding,
    )


def decode_any(
    value: bytes | None,
    key: str | bytes | None = None,
    headers: HeaderInput | None = None,
    *,
    log_time: int | None = None,
    origin: int | None = None,
) -> list[Message]:
    """The messages of any AtomicKafka record: the raw form (by its headers), the
    compact control form (by its first byte, :mod:`~atomickafka.core.compact`) or the
    JSON forms (:func:`~atomickafka.core.wire.decode_record`); :class:`MessageError`
    when it is none of them."""
    if headers:
        raw, ours, user = _split(headers)
        if raw:
            return [_raw_message(value, key, ours, user, log_time, origin)]
    if value is None:
        raise MessageError(None, "record has no value")
    if is_compact(value):
        return decode_compact(value, log_time=log_time, origin=origin)
    return decode_record(value, log_time=log_time, origin=origin)
