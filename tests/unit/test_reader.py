"""The lenient record reader (core/reader.py): every tool reads records through it, so
it must take every record the format allows and skip, never raise on, anything else."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.engine import Engine
from atomickafka.core.raw import H_FORMAT, H_TS, RAW_FORMAT
from atomickafka.core.reader import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_ERROR_HEADER,
    DEAD_LETTER_MESSAGES_HEADER,
    DEAD_LETTER_OFFSET_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    TYPE_HEADER,
    UNDECODABLE,
    PlainRecord,
    declares_delivery,
    delivery_order_key,
    delivery_writers,
    peek,
    read_dead_letter,
    read_delivery,
    read_messages,
)
from atomickafka.core.reasons import Reason
from atomickafka.core.wire import (
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_delivery,
    encode_watermark,
)
from atomickafka.node.config import NodeConfig
from atomickafka.node.merger_batch import merger_id


def _delivery_bytes(topic: str = "A", layer: int | None = None) -> bytes:
    node = Engine(topic, partition=layer)
    (out,) = node.step([client_message("c-1", [topic], {"x": 1}, "c")]).outputs
    return encode_delivery(out.message)


def test_a_delivery_is_read_with_its_order_key() -> None:
    message = read_delivery(PlainRecord(_delivery_bytes()))
    assert message is not None
    assert message.messageType is MessageType.DELIVERY
    assert message.value == b'{"x":1}'
    assert delivery_order_key(message) == (1, 0, "c-1")


def test_a_layer_delivery_carries_its_layer_in_the_order_key() -> None:
    message = read_delivery(PlainRecord(_delivery_bytes(layer=2)))
    assert message is not None
    assert message.messageType is MessageType.PARTITION_DELIVERY
    assert delivery_order_key(message) == (1, 2, "c-1")


def test_only_the_topics_own_node_delivers_into_it() -> None:
    record = PlainRecord(_delivery_bytes("A"))
    assert read_delivery(record, at="A") is not None
    assert read_delivery(record, at="B") is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"not json",
        b"[1,2]",
        b'{"messageType":"DeliveryMessage"}',
        encode_client(client_message("c-1", ["A"], 1, "c")),
        encode_watermark("node-A", 3, 0),
    ],
)
def test_anything_but_a_delivery_is_skipped(value: bytes | None) -> None:
    assert read_delivery(PlainRecord(value)) is None


def test_a_type_header_skips_a_record_without_parsing_it() -> None:
    record = PlainRecord(_delivery_bytes(), headers=[(TYPE_HEADER, b"Bundle")])
    assert read_delivery(record) is None


def test_a_delivery_is_known_by_its_type_header_alone() -> None:
    marked = PlainRecord(b"not even json", headers=[(TYPE_HEADER, b"DeliveryMessage")])
    assert declares_delivery(marked)
    assert not declares_delivery(PlainRecord(_delivery_bytes()))  # split layout: no header
    assert not declares_delivery(PlainRecord(b"{}", headers=[(TYPE_HEADER, b"Bundle")]))


def test_peek_reads_a_bundles_header_only() -> None:
    notify = client_message("c-1", ["A", "B"], "v", "c")._replace(
        messageType=MessageType.NOTIFY, sentFromTopic="A", timeStamp=4, protocol="direct"
    )
    raw = encode_bundle([notify], sender_id="node-A", sent_from="A", protocol="direct")
    seen = peek(PlainRecord(raw))
    assert seen.is_bundle and seen.sender_id == "node-A" and seen.sent_from == "A"
    assert [(i.kind, i.message_id, i.timestamp) for i in seen.inner] == [
        ("NotifyMessage", "c-1", 4)
    ]
    assert read_messages(PlainRecord(raw)) is not None


def test_peek_names_what_it_cannot_read() -> None:
    assert peek(PlainRecord(b"\xff\x00")).kind == UNDECODABLE
    assert peek(PlainRecord(None)).kind == UNDECODABLE
    assert peek(PlainRecord(b'{"a":1}')).kind == "<none>"


def test_a_dead_letter_is_read_from_its_headers() -> None:
    record = PlainRecord(
        b"junk",
        headers=[
            (DEAD_LETTER_ERROR_HEADER, b"record: not valid JSON"),
            (DEAD_LETTER_SOURCE_HEADER, b"atomickafka-in.A/0"),
            (DEAD_LETTER_OFFSET_HEADER, b"17"),
            (DEAD_LETTER_MESSAGES_HEADER, b"m1,m2"),
            (DEAD_LETTER_CODE_HEADER, b"invalid-record"),
        ],
    )
    letter = read_dead_letter(record)
    assert letter.reason == "record: not valid JSON"
    assert letter.code is Reason.INVALID_RECORD
    assert (letter.source, letter.source_offset) == ("atomickafka-in.A/0", 17)
    assert letter.message_ids == ("m1", "m2")
    assert read_dead_letter(PlainRecord(b"x")).reason == "(no reason given)"
    assert read_dead_letter(PlainRecord(b"x")).code is None  # an older writer's
    newer = PlainRecord(b"x", headers=[(DEAD_LETTER_CODE_HEADER, b"a-newer-code")])
    assert read_dead_letter(newer).code is None


def test_a_dead_letter_note_names_its_message() -> None:
    """A node writes a note in place of an aborted or held message's record."""
    note = PlainRecord(
        b'{"messageID":"m7","topic":["A","B"]}',
        headers=[(DEAD_LETTER_ERROR_HEADER, b"aborted: no node")],
    )
    assert read_dead_letter(note).message_ids == ("m7",)
    assert read_dead_letter(PlainRecord(b'{"messageID":7}')).message_ids == ()
    assert read_dead_letter(PlainRecord(b"[1]")).message_ids == ()


@given(st.binary(max_size=300))
def test_the_reader_never_raises(raw: bytes) -> None:
    record = PlainRecord(raw, headers=[(DEAD_LETTER_OFFSET_HEADER, raw[:10])])
    read_delivery(record)
    read_messages(record)
    peek(record)
    read_dead_letter(record)


@pytest.mark.parametrize("number", ["²", "--5", "٣"])
def test_numbers_that_are_no_ascii_integers_are_read_as_none(number: str) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: a header with such a number
    (found by the property test above) is no number."""
    text = number.encode()
    letter = read_dead_letter(PlainRecord(b"x", headers=[(DEAD_LETTER_OFFSET_HEADER, text)]))
    assert letter.source_offset is None
    raw = PlainRecord(b"x", headers=[(H_FORMAT, RAW_FORMAT), (H_TS, text)])
    assert peek(raw).inner[0].timestamp is None


@given(
    st.dictionaries(
        st.sampled_from(
            ["messageType", "messageID", "timeStamp", "topic", "value", "senderID", "messages"]
        ),
        st.one_of(
            st.none(),
            st.integers(-(2**63), 2**63 - 1),
            st.text(max_size=5),
            st.lists(st.text(max_size=3), max_size=2),
        ),
    )
)
def test_the_reader_never_raises_on_json_objects(obj: dict[str, object]) -> None:
    record = PlainRecord(orjson.dumps(obj))
    read_delivery(record)
    peek(record)


def test_the_delivery_writers_are_the_ids_nodes_and_mergers_write_with() -> None:
    """A DeliveryReader drops deliveries from anyone else (client/reader.py): the ids
    must be exactly those the node and the merger put on their deliveries."""
    node = NodeConfig(bootstrap="127.0.0.1:9092", topic="orders")
    assert delivery_writers("orders") == {node.node_id, merger_id("orders")}
