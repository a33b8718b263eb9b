"""Resident memory of processes over a long run: reading it, and summing it up.

The soak (``eval/soak.py``) samples each node's resident set size (``VmRSS`` in
``/proc/<pid>/status``) with the number of messages delivered so far. The claim it
checks is that a node's memory does not grow with what it has delivered: the engine
remembers settled message ids for a bounded window of log time (docs/DESIGN.md §4.13),
so once that window is full, memory is flat. :func:`summarise_memory` reads each node's
samples as start (the first sample after the warm-up, once the window is full),
middle and end, and fits a line through the samples after the warm-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "FLAT_TOLERANCE",
    "MemorySample",
    "NodeMemory",
    "least_squares_slope",
    "parse_vm_rss_kib",
    "read_rss_mib",
    "summarise_memory",
]

#: A node's memory counts as flat when it grew by at most this share of its start,
#: both from start to end and as the fitted line projects over 1,000,000 more messages.
FLAT_TOLERANCE: Final = 0.10


def parse_vm_rss_kib(status_text: str) -> int | None:
    """The ``VmRSS`` of a ``/proc/<pid>/status`` text, in KiB (``None`` if absent, as
    for a zombie)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1])
            return None
    return None


def read_rss_mib(pid: int) -> float | None:
    """Process ``pid``'s resident memory in MiB now, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            kib = parse_vm_rss_kib(status.read())
    except OSError:
        return None
    return None if kib is None else kib / 1024


@dataclass(frozen=True, slots=True)
class MemorySample:
    """One reading: seconds since the load started, messages delivered at every
    destination so far, and each node's RSS in MiB (by status key; a node whose process
    could not be read is left out)."""

    elapsed_s: float
    delivered: int
    rss_mib: Mapping[str, float]
    load_1m: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "elapsed_s": round(self.elapsed_s, 2),
            "delivered": self.delivered,
            "rss_mib": {k: round(v, 2) for k, v in sorted(self.rss_mib.items())},
            "load_1m": round(self.load_1m, 2),
        }


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """One node's memory over the soak (MiB): at the start (after the warm-up), in the
    middle and at the end (by messages delivered), its largest, the messages delivered
    at each of the three, and the fitted growth after the warm-up."""

    node: str
    start_mib: float
    middle_mib: float
    end_mib: float
    max_mib: float
    start_delivered: int
    middle_delivered: int
    end_delivered: int
    #: Slope of the least-squares line of RSS against messages delivered, after the
    #: warm-up, in MiB per 100,000 messages.
    growth_mib_per_100k: float

    @property
    def flat(self) -> bool:
        """Grown by at most :data:`FLAT_TOLERANCE` of the start, from start to end and
        as projected over 1,000,000 more messages."""
        allowed = FLAT_TOLERANCE * self.start_mib
        projected = self.growth_mib_per_100k * 10
        return self.end_mib - self.start_mib <= allowed and projected <= allowed

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (with :attr:`flat`)."""
        return {
            "node": self.node,
            "start_mib": round(self.start_mib, 1),
            "middle_mib": round(self.middle_mib, 1),
            "end_mib": round(self.end_mib, 1),
            "max_mib": round(self.max_mib, 1),
            "start_delivered": self.start_delivered,
            "middle_delivered": self.middle_delivered,
            "end_delivered": self.end_delivered,
            "growth_mib_per_100k": round(self.growth_mib_per_100k, 3),
            "flat": self.flat,
        }


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The slope of the least-squares line through ``(xs, ys)``; 0 with fewer than two
    distinct ``xs``."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} xs but {len(ys)} ys")
    n = len(xs)
    if n < 2:
        return 0.0
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var


def summarise_memory(samples: Sequence[MemorySample], warmup_s: float) -> list[NodeMemory]:
    """Each node's :class:`NodeMemory` from ``samples`` (in time order): the start is
    its first sample at or after ``warmup_s`` (its last one if none is that late), the
    middle the sample nearest halfway between start and end in messages delivered."""
    nodes = sorted({node for sample in samples for node in sample.rss_mib})
    out = []
    for node in nodes:
        mine = [s for s in samples if node in s.rss_mib]
        after = [s for s in mine if s.elapsed_s >= warmup_s] or mine[-1:]
        start, end = after[0], after[-1]
        halfway = (start.delivered + end.delivered) / 2
        middle = min(after, key=lambda s: abs(s.delivered - halfway))
        slope = least_squares_slope(
            [float(s.delivered) for s in after], [s.rss_mib[node] for s in after]
        )
        out.append(
            NodeMemory(
                node,
                start.rss_mib[node],
                middle.rss_mib[node],
                end.rss_mib[node],
                max(s.rss_mib[node] for s in mine),
                start.delivered,
                middle.delivered,
                end.delivered,
                slope * 100_000,
            )
        )
    return out
