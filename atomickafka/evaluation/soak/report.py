"""The soak's outputs: every figure as JSON, a short markdown summary, and the plot of
each node's memory against the messages delivered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = ["markdown", "plot_memory", "write_json"]


def write_json(path: Path, results: Mapping[str, Any]) -> None:
    """``results`` as indented JSON."""
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def plot_memory(
    samples: Sequence[Mapping[str, Any]], warmup_s: float, title: str, path: Path
) -> None:
    """Each node's RSS against the messages delivered so far (one line per node), the
    end of the warm-up marked."""
    import matplotlib  # noqa: PLC0415 (the eval extra; only the plot needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    nodes = sorted({node for s in samples for node in s["rss_mib"]})
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    top = 0.0
    for i, node in enumerate(nodes):
        points = [
            (s["delivered"] / 1000, s["rss_mib"][node]) for s in samples if node in s["rss_mib"]
        ]
        xs, ys = zip(*points, strict=True) if points else ((), ())
        top = max([top, *ys])
        ax.plot(xs, ys, label=f"node t{i + 1}", linewidth=1.4)
    after = [s for s in samples if s["elapsed_s"] >= warmup_s]
    if after:
        ax.axvline(after[0]["delivered"] / 1000, color="grey", linestyle="--", linewidth=1)
        ax.annotate(
            f" warm-up ends ({warmup_s:g} s)",
            (after[0]["delivered"] / 1000, top * 0.08),
            color="grey",
            fontsize=9,
        )
    ax.set_ylim(0, top * 1.15 if top else 1)
    ax.set_xlim(left=0)
    ax.set_xlabel("messages delivered at every destination (thousands)")
    ax.set_ylabel("resident memory, VmRSS (MiB)")
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", ncol=len(nodes) or 1, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "not seen"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value:,}{unit}" if isinstance(value, int) else f"{value}{unit}"


def _check(found: Mapping[str, Any] | None) -> str:
    if not found:
        return "not run"
    first = found["summary"].splitlines()[0] if found["summary"] else ""
    return ("passed" if found["ok"] else "FAILED") + f" ({first})"


def _soak(soak: Mapping[str, Any], plot: str | None) -> list[str]:
    settings, lat = soak["settings"], soak["latency"]
    rate = settings["rate"]
    lines = ["## 1. Soak: memory against messages delivered", ""]
    lines += [
        f"{settings['messages']:,} messages, {soak['shape']}, sent by {settings['senders']} "
        f"client processes {'at ' + format(rate, ',.0f') + ' msg/s' if rate else 'unpaced'}; "
        f"nodes {soak['cluster']}. Delivered {lat['delivered']:,} in {lat['seconds']:,} s "
        f"({lat['messages_per_s']:,} msg/s); latency p50 {lat['p50_ms']} ms, p99 "
        f"{lat['p99_ms']} ms, multicast p99 {lat['multicast_p99_ms']} ms. Order check: "
        f"{_check(soak.get('check'))}. Node restarts: {_fmt(soak.get('restarts'))}.",
        "",
        f"RSS in MiB; start = first sample {settings['warmup_s']:g} s after the load began "
        "(the 60 s memory window filled), middle = halfway in messages delivered, end = "
        "last sample; growth = slope of a least-squares line through the samples after "
        f"the warm-up. Sampled every {settings['sample_s']:g} s.",
        "",
        "| node | start | middle | end | max | growth per 100k msgs | flat |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in soak["memory"]:
        lines.append(
            f"| {m['node']} | {m['start_mib']} (at {m['start_delivered']:,}) | "
            f"{m['middle_mib']} (at {m['middle_delivered']:,}) | {m['end_mib']} "
            f"(at {m['end_delivered']:,}) | {m['max_mib']} | {m['growth_mib_per_100k']:+.2f} MiB "
            f"| {'yes' if m['flat'] else 'NO'} |"
        )
    if plot:
        lines += ["", f"Plot: `{plot}`"]
    return [*lines, ""]


def _recovery(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["## 2. Recovery after SIGKILL (no standby; the supervisor restarts the node)", ""]
    lines += [
        "kill → live: to the first status of the new process that is live and not "
        "replaying (statuses come every second); kill → delivery: to the first delivery "
        "at that topic written after the kill, as a consumer read it, with the trickle "
        "going on; recovery_seconds: the node's own metric, from taking the lease to the "
        "end of its replay.",
        "",
        "| messages filled | snapshots | victim's input records | kill → live | "
        "kill → delivery | recovery_seconds | records replayed | order check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kill = r["kill"]
        lines.append(
            f"| {r['messages']:,} | {'default' if r['snapshots'] else 'off'} | "
            f"{r['victim_input_records']:,} | {_fmt(kill['live_s'], ' s')} | "
            f"{_fmt(kill['delivery_s'], ' s')} | {_fmt(r['recovery_seconds_metric'], ' s')} | "
            f"{_fmt(r['records_replayed'], '', 0)} | {_check(r.get('check'))} |"
        )
    return [*lines, ""]


def _takeover(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["## 3. Standby takeover (`cluster --standby`, SIGKILL of the active node)", ""]
    lines += [
        "| --takeover-after | kills | kill → standby live: median / max | "
        "kill → delivery: median / max | standby took over | order check |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        live, dlv = r["live_s"], r["delivery_s"]
        took = sum(1 for k in r["kills"] if k["standby_took_over"])
        lines.append(
            f"| {r['takeover_after_s']:g} s | {len(r['kills'])} | {_fmt(live['median'], ' s')} / "
            f"{_fmt(live['max'], ' s')} | {_fmt(dlv['median'], ' s')} / {_fmt(dlv['max'], ' s')} "
            f"| {took} of {len(r['kills'])} | {_check(r.get('check'))} |"
        )
    lines += ["", "Every kill (seconds):", ""]
    for r in rows:
        each = ", ".join(
            f"{k['topic'].rsplit('-', 1)[1]}: live {_fmt(k['live_s'])}, delivery "
            f"{_fmt(k['delivery_s'])}"
            for k in r["kills"]
        )
        lines.append(f"- {r['takeover_after_s']:g} s: {each}")
    return [*lines, ""]


def _modes(modes: Mapping[str, Any]) -> list[str]:
    s = modes["settings"]
    fanout = "every topic" if s["fanout"] is None else f"{s['fanout'][0]}-{s['fanout'][1]} topics"
    lines = ["## 4. Delivery modes: exactly-once against at-least-once", ""]
    lines += [
        f"`atomickafka bench` at {s['share']:.0%} multicast to {fanout}, {s['topics']} topics, "
        f"{s['messages']:,} messages unpaced (capacity) and paced at {s['paced_rate']:,.0f} "
        f"msg/s (latency); {s['repeats']} runs per mode, alternating; medians:",
        "",
        "| mode | capacity msg/s | p50 ms | p99 ms | multicast p99 ms | runs (capacity; mc p99) |",
        "|---|---|---|---|---|---|",
    ]
    for mode, med in modes["median"].items():
        each = "; ".join(
            f"{r['figures']['capacity_msg_s']:,.0f}, {r['figures']['multicast_p99_ms']:.0f} ms"
            for r in modes["runs"][mode]
        )
        lines.append(
            f"| {mode} | {med['capacity_msg_s']:,.0f} | {med['p50_ms']:.1f} | {med['p99_ms']:.1f} "
            f"| {med['multicast_p99_ms']:.1f} | {each} |"
        )
    return [*lines, "", f"Rule: {modes['verdict']['summary']}", ""]


def markdown(results: Mapping[str, Any], plot: str | None) -> str:
    """The summary: one section per phase that ran, then the machine's load."""
    lines = ["# AtomicKafka soak and recovery", ""]
    lines += [
        f"Run {results['started']} on {results['machine']}; command: `{results['command']}`",
        "",
    ]
    phases = results["phases"]
    if "soak" in phases:
        lines += _soak(phases["soak"], plot)
    if "recovery" in phases:
        lines += _recovery(phases["recovery"])
    if "takeover" in phases:
        lines += _takeover(phases["takeover"])
    if "modes" in phases:
        lines += _modes(phases["modes"])
    lines += ["## Machine load (1/5/15-minute load average, before → after each phase)", ""]
    for name, phase in phases.items():
        for run in phase if isinstance(phase, list) else [phase]:
            label = name
            if name == "recovery":
                label += (
                    f" {run['messages']:,} {'snapshots' if run['snapshots'] else 'no snapshots'}"
                )
            elif name == "takeover":
                label += f" {run['takeover_after_s']:g} s"
            lines.append(f"- {label}: {run['load_before']} → {run['load_after']}")
    lines.append(f"- whole run: {results['load_before']} → {results['load_after']}")
    return "\n".join(lines) + "\n"
