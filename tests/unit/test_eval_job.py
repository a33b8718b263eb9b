"""The PySpark job's pure parts: topic names, the wire format as it reads it, buckets,
connector jars (no JVM started). The job keeps its own parser on purpose; these tests
hold it to what ``atomickafka.core.wire`` and ``atomickafka.kafka.topics`` write."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from atomickafka.core.engine import Engine
from atomickafka.core.reader import UNDECODABLE
from atomickafka.core.wire import (
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_delivery,
)
from atomickafka.evaluation.load.clients import payload
from atomickafka.evaluation.load.scenarios import scenario
from atomickafka.evaluation.load.variants import Variant
from atomickafka.evaluation.suite.runner import RunSpec
from atomickafka.evaluation.suite.spark import job_path, load_job
from atomickafka.kafka.connection import Connection


@pytest.fixture(scope="module")
def job() -> ModuleType:
    return load_job()


@pytest.mark.parametrize("control_log", [False, True])
@pytest.mark.parametrize("layout", ["split", "shared"])
def test_the_kafka_source_reads_the_topics_the_recorder_reads(
    job: ModuleType, layout: str, control_log: bool, tmp_path: Path
) -> None:
    """The job's own copy of the topic naming agrees with the runner's (which uses
    ``atomickafka.kafka.topics``): same Kafka topics, owners, roles, delivery logs."""
    topics = ("ev-a-t1", "ev-a-t2")
    spec = RunSpec(
        "r",
        scenario("baseline"),
        Variant.atomickafka("optimized", layout),
        topics,
        1,
        1,
        tmp_path,
        Connection("b:1"),
        control_log=control_log,
    )
    recorded = {
        (t.kafka_topic, t.node, t.role, t.holds_deliveries)
        for t in spec.recorded_topics(0)
        if t.role != "status"
    }
    assert set(job.kafka_topics(topics, layout, control_log)) == recorded


def imported_modules(path: Path) -> set[str]:
    """Every module a Python file imports, as written (``a.b`` for ``from a.b import``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }


#: What a Spark job file may import of ours: the raw-form reader, which spark-submit
#: ships beside it (``--py-files``) where the package is not installed.
SPARK_RAW = {"atomickafka.spark_raw", "spark_raw"}


def test_the_job_file_runs_alone_with_pyspark_only() -> None:
    """``spark-submit`` runs the packaged file as it is: it imports nothing of ours but
    the raw-form reader, which imports only pyspark."""
    path = job_path()
    assert path.name == "metrics_job.py" and path.is_file()
    allowed = {"pyspark", "__future__"} | set(sys.stdlib_module_names)
    imported = imported_modules(path) - SPARK_RAW
    assert {name.split(".")[0] for name in imported} <= allowed, imported
    reader = path.parents[2] / "spark_raw.py"
    assert {name.split(".")[0] for name in imported_modules(reader)} <= allowed


# ---------------------------------------------------------------------------- wire format


def _conforms(value: Any, spark_type: Any, where: str) -> None:
    """``value`` (parsed JSON) reads as ``spark_type`` under ``from_json``: nothing the
    job relies on would silently become null."""
    kind = type(spark_type).__name__
    if value is None:
        return
    if kind == "StructType":
        assert isinstance(value, dict), where
        for field in spark_type.fields:
            _conforms(value.get(field.name), field.dataType, f"{where}.{field.name}")
    elif kind == "ArrayType":
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _conforms(item, spark_type.elementType, f"{where}[{i}]")
    elif kind == "StringType":
        assert isinstance(value, str), where
    elif kind == "LongType":
        assert type(value) is int, where
    elif kind == "BooleanType":
        assert isinstance(value, bool), where
    else:
        raise AssertionError(f"{where}: a type this test does not know: {kind}")


def _parsed_as_the_job_does(job: ModuleType, raw: bytes) -> dict[str, Any]:
    header = raw.decode().split(job.BUNDLE_HEADER_END, 1)[0]
    parsed: dict[str, Any] = orjson.loads(header)
    _conforms(parsed, job.RECORD_SCHEMA, "record")
    return parsed


def test_the_jobs_record_types_are_the_wire_formats(job: ModuleType) -> None:
    assert MessageType.CLIENT.value == job.CLIENT_TYPE
    assert MessageType.DELIVERY.value == job.DELIVERY_TYPE
    assert MessageType.BUNDLE.value == job.BUNDLE_TYPE
    assert job.UNDECODABLE == UNDECODABLE


def test_the_job_reads_what_clients_and_nodes_write(job: ModuleType) -> None:
    """Every field the job uses, in a ClientMessage, a Delivery and a Bundle as the
    encoders write them, is where the job looks and of the type it reads."""
    value = payload(1, 7, True, 1_700_000_000_000_000)
    sent = client_message("client-1-x-7", ["A", "B"], value, "client-1")
    client = _parsed_as_the_job_does(job, encode_client(sent))
    assert (client["messageType"], client["messageID"]) == (job.CLIENT_TYPE, sent.messageID)
    assert (client["senderID"], client["topic"]) == ("client-1", ["A", "B"])
    assert (client["value"]["t"], client["value"]["m"]) == (value["t"], True)

    node = Engine("A")
    outputs = node.step([sent]).outputs
    bundles = [o for o in outputs if o.message.messageType is MessageType.NOTIFY]
    assert bundles, "the node proposes to B"
    raw = encode_bundle(
        [o.message for o in bundles], sender_id=node.node_id, sent_from="A", protocol="direct"
    )
    bundle = _parsed_as_the_job_does(job, raw)
    assert (bundle["messageType"], bundle["senderID"]) == (job.BUNDLE_TYPE, "node-A")
    assert [m["messageType"] for m in bundle["messages"]] == ["NotifyMessage"]
    assert bundle["messages"][0]["messageID"] == sent.messageID

    delivered = sent._replace(
        messageType=MessageType.DELIVERY, senderID="node-A", sentFromTopic="A", timeStamp=9
    )
    delivery = _parsed_as_the_job_does(job, encode_delivery(delivered))
    assert delivery["messageType"] == job.DELIVERY_TYPE
    assert (delivery["messageID"], delivery["sentFromTopic"]) == (sent.messageID, "A")
    assert (delivery["timeStamp"], delivery["value"]["t"]) == (9, value["t"])


def test_plot_buckets_give_at_most_120_points(job: ModuleType) -> None:
    assert job.bucket_ms(141) == 100
    assert job.bucket_ms(12_000) == 100
    assert job.bucket_ms(12_001) == 200
    assert job.bucket_ms(600_000) == 5000
    for run_ms in (1, 999, 50_000, 3_600_000):
        assert run_ms / job.bucket_ms(run_ms) <= job.MAX_POINTS


def test_only_the_connectors_own_jars_go_to_spark(job: ModuleType, tmp_path: Path) -> None:
    names = [
        "commons-pool2-2.12.0.jar",
        "hadoop-client-api-3.4.1.jar",
        "kafka-clients-3.9.0.jar",
        "scala-library-2.13.15.jar",
        "slf4j-api-1.7.36.jar",
        "spark-sql-kafka-0-10_2.13-4.0.0.jar",
        "spark-tags_2.13-4.0.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [Path(j).name for j in job.connector_jars(tmp_path)] == [
        "commons-pool2-2.12.0.jar",
        "kafka-clients-3.9.0.jar",
        "spark-sql-kafka-0-10_2.13-4.0.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    ]


def test_the_job_refuses_a_command_line_it_cannot_run(
    job: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        job.main(["--source", "kafka", "--out", "x"])
    assert exit_info.value.code == 2
    assert "--bootstrap-server and --topics are required" in capsys.readouterr().err


def test_rates_per_bucket_fold_a_sliver_at_the_end_into_the_bucket_before(
    job: ModuleType,
) -> None:
    cells = {("deliveries", "a"): {0: 10, 1: 10, 2: 3}, ("incoming", "b"): {1: 4}}
    # 205 ms in 100 ms buckets: the last 5 ms join the second bucket (13 in 105 ms)
    series = job._dense(cells, 100, 205)
    assert series["deliveries"] == {"a": [100.0, 123.81]}
    assert series["incoming"] == {"b": [0.0, 38.095]}
    assert series["outgoing"] == {}
    # 290 ms: the last bucket is 90 ms long and stays
    assert job._dense(cells, 100, 290)["deliveries"] == {"a": [100.0, 100.0, 33.333]}
    # a run shorter than one window is one window as long as the run
    assert job._dense({("deliveries", "a"): {0: 5}}, 5000, 141)["deliveries"] == {"a": [35.461]}
