"""The wire format and its codec (DESIGN §2): round trips and strict validation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.messages import (
    CONTROL_TYPES,
    MAX_ID_LENGTH,
    Message,
    MessageError,
    MessageType,
    decode,
    encode,
    is_valid_topic_name,
    to_dict,
    validate,
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
    | st.integers(min_value=-(2**53), max_value=2**53)
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
timestamps = st.integers(min_value=0, max_value=2**62)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Any valid message: every type, with the fields its type requires."""
    kind = draw(st.sampled_from(list(MessageType)))
    needs_ts = kind is not MessageType.CLIENT
    return Message(
        messageID=draw(ids),
        messageType=kind,
        topic=tuple(sorted(set(draw(st.lists(topic_names, min_size=1, max_size=6))))),
        value=draw(json_values),
        senderID=draw(st.text(max_size=20)),
        sentFromTopic=draw(topic_names if kind in CONTROL_TYPES else st.none() | topic_names),
        timeStamp=draw(timestamps if needs_ts else st.none() | timestamps),
        partitionID=draw(st.none() | st.integers(min_value=0, max_value=1000)),
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
        decode(data)
    return info.value


# ---------------------------------------------------------------------------- round trips


@given(messages())
def test_round_trip_any_message(message: Message) -> None:
    assert decode(encode(message)) == message


@given(messages())
def test_round_trip_through_str(message: Message) -> None:
    assert decode(encode(message).decode("utf-8")) == message


@given(json_values)
def test_round_trip_any_json_value(value: Any) -> None:
    message = Message("id", MessageType.CLIENT, ("T",), value=value)
    assert decode(encode(message)).value == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "naïve café, Straße, Ελληνικά, 日本語",
        "😀🚀👩‍👩‍👧 emoji, with ZWJ",
        "x" * (1 << 20),  # 1 MB
        {"nested": {"objects": {"and": ["arrays", [1, [2, [3]]]]}}},
        [1, "two", None, True, 2.5, {"k": []}],
        None,
        0,
        -(2**53),
        1.5e300,
        True,
        {},
        [],
        'line\nbreak\ttab"quote\\backslash\u0000nul',
    ],
    ids=[
        "empty",
        "unicode",
        "emoji",
        "1MB",
        "nested-object",
        "array",
        "null",
        "zero",
        "big-int",
        "big-float",
        "bool",
        "empty-object",
        "empty-array",
        "escapes",
    ],
)
def test_round_trip_odd_values(value: Any) -> None:
    message = Message("c1-7", MessageType.CLIENT, ("T1", "T2"), value=value, senderID="c1")
    decoded = decode(encode(message))
    assert decoded == message
    assert decoded.value == value
    assert type(decoded.value) is type(value)


def test_null_value_is_kept_explicit() -> None:
    assert orjson.loads(encode(Message("m", MessageType.CLIENT, ("T",))))["value"] is None


def test_encode_leaves_out_absent_optional_fields() -> None:
    out = to_dict(Message("m", MessageType.CLIENT, ("T",), value=1, senderID="c"))
    assert set(out) == {"messageID", "senderID", "messageType", "value", "topic"}
    out = to_dict(
        Message("m", MessageType.ACK, ("T",), sentFromTopic="T", timeStamp=0, partitionID=0)
    )
    assert out["timeStamp"] == 0 and out["partitionID"] == 0 and out["sentFromTopic"] == "T"


def test_thesis_example_record_decodes() -> None:
    # Listing 4.3-style record: numeric senderID, single topic given as a string.
    message = decode(
        b'{"messageID":"c1-1","senderID":1,"messageType":"NotifyMessage",'
        b'"value":"hello","topic":"T1","sentFromTopic":"T1","timeStamp":3}'
    )
    assert message.senderID == "1"
    assert message.topic == ("T1",)
    assert message.messageType is MessageType.NOTIFY


# ---------------------------------------------------------------------------- normalisation


def test_unknown_fields_are_tolerated_and_dropped() -> None:
    message = decode(record(extra="x", headers={"a": 1}, partition=3, offset=99))
    assert message == decode(record())


def test_duplicate_destinations_are_normalised() -> None:
    message = decode(record(topic=["T3", "T1", "T3", "T2", "T1"]))
    assert message.topic == ("T1", "T2", "T3")


@given(st.lists(topic_names, min_size=1, max_size=8))
def test_destinations_become_a_sorted_set(topics: list[str]) -> None:
    assert decode(record(topic=topics)).topic == tuple(sorted(set(topics)))


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (record(messageID=...), "messageID"),
        (record(messageID=7), "messageID"),
        (record(messageID=None), "messageID"),
        (record(messageID=["a"]), "messageID"),
        (record(messageID=""), "messageID"),
        (record(messageID="x" * (MAX_ID_LENGTH + 1)), "messageID"),
        (record(messageType=...), "messageType"),
        (record(messageType="Gossip"), "messageType"),
        (record(messageType="clientmessage"), "messageType"),
        (record(messageType=3), "messageType"),
        (record(topic=...), "topic"),
        (record(topic=[]), "topic"),
        (record(topic=["T1", "bad topic!"]), "topic"),
        (record(topic=[""]), "topic"),
        (record(topic=["."]), "topic"),
        (record(topic=[".."]), "topic"),
        (record(topic=["x" * 250]), "topic"),
        (record(topic=[5]), "topic"),
        (record(topic=[{}]), "topic"),  # unhashable: must not escape as TypeError
        (record(topic=[["T1"]]), "topic"),
        (record(topic=5), "topic"),
        (record(topic={"T1": 1}), "topic"),
        (record(messageType="AckMessage", sentFromTopic="T1", timeStamp=-1), "timeStamp"),
        (record(messageType="AckMessage", sentFromTopic="T1", timeStamp=True), "timeStamp"),
        (record(messageType="AckMessage", sentFromTopic="T1", timeStamp=1.0), "timeStamp"),
        (record(messageType="AckMessage", sentFromTopic="T1", timeStamp=1.5), "timeStamp"),
        (record(messageType="AckMessage", sentFromTopic="T1", timeStamp="3"), "timeStamp"),
        (record(messageType="AckMessage", sentFromTopic="T1"), "timeStamp"),
        (record(messageType="NotifyMessage", timeStamp=1), "sentFromTopic"),
        (record(messageType="NotifyMessage", timeStamp=1, sentFromTopic=3), "sentFromTopic"),
        (record(senderID=["c"]), "senderID"),
        (record(senderID=True), "senderID"),
        (record(partitionID=-1), "partitionID"),
        (record(partitionID="0"), "partitionID"),
    ],
)
def test_invalid_field_is_named(data: bytes, field: str) -> None:
    error = error_of(data)
    assert error.field == field
    assert repr(field) in str(error)


@pytest.mark.parametrize("kind", sorted(t.value for t in MessageType if t != "ClientMessage"))
def test_timestamp_required_on_every_timestamped_type(kind: str) -> None:
    assert error_of(record(messageType=kind, sentFromTopic="T1")).field == "timeStamp"


@pytest.mark.parametrize("kind", sorted(t.value for t in CONTROL_TYPES))
def test_sent_from_topic_required_on_control_types(kind: str) -> None:
    assert error_of(record(messageType=kind, timeStamp=1)).field == "sentFromTopic"


@pytest.mark.parametrize("data", [b"", b"{", b"not json", b"{'single': 1}", b"\xff\xfe"])
def test_not_json(data: bytes) -> None:
    error = error_of(data)
    assert error.field is None
    assert "not valid JSON" in str(error)


@pytest.mark.parametrize("data", [b"[]", b"[1, 2]", b'"text"', b"1", b"null", b"true"])
def test_not_an_object(data: bytes) -> None:
    error = error_of(data)
    assert error.field is None
    assert "JSON object" in str(error)


def test_error_message_shortens_huge_values() -> None:
    error = error_of(record(messageID="x" * 10_000))
    assert len(str(error)) < 200


def test_client_message_needs_no_timestamp() -> None:
    assert decode(record()).timeStamp is None


def test_validate_constructed_messages() -> None:
    good = Message("m", MessageType.ACK, ("A", "B"), sentFromTopic="A", timeStamp=1)
    assert validate(good) is good
    with pytest.raises(MessageError) as info:
        validate(good._replace(topic=("B", "A")))
    assert info.value.field == "topic"
    with pytest.raises(MessageError) as info:
        validate(good._replace(topic=("A", "A")))
    assert info.value.field == "topic"
    with pytest.raises(MessageError) as info:
        validate(good._replace(timeStamp=None))
    assert info.value.field == "timeStamp"
    with pytest.raises(MessageError) as info:
        validate(good._replace(sentFromTopic=None))
    assert info.value.field == "sentFromTopic"
    with pytest.raises(MessageError) as info:
        validate(good._replace(messageID=""))
    assert info.value.field == "messageID"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("T1", True),
        ("a.b_c-D9", True),
        ("x" * 249, True),
        ("x" * 250, False),
        ("", False),
        (".", False),
        ("..", False),
        ("a b", False),
        ("é", False),
        (None, False),
        (1, False),
    ],
)
def test_topic_names(name: object, valid: bool) -> None:
    assert is_valid_topic_name(name) is valid
