"""What a run's recording holds: the Parquet schemas and how records are read (no Kafka)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from atomickafka.evaluation.recording import (
    MESSAGES_SCHEMA,
    RECORDS_SCHEMA,
    RecordedTopic,
    SentRow,
    _message_columns,
    _RecordColumns,
    write_table,
)


@dataclass
class FakeRecord:
    """The part of a confluent-kafka ``Message`` the recorder reads."""

    data: bytes | None
    ts_ms: int
    at: int
    key_bytes: bytes | None = None

    def value(self) -> bytes | None:
        return self.data

    def key(self) -> bytes | None:
        return self.key_bytes

    def timestamp(self) -> tuple[int, int]:
        return (1, self.ts_ms)

    def offset(self) -> int:
        return self.at

    def partition(self) -> int:
        return 0


def _json(**fields: Any) -> bytes:
    return orjson.dumps(fields)


INPUT = RecordedTopic("atomickafka-in.A", "A", "input")
DELIVERY = RecordedTopic("A", "A", "delivery", holds_deliveries=True)
DEAD = RecordedTopic("atomickafka-dlq.A", "A", "dead-letter")
STATUS = RecordedTopic("atomickafka-status", "", "status", keys=frozenset({"A"}))


def _recorded() -> _RecordColumns:
    sink = _RecordColumns("run-1")
    delivery = {
        "messageType": "DeliveryMessage",
        "messageID": "m1",
        "senderID": "node-A",
        "sentFromTopic": "A",
        "topic": ["A", "B"],
        "timeStamp": 7,
        "value": {"t": 1},
    }
    sink.add(
        INPUT,
        FakeRecord(
            _json(
                messageType="ClientMessage", messageID="m1", senderID="client-1", topic=["A", "B"]
            ),
            1000,
            0,
        ),
    )
    sink.add(
        INPUT,
        FakeRecord(
            _json(
                messageType="Bundle",
                senderID="node-B",
                sentFromTopic="B",
                messages=[
                    {"messageType": "NotifyMessage", "messageID": "m1"},
                    {"messageType": "DecidedMessage", "messageID": "m1"},
                ],
            ),
            1001,
            1,
        ),
    )
    sink.add(DELIVERY, FakeRecord(orjson.dumps(delivery), 1005, 0))
    sink.add(DELIVERY, FakeRecord(orjson.dumps(delivery), 1009, 1))  # a replayed duplicate
    sink.add(DEAD, FakeRecord(b"\xff not json", 1002, 0))
    sink.add(INPUT, FakeRecord(_json(messageType="FutureMessage", senderID=3), 1003, 2))
    sink.add(STATUS, FakeRecord(_json(topic="A", pending=0), 1004, 40, b"A"))
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
