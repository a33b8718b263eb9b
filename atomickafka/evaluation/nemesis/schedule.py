"""The nemesis's schedule: which fault, when, for how long, drawn from a seed.

A schedule is a list of :class:`Fault`, one at a time with a quiet gap after each (so
that every check can say which fault a symptom followed): first one fault of every kind
in an order the seed draws (a short run sees each kind once), then kinds drawn at
random until the run's time is used up. Everything a schedule says -- kinds, times,
durations, delays and losses, which brokers a client loses, which topic's node is
paused or killed -- is a function of the seed and the settings, so a failing run is run
again with the same seed. What depends on the cluster's state when the fault starts is
resolved then by a fixed rule (:mod:`~atomickafka.evaluation.nemesis.faults`): the node
host cut is the one holding the most active roles, the broker isolated is the leader of
the named topic's input log, a paused or killed node is the topic's active instance.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Fault", "FaultKind", "ScheduleSettings", "draw_schedule", "schedule_seconds"]


class FaultKind(StrEnum):
    """The faults the nemesis injects (docs/soak.md, "Network faults")."""

    #: A node host loses every broker (its link down): its standbys elsewhere take over,
    #: and it is fenced when the link returns.
    NODE_HOST_CUT = "node-host-cut"
    #: The client host loses some brokers (blackhole routes): the copies of a multicast
    #: to those brokers' partitions wait, the others are written.
    CLIENT_CUT = "client-cut"
    #: The broker leading a topic's input log is cut off (a minority of one): leaders
    #: and coordinators move to the other two.
    BROKER_ISOLATED = "broker-isolated"
    #: A node host's link goes down and up every ``period_s``.
    FLAPPING_LINK = "flapping-link"
    #: A node host's traffic to the brokers is delayed and loses segments (the proxy).
    SLOW_LOSSY_LINKS = "slow-lossy-links"
    #: A topic's active node is paused (SIGSTOP) past its lease, then resumed: a zombie.
    NODE_PAUSED = "node-paused"
    #: A topic's active node is SIGKILLed (the supervisor restarts it).
    NODE_KILLED = "node-killed"


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` from ``start_s`` (seconds after the load started) for
    ``duration_s``; ``params`` say how (see :func:`draw_schedule`)."""

    kind: FaultKind
    start_s: float
    duration_s: float
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        """When it is healed."""
        return self.start_s + self.duration_s

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "kind": self.kind.value,
            "start_s": self.start_s,
            "duration_s": self.duration_s,
            "params": self.params,
        }


@dataclass(frozen=True)
class ScheduleSettings:
    """What a schedule is drawn for: the run's time, the topics and brokers, the lease."""

    seconds: float
    topics: tuple[str, ...]
    brokers: int = 3
    #: ``--takeover-after``: faults that must outlast a lease are longer than it.
    lease_s: float = 3.0
    #: Quiet time after each fault, before the next.
    gap_s: float = 3.0
    #: Quiet time before the first fault (the load has started).
    lead_s: float = 3.0


def _fault(kind: FaultKind, start: float, s: ScheduleSettings, rng: random.Random) -> Fault:
    lease = s.lease_s
    params: dict[str, Any] = {}
    if kind is FaultKind.NODE_HOST_CUT:
        duration = round(lease + rng.uniform(3, 6), 1)
    elif kind is FaultKind.CLIENT_CUT:
        lost = rng.randint(1, s.brokers - 1)
        params["brokers"] = sorted(rng.sample(range(1, s.brokers + 1), lost))
        duration = round(rng.uniform(3, 6), 1)
    elif kind is FaultKind.BROKER_ISOLATED:
        params["topic"] = rng.choice(s.topics)
        duration = round(rng.uniform(10, 14), 1)
    elif kind is FaultKind.FLAPPING_LINK:
        params["period_s"] = round(rng.uniform(0.5, 1.5), 2)
        duration = round(rng.uniform(5, 8), 1)
    elif kind is FaultKind.SLOW_LOSSY_LINKS:
        params["delay_ms"] = rng.randint(20, 150)
        params["jitter_ms"] = rng.randint(0, 50)
        params["loss"] = round(rng.uniform(0.02, 0.1), 3)
        duration = round(rng.uniform(6, 10), 1)
    elif kind is FaultKind.NODE_PAUSED:
        params["topic"] = rng.choice(s.topics)
        duration = round(lease + rng.uniform(2, 4), 1)
    else:  # NODE_KILLED: instantaneous; the gap after it is the restart's
        params["topic"] = rng.choice(s.topics)
        duration = 0.0
    return Fault(kind, round(start, 1), duration, params)


def draw_schedule(settings: ScheduleSettings, seed: int) -> list[Fault]:
    """The faults of a run of ``settings.seconds`` from ``seed``: every kind once (in an
    order the seed draws) as long as the time allows, then kinds drawn at random; the
    last fault ends by ``settings.seconds``. The same seed and settings give the same
    schedule."""
    rng = random.Random(f"nemesis-{seed}")
    kinds = list(FaultKind)
    rng.shuffle(kinds)
    out: list[Fault] = []
    at = settings.lead_s
    while True:
        kind = kinds.pop(0) if kinds else rng.choice(list(FaultKind))
        fault = _fault(kind, at, settings, rng)
        if fault.end_s > settings.seconds:
            return out
        out.append(fault)
        at = fault.end_s + settings.gap_s


def schedule_seconds(settings: ScheduleSettings, seed: int) -> float:
    """The shortest run whose schedule holds one fault of every kind, for ``seed``."""
    long = ScheduleSettings(
        10_000.0,
        settings.topics,
        settings.brokers,
        settings.lease_s,
        settings.gap_s,
        settings.lead_s,
    )
    every = draw_schedule(long, seed)[: len(FaultKind)]
    return every[-1].end_s
