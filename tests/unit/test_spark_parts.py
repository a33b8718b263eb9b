"""The Spark data source's parts without Spark running or a broker: options in Kafka's
words, the ranges a read is split into, rows turned into messages and their ids (the
same row, the same id: what makes a replayed micro-batch the same messages), and the
Arrow batches of deliveries."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import types as T  # noqa: N812 (the usual spelling)

from atomickafka.client import Delivery
from atomickafka.core.wire import MessageError
from atomickafka.errors import ConfigError
from atomickafka.spark import options as opt
from atomickafka.spark.columns import ARROW_SCHEMA, DELIVERY_SCHEMA, arrow_batch
from atomickafka.spark.sink import RowShape, message_prefix, write_rows
from atomickafka.spark.source import plan_ranges

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def test_kafka_options_become_librdkafka_settings_and_files_are_read(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    connection = opt.connection(
        {
            "Kafka.Bootstrap.Servers": "b1:9092,b2:9092",  # Spark folds names; so does this
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.password.file": str(secret),
            "subscribe": "orders",
        }
    )
    assert connection.bootstrap == "b1:9092,b2:9092"
    assert connection.settings == {"security.protocol": "SASL_SSL", "sasl.password": "s3cret"}
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="u" password="p";'
    )
    assert opt.connection({**BOOT, "kafka.sasl.jaas.config": jaas}).settings == {
        "sasl.username": "u",
        "sasl.password": "p",
    }
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap\.servers is required"):
        opt.connection({"subscribe": "orders"})
    with pytest.raises(ConfigError, match="cannot read"):
        opt.connection({**BOOT, "kafka.sasl.password.file": str(tmp_path / "none")})


def test_offsets_are_words_or_sparks_json_and_anything_else_is_named() -> None:
    topics = ("a", "b")
    assert opt.offsets({}, "startingOffsets", topics, opt.LATEST) == {"a": -1, "b": -1}
    assert opt.offsets({"startingoffsets": "Earliest"}, "startingOffsets", topics, -1) == {
        "a": -2,
        "b": -2,
    }
    given = {"startingOffsets": '{"a": {"0": 42}}'}
    assert opt.offsets(given, "startingOffsets", topics, opt.EARLIEST) == {"a": 42, "b": -2}
    for bad, why in [
        ("soon", "must be earliest, latest or JSON"),
        ('{"c": {"0": 1}}', "names 'c', which is not read"),
        ('{"a": {"1": 1}}', 'must map partition "0"'),
        ('{"a": {"0": "x"}}', "not an offset"),
    ]:
        with pytest.raises(ConfigError, match=why):
            opt.offsets({"startingOffsets": bad}, "startingOffsets", topics, -1)
    assert opt.topic_list({"subscribe": " b, a"}, "subscribe") == ("a", "b")
    with pytest.raises(ConfigError, match="option subscribe is required"):
        opt.topic_list({}, "subscribe")
    with pytest.raises(ConfigError, match="not a valid Kafka topic name"):
        opt.topic_list({"subscribe": "a b"}, "subscribe")
    with pytest.raises(ConfigError, match="minPartitions must be an integer of at least 1"):
        opt.positive_int({"minpartitions": "0"}, "minPartitions", 1)
    with pytest.raises(ConfigError, match="layout must be split or shared"):
        opt.layout({"layout": "flat"})


def test_a_read_is_split_into_ordered_ranges_each_primed_from_the_records_before() -> None:
    ranges = plan_ranges({"b": (10, 20), "a": (0, 30), "c": (5, 5)}, 4, 3, {"a": 0, "b": 8})
    got = [(r.topic, r.start, r.end, r.primed_from) for r in ranges]
    assert got == [
        ("a", 0, 10, 0),
        ("a", 10, 20, 7),
        ("a", 20, 30, 17),
        ("b", 10, 20, 8),  # a quarter of the records: one range, primed from the log's start
    ]
    assert [(r.topic, r.start, r.end) for r in plan_ranges({"a": (0, 3)}, 8, 0, {})] == [
        ("a", 0, 1),
        ("a", 1, 2),
        ("a", 2, 3),
    ]


SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType()),
        T.StructField("destinations", T.StringType()),
        T.StructField("key", T.BinaryType()),
        T.StructField(
            "headers",
            T.ArrayType(
                T.StructType(
                    [T.StructField("key", T.StringType()), T.StructField("value", T.StringType())]
                )
            ),
        ),
        T.StructField("sentAt", T.LongType()),
        T.StructField("other", T.IntegerType()),
    ]
)


class Recorder:
    """Records what the sink would send."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.flushed = 0

    def send_batch(
        self, values: Sequence[Any], destinations: Sequence[str], **kw: Any
    ) -> list[str]:
        ids = list(kw.pop("message_ids"))
        self.batches.append({"values": list(values), "destinations": destinations, **kw})
        self.batches[-1]["message_ids"] = ids
        return ids

    def flush(self) -> None:
        self.flushed += 1


def _written(shape: RowShape, rows: list[tuple[Any, ...]], prefix: str = "sk-q-3-0") -> Recorder:
    recorder = Recorder()
    assert write_rows(recorder, shape, iter(rows), prefix) == len(rows)  # type: ignore[arg-type]
    assert recorder.flushed == 1
    return recorder


def test_rows_become_messages_whose_ids_the_same_rows_give_again() -> None:
    shape = RowShape.of(SCHEMA, {"destinations": "fallback"})
    rows = [
        ('{"n": 1}', "b,a", b"k", [("h", "1")], 1_764_000_000_000, 7),
        ('{"n": 1}', "b,a", b"k", [("h", "1")], 1_764_000_000_000, 8),  # the same content
        ('{"n": 2}', None, None, None, None, 9),  # the option's destinations
    ]
    first, again = _written(shape, rows), _written(shape, list(reversed(rows)))
    ids = [i for batch in first.batches for i in batch["message_ids"]]
    assert len(set(ids)) == 3 and all(i.startswith("sk-q-3-0-") for i in ids)
    assert ids[1] == ids[0] + "-1"  # the second row of one content: its own message
    assert set(ids) == {i for batch in again.batches for i in batch["message_ids"]}
    batch = first.batches[0]
    assert batch["destinations"] == ("a", "b") and batch["key"] == b"k"
    assert batch["headers"] == (("h", b"1"),) and batch["sent_at_ms"] == 1_764_000_000_000
    assert [bytes(orjson.dumps(v)) for v in batch["values"]] == [b'{"n": 1}'] * 2
    assert first.batches[1]["destinations"] == ("fallback",)
    assert message_prefix("q", "3", 0) == "sk-q-3-0" and message_prefix("w", None, 2) == "sk-w-2"


def test_values_are_json_text_or_bytes_as_the_column_and_valueformat_say() -> None:
    binary = T.StructType(
        [
            T.StructField("value", T.BinaryType()),
            T.StructField("destinations", T.ArrayType(T.StringType())),
        ]
    )
    raw = _written(RowShape.of(binary, {}), [(bytearray(b"\xff"), ["a"])]).batches[0]
    assert raw["values"] == [b"\xff"] and raw["sent_at_ms"] is None
    as_json = RowShape.of(binary, {"valueFormat": "json"})
    assert orjson.dumps(as_json.message([b"[1]", ["a"]]).value) == b"[1]"
    as_bytes = RowShape.of(SCHEMA, {"valueformat": "bytes", "destinations": "a"})
    assert as_bytes.message(["not json", None, None, None, None, 0]).value == b"not json"
    text = RowShape.of(SCHEMA, {"destinations": "a"})
    with pytest.raises(MessageError, match="row 1 of the partition: not a valid UTF-8 JSON"):
        _written(
            text, [('"ok"', None, None, None, None, 0), ("not json", None, None, None, None, 0)]
        )
    with pytest.raises(MessageError, match="is null"):
        text.message([None, None, None, None, None, 0])


def test_a_schema_the_sink_cannot_write_fails_before_any_task() -> None:
    with pytest.raises(ConfigError, match="needs a value column"):
        RowShape.of(T.StructType([T.StructField("v", T.StringType())]), {"destinations": "a"})
    with pytest.raises(ConfigError, match="column value is int; the sink takes binary or string"):
        RowShape.of(T.StructType([T.StructField("value", T.IntegerType())]), {"destinations": "a"})
    with pytest.raises(ConfigError, match="option destinations is required"):
        RowShape.of(T.StructType([T.StructField("value", T.StringType())]), {})
    with pytest.raises(ConfigError, match="valueFormat must be json or bytes"):
        RowShape.of(SCHEMA, {"valueFormat": "xml"})


def test_deliveries_become_arrow_rows_of_the_sources_schema() -> None:
    deliveries = [
        Delivery("m1", {"n": 1}, 5, ("a", "b"), "a", 0, 10, raw=b'{"n":1}', sentAt=1_000),
        Delivery(
            "m2",
            b"\xff",
            6,
            ("a",),
            "a",
            0,
            11,
            key=b"k",
            headers=(("h", b"v"),),
            raw=b"\xff",
            layer=2,
        ),
    ]
    batch = arrow_batch(deliveries)
    assert batch.schema == ARROW_SCHEMA and batch.schema.names == DELIVERY_SCHEMA.fieldNames()
    rows = batch.to_pylist()
    assert rows[0]["valueString"] == '{"n":1}' and rows[0]["destinations"] == ["a", "b"]
    assert rows[0]["sentAt"].timestamp() == 1.0 and rows[0]["key"] is None
    assert rows[1]["valueString"] == "\ufffd" and rows[1]["headers"] == [
        {"key": "h", "value": b"v"}
    ]
    assert (rows[1]["layer"], rows[1]["offset"], rows[1]["timeStamp"]) == (2, 11, 6)
