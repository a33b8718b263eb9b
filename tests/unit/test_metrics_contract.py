"""The metrics' record sniffing agrees with the one record reader (issue 14).

:func:`atomickafka.metrics.records.record_type` and ``sent_at_ms`` look at a record's
first and last bytes instead of decoding it (they run for every record a node reads or
writes). Here every :class:`~atomickafka.core.wire.MessageType`, encoded in every form
AtomicKafka writes it (the JSON envelope, the raw form, a Bundle, with and without the
type header of the shared layout, and with ids that push the field far into the
record), is classified as :func:`atomickafka.core.reader.peek` classifies it and, for
single-message records, as the strict decoder decodes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from atomickafka.core.raw import encode_raw_client, encode_raw_delivery
from atomickafka.core.reader import TYPE_HEADER, PlainRecord, peek, read_messages
from atomickafka.core.wire import (
    MAX_ID_LENGTH,
    Message,
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_delivery,
    encode_members,
    encode_tick,
    encode_watermark,
)
from atomickafka.metrics.records import UNKNOWN, record_type, sent_at_ms

SENT_AT = 1_795_000_000_123
CONTROL = (MessageType.NOTIFY, MessageType.ACK, MessageType.DECIDED, MessageType.ABORT)
#: Message ids a client may choose: plain, the longest allowed, escaped on the wire
#: (quotes, control characters: six bytes each), multi-byte, and one that spells a field.
IDS = (
    "m-1",
    "x" * MAX_ID_LENGTH,
    '"' * MAX_ID_LENGTH,
    "\x01" * MAX_ID_LENGTH,
    "\U0001f600" * MAX_ID_LENGTH,
    '","messageType":"TickMessage',
)

Sample = tuple[str, MessageType, bytes, list[tuple[str, bytes]] | None]


def _client(mid: str, sent_at: int | None = SENT_AT, raw_value: bool = False) -> Message:
    value: object = b"\x00user bytes" if raw_value else {"n": 1, "messageType": "AckMessage"}
    return client_message(mid, ["A", "B"], value, "s" * 300, sent_at=sent_at)


def _delivery(mid: str, kind: MessageType, sent_at: int | None = SENT_AT) -> Message:
    layer = 1 if kind is MessageType.PARTITION_DELIVERY else None
    return _client(mid, sent_at)._replace(
        messageType=kind, sentFromTopic="A", timeStamp=7, partitionID=layer, senderID="node-A"
    )


def _control(mid: str, kind: MessageType) -> Message:
    return _client(mid)._replace(
        messageType=kind, senderID="node-B", sentFromTopic="B", timeStamp=5
    )


def _typed(kind: MessageType) -> list[tuple[str, bytes]]:
    return [(TYPE_HEADER, kind.value.encode())]


def samples() -> Iterator[Sample]:
    """(name, type, value, headers) of every kind of record AtomicKafka writes."""
    for i, mid in enumerate(IDS):
        client = _client(mid)
        yield f"client-json-{i}", MessageType.CLIENT, encode_client(client), None
        yield (
            f"client-json-typed-{i}",
            MessageType.CLIENT,
            encode_client(client),
            _typed(MessageType.CLIENT),
        )
        _, value, headers = encode_raw_client(_client(mid, raw_value=True))
        yield f"client-raw-{i}", MessageType.CLIENT, value, headers
        for kind in (MessageType.DELIVERY, MessageType.PARTITION_DELIVERY):
            delivery = _delivery(mid, kind)
            yield f"{kind.value}-json-{i}", kind, encode_delivery(delivery), None
            yield f"{kind.value}-json-typed-{i}", kind, encode_delivery(delivery), _typed(kind)
        _, value, headers = encode_raw_delivery(_delivery(mid, MessageType.DELIVERY))
        yield f"delivery-raw-{i}", MessageType.DELIVERY, value, headers
        for kind in CONTROL:
            bundle = encode_bundle(
                [_control(mid, kind)], sender_id="node-B", sent_from="B", protocol="direct"
            )
            yield f"bundle-{kind.value}-{i}", MessageType.BUNDLE, bundle, None
            yield (
                f"bundle-typed-{kind.value}-{i}",
                MessageType.BUNDLE,
                bundle,
                _typed(MessageType.BUNDLE),
            )
    long_sender = "n" * 4000  # sender ids have no length limit
    yield "tick", MessageType.TICK, encode_tick("node-A", 3), None
    yield "tick-layer", MessageType.TICK, encode_tick("node-A/1", 3, 1), None
    yield "tick-long-sender", MessageType.TICK, encode_tick(long_sender, 3), None
    yield "members", MessageType.MEMBERS, encode_members("node-A", ["A", "B"]), None
    yield "watermark", MessageType.WATERMARK, encode_watermark("node-A/0", 3, 0), None
    yield "watermark-long", MessageType.WATERMARK, encode_watermark(long_sender, 3, 0), None


SAMPLES = list(samples())
#: What a record that does not decode stands for (its sentAt never matches).
_MISSING = Message("", MessageType.TICK, (), sentAt=-1)


def test_every_message_type_has_a_sample() -> None:
    """A type added to the wire format needs a sample here (control messages are only
    written inside Bundles)."""
    covered = {kind.value for _, kind, _, _ in SAMPLES}
    for _, _, value, headers in SAMPLES:
        covered |= {inner.kind for inner in peek(PlainRecord(value, headers=headers)).inner}
    assert covered == {t.value for t in MessageType}


@pytest.mark.parametrize(("name", "kind", "value", "headers"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_record_type_is_the_readers_type(
    name: str, kind: MessageType, value: bytes, headers: list[tuple[str, bytes]] | None
) -> None:
    record = PlainRecord(value, headers=headers)
    assert peek(record).kind == kind.value
    assert record_type(value, headers) == kind.value
    if kind is not MessageType.BUNDLE:
        decoded = read_messages(record)
        assert decoded is not None and [m.messageType for m in decoded] == [kind], name


@pytest.mark.parametrize("mid", IDS)
@pytest.mark.parametrize("sent_at", [SENT_AT, None])
def test_sent_at_is_the_decoded_sent_at(mid: str, sent_at: int | None) -> None:
    for kind in (MessageType.DELIVERY, MessageType.PARTITION_DELIVERY):
        value = encode_delivery(_delivery(mid, kind, sent_at))
        (message,) = read_messages(PlainRecord(value)) or [_MISSING]
        assert sent_at_ms(value, None) == message.sentAt == sent_at
    _, raw, headers = encode_raw_delivery(_delivery(mid, MessageType.DELIVERY, sent_at))
    (message,) = read_messages(PlainRecord(raw, headers=headers)) or [_MISSING]
    assert sent_at_ms(raw, headers) == message.sentAt == sent_at


#: What a sender may give beside the value (issue 26, item 4): a key, headers (whose
#: names may spell fields), a value that is not JSON; the envelope then carries them
#: after ``sentAt``.
EXTRAS: tuple[dict[str, Any], ...] = (
    {"key": b"order-42"},
    {"headers": (("trace", b"abc"), (',"sentAt":1,"digest":"x', b"\x00"))},
    {"key": b"k", "headers": (("h", b"v" * 3000),)},
    {"key": b"k", "encoding": "bytes", "value": b"\xff not json"},
)


@pytest.mark.parametrize("extras", EXTRAS, ids=["key", "headers", "large-header", "bytes"])
@pytest.mark.parametrize("sent_at", [SENT_AT, None])
def test_sent_at_is_found_when_the_sender_gave_a_key_or_headers(
    extras: dict[str, Any], sent_at: int | None
) -> None:
    """The delivery-latency histogram's input: with a key or headers the envelope's
    ``sentAt`` is no longer its last field, and was missed (every keyed delivery)."""
    for kind in (MessageType.DELIVERY, MessageType.PARTITION_DELIVERY):
        value = encode_delivery(_delivery(mid="m-1", kind=kind, sent_at=sent_at)._replace(**extras))
        (message,) = read_messages(PlainRecord(value)) or [_MISSING]
        assert message.key == extras.get("key") and message.sentAt == sent_at
        assert sent_at_ms(value, None) == sent_at, value[-200:]


def test_what_the_reader_does_not_know_is_unknown() -> None:
    for value in (b"", b"junk", b"[1, 2]", b'{"messageType": "Bogus"}', b'{"a": 1}'):
        assert peek(PlainRecord(value)).kind not in {t.value for t in MessageType}
        assert record_type(value, None) == UNKNOWN
