"""``atomickafka eval`` end to end on the real broker, small: runs, checks, Spark, report.

One small suite (2 scenarios x 2 clients x 300 messages through the default protocol
in the split and shared layouts, and the single sequencer) runs once for the module,
in this process, so that its metrics job and the tests below share one SparkSession.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from atomickafka.cli import main
from atomickafka.core.engine import DEFAULT_ALGORITHM
from atomickafka.evaluation.results import RunInfo, RunMetrics
from atomickafka.evaluation.spark import load_job, session

pytestmark = pytest.mark.integration

MESSAGES = 300
DEFAULT = DEFAULT_ALGORITHM.value
RUNS = [
    f"{variant}--{scenario}"
    for scenario in ("baseline", "90-10")
    for variant in (f"{DEFAULT}-split", f"{DEFAULT}-shared", "sequencer")
]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local SparkSession with the Kafka connector, for the module."""
    active = session(kafka_source=True)
    yield active
    active.stop()


@pytest.fixture(scope="module")
def suite(kafka_bootstrap: str, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report folder of one small suite, run by the CLI in this process."""
    out = tmp_path_factory.mktemp("eval") / "report"
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        status = main(
            [
                "eval",
                "--bootstrap-server",
                kafka_bootstrap,
                "--scenarios",
                "baseline,90-10",
                "--messages-per-client",
                str(MESSAGES),
                "--compare",
                "sequencer,layouts",
                "--no-warmup",
                "--out",
                str(out),
            ]
        )
    finally:
        root.handlers[:], root.level = saved
    assert status == 0, (out / "suite.json").read_text() if (out / "suite.json").exists() else ""
    return out


def _metrics(suite: Path, run: str) -> RunMetrics:
    return RunMetrics.load(suite / "metrics" / f"{run}.json")


def test_every_run_passes_the_order_check_and_the_report_has_everything(suite: Path) -> None:
    for run in RUNS:
        info = RunInfo.load(suite / "runs" / run / "run.json")
        assert info.ok, info.check_summary or info.error
        assert "OK: integrity, validity and total order hold" in info.check_summary
        assert info.counted_deliveries == info.expected_deliveries
    text = (suite / "report.md").read_text(encoding="utf-8")
    assert f"**All {len(RUNS)} runs passed the order check**" in text
    for heading in (
        "## Summary",
        f"## Against the 2019 thesis ({DEFAULT}/split)",
        "## Comparison: msg/s / p99 ms per variant",
        "## Across scenarios",
        "## baseline (0 % multicast)",
        "## 90-10 (10 % multicast)",
        "### 90-10: compared variants",
        "## Configuration",
    ):
        assert heading in text, heading
    assert "2019 (table 5.2): in / out / dlv" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(links) == sorted(
        [f"plots/{run}-{kind}.png" for run in RUNS for kind in ("rates", "latency")]
        + ["plots/throughput-vs-share.png", "plots/p99-vs-share.png"]
    )
    for link in links:
        assert (suite / link).read_bytes()[:4] == b"\x89PNG", link
    summary = json.loads((suite / "suite.json").read_text())
    assert summary["metrics_error"] is None
    assert len(summary["runs"]) == len(RUNS)


def test_the_spark_job_counts_what_the_clients_sent(suite: Path) -> None:
    """Deliveries and client messages follow from the plans; incoming and outgoing
    messages per node are counted again here, independently, from the Parquet files."""
    for run in RUNS:
        metrics = _metrics(suite, run)
        info = RunInfo.load(suite / "runs" / run / "run.json")
        topics = info.topics
        multicast = 2 * MESSAGES // 10 if run.endswith("90-10") else 0
        assert metrics.messages == 2 * MESSAGES
        assert metrics.multicast == multicast
        assert metrics.delivered_messages == 2 * MESSAGES
        assert metrics.missing_deliveries == 0
        assert metrics.deliveries == 2 * MESSAGES + multicast * (len(topics) - 1)
        delivered = {n.node: n.deliveries for n in metrics.nodes if n.deliveries}
        share = multicast // 2
        expected = {
            topics[0]: MESSAGES - share + multicast,
            topics[2]: MESSAGES - share + multicast,
        }
        if multicast:
            expected.update({t: multicast for t in (topics[1], topics[3], topics[4])})
        assert delivered == expected, run
        # a direct client writes a multicast's ClientMessage to every destination
        copies = multicast * (len(topics) - 1) if run.startswith("direct") else 0
        assert metrics.by_type["ClientMessage"] == 2 * MESSAGES + copies
        assert metrics.by_type["DeliveryMessage"] == metrics.deliveries

        window = [
            r
            for r in pq.read_table(suite / "runs" / run / "records.parquet").to_pylist()
            if metrics.start_ms <= r["kafka_ts_ms"] <= metrics.end_ms and r["role"] != "status"
        ]
        for node in metrics.nodes:
            incoming = sum(
                r["messages"] for r in window if r["role"] == "input" and r["node"] == node.node
            )
            writer = "sequencer" if node.node == "sequencer" else f"node-{node.node}"
            outgoing = sum(r["messages"] for r in window if r["writer"] == writer)
            assert (node.incoming, node.outgoing) == (incoming, outgoing), (run, node.node)
        if run.startswith("sequencer"):
            (sequencer,) = [n for n in metrics.nodes if n.node == "sequencer"]
            assert sequencer.incoming == 2 * MESSAGES
            assert sequencer.outgoing == metrics.deliveries


@pytest.mark.parametrize("layout", ["split", "shared"])
def test_spark_reads_a_run_straight_from_kafka_with_the_same_figures(
    suite: Path, spark: Any, kafka_bootstrap: str, layout: str
) -> None:
    run = f"{DEFAULT}-{layout}--90-10"
    info = RunInfo.load(suite / "runs" / run / "run.json")
    job = load_job()
    records, messages = job.load_kafka(spark, kafka_bootstrap, info.topics, layout=layout, run=run)
    (from_kafka,) = job.compute(records, messages)
    from_parquet = json.loads((suite / "metrics" / f"{run}.json").read_text())
    assert json.loads(json.dumps(from_kafka)) == from_parquet
