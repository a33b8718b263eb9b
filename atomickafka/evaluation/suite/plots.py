"""The report's PNG plots (matplotlib's object API: no pyplot state, no display).

Per run: messages per second over time per node (incoming, outgoing, deliveries; one
panel per node and kind, so every node can be read) and the latency distribution.
Across scenarios: throughput and p99 latency against the multicast share, one line per
variant and pacing (and the thesis's paced runs, labelled as such, for scale).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from atomickafka.evaluation.cost.accounting import RunCost
from atomickafka.evaluation.cost.projection_plot import TopicPoint, plot_projection_vs_topics
from atomickafka.evaluation.load.destinations import MANY
from atomickafka.evaluation.load.scenarios import home_topics
from atomickafka.evaluation.load.variants import System
from atomickafka.evaluation.suite.comparison import Pacing, pacing_of
from atomickafka.evaluation.suite.results import RunInfo, RunResult
from atomickafka.evaluation.suite.thesis import THESIS_MESSAGES, THESIS_PACE_MS, THESIS_RUNS

__all__ = [
    "MAX_BUCKETS",
    "coarsen",
    "node_label",
    "plot_latency",
    "plot_projection",
    "plot_rates",
    "plot_vs_share",
    "rates_figure",
]

_KIND_TITLES = {
    "incoming": "incoming (input log) msg/s",
    "outgoing": "outgoing (written) msg/s",
    "deliveries": "deliveries/s",
}
_KIND_COLORS = {"incoming": "C0", "outgoing": "C1", "deliveries": "C2"}
_DPI = 110
_CLASS_COLORS = {"all": "C0", "single": "C1", "multicast": "C2"}
#: The most buckets a rates panel shows, and the merges tried to get there.
MAX_BUCKETS: Final = 40
_FACTORS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def node_label(node: str, topics: Sequence[str]) -> str:
    """``node 3`` for the run's third topic (the thesis's numbering), else the name."""
    if node in topics:
        return f"node {topics.index(node) + 1}"
    return node


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=_DPI)
    return path


def coarsen(
    values: Sequence[float], width_s: float, most: int = MAX_BUCKETS
) -> tuple[list[float], float]:
    """Rates per bucket of ``width_s`` merged into wider buckets (2, 5, 10, 20, 50, ...
    of them) so that at most ``most`` remain; returns the rates and the new width. A
    merged bucket's rate is the mean of its buckets' (a last, partial one: of those it
    has)."""
    factor = next(
        (k for k in _FACTORS if math.ceil(len(values) / k) <= most),
        math.ceil(len(values) / most),
    )
    merged = [
        statistics.fmean(values[start : start + factor]) for start in range(0, len(values), factor)
    ]
    return merged, width_s * factor


def _writers(info: RunInfo) -> dict[str, str]:
    """Node -> which clients write to it: each client its own topic, or every client
    a sequencer baseline."""
    baseline = System(info.system).baseline if info.system in set(System) else None
    if baseline is not None:
        return {baseline.sender_id: "clients write here"}
    out: dict[str, list[str]] = {}
    for index, home in enumerate(home_topics(info.topics, info.clients)):
        out.setdefault(home, []).append(str(index + 1))
    return {node: f"client {', '.join(numbers)} writes here" for node, numbers in out.items()}


def plot_rates(result: RunResult, path: Path) -> Path | None:
    """Write :func:`rates_figure` of ``result`` to ``path`` (``None``: no metrics)."""
    fig = rates_figure(result)
    return None if fig is None else _save(fig, path)


def rates_figure(result: RunResult) -> Figure | None:
    """Incoming, outgoing and deliveries per second over the run: small multiples, one
    row per node and one column per kind, so that every node's rates can be read on
    their own (scales shared per column), in buckets coarse enough to read."""
    metrics = result.metrics
    if metrics is None:
        return None
    info = result.info
    nodes = sorted(
        {n for per_node in metrics.series.values() for n in per_node},
        key=lambda n: (n not in info.topics, node_label(n, info.topics)),
    )
    if not nodes:
        return None
    longest = max(len(v) for per_node in metrics.series.values() for v in per_node.values())
    width = coarsen([0.0] * longest, metrics.bucket_s)[1]
    writers = _writers(info)
    # Fixed margins in inches (a constrained layout of this many panels is slow).
    width_in, height_in = 11.0, 1.2 + 1.45 * len(nodes)
    fig = Figure(figsize=(width_in, height_in))
    grid = fig.subplots(len(nodes), len(_KIND_TITLES), sharex=True, sharey="col", squeeze=False)
    fig.subplots_adjust(
        left=1.25 / width_in,
        right=1 - 0.2 / width_in,
        top=1 - 0.8 / height_in,
        bottom=0.5 / height_in,
        hspace=0.3,
        wspace=0.22,
    )
    for column, (kind, title) in enumerate(_KIND_TITLES.items()):
        per_node = metrics.series.get(kind, {})
        color = _KIND_COLORS[kind]
        top = 0.0
        for row, node in enumerate(nodes):
            ax = grid[row][column]
            values = coarsen(per_node.get(node, []), metrics.bucket_s)[0]
            if any(values):
                edges = [i * width for i in range(len(values) + 1)]
                ax.stairs(values, edges, fill=True, color=color, alpha=0.25)
                ax.stairs(values, edges, color=color, linewidth=1.4)
                top = max(top, *values)
            else:
                ax.text(0.5, 0.5, "none", transform=ax.transAxes, ha="center", color="grey")
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize="small")
            if row == 0:
                ax.set_title(title, fontsize="medium")
            if column == 0:
                label = node_label(node, info.topics)
                if node in writers:
                    label += f"\n({writers[node]})"
                ax.set_ylabel(label, fontsize="small")
        grid[0][column].set_ylim(0, top * 1.08 or 1.0)  # the column shares it
    for ax in grid[-1]:
        ax.set_xlabel(f"s since the first send ({width:g} s buckets)", fontsize="small")
    pacing = pacing_of(info.pace_ms).describe(info.pace_ms)
    fig.suptitle(f"{info.scenario} — {info.variant}, {pacing}: messages per second per node")
    return fig


def plot_latency(result: RunResult, path: Path) -> Path | None:
    """Cumulative distribution of send-to-delivery latency (single, multicast, all)."""
    metrics = result.metrics
    if metrics is None or not metrics.latency:
        return None
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.subplots()
    percent = list(range(101))
    # With one class only (the baseline has no multicast), "all" is that class again.
    both = "single" in metrics.latency and "multicast" in metrics.latency
    for name in ("all", "single", "multicast") if both else ("single", "multicast"):
        summary = metrics.latency.get(name)
        if summary is None or len(summary.quantiles) != len(percent):
            continue
        ax.plot(
            summary.quantiles,
            percent,
            label=f"{name} (n={summary.n:,}; p50 {summary.p50:,.0f} ms, p99 {summary.p99:,.0f} ms)",
            linewidth=1.6,
            linestyle="--" if name == "all" else "-",
            color=_CLASS_COLORS[name],
        )
    ax.set_xlabel("send to delivery at the last destination (ms)")
    ax.set_ylabel("% of messages delivered within")
    ax.set_ylim(0, 100)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    info = result.info
    pacing = pacing_of(info.pace_ms).short(info.pace_ms)
    ax.set_title(f"{info.scenario} — {info.variant}, {pacing}: latency distribution")
    return _save(fig, path)


def plot_vs_share(results: Sequence[RunResult], out_dir: Path) -> list[Path]:
    """Throughput against the multicast share, one plot per pacing (one line per
    variant, and the thesis's paced runs, log scale): ``throughput-vs-share.png`` for
    runs paced as the thesis's, ``capacity-vs-share.png`` for unpaced runs, each titled
    for what it compares; and p99 latency against the share, one line per variant and
    pacing (``p99-vs-share.png``)."""
    throughput: dict[Pacing, dict[str, list[tuple[int, float]]]] = {}
    paces: dict[Pacing, float] = {}
    p99: dict[str, list[tuple[int, float]]] = {}
    thesis: dict[int, float] = {}
    for result in results:
        info, metrics = result.info, result.metrics
        if metrics is None or info.mix:  # the many-topic workload has no share to all
            continue
        share, pacing = info.multicast_percent, pacing_of(info.pace_ms)
        paces.setdefault(pacing, info.pace_ms)
        lines = throughput.setdefault(pacing, {})
        lines.setdefault(info.variant, []).append((share, metrics.messages_per_s))
        if "all" in metrics.latency:
            label = f"{info.variant}, {pacing.short(info.pace_ms)}"
            p99.setdefault(label, []).append((share, metrics.latency["all"].p99))
        if info.scenario in THESIS_RUNS:
            thesis[share] = THESIS_RUNS[info.scenario].messages_per_s
    if not throughput:
        return []
    reference = (
        f"2019 thesis, paced {THESIS_PACE_MS} ms ({THESIS_MESSAGES:,} / run time)",
        list(thesis.items()),
    )
    made = []
    for pacing, lines in throughput.items():
        pace = paces[pacing]
        shares = sorted({share for points in lines.values() for share, _ in points})
        if pacing is Pacing.UNPACED:
            name, ylabel = "capacity-vs-share.png", "messages per second, unpaced (capacity)"
            title = "Capacity (unpaced) against the 2019 thesis's paced runs"
        elif pacing is Pacing.AS_THESIS:
            name, ylabel = "throughput-vs-share.png", "messages per second"
            title = f"Throughput paced as the 2019 thesis ({THESIS_PACE_MS} ms): like for like"
        else:
            name, ylabel = f"throughput-vs-share-{pace:g}ms.png", "messages per second"
            title = f"Throughput paced {pace:g} ms against the thesis's {THESIS_PACE_MS} ms"
        labelled = {f"{variant}, {pacing.describe(pace)}": p for variant, p in lines.items()}
        made.append(
            _share_plot(labelled, shares, out_dir / name, ylabel, title, reference=reference)
        )
    shares = sorted({share for points in p99.values() for share, _ in points})
    made.append(
        _share_plot(
            p99,
            shares,
            out_dir / "p99-vs-share.png",
            "p99 send-to-delivery latency (ms)",
            "p99 latency against the multicast share (2019 recorded no latency)",
        )
    )
    return made


def _share_plot(
    lines: dict[str, list[tuple[int, float]]],
    shares: Sequence[int],
    path: Path,
    ylabel: str,
    title: str,
    *,
    reference: tuple[str, list[tuple[int, float]]] | None = None,
) -> Path:
    """One line per variant against the share; a ``reference`` line (the thesis's) in
    grey, on a log scale since it is orders of magnitude apart."""
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for label, points in lines.items():
        ordered = sorted(points)
        ax.plot([p for p, _ in ordered], [v for _, v in ordered], marker="o", label=label)
    if reference is not None and reference[1]:
        label, points = reference
        ordered = sorted(points)
        ax.plot(
            [p for p, _ in ordered],
            [v for _, v in ordered],
            marker="s",
            linestyle=":",
            color="grey",
            label=label,
        )
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ylabel += " (log scale)"
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("messages multicast to all topics (%)")
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(shares))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    ax.set_title(title)
    return _save(fig, path)


def plot_projection(results: Sequence[RunResult], out_dir: Path) -> Path | None:
    """Projected capacity with one core per process against the number of topics, each
    variant a line, over the runs of the many-topic workload's ``many`` mix
    (``projection-vs-topics.png``; ``None``: no such run was measured)."""
    lines: dict[str, list[TopicPoint]] = {}
    prefix = f"{MANY.name}-"
    for result in results:
        info = result.info
        if not info.scenario.startswith(prefix) or not info.cost or not info.ok:
            continue
        cost = RunCost.from_dict(info.cost)
        measured = result.metrics.messages_per_s if result.metrics else None
        point = (len(info.topics), cost.projected_msgs_per_s, measured)
        label = f"AtomicKafka {info.variant}" if info.system == "atomickafka" else info.variant
        lines.setdefault(label, []).append(point)
    if not lines:
        return None
    path = out_dir / "projection-vs-topics.png"
    return plot_projection_vs_topics(lines, path, f"{MANY.name}: {MANY.describe()}")
