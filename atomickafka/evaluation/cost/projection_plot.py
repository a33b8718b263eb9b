"""The plot of projected capacity against the number of topics: AtomicKafka against
each baseline on the many-topic workload (matplotlib's object API: no pyplot state).

Each system is a line of its projected msg/s with one core per process
(:data:`~atomickafka.evaluation.cost.accounting.PROJECTION_FORMULA`) against the topic
count, and, dotted, the capacity measured on this machine; the title says that the
solid lines are a projection. ``atomickafka bench --workload many --plot`` and the
evaluation report (``eval --compare many-topics``) draw it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from matplotlib.figure import Figure

__all__ = ["TopicPoint", "plot_projection_vs_topics"]

#: One system at one topic count: the count, its projected msg/s, its measured msg/s.
TopicPoint = tuple[int, float | None, float | None]
_DPI: Final = 110


def plot_projection_vs_topics(
    lines: Mapping[str, Sequence[TopicPoint]], path: Path, workload: str
) -> Path:
    """Write the plot of ``lines`` (system label -> its points) to ``path``;
    ``workload`` says which messages (e.g. the mix in words)."""
    fig = Figure(figsize=(8.5, 5.6), layout="constrained")
    ax = fig.subplots()
    counts: set[int] = set()
    for index, (label, points) in enumerate(lines.items()):
        ordered = sorted(points)
        color = f"C{index}"
        projected = [(n, v) for n, v, _ in ordered if v is not None]
        measured = [(n, m) for n, _, m in ordered if m is not None]
        counts.update(n for n, _, _ in ordered)
        if projected:
            ax.plot(
                [n for n, _ in projected],
                [v for _, v in projected],
                marker="o",
                color=color,
                label=f"{label}: projected, one core per process",
            )
        if measured:
            ax.plot(
                [n for n, _ in measured],
                [m for _, m in measured],
                marker="x",
                linestyle=":",
                color=color,
                label=f"{label}: measured on this machine",
            )
    ax.set_xlabel("topics\n" + textwrap.fill(workload, 100), fontsize="small")
    ax.set_xticks(sorted(counts))
    ax.set_ylabel("messages per second")
    values = [v for points in lines.values() for _, *pair in points for v in pair if v]
    ax.set_ylim(0, 1.45 * max(values, default=1.0))  # room above the lines for the legend
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", ncols=2)
    ax.set_title(
        "Projected capacity against the number of topics (a projection:\n"
        "1,000,000 ÷ the busiest ordering process's CPU-µs per message)",
        fontsize="medium",
    )
    fig.savefig(path, dpi=_DPI)
    return path
