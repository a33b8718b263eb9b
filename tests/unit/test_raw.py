"""The raw record form (core/raw.py, docs/DESIGN.md §3.8): the user's bytes as the
value, the user's key and headers carried, AtomicKafka's metadata in headers."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.raw import (
    BYTES,
    H_TS,
    decode_any,
    decode_raw,
    encode_raw_client,
    encode_raw_delivery,
    is_raw,
    raw_client_record,
    user_headers,
)
from atomickafka.core.reader import PlainRecord, delivery_order_key, peek, read_delivery
from atomickafka.core.wire import (
    MessageError,
    client_message,
    decode_record,
    encode_bundle,
    encode_delivery,
    parse_destinations,
)

BINARY = b"\x00\xffnot json\t\n"


def test_a_binary_value_key_and_headers_travel_to_every_destination() -> None:
    """direct: A hears of the message from the client's raw record and Notifies B; both
    deliver the same bytes, key and headers, and the same digest."""
    message = client_message(
        "m", ["A", "B"], BINARY, "c", key=b"k1", headers=(("trace", b"42"),), sent_at=5
    )
    key, value, headers = encode_raw_client(message)
    assert value == BINARY and key == b"k1" and ("trace", b"42") in headers and is_raw(headers)
    (read,) = decode_any(value, key, headers)
    assert read == message._replace(senderID="c")
    a, b = Engine("A", algorithm=Algorithm.DIRECT), Engine("B", algorithm=Algorithm.DIRECT)
    notify = [o for o in a.handle_batch([read]) if o.topic == "B"]
    bundle = encode_bundle(
        [o.message for o in notify], sender_id="node-A", sent_from="A", protocol="direct"
    )
    out_b = b.handle_batch(decode_record(bundle))
    out_a = a.handle_batch(decode_record(encode_bundle(
        [o.message for o in out_b if o.topic == "A"], sender_id="node-B", sent_from="B",
        protocol="direct",
    )))  # fmt: skip
    (da,) = [o.message for o in out_a if o.message.messageType.value == "DeliveryMessage"]
    (db,) = [o.message for o in out_b if o.message.messageType.value == "DeliveryMessage"]
    for delivery in (da, db):
        assert (delivery.value, delivery.key, delivery.headers, delivery.encoding) == (
            BINARY, b"k1", (("trace", b"42"),), BYTES,
        )  # fmt: skip
        assert delivery.digest == message.digest


def test_a_raw_delivery_is_the_value_as_sent_with_the_metadata_in_headers() -> None:
    node = Engine("A")
    (out,) = node.handle_batch([client_message("m", ["A"], BINARY, "c", key=b"k")])
    key, value, headers = encode_raw_delivery(out.message)
    assert (key, value) == (b"k", BINARY)
    assert dict(headers)[H_TS] == b"1"
    assert user_headers(headers) == ()
    record = PlainRecord(value, key=key, headers=headers)
    message = read_delivery(record, at="A")
    assert message is not None and delivery_order_key(message) == (1, 0, "m")
    assert peek(record).kind == "DeliveryMessage"


def test_the_json_envelope_carries_bytes_keys_and_headers_as_base64() -> None:
    node = Engine("A")
    message = client_message("m", ["A"], BINARY, "c", key=b"k", headers=(("h", b"\xff"),))
    (out,) = node.handle_batch([message])
    envelope = encode_delivery(out.message)
    data = orjson.loads(envelope)  # always valid UTF-8 JSON
    assert "value" not in data and data["encoding"] == BYTES
    (back,) = decode_record(envelope)
    assert (back.value, back.key, back.headers) == (BINARY, b"k", (("h", b"\xff"),))


def test_key_and_headers_are_part_of_the_version() -> None:
    one = client_message("m", ["A"], "v", "c", key=b"1")
    two = client_message("m", ["A"], "v", "c", key=b"2")
    plain = client_message("m", ["A"], "v", "c")
    assert len({one.digest, two.digest, plain.digest}) == 3
    assert plain.digest == client_message("m", ["A"], "v", "c").digest


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda h: [x for x in h if x[0] != "atomickafka-id"], "atomickafka-id"),
        (lambda h: [*h, ("atomickafka-sent", b"soon")], "atomickafka-sent"),
        # digits to str.isdigit, not to int(): a ValueError here once stopped a node
        (lambda h: [*h, ("atomickafka-sent", "²".encode())], "atomickafka-sent"),
        (lambda h: [*h, ("atomickafka-layer", "٣".encode())], "atomickafka-layer"),
        (lambda h: [*h, ("atomickafka-encoding", b"utf-16")], "atomickafka-encoding"),
        (lambda h: [(k, b"bad name!" if k == "atomickafka-to" else v) for k, v in h], "topic"),
    ],
)
def test_a_malformed_raw_record_names_what_is_wrong(change: object, field: str) -> None:
    key, value, headers = encode_raw_client(client_message("m", ["A"], "v", "c"))
    with pytest.raises(MessageError, match=field):
        decode_raw(value, key, change(headers))  # type: ignore[operator]


def test_a_raw_client_record_whose_value_is_not_json_must_say_bytes() -> None:
    key, _value, headers = encode_raw_client(client_message("m", ["A"], "v", "c"))
    with pytest.raises(MessageError, match="JSON"):
        decode_raw(b"\xff{", key, headers)


@given(
    st.binary(max_size=200),
    st.binary(max_size=20),
    st.lists(
        st.tuples(st.text("abcxyz-", min_size=1, max_size=8), st.binary(max_size=16)), max_size=3
    ),
)
def test_bytes_survive_every_form(
    value: bytes, key: bytes, headers: list[tuple[str, bytes]]
) -> None:
    message = client_message("m", ["A", "B"], value, "c", key=key, headers=tuple(headers))
    k, v, h = encode_raw_client(message)
    (back,) = decode_any(v, k, h)
    assert (back.value, back.key, back.headers, back.digest) == (
        value, key, tuple(headers), message.digest,
    )  # fmt: skip


@given(
    st.one_of(st.binary(max_size=40), st.text(max_size=20), st.integers(-(2**63), 2**63 - 1)),
    st.lists(st.sampled_from(["A", "B", "c.d"]), min_size=1, max_size=3),
    st.sampled_from(["", "client-1"]),
    st.one_of(st.none(), st.integers(0, 7)),
    st.one_of(st.none(), st.integers(0, 2**53 - 1)),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.lists(
        st.tuples(st.text("abxy-", min_size=1, max_size=5), st.binary(max_size=6)), max_size=2
    ),
)
def test_the_clients_record_is_the_client_messages_raw_form(
    value: object,
    destinations: list[str],
    sender: str,
    layer: int | None,
    sent_at: int | None,
    key: bytes | None,
    headers: list[tuple[str, bytes]],
) -> None:
    """The client builds its record without the Message (client/client.py): the same
    record, byte for byte, as the Message encoded."""
    message = client_message(
        "c-1", destinations, value, sender, layer, sent_at=sent_at, key=key, headers=headers
    )
    built = raw_client_record(
        "c-1",
        parse_destinations(destinations),
        value,
        sender,
        layer,
        sent_at=sent_at,
        key=key,
        headers=tuple(headers),
    )
    assert built == encode_raw_client(message)


def test_the_clients_record_refuses_what_client_message_refuses() -> None:
    with pytest.raises(MessageError, match="messageID"):
        raw_client_record("", ("A",), 1)
    with pytest.raises(MessageError, match="sentAt"):
        raw_client_record("m", ("A",), 1, sent_at=-1)
    with pytest.raises(MessageError, match="JSON"):
        raw_client_record("m", ("A",), 2**70)
