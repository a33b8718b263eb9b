"""The evaluation report, rendered from synthetic runs and metrics (no Kafka, no Spark)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from atomickafka.evaluation.report import ReportInput, render_report
from atomickafka.evaluation.results import RunInfo, RunMetrics, RunResult

TOPICS = [f"ev-x-t{i}" for i in range(1, 6)]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _info(scenario: str, percent: int, variant: str = "optimized/split", **kw: Any) -> RunInfo:
    system = "sequencer" if variant == "sequencer" else "atomickafka"
    algorithm, _, layout = variant.partition("/")
    defaults: dict[str, Any] = {
        "sent": 1000,
        "expected_deliveries": 1000,
        "counted_deliveries": 1000,
        "complete": True,
        "check_ok": True,
        "check_summary": "OK: integrity, validity and total order hold",
        "wall_s": 12.5,
    }
    defaults.update(kw)
    return RunInfo(
        run=f"{variant.replace('/', '-')}--{scenario}",
        scenario=scenario,
        multicast_percent=percent,
        variant=variant,
        system=system,
        algorithm=algorithm if system == "atomickafka" else "",
        layout=layout or "split",
        topics=TOPICS,
        clients=2,
        messages_per_client=500,
        pace_ms=0.0,
        **defaults,
    )


def _latency(base: float) -> dict[str, Any]:
    quantiles = [base + i for i in range(101)]
    return {
        "n": 500,
        "p50": quantiles[50],
        "p90": quantiles[90],
        "p99": quantiles[99],
        "max": quantiles[100],
        "mean": base + 50,
        "quantiles": quantiles,
    }


def _metrics(run: str, speed: float, nodes: list[str]) -> RunMetrics:
    """The JSON ``eval/metrics.py`` writes for a run, with made-up figures."""
    node_rows = [
        {
            "node": node,
            "incoming": 100,
            "incoming_records": 100,
            "outgoing": 200,
            "outgoing_records": 200,
            "deliveries": 100,
            "incoming_per_s": 10 * speed,
            "outgoing_per_s": 20 * speed,
            "deliveries_per_s": 10 * speed,
            "window_max": {"incoming": 12 * speed, "outgoing": 22 * speed, "deliveries": 11},
        }
        for node in nodes
    ]
    series = {
        kind: {node: [speed, 2 * speed, speed] for node in nodes}
        for kind in ("incoming", "outgoing", "deliveries")
    }
    return RunMetrics.from_dict(
        {
            "run": run,
            "start_ms": 1_000,
            "end_ms": 11_000,
            "run_time_s": 10.0,
            "messages": 1000,
            "multicast": 100,
            "delivered_messages": 1000,
            "deliveries": 1400,
            "missing_deliveries": 0,
            "messages_per_s": 100 * speed,
            "deliveries_per_s": 140 * speed,
            "records": 5000,
            "nodes": node_rows,
            "by_type": {"ClientMessage": 1000, "DeliveryMessage": 1400},
            "latency_ms": {"all": _latency(100 / speed), "single": _latency(50), "multicast": None},
            "series": {"bucket_s": 0.5, **series},
            "windows": {"window_s": 5.0, **series},
        }
    )


def _results(*, failed: bool = False) -> list[RunResult]:
    out = []
    for scenario, percent, speed in (("baseline", 0, 3.0), ("90-10", 10, 2.0)):
        bad = failed and scenario == "90-10"
        info = _info(
            scenario,
            percent,
            check_ok=not bad,
            check_summary=(
                "checked 1000 sent messages (100 multicast)\n"
                "VIOLATIONS: 1 (order: 1)\n"
                "FIRST VIOLATION (total order): [order] ev-x-t1 delivered 'a' before 'b', "
                "ev-x-t3 the other way round"
            )
            if bad
            else "OK: integrity, validity and total order hold",
        )
        out.append(RunResult(info, _metrics(info.run, speed, TOPICS)))
        seq = _info(scenario, percent, "sequencer")
        out.append(RunResult(seq, _metrics(seq.run, speed * 2, [*TOPICS, "sequencer"])))
    return out


def _render(tmp_path: Path, results: list[RunResult], **kw: Any) -> str:
    data = ReportInput(
        results=results,
        primary="optimized/split",
        settings=[("scenarios", "baseline, 90-10")],
        environment=[("cpu", "2 cores")],
        wall_s=125.0,
        **kw,
    )
    return render_report(tmp_path, data).read_text(encoding="utf-8")


def test_the_report_has_every_table_and_every_plot(tmp_path: Path) -> None:
    text = _render(tmp_path, _results())
    assert text.startswith("# AtomicKafka evaluation")
    assert "**All 4 runs passed the order check**" in text
    assert "FAILED" not in text
    for heading in (
        "## Summary",
        "## Against the 2019 thesis (optimized/split)",
        "## Comparison: msg/s / p99 ms per variant",
        "## Across scenarios",
        "## baseline (0 % multicast) — optimized/split",
        "## 90-10 (10 % multicast) — optimized/split",
        "### 90-10: compared variants",
        "## How the figures are computed",
        "## Configuration",
    ):
        assert heading in text, heading
    # our figures beside the thesis's, with the speed-up (table 5.2: node 1 delivered 18.0/s)
    assert "2019 (table 5.1): in / out / dlv" in text
    assert "| node 1 | 20.0 | 40.0 | 20.0 | 24 / 44 / 11 | 57.6 / 42.9 / 18.0 | 1.1x |" in text
    # 90-10 ran 810 s in 2019 and 10 s here
    assert "| 90-10 | 5.2 | 810 | 10.00 | 81x |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 4 * 2 + 2
    for link in links:
        png = tmp_path / link
        assert png.read_bytes()[:8] == PNG_MAGIC, link
        assert png.stat().st_size > 10_000, link


def test_a_failed_order_check_is_the_first_thing_the_report_says(tmp_path: Path) -> None:
    text = _render(tmp_path, _results(failed=True))
    head = text.split("## Summary")[0]
    assert "[!CAUTION]" in head
    assert "**FAILED: 1 of 4 runs.**" in head
    assert "90-10 · optimized/split: FAILED (order check)" in head
    assert "FIRST VIOLATION (total order): [order] ev-x-t1" in head
    assert "**❌ FAILED (order check)**" in text.split("## Summary")[1].split("##")[0]
    section = text.split("## 90-10 (10 % multicast)")[1]
    assert "```text\nchecked 1000 sent messages" in section
    assert "All 4 runs passed" not in text


@pytest.mark.parametrize("how", ["error", "incomplete"])
def test_a_run_that_broke_or_stalled_is_failed_too(tmp_path: Path, how: str) -> None:
    results = _results()
    info = results[0].info
    if how == "error":
        info.error = "RunError: client-2 failed"
    else:
        info.complete = False
        info.counted_deliveries = 640
    text = _render(tmp_path, results)
    verdict = "FAILED (error)" if how == "error" else "FAILED (incomplete)"
    assert f"baseline · optimized/split: {verdict}" in text
    if how == "incomplete":
        assert "640 of 1,000 deliveries arrived before progress stalled" in text


def test_runs_without_metrics_and_a_failed_job_still_make_a_report(tmp_path: Path) -> None:
    results = [RunResult(r.info, None) for r in _results()]
    text = _render(tmp_path, results, metrics_error="Py4JError: the JVM died")
    assert "**The metrics job failed:** Py4JError: the JVM died" in text
    assert "_No metrics for this run (see above)._" in text
    assert not re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
