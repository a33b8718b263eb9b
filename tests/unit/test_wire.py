"""The wire format and its codec (docs/DESIGN.md §3): round trips and strict validation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.wire import (
    FORMAT_VERSION,
    MAX_ID_LENGTH,
    MAX_TIMESTAMP,
    Message,
    MessageError,
    MessageType,
    client_message,
    decode_record,
    encode_bundle,
    encode_client,
    encode_delivery,
    encode_tick,
    envelope_bytes,
    is_valid_topic_name,
    pack_bundles,
    parse_destinations,
    value_bytes,
    value_digest,
    with_arrived,
    with_seq,
)

# ---------------------------------------------------------------------------- strategies

topic_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=30,
).filter(lambda s: s not in {".", ".."})
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ids = st.text(min_size=1, max_size=40)
destination_sets = st.lists(topic_names, min_size=1, max_size=6).map(
    lambda names: tuple(sorted(set(names)))
)
timestamps = st.integers(min_value=0, max_value=MAX_TIMESTAMP)
CONTROL = [MessageType.NOTIFY, MessageType.ACK, MessageType.DECIDED, MessageType.ABORT]


@st.composite
def control_messages(draw: st.DrawFn, sender: str = "T1") -> Message:
    """A control message as a node's bundle would hold it."""
    kind = draw(st.sampled_from([*CONTROL, MessageType.CLIENT]))
    carries = kind in (MessageType.NOTIFY, MessageType.DECIDED, MessageType.CLIENT)
    value = value_bytes(draw(json_values))
    return Message(
        messageID=draw(ids),
        messageType=kind,
        topic=draw(destination_sets),
        value=value if carries else None,
        senderID=f"node-{sender}",
        sentFromTopic=sender,
        timeStamp=None if kind in (MessageType.ABORT, MessageType.CLIENT) else draw(timestamps),
        digest=value_digest(value),
        protocol="direct",
    )


def record(**fields: Any) -> bytes:
    """A raw record: a valid ClientMessage with ``fields`` replaced (``...`` drops one)."""
    base: dict[str, Any] = {
        "messageID": "c1-1",
        "senderID": "c1",
        "messageType": "ClientMessage",
        "value": "v",
        "topic": ["T1", "T2"],
    }
    for name, value in fields.items():
        if value is ...:
            base.pop(name, None)
        else:
            base[name] = value
    return orjson.dumps(base)


def error_of(data: bytes | str) -> MessageError:
    with pytest.raises(MessageError) as info:
        decode_record(data)
    return info.value


def one(data: bytes | str) -> Message:
    (message,) = decode_record(data)
    return message


# ---------------------------------------------------------------------------- round trips


@given(ids, destination_sets, json_values)
def test_client_message_round_trip(mid: str, destinations: tuple[str, ...], value: Any) -> None:
    message = client_message(mid, destinations, value, "c1", partition=3)
    assert one(encode_client(message)) == message
    assert orjson.loads(one(encode_client(message)).value or b"") == value


@given(ids, destination_sets, json_values, timestamps)
def test_delivery_round_trip(mid: str, dests: tuple[str, ...], value: Any, ts: int) -> None:
    data = value_bytes(value)
    message = Message(
        mid,
        MessageType.DELIVERY,
        dests,
        data,
        "node-T1",
        "T1",
        ts,
        digest=value_digest(data),
        protocol="optimized",
    )
    encoded = encode_delivery(message)
    assert one(encoded) == message
    # Plain consumers read the thesis fields, the value inline as JSON.
    plain = orjson.loads(encoded)
    assert plain["value"] == value and plain["timeStamp"] == ts and plain["topic"] == list(dests)
    assert plain["formatVersion"] == FORMAT_VERSION
    assert len(encoded) <= len(data) + envelope_bytes(mid, dests)


@given(control_messages(), st.tuples(timestamps, st.integers(0, 10**6)), timestamps)
def test_the_hot_path_setters_are_replace(message: Message, seq: tuple[int, int], at: int) -> None:
    """``with_seq`` and ``with_arrived`` (the batch layer's, per record) change one field
    exactly as NamedTuple's ``_replace`` does."""
    assert with_seq(message, seq) == message._replace(seq=seq)
    assert with_arrived(message, at) == message._replace(arrived=at)
    assert type(with_arrived(message, at)) is Message


@given(st.lists(control_messages(), min_size=1, max_size=8))
def test_bundle_round_trip(messages: list[Message]) -> None:
    encoded = encode_bundle(messages, sender_id="node-T1", sent_from="T1", protocol="direct")
    assert decode_record(encoded) == messages
    header = orjson.loads(encoded.split(b"\n", 1)[0])
    assert header["messageType"] == "Bundle"
    assert [m["messageType"] for m in header["messages"]] == [m.messageType for m in messages]


@given(st.lists(control_messages(), min_size=1, max_size=20), st.integers(300, 5000))
def test_pack_bundles_keeps_order_and_fits(messages: list[Message], limit: int) -> None:
    records = list(
        pack_bundles(
            messages, sender_id="node-T1", sent_from="T1", protocol="direct", max_bytes=limit
        )
    )
    assert [m for r in records for m in decode_record(r)] == messages
    for r in records:
        inside = decode_record(r)
        assert len(r) <= limit or len(inside) == 1  # only a message too big alone overflows
        for m in inside:
            assert len(r) <= sum(
                len(x.value or b"") + envelope_bytes(x.messageID, x.topic) for x in inside
            ), m


def test_a_bundle_carries_values_as_opaque_bytes() -> None:
    """No hop parses a value: its bytes come out of the bundle exactly as they went in."""
    raw = b'{"z":1,"a":[1.0,2e3]}'  # not what orjson would write for that value
    message = Message(
        "m", MessageType.NOTIFY, ("A", "B"), raw, "node-A", "A", 5, digest="d", protocol="poc"
    )
    (back,) = decode_record(encode_bundle([message], sender_id="n", sent_from="A", protocol="poc"))
    assert back.value == raw


@pytest.mark.parametrize(
    "value",
    [
        "",
        "naïve café, Straße, Ελληνικά, 日本語",
        "😀🚀👩‍👩‍👧 emoji, with ZWJ",
        "x" * (1 << 20),
        {"nested": {"objects": {"and": ["arrays", [1, [2, [3]]]]}}},
        [1, "two", None, True, 2.5, {"k": []}],
        None,
        0,
        -(2**63),
        1.5e300,
        True,
        {},
        [],
        'line\nbreak\ttab"quote\\backslash\u0000nul',
    ],
)
def test_odd_values_survive(value: Any) -> None:
    message = client_message("c1-7", ["T1", "T2"], value, "c1")
    back = one(encode_client(message))
    assert orjson.loads(back.value or b"") == value
    assert type(orjson.loads(back.value or b"")) is type(value)


def test_null_is_a_value_and_absence_is_not() -> None:
    assert one(record(value=None)).value == b"null"
    assert "is missing" in str(error_of(record(value=...)))


def test_a_value_is_sized_as_it_is_produced() -> None:
    """``1e15`` is 4 bytes in, 18 bytes as orjson writes it: nodes size what they write."""
    message = one(b'{"messageID":"m","messageType":"ClientMessage","value":1e15,"topic":["A"]}')
    assert message.value == b"1000000000000000.0"


def test_tick_round_trip() -> None:
    tick = one(encode_tick("merger-T1", 42, partition=2))
    assert (tick.messageType, tick.timeStamp, tick.partitionID) == (MessageType.TICK, 42, 2)


def test_thesis_records_still_decode() -> None:
    """Listing 4.3-style records (format 1): a numeric senderID, a topic given as a
    string, one record per control message and no protocol (the engine refuses those)."""
    client = one(
        b'{"messageID":"c1-1","senderID":1,"messageType":"ClientMessage","value":"hi","topic":"T1"}'
    )
    assert (client.senderID, client.topic, client.value) == ("1", ("T1",), b'"hi"')
    notify = one(
        b'{"messageID":"c1-1","senderID":1,"messageType":"NotifyMessage",'
        b'"value":"hello","topic":"T1","sentFromTopic":"T1","timeStamp":3}'
    )
    assert notify.messageType is MessageType.NOTIFY and notify.protocol is None
    assert notify.digest == value_digest(b'"hello"')


# ---------------------------------------------------------------------------- normalisation


def test_unknown_fields_are_tolerated() -> None:
    assert one(record(extra="x", annotations={"a": 1}, offset=99)) == one(record())


def test_destinations_become_a_sorted_set() -> None:
    assert one(record(topic=["T3", "T1", "T3", "T2", "T1"])).topic == ("T1", "T2", "T3")
    assert parse_destinations("T1") == ("T1",)
    assert parse_destinations(iter(["b", "a"])) == ("a", "b")


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (record(messageID=...), "messageID"),
        (record(messageID=7), "messageID"),
        (record(messageID=""), "messageID"),
        (record(messageID="x" * (MAX_ID_LENGTH + 1)), "messageID"),
        (record(messageType=...), "messageType"),
        (record(messageType="Gossip"), "messageType"),
        (record(messageType=3), "messageType"),
        (record(topic=...), "topic"),
        (record(topic=[]), "topic"),
        (record(topic=["T1", "bad topic!"]), "topic"),
        (record(topic=["."]), "topic"),
        (record(topic=["x" * 250]), "topic"),
        (record(topic=[5]), "topic"),
        (record(topic=[{}]), "topic"),
        (record(topic={"a": 1}), "topic"),
        (record(senderID=[1]), "senderID"),
        (record(timeStamp=-1), "timeStamp"),
        (record(timeStamp=MAX_TIMESTAMP + 1), "timeStamp"),
        (record(timeStamp=2**64 - 1), "timeStamp"),
        (record(timeStamp=1.5), "timeStamp"),
        (record(timeStamp=True), "timeStamp"),
        (record(partitionID=-1), "partitionID"),
        (record(partitionID="0"), "partitionID"),
        (record(formatVersion=FORMAT_VERSION + 1), "formatVersion"),
        (record(formatVersion="2"), "formatVersion"),
        (record(messageType="NotifyMessage", timeStamp=1), "sentFromTopic"),
        (record(messageType="AckMessage", sentFromTopic="T1"), "timeStamp"),
        (record(messageType="TickMessage"), "timeStamp"),
        (record(messageType="Bundle"), None),
    ],
)
def test_invalid_field_is_named(data: bytes, field: str | None) -> None:
    assert error_of(data).field == field


def test_a_newer_format_says_what_to_do() -> None:
    assert "upgrade" in str(error_of(record(formatVersion=FORMAT_VERSION + 1)))


@pytest.mark.parametrize("data", [b"", b"not json", b"{", b'{"a":1e400}', b"\xff\xfe"])
def test_not_json(data: bytes) -> None:
    assert error_of(data).field is None


@pytest.mark.parametrize("data", [b"[]", b"1", b'"x"', b"null"])
def test_not_an_object(data: bytes) -> None:
    assert "JSON object" in str(error_of(data))


def bundle_with(header: dict[str, Any], body: bytes = b"") -> bytes:
    base: dict[str, Any] = {"messageType": "Bundle", "sentFromTopic": "A", "protocol": "poc"}
    return orjson.dumps({**base, **header}) + b"\n" + body


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (bundle_with({"messages": []}), "messages"),
        (bundle_with({"messages": "x"}), "messages"),
        (bundle_with({"messages": [1]}), "messages[0]"),
        (bundle_with({"sentFromTopic": None, "messages": [{}]}), "sentFromTopic"),
        (
            bundle_with({"messages": [{"messageID": "m", "messageType": "DeliveryMessage"}]}),
            "messageType",
        ),
        (
            bundle_with(
                {
                    "messages": [
                        {
                            "messageID": "m",
                            "messageType": "NotifyMessage",
                            "topic": ["A"],
                            "timeStamp": 1,
                            "valueBytes": 9,
                        }
                    ]
                },
                b"1",
            ),
            "messages[0].valueBytes",
        ),
        (
            bundle_with(
                {
                    "messages": [
                        {
                            "messageID": "m",
                            "messageType": "AckMessage",
                            "topic": ["A"],
                            "timeStamp": 1,
                        }
                    ]
                }
            ),
            "messages[0].digest",
        ),
        (
            bundle_with(
                {
                    "messages": [
                        {
                            "messageID": "m",
                            "messageType": "AckMessage",
                            "topic": ["A"],
                            "timeStamp": 1,
                            "digest": "d",
                        }
                    ]
                },
                b"extra",
            ),
            "messages",
        ),
    ],
)
def test_invalid_bundles_name_the_field(data: bytes, field: str) -> None:
    assert error_of(data).field == field


def test_error_message_shortens_huge_values() -> None:
    assert len(str(error_of(record(messageID=["x" * 10_000])))) < 200


def test_values_json_cannot_hold_are_refused() -> None:
    with pytest.raises(MessageError, match="not a JSON value"):
        client_message("m", ["A"], 2**64)
    with pytest.raises(MessageError, match="not a JSON value"):
        client_message("m", ["A"], {1: "x"})


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("orders", True),
        ("a.b-c_d", True),
        ("x" * 249, True),
        ("x" * 250, False),
        ("", False),
        (".", False),
        ("..", False),
        ("a b", False),
        ("a/b", False),
        (3, False),
        (None, False),
    ],
)
def test_topic_names(name: object, valid: bool) -> None:
    assert is_valid_topic_name(name) is valid
