"""What a run's recording holds: the Parquet schemas and how records are read (no Kafka),
from records as the wire format's encoders write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from atomickafka.core.reader import PlainRecord
from atomickafka.core.wire import (
    Message,
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_delivery,
)
from atomickafka.evaluation.suite.recording import (
    MESSAGES_SCHEMA,
    RECORDS_SCHEMA,
    RecordedTopic,
    Role,
    SentRow,
    _message_columns,
    _RecordColumns,
    write_table,
)


def _json(**fields: Any) -> bytes:
    return orjson.dumps(fields)


def _at(value: bytes | None, ts_ms: int, offset: int, key: bytes | None = None) -> PlainRecord:
    return PlainRecord(value, offset=offset, key=key, timestamp_ms=ts_ms)


INPUT = RecordedTopic("atomickafka-in.A", "A", Role.INPUT)
DELIVERY = RecordedTopic("A", "A", Role.DELIVERY, holds_deliveries=True)
DEAD = RecordedTopic("atomickafka-dlq.A", "A", Role.DEAD_LETTER)
STATUS = RecordedTopic("atomickafka-status", "", Role.STATUS, keys=frozenset({"A"}))

SENT = client_message("m1", ["A", "B"], {"t": 1}, "client-1")


def _from_b(kind: MessageType, stamp: int) -> Message:
    return SENT._replace(messageType=kind, senderID="node-B", sentFromTopic="B", timeStamp=stamp)


def _recorded() -> _RecordColumns:
    sink = _RecordColumns("run-1")
    delivery = encode_delivery(
        SENT._replace(
            messageType=MessageType.DELIVERY, senderID="node-A", sentFromTopic="A", timeStamp=7
        )
    )
    bundle = encode_bundle(
        [_from_b(MessageType.NOTIFY, 3), _from_b(MessageType.DECIDED, 7)],
        sender_id="node-B",
        sent_from="B",
        protocol="optimized",
    )
    sink.add(INPUT, _at(encode_client(SENT), 1000, 0))
    sink.add(INPUT, _at(bundle, 1001, 1))
    sink.add(DELIVERY, _at(delivery, 1005, 0))
    sink.add(DELIVERY, _at(delivery, 1009, 1))  # a replayed duplicate
    sink.add(DEAD, _at(b"\xff not json", 1002, 0))
    sink.add(INPUT, _at(_json(messageType="FutureMessage", senderID=3), 1003, 2))
    sink.add(STATUS, _at(_json(topic="A", pending=0), 1004, 40, b"A"))
    return sink


def test_every_kind_of_record_gets_a_type_a_writer_and_a_message_count() -> None:
    cols = _recorded().columns
    assert cols["message_type"] == [
        "ClientMessage",
        "Bundle",
        "DeliveryMessage",
        "DeliveryMessage",
        "<undecodable>",
        "FutureMessage",
        "NodeStatus",
    ]
    assert cols["writer"] == ["client-1", "node-B", "node-A", "node-A", "node-A", "3", "node-A"]
    assert cols["messages"] == [1, 2, 1, 1, 1, 1, 1]
    assert cols["inner_types"][1] == ["NotifyMessage", "DecidedMessage"]
    assert cols["inner_types"][0] == ["ClientMessage"]
    assert cols["message_id"][:3] == ["m1", None, "m1"]
    assert cols["role"] == [
        "input",
        "input",
        "delivery",
        "delivery",
        "dead-letter",
        "input",
        "status",
    ]
    assert cols["node"][-1] == "A"  # a status record belongs to the node of its key


def test_a_message_counts_its_first_delivery_at_each_destination() -> None:
    sink = _recorded()
    assert set(sink.delivered) == {("m1", "A")}
    sent = [SentRow("m1", "client-1", "A", ("A", "B"), 999_500)]
    cols = _message_columns("run-1", sent, sink.delivered)
    assert cols["destination"] == ["A", "B"]
    assert cols["delivered_ms"] == [1005, None]
    assert cols["final_ts"] == [7, None]
    assert cols["latency_ms"] == [5.5, None]
    assert cols["multicast"] == [True, True]


def test_both_tables_round_trip_through_parquet_with_their_schema(tmp_path: Path) -> None:
    sink = _recorded()
    records = tmp_path / "records.parquet"
    assert write_table(sink.columns, RECORDS_SCHEMA, records) == 7
    table = pq.read_table(records)
    assert table.schema.equals(RECORDS_SCHEMA)
    assert table.column("inner_types").to_pylist() == sink.columns["inner_types"]

    sent = [
        SentRow("m1", "client-1", "A", ("A", "B"), 999_500),
        SentRow("w1", "warmup", "A", ("A",), 999_000, warmup=True),
    ]
    messages = tmp_path / "messages.parquet"
    columns = _message_columns("run-1", sent, sink.delivered)
    assert write_table(columns, MESSAGES_SCHEMA, messages) == 3
    table = pq.read_table(messages)
    assert table.schema.equals(MESSAGES_SCHEMA)
    assert table.to_pydict() == columns
