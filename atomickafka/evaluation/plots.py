"""The report's PNG plots (matplotlib's object API: no pyplot state, no display).

Per run: messages per second over time per node (incoming, outgoing, deliveries) and
the latency distribution. Across scenarios: throughput and p99 latency against the
multicast share, one line per variant (and the thesis's throughput for scale).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from atomickafka.evaluation.results import RunResult
from atomickafka.evaluation.thesis import THESIS_RUNS

__all__ = ["node_label", "plot_latency", "plot_rates", "plot_vs_share"]

_KIND_TITLES = {
    "incoming": "incoming (input log) msg/s",
    "outgoing": "outgoing (written) msg/s",
    "deliveries": "deliveries/s",
}
_DPI = 110
_CLASS_COLORS = {"all": "C0", "single": "C1", "multicast": "C2"}
_Dash = Literal["-", "--", "-.", ":"]
_LINESTYLES: tuple[_Dash, ...] = ("-", "--", "-.", ":")


class _Style(NamedTuple):
    color: str
    linestyle: _Dash
    linewidth: float


def _style(index: int) -> _Style:
    """Line style of the ``index``-th node: its own colour and dash, wider lines first."""
    return _Style(
        f"C{index % 10}", _LINESTYLES[index % len(_LINESTYLES)], max(1.0, 3.2 - 0.5 * index)
    )


def node_label(node: str, topics: Sequence[str]) -> str:
    """``node 3`` for the run's third topic (the thesis's numbering), else the name."""
    if node in topics:
        return f"node {topics.index(node) + 1}"
    return node


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=_DPI)
    return path


def plot_rates(result: RunResult, path: Path) -> Path | None:
    """Incoming, outgoing and deliveries per second over the run, one line per node."""
    metrics = result.metrics
    if metrics is None:
        return None
    info = result.info
    fig = Figure(figsize=(10, 7.5), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    width = metrics.bucket_s
    nodes = sorted(
        {n for per_node in metrics.series.values() for n in per_node},
        key=lambda n: (n not in info.topics, node_label(n, info.topics)),
    )
    # Nodes that carry the same load draw the same line: wider lines first, and a
    # style each, keep every one of them visible.
    styles = {node: _style(i) for i, node in enumerate(nodes)}
    for ax, (kind, title) in zip(axes, _KIND_TITLES.items(), strict=True):
        per_node = metrics.series.get(kind, {})
        for node in nodes:
            values = per_node.get(node, [])
            if values:
                xs = [i * width for i in range(len(values) + 1)]
                style = styles[node]
                ax.stairs(
                    values,
                    xs,
                    color=style.color,
                    linestyle=style.linestyle,
                    linewidth=style.linewidth,
                )
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[-1].set_xlabel(f"seconds since the first send ({width:g} s buckets)")
    handles = [
        Line2D(
            [],
            [],
            label=node_label(node, info.topics),
            color=styles[node].color,
            linestyle=styles[node].linestyle,
            linewidth=styles[node].linewidth,
        )
        for node in nodes
    ]
    if handles:
        fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    fig.suptitle(f"{info.scenario} — {info.variant}: messages per second per node")
    return _save(fig, path)


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
    ax.legend(loc="lower right", fontsize="small")
    info = result.info
    ax.set_title(f"{info.scenario} — {info.variant}: latency distribution")
    return _save(fig, path)


def plot_vs_share(results: Sequence[RunResult], out_dir: Path) -> list[Path]:
    """Throughput and p99 latency against the multicast share, one line per variant;
    the throughput plot also shows the thesis's (log scale)."""
    throughput: dict[str, list[tuple[int, float]]] = {}
    p99: dict[str, list[tuple[int, float]]] = {}
    thesis: dict[int, float] = {}
    for result in results:
        info, metrics = result.info, result.metrics
        if metrics is None:
            continue
        share = info.multicast_percent
        throughput.setdefault(info.variant, []).append((share, metrics.messages_per_s))
        if "all" in metrics.latency:
            p99.setdefault(info.variant, []).append((share, metrics.latency["all"].p99))
        if info.scenario in THESIS_RUNS:
            thesis[share] = THESIS_RUNS[info.scenario].messages_per_s
    if not throughput:
        return []
    shares = sorted({share for points in throughput.values() for share, _ in points})
    return [
        _share_plot(
            throughput,
            shares,
            out_dir / "throughput-vs-share.png",
            "messages per second",
            "Throughput against the multicast share",
            reference=("2019 thesis (40,000 / run time)", list(thesis.items())),
        ),
        _share_plot(
            p99,
            shares,
            out_dir / "p99-vs-share.png",
            "p99 send-to-delivery latency (ms)",
            "p99 latency against the multicast share (2019 recorded no latency)",
        ),
    ]


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
