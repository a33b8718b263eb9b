"""The PySpark job's pure parts: topic names, buckets, connector jars (no JVM started)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from atomickafka.evaluation.runner import RunSpec
from atomickafka.evaluation.scenarios import scenario
from atomickafka.evaluation.spark import load_job
from atomickafka.evaluation.variants import Variant


@pytest.fixture(scope="module")
def job() -> ModuleType:
    return load_job()


@pytest.mark.parametrize("layout", ["split", "shared"])
def test_the_kafka_source_reads_the_topics_the_recorder_reads(
    job: ModuleType, layout: str, tmp_path: Path
) -> None:
    """The job's own copy of the topic naming agrees with the runner's (which uses
    ``atomickafka.topics``): same Kafka topics, owners, roles, delivery logs."""
    topics = ("ev-a-t1", "ev-a-t2")
    spec = RunSpec(
        "r", scenario("baseline"), Variant.atomickafka("optimized", layout), topics, 1, 1, tmp_path
    )
    recorded = {
        (t.kafka_topic, t.node, t.role, t.holds_deliveries)
        for t in spec.recorded_topics(0)
        if t.role != "status"
    }
    assert set(job.kafka_topics(topics, layout)) == recorded


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
