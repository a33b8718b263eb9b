"""One nemesis run (``atomickafka soak --nemesis``; ``tests/integration/test_netfaults.py``):
deploy, load, inject the seeded schedule, heal, wait, check, report.

The steps: the deployment (:mod:`~atomickafka.evaluation.nemesis.deployment`) starts and
every topic gets an active instance; the client host sends at a steady rate for the
schedule's time plus a quiet tail; the nemesis applies the schedule meanwhile; then
everything is healed (links, routes, proxy, paused processes), the sender's last
acknowledgements come in, every acknowledged send is awaited at its destinations,
a probe multicast to every topic must be delivered (no topic stays stuck), and the
checks (:mod:`~atomickafka.evaluation.nemesis.checks`) give their verdicts. The
deployment is removed whatever happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomickafka.client import AtomicKafkaClient
from atomickafka.evaluation.errors import RunError
from atomickafka.evaluation.nemesis.checks import (
    Delivered,
    Verdict,
    check_fences,
    check_order,
    check_plain_consumers,
    check_takeovers,
    metric_total,
    wait_delivered,
)
from atomickafka.evaluation.nemesis.deployment import Deployment
from atomickafka.evaluation.nemesis.faults import Nemesis
from atomickafka.evaluation.nemesis.observe import StatusRecorder
from atomickafka.evaluation.nemesis.report import plot_timeline, summary_markdown, write_results
from atomickafka.evaluation.nemesis.schedule import (
    Fault,
    FaultKind,
    ScheduleSettings,
    draw_schedule,
    schedule_seconds,
)

__all__ = ["NemesisSettings", "run_nemesis"]

#: Probe messages multicast to every topic after the heal.
PROBES = 5


@dataclass(frozen=True)
class NemesisSettings:
    """A run: ``seconds`` of faults (0: the shortest schedule holding every kind once)."""

    out: Path
    seconds: float = 0.0
    seed: int = 1
    topics: tuple[str, ...] = ("nema", "nemb", "nemc")
    rate: float = 30.0
    lease_s: float = 3.0
    node_hosts: int = 2
    #: Sending goes on this long after the last fault healed.
    tail_s: float = 8.0
    #: How long the checks wait for everything acknowledged to be delivered.
    settle_s: float = 150.0
    #: Allowance over the takeover bound (lease + 2 s) for a busy machine.
    takeover_margin_s: float = 3.0
    log_level: str = "info"

    def schedule(self) -> ScheduleSettings:
        """The schedule's settings (its time resolved)."""
        base = ScheduleSettings(self.seconds or 1.0, self.topics, lease_s=self.lease_s)
        seconds = self.seconds or schedule_seconds(base, self.seed)
        return ScheduleSettings(seconds, self.topics, lease_s=self.lease_s)


def _read_sends(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise RunError(f"the sender wrote no {path}; see its log beside it")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _probe(bootstrap: str, topics: tuple[str, ...]) -> list[dict[str, Any]]:
    """Multicast :data:`PROBES` messages to every topic from the root namespace."""
    sends: list[dict[str, Any]] = []
    with AtomicKafkaClient(bootstrap, client_id="probe") as client:
        for n in range(PROBES):
            value = {"probe": n}
            mid = client.send(value, list(topics))
            sends.append({"id": mid, "to": list(topics), "value": value, "t": time.time()})
        client.flush(60)
    for entry in sends:
        entry["ack"] = time.time()
    return sends


def run_nemesis(
    settings: NemesisSettings,
    inspect: Callable[[Deployment, list[dict[str, Any]]], None] | None = None,
    deployment: Deployment | None = None,
) -> dict[str, Any]:
    """Run it; return the results (also written to ``settings.out``) with ``ok``.
    ``inspect(deployment, sends)`` is called once everything is delivered, before the
    deployment is removed (a test's own checks). ``deployment``: one already running
    for ``settings.topics`` (left running); by default one is made and removed."""
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    if deployment is not None:
        return _run(settings, deployment, inspect)
    with Deployment(
        out,
        settings.topics,
        node_hosts=settings.node_hosts,
        lease_s=settings.lease_s,
        seed=settings.seed,
        log_level=settings.log_level,
    ) as made:
        return _run(settings, made, inspect)


def _run(
    settings: NemesisSettings,
    deployment: Deployment,
    inspect: Callable[[Deployment, list[dict[str, Any]]], None] | None,
) -> dict[str, Any]:
    out = settings.out
    schedule_settings = settings.schedule()
    schedule = draw_schedule(schedule_settings, settings.seed)
    wall = time.monotonic()
    topics = settings.topics
    recorder = StatusRecorder(deployment.bootstrap, topics, deployment.host_of).start()
    try:
        if not recorder.wait_all_active(120):
            raise RunError("not every topic got an active node within 120 s")
        load_s = schedule_settings.seconds + settings.tail_s
        sends_path = out / "sends.jsonl"
        nemesis, load_started = _load_under_faults(
            settings, deployment, recorder, schedule, load_s, sends_path
        )
        sends = _read_sends(sends_path)
        delivered, stuck = _delivered_and_stuck(settings, deployment, sends)
        logs = {
            h: deployment.log_path(h).read_text(errors="replace") for h in deployment.node_hosts
        }
        metrics = {h: deployment.metrics_text(h) for h in deployment.node_hosts}
        if inspect is not None:
            inspect(deployment, sends)
    finally:
        recorder.stop()
    checks = _checks(settings, nemesis, recorder, sends, delivered, stuck, logs, metrics)
    results: dict[str, Any] = {
        "ok": all(c.ok for c in checks),
        "seed": settings.seed,
        "topics": list(topics),
        "node_hosts": settings.node_hosts,
        "rate": settings.rate,
        "lease_s": settings.lease_s,
        "load_seconds": schedule_settings.seconds + settings.tail_s,
        "load_started": load_started,
        "timeline_seconds": time.time() - load_started,
        "wall_s": time.monotonic() - wall,
        "schedule": [f.to_dict() for f in schedule],
        "faults": [a.to_dict() for a in nemesis.applied],
        "takeovers": [t.to_dict() for t in recorder.takeovers],
        "checks": [c.to_dict() for c in checks],
        "sends": sends,
        "delivery_times": {t: d.timestamps for t, d in delivered.items()},
        "producers_replaced": {h: logs[h].count("going on with a new producer") for h in logs},
        "metrics": _metric_totals(metrics),
    }
    write_results(out, results)
    plot_timeline(out, results)
    (out / "summary.md").write_text(summary_markdown(results), encoding="utf-8")
    return results


def _load_under_faults(
    settings: NemesisSettings,
    deployment: Deployment,
    recorder: StatusRecorder,
    schedule: list[Fault],
    load_s: float,
    sends_path: Path,
) -> tuple[Nemesis, float]:
    """Start the sender, apply ``schedule`` while it sends, heal, wait for it to end;
    the nemesis and when the load started (wall clock)."""
    topics = settings.topics
    sender_args = {
        "--bootstrap-server": deployment.bootstrap,
        "--topics": ",".join(topics),
        "--rate": f"{settings.rate:g}",
        "--seconds": f"{load_s:g}",
        "--seed": str(settings.seed),
        "--out": str(sends_path),
    }
    sender = deployment.run_client(
        [
            "atomickafka.evaluation.nemesis.sender",
            *(x for kv in sender_args.items() for x in kv),
        ],
        "sender.log",
    )
    load_started, started = time.time(), time.monotonic()
    nemesis = Nemesis(deployment, recorder)
    try:
        nemesis.run(schedule, started, started + load_s)
    finally:
        nemesis.heal_everything()
    if sender.wait(load_s + 300) != 0:
        raise RunError(f"the sender failed (exit {sender.returncode}); see sender.log")
    return nemesis, load_started


def _delivered_and_stuck(
    settings: NemesisSettings, deployment: Deployment, sends: list[dict[str, Any]]
) -> tuple[dict[str, Delivered], list[str]]:
    """Wait for the sends, then probe every topic (the probes join ``sends``); what was
    delivered, and the topics the probes did not get through."""
    topics = settings.topics
    delivered = wait_delivered(deployment.bootstrap, sends, topics, settings.settle_s)
    probes = _probe(deployment.bootstrap, topics)
    after = wait_delivered(deployment.bootstrap, probes, topics, 90)
    stuck = [
        t
        for t in topics
        if not {p["id"] for p in probes} <= {m.messageID for m in after[t].messages}
    ]
    sends += probes
    delivered = wait_delivered(deployment.bootstrap, sends, topics, 30)
    return delivered, stuck


def _checks(
    settings: NemesisSettings,
    nemesis: Nemesis,
    recorder: StatusRecorder,
    sends: list[dict[str, Any]],
    delivered: dict[str, Delivered],
    stuck: list[str],
    logs: dict[str, str],
    metrics: dict[str, str],
) -> list[Verdict]:
    """The run's verdicts: order, plain consumers, not stuck, takeovers, fences, kinds."""
    kinds = {a.fault.kind for a in nemesis.applied}
    checks: list[Verdict] = [
        check_order(sends, delivered),
        check_plain_consumers(delivered),
        Verdict(
            "not-stuck",
            not stuck,
            f"stuck: {', '.join(stuck)}" if stuck else f"{PROBES} probes delivered at every topic",
        ),
        check_takeovers(
            nemesis.applied,
            recorder.takeovers,
            logs,
            metrics,
            settings.lease_s,
            settings.takeover_margin_s,
        ),
        check_fences(nemesis.applied, logs, metrics),
        Verdict(
            "every-kind",
            kinds == set(FaultKind),
            f"{len(kinds)} of {len(FaultKind)} kinds applied"
            + ("" if kinds == set(FaultKind) else f"; missing {sorted(set(FaultKind) - kinds)}"),
        ),
    ]
    return checks


def _metric_totals(metrics: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per host, the totals of its takeovers, fencings and cluster restarts."""
    return {
        h: {
            name: metric_total(metrics[h], f"atomickafka_{name}_total")
            for name in ("node_takeovers", "node_fenced", "cluster_restarts")
        }
        for h in metrics
    }
