"""Applying a scheduled fault to the deployment, and healing it.

:meth:`Nemesis.run` walks the schedule in time, applies each fault, heals it at its
end (a flapping link is toggled meanwhile) and records what really happened when: a
:class:`Applied` with the fault's resolved target and wall-clock times. Targets that
depend on the cluster's state are resolved when the fault starts, by a fixed rule:

- a node host cut, a flapping link and slow links hit the node host holding the most
  active roles (ties: the first host), so that a takeover is what the fault tests;
- a broker isolated is the leader of the named topic's input log;
- a node paused or killed is the named topic's active instance;
- a client cut blackholes the named brokers in the client's host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from atomickafka.evaluation.nemesis.deployment import BROKER_HOSTS, CLIENT_HOST, Deployment
from atomickafka.evaluation.nemesis.observe import StatusRecorder
from atomickafka.evaluation.nemesis.schedule import Fault, FaultKind
from atomickafka.kafka.admin import admin_client
from atomickafka.kafka.topics import Layout, input_topic

__all__ = ["Applied", "Nemesis"]


@dataclass
class Applied:
    """A fault as it happened: the schedule's entry, its target, and wall times."""

    fault: Fault
    target: str | None
    started: float
    healed: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            **self.fault.to_dict(),
            "target": self.target,
            "started": self.started,
            "healed": self.healed,
            "detail": self.detail,
        }


class Nemesis:
    """Runs a schedule against a :class:`Deployment` (see the module)."""

    def __init__(self, deployment: Deployment, recorder: StatusRecorder) -> None:
        self.deployment = deployment
        self.recorder = recorder
        self.applied: list[Applied] = []

    def run(self, schedule: Sequence[Fault], started: float, stop_at: float) -> None:
        """Apply ``schedule`` from ``started`` (a monotonic time: the load's start),
        each fault at its ``start_s``; return once the last is healed (or ``stop_at``)."""
        for fault in schedule:
            self._sleep_until(started + fault.start_s, stop_at)
            if time.monotonic() >= stop_at:
                return
            applied = self._apply(fault)
            self.applied.append(applied)
            end = started + fault.end_s
            if fault.kind is FaultKind.FLAPPING_LINK and applied.target is not None:
                self._flap(applied.target, float(fault.params["period_s"]), min(end, stop_at))
            else:
                self._sleep_until(end, stop_at)
            self._heal(applied)
            applied.healed = time.time()

    def heal_everything(self) -> None:
        """Every link up, nothing blackholed, no proxy fault, every process running."""
        self.deployment.lab.heal_all()
        if self.deployment.proxy is not None:
            self.deployment.proxy.clear()
        self.deployment.resume_everything()

    @staticmethod
    def _sleep_until(when: float, stop_at: float) -> None:
        while (left := min(when, stop_at) - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))

    # ------------------------------------------------------------------ targets

    def _busiest_host(self) -> str:
        hosts = self.deployment.node_hosts
        return max(hosts, key=lambda h: (len(self.recorder.active_on(h)), -hosts.index(h)))

    def _leader_host(self, topic: str) -> str | None:
        admin = admin_client(self.deployment.bootstrap)
        name = input_topic(topic, Layout.SPLIT)
        with contextlib.suppress(Exception):
            meta = admin.list_topics(name, timeout=10).topics[name].partitions[0]
            return self.deployment.brokers.host_of(meta.leader)
        return None

    # ------------------------------------------------------------------ faults

    def _apply(self, fault: Fault) -> Applied:
        d, kind = self.deployment, fault.kind
        now = time.time()
        if kind is FaultKind.NODE_HOST_CUT:
            host = self._busiest_host()
            applied = Applied(fault, host, now, detail={"active": self.recorder.active_on(host)})
            d.lab.cut(host)
        elif kind is FaultKind.CLIENT_CUT:
            lost = [BROKER_HOSTS[n - 1] for n in fault.params["brokers"]]
            applied = Applied(fault, CLIENT_HOST, now, detail={"brokers": lost})
            d.lab.block(CLIENT_HOST, lost)
        elif kind is FaultKind.BROKER_ISOLATED:
            broker = self._leader_host(str(fault.params["topic"])) or BROKER_HOSTS[0]
            applied = Applied(fault, broker, now)
            d.lab.cut(broker)
        elif kind is FaultKind.FLAPPING_LINK:
            applied = Applied(fault, self._busiest_host(), now)
        elif kind is FaultKind.SLOW_LOSSY_LINKS:
            host = self._busiest_host()
            applied = Applied(fault, host, now, detail={"active": self.recorder.active_on(host)})
            assert d.proxy is not None
            p = fault.params
            d.proxy.faults(host, p["delay_ms"], p["jitter_ms"], p["loss"])
        else:  # a node paused or killed: the topic's active instance
            topic = str(fault.params["topic"])
            pid = self.recorder.active_pid(topic)
            applied = Applied(fault, None if pid is None else d.host_of(pid), now)
            applied.detail = {"topic": topic, "pid": pid}
            if pid is not None:
                sig = signal.SIGSTOP if kind is FaultKind.NODE_PAUSED else signal.SIGKILL
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        return applied

    def _flap(self, host: str, period_s: float, until: float) -> None:
        lab, flips = self.deployment.lab, 0
        while time.monotonic() < until:
            (lab.cut if flips % 2 == 0 else lab.heal)(host)
            flips += 1
            time.sleep(min(period_s, max(0.0, until - time.monotonic())))
        lab.heal(host)

    def _heal(self, applied: Applied) -> None:
        d, kind, target = self.deployment, applied.fault.kind, applied.target
        if kind in (FaultKind.NODE_HOST_CUT, FaultKind.BROKER_ISOLATED) and target:
            d.lab.heal(target)
        elif kind is FaultKind.CLIENT_CUT:
            d.lab.unblock(CLIENT_HOST)
        elif kind is FaultKind.SLOW_LOSSY_LINKS and target and d.proxy is not None:
            d.proxy.faults(target)
        elif kind is FaultKind.NODE_PAUSED:
            pid = applied.detail.get("pid")
            if isinstance(pid, int):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
