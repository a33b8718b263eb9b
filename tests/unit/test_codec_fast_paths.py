"""The codecs' fast paths agree with their checked paths: a bundle entry as this code
writes it decodes to the same message either way, anything unusual takes the checked
path (which names the problem), and a raw record's headers split in one pass as
``is_raw`` and ``user_headers`` read them."""

from __future__ import annotations

import orjson
import pytest

from atomickafka.core import wire
from atomickafka.core.raw import _split, encode_raw_client, is_raw, user_headers
from atomickafka.core.wire import (
    MessageError,
    MessageType,
    client_message,
    decode_record,
    encode_bundle,
)

TOPICS = ("t1", "t2", "t3")


def _messages() -> list[wire.Message]:
    base = client_message("c-1", TOPICS, {"a": 1}, "c", sent_at=1_700_000_000_000)
    keyed = client_message("c-2", TOPICS, b"\x00raw", "c", key=b"k", headers=[("h", b"v")])
    return [
        base._replace(messageType=MessageType.NOTIFY, timeStamp=7, seq=(3, 0)),
        base._replace(messageType=MessageType.ACK, timeStamp=8, value=None, seq=(3, 1)),
        base._replace(messageType=MessageType.ABORT, value=None),
        base,  # a relayed copy: no timestamp
        keyed._replace(messageType=MessageType.NOTIFY, timeStamp=9),  # extras: checked path
    ]


def _checked(raw: bytes) -> list[wire.Message]:
    """Decode ``raw`` with the fast path switched off."""
    original = wire._fast_entry
    wire._fast_entry = lambda *_: None
    try:
        return decode_record(raw, log_time=5, origin=11)
    finally:
        wire._fast_entry = original


def test_both_paths_decode_a_bundle_alike() -> None:
    raw = encode_bundle(_messages(), sender_id="node-t1", sent_from="t1", protocol="direct")
    fast = decode_record(raw, log_time=5, origin=11)
    assert fast == _checked(raw)
    assert [m.seq for m in fast] == [(3, 0), (3, 1), None, None, None]
    assert fast[-1].key == b"k" and fast[-1].headers == (("h", b"v"),)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("seq", [1, -1]),
        ("seq", [1, 2, 3]),
        ("seq", [True, 1]),
        ("timeStamp", -5),
        ("timeStamp", "7"),
        ("sentAt", 1.5),
        ("messageID", ""),
        ("digest", 12),
        ("topic", ["bad name!"]),
        ("valueBytes", 10_000),
    ],
)
def test_an_unusual_entry_is_refused_as_the_checked_path_refuses_it(
    field: str, bad: object
) -> None:
    raw = encode_bundle(_messages()[:1], sender_id="node-t1", sent_from="t1", protocol="direct")
    head, _, body = raw.partition(b"\n")
    header = orjson.loads(head)
    header["messages"][0][field] = bad
    _refused_alike(orjson.dumps(header) + b"\n" + body)


def test_a_value_that_is_not_json_is_refused_the_same_way() -> None:
    raw = encode_bundle(_messages()[:1], sender_id="node-t1", sent_from="t1", protocol="direct")
    head, _, body = raw.partition(b"\n")
    _refused_alike(head + b"\n" + b"x" + body[1:])


def _refused_alike(broken: bytes) -> None:
    """The fast decoder refuses ``broken`` with the checked decoder's very message."""
    with pytest.raises(MessageError) as fast:
        decode_record(broken)
    with pytest.raises(MessageError) as checked:
        _checked(broken)
    assert str(fast.value) == str(checked.value)


def test_headers_split_in_one_pass() -> None:
    message = client_message("c-3", TOPICS, {"x": 1}, "c", headers=[("trace", b"1")])
    _, _, headers = encode_raw_client(message)
    mixed = [*headers, ("atomickafka-id", None), ("user", None), ("other", "text")]
    raw, ours, user = _split(mixed)
    assert raw is is_raw(mixed) is True
    assert user == user_headers(mixed) == (("trace", b"1"), ("user", b""), ("other", b"text"))
    assert ours["atomickafka-id"] == b"c-3"  # a None value does not replace it
    assert _split({"atomickafka-format": "3"})[0] is True
    assert _split(None) == (False, {}, ())
