"""The suite's report: Markdown with our figures beside the thesis's, and the plots.

``report.md`` opens with the verdict (a failed order check is shown first, loudly, and
again in its run's section with the checker's summary), then a summary of every run and
how its clients sent, the comparison with the 2019 thesis (one table per pacing: runs
paced as the thesis's like for like, unpaced runs apart as capacity; run times only
between runs of the thesis's size, rates otherwise; every ratio headed by what it
divides, see :mod:`~atomickafka.evaluation.suite.comparison`), one section per scenario (the
per-node table like thesis tables 5.1-5.6, the compared variants, the plots), the plots
across scenarios, the exact configuration, and how each figure is computed. It is
rendered from :class:`RunResult` values alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomickafka.evaluation.cost.accounting import (
    BROKER_FORMULA,
    PROJECTION_FORMULA,
    ProjectionRow,
    RunCost,
    cost_table,
    projection_table,
    traffic_table,
)
from atomickafka.evaluation.load.baselines import Baseline
from atomickafka.evaluation.suite.comparison import (
    Pacing,
    ThesisComparison,
    compare_with_thesis,
    pacing_of,
)
from atomickafka.evaluation.suite.plots import (
    node_label,
    plot_latency,
    plot_projection,
    plot_rates,
    plot_vs_share,
)
from atomickafka.evaluation.suite.results import NodeMetrics, RunInfo, RunResult
from atomickafka.evaluation.suite.thesis import (
    THESIS_MESSAGES,
    THESIS_PACE_MS,
    THESIS_RUNS,
    THESIS_SETUP,
    ThesisNode,
)

__all__ = ["ReportInput", "render_report"]


@dataclass(frozen=True, slots=True)
class ReportInput:
    """Everything the report shows.

    ``primary`` is the label of the variant compared with the thesis; ``settings`` and
    ``environment`` are ``(what, value)`` rows; ``metrics_error`` says why the metrics
    job failed, if it did.
    """

    results: Sequence[RunResult]
    primary: str
    settings: Sequence[tuple[str, str]]
    environment: Sequence[tuple[str, str]]
    wall_s: float
    metrics_error: str | None = None


# ----------------------------------------------------------------------------- format


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    if not value:
        return "-"
    return f"{value:,.0f}x" if value >= 10 else f"{value:,.1f}x"


def _factor(ours: float | None, theirs: float | None) -> str:
    return _ratio(ours / theirs) if ours and theirs else "-"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _verdict(result: RunResult) -> str:
    verdict = result.info.verdict
    return verdict if result.info.ok else f"**❌ {verdict}**"


def _audit_verdict(result: RunResult) -> str:
    """The live audit's verdict on the run (atomickafka/audit), beside the checker's.
    The bare pipe orders nothing: the audit's order findings are expected there, so its
    verdict on order is "not applicable" (a finding of another kind still fails it)."""
    info = result.info
    if info.audit_ok is None:
        return info.audit_summary.split(":", 1)[0] if info.audit_summary else "-"
    if info.audit_ok and info.system == "kafka":
        return f"n/a: orders nothing ({info.audit_counts.get('order', 0):,} order findings)"
    if info.audit_ok:
        return "passed"
    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(info.audit_counts.items()))
    return f"**❌ FAILED ({kinds or 'incomplete'})**"


# ----------------------------------------------------------------------------- sections


def _banner(data: ReportInput) -> list[str]:
    failed = [r for r in data.results if not r.info.ok]
    total = len(data.results)
    if not failed:
        bare = any(r.info.system == "kafka" for r in data.results)
        held = "; the bare Kafka pipe, which orders nothing, integrity and validity only"
        return [
            f"**All {total} runs passed the order check** (integrity, validity, and the "
            "same relative order at every pair of topics, on every delivery"
            f"{held if bare else ''}).",
            "",
        ]
    lines = [
        "> [!CAUTION]",
        f"> **FAILED: {len(failed)} of {total} runs.** Their figures below are not valid.",
    ]
    for result in failed:
        info = result.info
        lines.append(f"> - **{info.scenario} · {info.variant}: {info.verdict}** — {_why(info)}")
    return [*lines, ""]


def _why(info: RunInfo) -> str:
    """One line saying why a run failed."""
    if info.error is not None:
        return info.error.splitlines()[0]
    if not info.check_ok:
        lines = info.check_summary.splitlines()
        first = [line for line in lines if line.startswith("FIRST VIOLATION")]
        return (first or lines[-1:] or ["(no details)"])[0]
    return (
        f"{info.counted_deliveries:,} of {info.expected_deliveries:,} deliveries arrived "
        "before progress stalled"
    )


def _summary(data: ReportInput) -> list[str]:
    rows = []
    for result in data.results:
        info, m = result.info, result.metrics
        lat = m.latency.get("all") if m else None
        rows.append(
            [
                info.scenario,
                info.variant,
                f"{info.sent:,}",
                _num(m.run_time_s, 2) if m else "-",
                _num(m.messages_per_s, 0) if m else "-",
                _num(m.deliveries_per_s, 0) if m else "-",
                _num(lat.p50, 0) if lat else "-",
                _num(lat.p90, 0) if lat else "-",
                _num(lat.p99, 0) if lat else "-",
                _num(lat.max, 0) if lat else "-",
                _verdict(result),
                _audit_verdict(result),
            ]
        )
    headers = [
        "scenario",
        "variant",
        "messages",
        "run time (s)",
        "msg/s",
        "deliveries/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "order check",
        "live audit",
    ]
    return [
        "## Summary",
        "",
        *_pacing_lines(data.results),
        *_load_lines(data.results),
        *_table(headers, rows),
    ]


def _load_lines(results: Sequence[RunResult]) -> list[str]:
    """The load's shape, said once: topics, value size, multicast destinations."""
    shapes = dict.fromkeys(
        (len(r.info.topics), r.info.record_size, r.info.fanout, r.info.mix) for r in results
    )
    lines = []
    for topics, size, fanout, mix in shapes:
        value = f"{size:,}-byte values" if size else "values of the probe alone (about 60 bytes)"
        if mix:
            lines.append(f"{topics} topics, {value}, the many-topic workload: {mix}.")
            continue
        where = f"{fanout} topics drawn at random" if fanout else "every topic"
        lines.append(f"{topics} topics, {value}, each multicast to {where}.")
    return [" ".join(lines), ""] if lines else []


def _pacing_lines(results: Sequence[RunResult]) -> list[str]:
    """How the clients sent, said once above the figures it qualifies."""
    lines = []
    for pacing, runs in _by_pacing(results).items():
        pace = _pace_of(runs)
        if pacing is Pacing.UNPACED:
            how = (
                "sent as fast as they could (unpaced): rates are capacity, and latency is "
                "mostly the queue draining"
            )
        else:
            how = f"waited {pace:g} ms after every send ({pacing.describe(pace)})"
        count = "All runs" if len(runs) == len(results) else f"{len(runs)} runs"
        lines.append(f"{count}: the clients {how}.")
    return [" ".join(lines), ""] if lines else []


def _primary_runs(data: ReportInput) -> list[RunResult]:
    return [r for r in data.results if r.info.variant == data.primary]


def _pace_of(runs: Sequence[RunResult]) -> float:
    return runs[0].info.pace_ms if runs else 0.0


def _by_pacing(runs: Iterable[RunResult]) -> dict[Pacing, list[RunResult]]:
    """Runs grouped by how their clients sent: like for like first, capacity last."""
    groups: dict[Pacing, list[RunResult]] = {}
    for result in runs:
        groups.setdefault(pacing_of(result.info.pace_ms), []).append(result)
    order = (Pacing.AS_THESIS, Pacing.OTHER, Pacing.UNPACED)
    return {pacing: groups[pacing] for pacing in order if pacing in groups}


def _against_thesis(data: ReportInput) -> list[str]:
    """One table per pacing of the primary runs: paced as the thesis (like for like),
    or labelled as what it is (capacity, another pace)."""
    lines: list[str] = []
    for pacing, runs in _by_pacing(_primary_runs(data)).items():
        rows, sizes = _thesis_rows(runs)
        if not rows:
            continue
        headers = [
            "scenario",
            "thesis table",
            "2019 run time (s)",
            "our run time (s)",
            "run time: 2019 ÷ ours",
            f"2019 msg/s ({THESIS_MESSAGES:,} ÷ run time)",
            "our msg/s",
            "2019 deliveries/s (all nodes)",
            "our deliveries/s",
            "deliveries/s: ours ÷ 2019",
        ]
        notes = [pacing.caveat()]
        if sizes:
            notes.append(
                f"Our runs sent {', '.join(f'{n:,}' for n in sorted(sizes))} messages, not "
                f"the thesis's {THESIS_MESSAGES:,}: their run times are not comparable with "
                "its run times, so the speed-up is the ratio of deliveries per second."
            )
        notes.append(
            "The 2019 deliveries/s add up the nodes' rates of its tables; its msg/s is its "
            f"{THESIS_MESSAGES:,} messages over its run time. {THESIS_SETUP}"
        )
        lines += [
            f"## {pacing.heading(_pace_of(runs))} ({data.primary})",
            "",
            *_table(headers, rows),
            " ".join(notes),
            "",
        ]
    return lines


def _thesis_rows(runs: list[RunResult]) -> tuple[list[list[str]], set[int]]:
    """A row per run the thesis has a table of, beside the thesis's figures; and the
    message counts of our runs not of the thesis's size."""
    rows = []
    sizes: set[int] = set()
    for result in runs:
        m = result.metrics
        thesis = THESIS_RUNS.get(result.info.scenario)
        if thesis is None:
            continue
        ours = compare_with_thesis(result.info, m) if m else None
        if ours is not None and not ours.same_size:
            sizes.add(ours.messages)
        rows.append(
            [
                result.info.scenario,
                thesis.table,
                _num(thesis.run_time_s, 0),
                _num(ours.run_time_s, 2) if ours else "-",
                _run_time_factor(ours),
                _num(thesis.messages_per_s, 1),
                _num(ours.messages_per_s, 0) if ours else "-",
                _num(thesis.deliveries_per_s, 1),
                _num(ours.deliveries_per_s, 0) if ours else "-",
                _ratio(ours.deliveries_factor) if ours else "-",
            ]
        )
    return rows, sizes


def _run_time_factor(ours: ThesisComparison | None) -> str:
    if ours is None:
        return "-"
    factor = ours.run_time_factor
    return _ratio(factor) if factor is not None else f"n/a ({ours.messages:,} msgs)"


def _node_rows(result: RunResult) -> tuple[list[str], list[list[str]]]:
    """The per-node table of a run, like thesis tables 5.1-5.6, with the thesis's row
    beside ours and the deliveries speed-up."""
    info, m = result.info, result.metrics
    assert m is not None
    thesis = THESIS_RUNS.get(info.scenario)
    names = [n.node for n in m.nodes if n.node not in info.topics] + list(info.topics)
    bundled = any(
        n.incoming != n.incoming_records or n.outgoing != n.outgoing_records for n in m.nodes
    )
    headers = ["node", "incoming msg/s", "outgoing msg/s", "deliveries/s"]
    if bundled:
        headers += ["in / out records/s"]
    headers += ["busiest 5 s: in / out / dlv"]
    if thesis is not None:
        headers += [f"2019 (table {thesis.table}): in / out / dlv", "deliveries/s: ours ÷ 2019"]
    rows = []
    for name in names:
        node = m.node(name) or NodeMetrics(name, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0)
        row = [
            node_label(name, info.topics),
            _num(node.incoming_per_s),
            _num(node.outgoing_per_s),
            _num(node.deliveries_per_s),
        ]
        if bundled:
            row.append(
                f"{_num(node.incoming_records / m.run_time_s)} / "
                f"{_num(node.outgoing_records / m.run_time_s)}"
            )
        peak = node.window_max
        row.append(
            " / ".join(_num(peak.get(k, 0.0), 0) for k in ("incoming", "outgoing", "deliveries"))
        )
        if thesis is not None:
            theirs: ThesisNode | None = None
            if name in info.topics and info.topics.index(name) < len(thesis.nodes):
                theirs = thesis.nodes[info.topics.index(name)]
            if theirs is None:
                row += ["-", "-"]
            else:
                row += [
                    f"{theirs.incoming} / {theirs.outgoing} / {theirs.deliveries}",
                    _factor(node.deliveries_per_s, theirs.deliveries),
                ]
        rows.append(row)
    return headers, rows


def _node_caption(result: RunResult) -> list[str]:
    thesis = THESIS_RUNS.get(result.info.scenario)
    if thesis is None:
        return []
    pace = result.info.pace_ms
    return [
        f"Per node, beside the thesis's table {thesis.table}: its clients paced "
        f"{THESIS_PACE_MS} ms, ours {pacing_of(pace).describe(pace)}.",
        "",
    ]


def _run_facts(result: RunResult) -> list[str]:
    info, m = result.info, result.metrics
    audit = f" ({info.audit_summary})" if info.audit_summary else ""
    facts = [
        f"Order check: {_verdict(result)}. Live audit: {_audit_verdict(result)}{audit}. "
        f"Run wall time (start of nodes to recorded) {info.wall_s:,.1f} s."
    ]
    if m is None:
        return [*facts, "", "_No metrics for this run (see above)._", ""]
    lat = m.latency.get("all")
    facts.append(
        f"{m.messages:,} messages ({m.multicast:,} multicast), {m.deliveries:,} deliveries "
        f"({m.missing_deliveries:,} missing) in {m.run_time_s:,.2f} s: "
        f"**{m.messages_per_s:,.0f} msg/s**, {m.deliveries_per_s:,.0f} deliveries/s."
    )
    if lat is not None:
        facts.append(
            f"Latency (send to delivery at the last destination): p50 {lat.p50:,.0f} ms, "
            f"p90 {lat.p90:,.0f} ms, **p99 {lat.p99:,.0f} ms**, max {lat.max:,.0f} ms."
        )
    if info.flow is not None:
        facts.append(f"Flow until the clients stopped: {_flow_words(info.flow)}.")
    types = ", ".join(f"{k} {v:,}" for k, v in sorted(m.by_type.items()))
    per_message = m.records / m.messages if m.messages else 0.0
    facts.append(
        f"Records in the run window: {m.records:,} ({per_message:.2f} per message; by "
        f"type: {types})."
    )
    return [" ".join(facts), ""]


def _flow_words(flow: dict[str, Any]) -> str:
    """A run's flow (:class:`~atomickafka.evaluation.load.measuring.Flow`) in words."""
    return (
        f"{flow['low']} of {flow['buckets']} {flow['bucketS']:g} s buckets "
        f"({flow['lowShare']:.1%}) below half the mean {flow['meanPerS']:,.0f} "
        f"deliveries/s, longest such gap {flow['longestLowS']:.1f} s"
    )


def _failure_details(result: RunResult) -> list[str]:
    info = result.info
    if info.ok:
        return []
    text = info.error or info.check_summary or "(no details)"
    if info.check_ok and info.error is None:  # incomplete
        text = f"{_why(info)}.\n{info.check_summary}"
    return [f"**❌ {info.variant}: {info.verdict}**", "", "```text", text.strip(), "```", ""]


def _audit_details(result: RunResult) -> list[str]:
    """The first violations of a live audit that failed, as the audit wrote them."""
    info = result.info
    if info.audit_ok is not False or not info.audit_examples:
        return []
    shown = [json.dumps(v, ensure_ascii=False) for v in info.audit_examples]
    return [
        f"**❌ live audit of {info.variant}: the first {len(shown)} violations** "
        "(all of them in `audit.log` in the run's folder):",
        "",
        "```json",
        *shown,
        "```",
        "",
    ]


def _plot_links(result: RunResult, plots: dict[str, list[Path]], out_dir: Path) -> list[str]:
    return [
        f"![{result.info.variant} {result.info.scenario}]({path.relative_to(out_dir)})"
        for path in plots.get(result.info.run, [])
    ]


def _scenario_sections(data: ReportInput, plots: dict[str, list[Path]], out_dir: Path) -> list[str]:
    lines: list[str] = []
    scenarios: dict[str, list[RunResult]] = {}
    for result in data.results:
        scenarios.setdefault(result.info.scenario, []).append(result)
    for name, runs in scenarios.items():
        primary = next((r for r in runs if r.info.variant == data.primary), runs[0])
        info = primary.info
        lines += [f"## {name} ({info.multicast_percent} % multicast) — {info.variant}", ""]
        for result in runs:
            lines += _failure_details(result)
            lines += _audit_details(result)
        lines += _run_facts(primary)
        if primary.metrics is not None:
            headers, rows = _node_rows(primary)
            lines += [*_node_caption(primary), *_table(headers, rows)]
        lines += [*_plot_links(primary, plots, out_dir), ""]
        others = [r for r in runs if r is not primary]
        if others:
            lines += [f"### {name}: compared variants", ""]
            rows = []
            for result in runs:
                m = result.metrics
                lat = m.latency.get("all") if m else None
                rows.append(
                    [
                        result.info.variant,
                        _verdict(result),
                        _audit_verdict(result),
                        _num(m.run_time_s, 2) if m else "-",
                        _num(m.messages_per_s, 0) if m else "-",
                        _num(lat.p50, 0) if lat else "-",
                        _num(lat.p99, 0) if lat else "-",
                        _num(m.records / m.messages, 2) if m and m.messages else "-",
                    ]
                )
            headers = [
                "variant",
                "order check",
                "live audit",
                "run time (s)",
                "msg/s",
                "p50 ms",
                "p99 ms",
                "records per message",
            ]
            lines += _table(headers, rows)
            for result in others:
                lines += [*_plot_links(result, plots, out_dir), ""]
    return lines


def _comparisons(data: ReportInput) -> list[str]:
    variants = list(dict.fromkeys(r.info.variant for r in data.results))
    if len(variants) < 2:
        return []
    scenarios = list(dict.fromkeys(r.info.scenario for r in data.results))
    by_key = {(r.info.scenario, r.info.variant): r for r in data.results}
    rows = []
    for scenario in scenarios:
        row = [scenario]
        for variant in variants:
            result = by_key.get((scenario, variant))
            m = result.metrics if result else None
            lat = m.latency.get("all") if m else None
            if result is None:
                row.append("-")
            elif m is None or not result.info.ok:
                row.append(_verdict(result))
            else:
                row.append(f"{m.messages_per_s:,.0f} / {_num(lat.p99, 0) if lat else '-'}")
        rows.append(row)
    return [
        "## Comparison: msg/s / p99 ms per variant",
        "",
        *_table(["scenario", *variants], rows),
        "`shared` is the thesis's layout (client, control and delivery records in one topic "
        "per node; readers filter); `split` keeps a node's input log apart so a topic holds "
        "only its ordered deliveries. The sequencer baselines are what a Kafka user does "
        "without AtomicKafka: every message through one partition of one topic, fanned out "
        "to its destinations by one process: `seq-alo` the plain sequencer (at-least-once, "
        "no recovery), `seq-eos` a transactional one in Python and `streams` a Kafka "
        "Streams application with `exactly_once_v2` (both exactly-once, AtomicKafka's "
        "promise in these runs). `kafka` is the bare pipe: each client writes each "
        "message to each destination, nothing orders them (the floor of the cost); its "
        "latency reads as about 0 here, since a delivery's time is its record's Kafka "
        "timestamp, which the client set when it sent (`atomickafka bench` measures a bare "
        "hop's latency at the reader).",
        "",
    ]


def _costs(data: ReportInput) -> list[str]:
    """What each run cost per delivered message, by process role and by record type,
    and the projected capacity with one core per process, the primary variant beside
    each sequencer baseline for each scenario."""
    measured = [(r, RunCost.from_dict(r.info.cost)) for r in data.results if r.info.cost]
    if not measured:
        return []
    labelled = [(f"{r.info.scenario} · {r.info.variant}", cost) for r, cost in measured]
    lines = [
        "## Cost per delivered message (CPU time from the OS)",
        "",
        "Every process's CPU time (user + system, read from the OS) over each run's "
        "window, from the clients' start signal to the last delivery counted, in µs per "
        "message delivered at every destination; records and value bytes are those the "
        "run wrote in that window. Nodes and mergers are told apart by the pids in their "
        "statuses; the broker is the `kafka.Kafka` JVM on the bootstrap port (it serves "
        "anything else using it meanwhile). The measuring consumer is the suite's own "
        "process. The live audit is in no figure here: it runs beside each run in a "
        "process of its own, at a lower priority, and its CPU is in each run's facts.",
        "",
        *_table(*cost_table(labelled)),
    ]
    missing = sorted({p.name for _, cost in measured for p in cost.unmeasured})
    if missing:
        lines += [f"Not measured over a whole window: {', '.join(missing)}.", ""]
    by_key = {(r.info.scenario, r.info.variant): cost for r, cost in measured}
    baselines = [b.value for b in Baseline if any(r.info.variant == b.value for r, _ in measured)]
    rows: list[ProjectionRow] = []
    for result, cost in measured:
        info = result.info
        if info.variant != data.primary:
            continue
        label = f"{info.scenario} ({_load_of(info)})"
        theirs = {b: by_key.get((info.scenario, b)) for b in baselines}
        rows.append((label, cost, theirs, by_key.get((info.scenario, "kafka"))))
    if rows:
        lines += [
            f"## Projected capacity with one core per process ({data.primary}, the baselines)",
            "",
            "**A projection, not a measurement.** "
            f"{PROJECTION_FORMULA[0].upper()}{PROJECTION_FORMULA[1:]}. "
            f"{BROKER_FORMULA[0].upper()}{BROKER_FORMULA[1:]}; Kafka spreads that over its "
            "brokers by partition, except that a sequencer's one partition lives on one.",
            "",
            *_table(*projection_table(rows, baselines)),
            *_baseline_notes(baselines),
        ]
    lines += [
        "### Records and bytes per delivered message, by type",
        "",
        *_table(*traffic_table(labelled)),
    ]
    return lines


def _load_of(info: RunInfo) -> str:
    """A run's load in a few words: its multicast share, or its many-topic mix."""
    if info.mix:  # the mix in words is in the summary's load lines
        return f"{len(info.topics)} topics, many-topic workload"
    return f"{info.multicast_percent} % multicast"


def _baseline_notes(names: Sequence[str]) -> list[str]:
    """What each baseline shown promises: every table says which is which."""
    if not names:
        return []
    notes = "; ".join(f"`{b}`: {Baseline(b).promise}" for b in names)
    return [f"Baselines: {notes}. AtomicKafka's runs are exactly-once.", ""]


def _definitions(data: ReportInput) -> list[str]:
    return [
        "## How the figures are computed",
        "",
        "- Every record of every topic of a run is recorded with its Kafka timestamp "
        "(`runs/<run>/records.parquet`), and every message with its send time (noted by the "
        "client) and its delivery time at each destination (the Kafka timestamp of its "
        "Delivery record) (`runs/<run>/messages.parquet`). The PySpark job "
        "`atomickafka/evaluation/suite/metrics_job.py` computes everything below from these files "
        "(`metrics/<run>.json`); it can also read a run straight from Kafka.",
        "- The run window goes from the first measured send to the last measured delivery; "
        "rates are counts in the window over its length. A warm-up multicast through every "
        "topic before each run is not measured.",
        "- Incoming of a node: messages in its input log (a bundle counts its inner "
        "messages). In the `shared` layout the input log is the topic itself, so it includes "
        "the node's own deliveries, as the thesis's counts did; in `split` it does not. "
        "Outgoing: records the node wrote, to any topic (status records not counted). "
        "Deliveries: first Delivery record of each message at each topic.",
        "- Busiest 5 s: the highest rate over the thesis's 5-second windows (a run shorter "
        "than 5 s has one window, its whole length). Plots use finer buckets when a run is "
        "short.",
        "- Latency: from the client's send to the Delivery record at the last of the "
        "message's destinations, for messages delivered everywhere. An unthrottled run "
        "sends a burst far faster than it is delivered, so its latency is mostly queueing.",
        "- The machine is shared (other developers' work runs on the same cores), so "
        "figures vary from run to run; compare variants within one report.",
        f"- The thesis's clients waited {THESIS_PACE_MS} ms after every send, so its runs "
        f"are compared like for like only with runs paced as they were (`--pace-ms "
        f"{THESIS_PACE_MS}`); unpaced runs measure capacity and their comparison is "
        "labelled as such. A run time is compared only between runs of the thesis's size "
        f"({THESIS_MESSAGES:,} messages); otherwise the speed-up is the ratio of deliveries "
        "per second. Its baseline table shows every node busy although its clients wrote "
        "to topics 1 and 3 only (its text counts 300,000 messages in that run), so its "
        "baseline load was not the other scenarios' setup.",
        "",
    ]


def _configuration(data: ReportInput) -> list[str]:
    return [
        "## Configuration",
        "",
        *_table(["setting", "value"], [[k, f"`{v}`"] for k, v in data.settings]),
        *_table(["environment", "value"], [[k, v] for k, v in data.environment]),
    ]


# ----------------------------------------------------------------------------- render


def render_report(out_dir: Path, data: ReportInput) -> Path:
    """Write ``report.md`` and its PNGs (in ``plots/``) into ``out_dir``; return the path."""
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, list[Path]] = {}
    for result in data.results:
        run = result.info.run
        made = [
            plot_rates(result, plot_dir / f"{run}-rates.png"),
            plot_latency(result, plot_dir / f"{run}-latency.png"),
        ]
        plots[run] = [p for p in made if p is not None]
    across = plot_vs_share(data.results, plot_dir)
    projection = plot_projection(data.results, plot_dir)
    if projection is not None:
        across.append(projection)
    lines = [
        "# AtomicKafka evaluation (thesis chapter 5)",
        "",
        *_banner(data),
        f"{len(data.results)} runs in {data.wall_s / 60:,.1f} min of wall time; "
        f"the thesis comparison uses **{data.primary}**.",
        "",
    ]
    if data.metrics_error:
        lines += [
            "> [!CAUTION]",
            f"> **The metrics job failed:** {data.metrics_error}",
            "",
        ]
    lines += _summary(data)
    lines += _against_thesis(data)
    lines += _comparisons(data)
    lines += _costs(data)
    if across:
        lines += ["## Across scenarios", ""]
        lines += [f"![{p.stem}]({p.relative_to(out_dir)})" for p in across]
        lines.append("")
    lines += _scenario_sections(data, plots, out_dir)
    lines += _definitions(data)
    lines += _configuration(data)
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
