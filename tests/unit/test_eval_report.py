"""The evaluation report, rendered from synthetic runs and metrics (no Kafka, no Spark):
what it compares with the thesis and how, and plots in which every node can be read."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from atomickafka.evaluation.cost.accounting import RunCost
from atomickafka.evaluation.cost.processes import ProcessCpu, ProcessRole
from atomickafka.evaluation.cost.traffic import TypeTraffic
from atomickafka.evaluation.load.measuring import delivery_flow
from atomickafka.evaluation.load.variants import System
from atomickafka.evaluation.suite.comparison import (
    Pacing,
    ThesisComparison,
    compare_with_thesis,
    pacing_of,
)
from atomickafka.evaluation.suite.plots import coarsen, rates_figure
from atomickafka.evaluation.suite.report import ReportInput, render_report
from atomickafka.evaluation.suite.results import RunInfo, RunMetrics, RunResult
from atomickafka.evaluation.suite.run_audit import AuditOutcome
from atomickafka.evaluation.suite.runner import _take_audit as take_audit
from atomickafka.evaluation.suite.thesis import THESIS_RUNS

TOPICS = [f"ev-x-t{i}" for i in range(1, 6)]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _info(
    scenario: str,
    percent: int,
    variant: str = "optimized/split",
    pace_ms: float = 0.0,
    **kw: Any,
) -> RunInfo:
    system = variant if variant in ("seq-alo", "seq-eos", "streams") else "atomickafka"
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
        pace_ms=pace_ms,
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


def _metrics(run: str, speed: float, nodes: list[str], messages: int = 1000) -> RunMetrics:
    """The JSON the metrics job writes for a run, with made-up figures."""
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
            "messages": messages,
            "multicast": 100,
            "delivered_messages": messages,
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
        seq = _info(scenario, percent, "seq-eos")
        out.append(RunResult(seq, _metrics(seq.run, speed * 2, [*TOPICS, "seq-eos"])))
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
        "## Capacity against the 2019 thesis: our unpaced runs, its paced runs (optimized/split)",
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
    assert "deliveries/s: ours ÷ 2019" in text
    assert "| node 1 | 20.0 | 40.0 | 20.0 | 24 / 44 / 11 | 57.6 / 42.9 / 18.0 | 1.1x |" in text
    # 90-10: 810 s in 2019, 10 s here for 1,000 messages (not 40,000): no run-time ratio;
    # 280 deliveries/s against the thesis's 47.0 (its five nodes added up)
    assert (
        "| 90-10 | 5.2 | 810 | 10.00 | n/a (1,000 msgs) | 49.4 | 200 | 47.0 | 280 | 6.0x |" in text
    )
    assert "Our runs sent 1,000 messages, not the thesis's 40,000" in text
    assert "All runs: the clients sent as fast as they could (unpaced)" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 4 * 2 + 2
    assert "plots/capacity-vs-share.png" in links
    assert "plots/throughput-vs-share.png" not in links  # no run was paced as the thesis
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


# ---------------------------------------------------------------------------- comparisons


def _compared(
    pace_ms: float, messages: int, run_time_s: float, deliveries_per_s: float
) -> ThesisComparison:
    info = _info("baseline", 0, pace_ms=pace_ms)
    metrics = replace(
        _metrics(info.run, 1.0, TOPICS, messages),
        run_time_s=run_time_s,
        deliveries_per_s=deliveries_per_s,
    )
    compared = compare_with_thesis(info, metrics)
    assert compared is not None
    return compared


def test_pacing_names_what_is_compared_with_the_thesis() -> None:
    assert pacing_of(0) is Pacing.UNPACED
    assert pacing_of(5.0) is Pacing.AS_THESIS
    assert pacing_of(2) is Pacing.OTHER
    assert "capacity" in Pacing.UNPACED.describe(0)
    assert Pacing.AS_THESIS.describe(5) == "paced 5 ms, as the thesis"
    assert "like for like" in Pacing.AS_THESIS.heading(5)
    assert "at least 100 s" in Pacing.AS_THESIS.caveat()
    assert "--pace-ms 5" in Pacing.UNPACED.caveat()


def test_a_run_of_another_size_is_compared_by_rates_not_run_time() -> None:
    """The issue's case: 2 x 2,000 messages took 0.25 s; 270 s / 0.25 s said 1,080x,
    the delivery rates say 36x."""
    small = _compared(0.0, 4000, 0.25, 16_040.0)
    assert not small.same_size and small.run_time_factor is None
    assert THESIS_RUNS["baseline"].deliveries_per_s == pytest.approx(444.5)
    assert small.deliveries_factor == pytest.approx(16_040 / 444.5)
    assert round(16_040 / 444.5) == 36
    full = _compared(5.0, 40_000, 100.0, 400.0)
    assert full.same_size and full.pacing is Pacing.AS_THESIS
    assert full.run_time_factor == pytest.approx(2.7)


def _renamed(result: RunResult, **changes: Any) -> RunResult:
    data = {**result.info.to_dict(), **changes}
    return RunResult(RunInfo.from_dict(data), result.metrics)


def test_paced_runs_of_the_thesis_size_are_compared_like_for_like(tmp_path: Path) -> None:
    info = _info("90-10", 10, pace_ms=5.0)
    results = [RunResult(info, _metrics(info.run, 2.0, TOPICS, messages=40_000))]
    text = _render(tmp_path, results)
    assert "## Against the 2019 thesis, like for like: paced 5 ms, as it was" in text
    assert "Capacity" not in text
    # 810 s in 2019, 10 s here for the same 40,000 messages
    assert "| 90-10 | 5.2 | 810 | 10.00 | 81x |" in text
    assert "All runs: the clients waited 5 ms after every send" in text
    assert "its clients paced 5 ms, ours paced 5 ms, as the thesis." in text
    assert (tmp_path / "plots" / "throughput-vs-share.png").exists()
    assert not (tmp_path / "plots" / "capacity-vs-share.png").exists()


def test_paced_and_unpaced_runs_are_compared_apart(tmp_path: Path) -> None:
    unpaced = [r for r in _results() if r.info.variant == "optimized/split"]
    paced = [_renamed(r, run=f"{r.info.run}-paced", pace_ms=5.0) for r in unpaced]
    text = _render(tmp_path, [*paced, *unpaced])
    like = text.index("## Against the 2019 thesis, like for like")
    capacity = text.index("## Capacity against the 2019 thesis")
    assert like < capacity  # like for like is the main comparison
    assert text[like:capacity].count("| 90-10 | 5.2 |") == 1
    assert "2 runs: the clients waited 5 ms" in text
    assert "2 runs: the clients sent as fast as they could" in text
    for name in ("throughput-vs-share.png", "capacity-vs-share.png", "p99-vs-share.png"):
        assert f"plots/{name}" in text


# ---------------------------------------------------------------------------- plots


def test_rates_are_merged_into_buckets_a_reader_can_see() -> None:
    assert coarsen([1.0] * 40, 0.1) == ([1.0] * 40, 0.1)
    values, width = coarsen([float(i % 2) for i in range(70)], 0.1)
    assert len(values) == 35 and width == pytest.approx(0.2)
    assert values == [0.5] * 35
    values, width = coarsen([4.0] * 100, 1.0)
    assert (len(values), width) == (20, 5.0)
    values, _ = coarsen([2.0] * 41, 0.1)
    assert values == [2.0] * 21  # the last, partial bucket is the mean of what it has


def test_every_node_gets_its_own_panels() -> None:
    primary, sequencer = _results()[:2]
    fig = rates_figure(primary)
    assert fig is not None
    assert len(fig.axes) == len(TOPICS) * 3  # a row per node, a column per kind
    labels = [ax.get_ylabel() for ax in fig.axes[::3]]
    assert labels == [
        "node 1\n(client 1 writes here)",
        "node 2",
        "node 3\n(client 2 writes here)",
        "node 4",
        "node 5",
    ]
    fig = rates_figure(sequencer)
    assert fig is not None
    assert len(fig.axes) == (len(TOPICS) + 1) * 3
    labels = [ax.get_ylabel() for ax in fig.axes[::3]]
    assert labels[0] == "node 1" and labels[-1] == "seq-eos\n(clients write here)"
    assert [ax.get_title() for ax in fig.axes[:3]] == [
        "incoming (input log) msg/s",
        "outgoing (written) msg/s",
        "deliveries/s",
    ]


def _cost(system: str, busiest_s: float, broker_s: float) -> dict[str, Any]:
    """A run's cost: 1000 messages in 2 s; the ordering processes' and broker's CPU."""
    if system == "seq-eos":
        ordering = [ProcessCpu("seq-eos", ProcessRole.SEQUENCER, 9, busiest_s)]
    else:
        ordering = [
            ProcessCpu("node ev-x-t1", ProcessRole.NODE, 3, busiest_s),
            ProcessCpu("node ev-x-t2", ProcessRole.NODE, 4, busiest_s / 2),
        ]
    processes = (
        ProcessCpu("broker", ProcessRole.BROKER, 1, broker_s),
        *ordering,
        ProcessCpu("client-1", ProcessRole.CLIENT, 5, 0.2),
        ProcessCpu("client-2", ProcessRole.CLIENT, 6, None),
    )
    traffic = {"ClientMessage": TypeTraffic(1000, 1000, 80_000)}
    return RunCost(system, 1000, 2.0, processes, traffic).to_dict()


def test_the_cost_and_the_projection_sit_beside_the_sequencers(tmp_path: Path) -> None:
    results = [
        _renamed(r, cost=_cost(r.info.system, 0.5 if r.info.system == "seq-eos" else 0.1, 0.4))
        for r in _results()
    ]
    results = [_renamed(r, record_size=1000, fanout="2-5") for r in results]
    text = _render(tmp_path, results)
    assert "5 topics, 1,000-byte values, each multicast to 2-5 topics drawn at random." in text
    assert "## Cost per delivered message (CPU time from the OS)" in text
    assert "| 90-10 · optimized/split | 1,000 | 2.00 | 400 | 150 |" in text
    assert "Not measured over a whole window: client-2." in text
    heading = "## Projected capacity with one core per process (optimized/split, the baselines)"
    assert heading in text
    assert "**A projection, not a measurement.** Projected msg/s with one core" in text
    # the busiest node spent 100 µs per message, seq-eos 500: 10,000 and 2,000 msg/s
    row = "| 90-10 (10 % multicast) | 10,000 (100) | 2,000 (500) | 5.00x | 400 / 400 / - |"
    assert row in text
    # every table says which baseline is which
    assert "`seq-eos`: transactional sequencer in Python: exactly-once" in text
    assert "| baseline · seq-eos | ClientMessage | 1.000 | 1.000 | 80 |" in text


def test_the_live_audits_verdict_stands_beside_the_order_checks(tmp_path: Path) -> None:
    results = _results()
    results[0].info.audit_ok = True
    results[0].info.audit_summary = "audit passed: 1000 deliveries checked"
    results[1].info.audit_ok = False
    results[1].info.audit_counts = {"missing": 2, "order": 1}
    text = _render(tmp_path, results)
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert "| order check | live audit |" in summary
    assert "| passed | passed |" in summary
    assert "**❌ FAILED (2 missing, 1 order)**" in summary
    assert "| passed | - |" in summary  # runs the audit did not see
    assert "Live audit: passed (audit passed: 1000 deliveries checked)." in text
    assert RunInfo.from_dict(results[1].info.to_dict()).audit_counts == {"missing": 2, "order": 1}


def _bare(scenario: str, percent: int, **kw: Any) -> RunResult:
    info = replace(_info(scenario, percent, "kafka", **kw), system="kafka", algorithm="")
    return RunResult(info, _metrics(info.run, 9.0, TOPICS))


def test_the_bare_pipes_audit_is_not_applicable_to_order(tmp_path: Path) -> None:
    """Nothing orders the bare pipe: the audit's order findings are expected there and
    read as "not applicable", not as a failure; another kind still fails it."""
    results = [*_results(), _bare("baseline", 0), _bare("90-10", 10)]
    clean, broken = results[4].info, results[5].info
    clean.audit_ok, clean.audit_counts = True, {"order": 1234}
    clean.audit_summary = "audit not applicable to order: nothing orders the bare pipe"
    broken.audit_ok, broken.audit_counts = False, {"order": 7, "missing": 1}
    broken.audit_examples = [{"kind": "missing", "topic": "t2", "messageID": "m9"}]
    text = _render(tmp_path, results)
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert "| n/a: orders nothing (1,234 order findings) |" in summary
    assert "**❌ FAILED (1 missing, 7 order)**" in summary
    compared = text.split("### 90-10: compared variants")[1].split("\n## ")[0]
    assert "| variant | order check | live audit |" in compared
    # a failed audit shows its first violations as it wrote them
    assert "**❌ live audit of kafka: the first 1 violations**" in text
    assert '{"kind": "missing", "topic": "t2", "messageID": "m9"}' in text


def _outcome(**kw: Any) -> AuditOutcome:
    data: dict[str, Any] = {"ok": True, "summary": "audit passed: 100 deliveries checked"}
    data.update(checked=100, lag_s=0.25, read_to_end=True, cpu_s=0.002)
    data.update(kw)
    return AuditOutcome(**data)


@pytest.mark.parametrize(
    ("system", "counts", "read_to_end", "ok"),
    [
        (System.ATOMICKAFKA, {}, True, True),
        (System.ATOMICKAFKA, {"order": 1}, True, False),
        (System.ATOMICKAFKA, {}, False, False),
        (System.SEQ_EOS, {"missing": 2}, True, False),
        (System.SEQ_ALO, {"duplicate": 1}, True, False),
        (System.KAFKA, {"order": 40}, True, True),
        (System.KAFKA, {"order": 40, "duplicate": 1}, True, False),
    ],
)
def test_the_audits_outcome_becomes_the_runs_audit_verdict(
    system: System, counts: dict[str, int], read_to_end: bool, ok: bool
) -> None:
    info = _info("baseline", 0)
    outcome = _outcome(ok=not counts, counts=counts, read_to_end=read_to_end)
    take_audit(outcome, system, info)
    assert info.audit_ok is ok
    assert info.audit_counts == counts and info.audit_checked == 100
    assert info.audit_lag_s == 0.25 and info.audit_cpu_s == 0.002
    assert "live beside the run: had read everything 0.25 s after the last delivery" in (
        info.audit_summary
    )
    assert "20 CPU-µs per delivery" in info.audit_summary
    if system is System.KAFKA and ok:
        assert info.audit_summary.startswith("audit not applicable to order: nothing orders")
    elif not read_to_end:
        assert info.audit_summary.startswith("audit incomplete: ")


def test_a_runs_flow_is_said_beside_its_rates(tmp_path: Path) -> None:
    """Issue 38, item 5: how steadily deliveries came until the clients stopped."""
    flow = delivery_flow([w * 1.6 + i / 10_000 for w in range(3) for i in range(4_000)], 4.0)
    assert flow is not None
    info = _info("50-50", 50, "optimized/split", flow=flow.to_dict())
    loaded = RunInfo.from_dict(json.loads(json.dumps(info.to_dict())))
    assert loaded.flow == flow.to_dict()
    text = _render(tmp_path, [RunResult(loaded, _metrics(info.run, 1.0, TOPICS))])
    assert (
        "Flow until the clients stopped: 7 of 10 0.4 s buckets (70.0%) below half the mean "
        "3,000 deliveries/s, longest such gap 1.2 s." in text
    )
    quiet = _render(tmp_path, [RunResult(_info("50-50", 50, "optimized/split"), None)])
    assert "Flow until" not in quiet
