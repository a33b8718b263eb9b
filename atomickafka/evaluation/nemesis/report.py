"""The nemesis's outputs: ``results.json`` (everything), ``summary.md`` (the verdicts,
the faults, the figures) and ``timeline.png``: the faults as bands, sends and
deliveries per second per topic, and every takeover as a marker."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_timeline", "summary_markdown", "write_results"]

#: A band's colour per fault kind (matplotlib's tab10).
_COLOURS = {
    "node-host-cut": "tab:red",
    "client-cut": "tab:orange",
    "broker-isolated": "tab:purple",
    "flapping-link": "tab:brown",
    "slow-lossy-links": "tab:olive",
    "node-paused": "tab:cyan",
    "node-killed": "tab:gray",
}


def write_results(out: Path, results: Mapping[str, Any]) -> Path:
    """``results.json`` in ``out``."""
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def _per_second(times: Sequence[float], start: float, seconds: int) -> list[int]:
    counts = Counter(int(t - start) for t in times if 0 <= t - start < seconds)
    return [counts.get(i, 0) for i in range(seconds)]


def plot_timeline(out: Path, results: Mapping[str, Any]) -> Path:
    """``timeline.png``: sends and deliveries per second per topic over the run, the
    faults as bands (labelled by kind and target), takeovers as markers."""
    import matplotlib  # noqa: PLC0415 (the eval extra; only when a report is written)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    start = float(results["load_started"])
    seconds = int(results["timeline_seconds"]) + 1
    topics: list[str] = list(results["topics"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 7.5), sharex=True)
    xs = list(range(seconds))
    for i, topic in enumerate(topics):
        colour = f"C{i}"
        sent = [s["t"] for s in results["sends"] if topic in s["to"]]
        top.plot(xs, _per_second(sent, start, seconds), color=colour, lw=1, label=f"{topic} sent")
        got = [t / 1000 for t in results["delivery_times"][topic]]
        bottom.plot(
            xs, _per_second(got, start, seconds), color=colour, lw=1, label=f"{topic} delivered"
        )
    for axis in (top, bottom):
        for fault in results["faults"]:
            begin = float(fault["started"]) - start
            end = (float(fault["healed"]) if fault["healed"] else begin + 1) - start
            axis.axvspan(
                begin, max(end, begin + 0.5), color=_COLOURS[fault["kind"]], alpha=0.18, lw=0
            )
        for takeover in results["takeovers"]:
            if takeover["from"] is not None:
                axis.axvline(float(takeover["at"]) - start, color="k", lw=0.8, ls="--")
    _label_faults_and_takeovers(top, bottom, results, start)
    top.set_ylabel("sends / s (client)")
    bottom.set_ylabel("deliveries / s (committed)")
    bottom.set_xlabel("seconds since the load started (bands: faults; dashed: takeovers)")
    top.legend(loc="upper right", fontsize=7, ncol=len(topics))
    bottom.legend(loc="upper right", fontsize=7, ncol=len(topics))
    verdicts = ", ".join(f"{v['name']} {'ok' if v['ok'] else 'FAILED'}" for v in results["checks"])
    top.set_title(f"nemesis, seed {results['seed']}: {verdicts}", fontsize=9)
    fig.tight_layout()
    path = out / "timeline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _label_faults_and_takeovers(
    top: Any, bottom: Any, results: Mapping[str, Any], start: float
) -> None:
    """Name every fault (kind, target) on the top plot, every takeover on the bottom one."""
    ymax = top.get_ylim()[1]
    for fault in results["faults"]:
        top.text(
            float(fault["started"]) - start,
            ymax * 0.98,
            f"{fault['kind']}\n{fault['target'] or ''}",
            fontsize=7,
            va="top",
            rotation=90,
            color=_COLOURS[fault["kind"]],
        )
    for takeover in results["takeovers"]:
        if takeover["from"] is not None:
            bottom.text(
                float(takeover["at"]) - start,
                bottom.get_ylim()[1] * 0.95,
                f" {takeover['topic']}→{takeover['to']['host']}",
                fontsize=7,
                va="top",
                rotation=90,
            )


def summary_markdown(results: Mapping[str, Any]) -> str:
    """The verdicts, the faults and the figures, as Markdown."""
    start = float(results["load_started"])
    lines = [
        f"# Nemesis run, seed {results['seed']}",
        "",
        f"{len(results['topics'])} topics on {results['node_hosts']} node hosts and 3 brokers, "
        f"{results['rate']:g} msg/s for {results['load_seconds']:.0f} s, "
        f"`--takeover-after` {results['lease_s']:g} s; wall time {results['wall_s']:.0f} s.",
        "",
        "| check | verdict | detail |",
        "|---|---|---|",
    ]
    lines += [
        f"| {v['name']} | {'ok' if v['ok'] else '**FAILED**'} | {v['detail']} |"
        for v in results["checks"]
    ]
    lines += ["", "| t (s) | fault | target | for (s) | how |", "|---|---|---|---|---|"]
    for f in results["faults"]:
        how = ", ".join(f"{k} {v}" for k, v in {**f["params"], **f["detail"]}.items())
        lines.append(
            f"| {float(f['started']) - start:.1f} | {f['kind']} | {f['target']} | "
            f"{f['duration_s']:g} | {how} |"
        )
    order = next(v for v in results["checks"] if v["name"] == "order")
    lines += [
        "",
        f"Sent {order['sent']} ({order['acknowledged']} acknowledged, "
        f"{order['unacknowledged']} not, {order['refused']} refused by the client), "
        f"delivered {order['delivered']}; violations: {order['violations'] or 'none'}.",
    ]
    takeovers = next(v for v in results["checks"] if v["name"] == "takeovers")
    if takeovers.get("live_s"):
        lines += [
            "",
            f"After each node host cut, the lease was taken after {takeovers['lease_taken_s']} s "
            f"and the new instance was live after {takeovers['live_s']} s "
            f"(bound {takeovers['bound_s']:g} s).",
        ]
    lines += ["", "| host | takeovers | fenced stops | restarts |", "|---|---|---|---|"]
    for host, m in sorted(results.get("metrics", {}).items()):
        lines.append(
            f"| {host} | {m['node_takeovers']:g} | {m['node_fenced']:g} | "
            f"{m['cluster_restarts']:g} |"
        )
    replaced = sum(results.get("producers_replaced", {}).values())
    lines += [
        "",
        f"Transactional producers replaced after a failed transaction: {replaced}.",
        "",
        "![timeline](timeline.png)",
        "",
    ]
    return "\n".join(lines)
