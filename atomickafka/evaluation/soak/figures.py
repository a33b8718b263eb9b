"""The soak's figures from repeated measurements: the spread of a timing over repeats,
and the project's rule for the nodes' default delivery mode.

The rule (issue 16): exactly-once stays the default unless, at 50 % multicast, it costs
more than :data:`MAX_CAPACITY_COST` of the capacity at-least-once reaches, or pushes the
multicast p99 at 1,000 msg/s above :data:`MAX_MULTICAST_P99_MS`. "Pushes above" is read
as: exactly-once is above the limit where at-least-once is not; when both are above,
the delivery mode is not what puts it there, and :class:`ModeVerdict` says so apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

__all__ = [
    "MAX_CAPACITY_COST",
    "MAX_MULTICAST_P99_MS",
    "ModeFigures",
    "ModeVerdict",
    "Spread",
    "judge_modes",
    "spread",
]

#: Largest share of at-least-once's capacity exactly-once may cost and stay the default.
MAX_CAPACITY_COST: Final = 0.25
#: Largest multicast p99 (ms) at 1,000 msg/s exactly-once may have and stay the default.
MAX_MULTICAST_P99_MS: Final = 60.0


@dataclass(frozen=True, slots=True)
class Spread:
    """A timing measured several times: every value (in the order measured), their
    median and their largest."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median (NaN when nothing was measured)."""
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def max(self) -> float:
        """The largest value (NaN when nothing was measured)."""
        return max(self.values) if self.values else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        rounded = [round(v, 3) for v in self.values]
        if not self.values:
            return {"values": rounded, "median": None, "max": None}
        return {"values": rounded, "median": round(self.median, 3), "max": round(self.max, 3)}


def spread(values: Iterable[float | None]) -> Spread:
    """The :class:`Spread` of the values that were measured (``None``: not measured)."""
    return Spread(tuple(v for v in values if v is not None))


@dataclass(frozen=True, slots=True)
class ModeFigures:
    """One delivery mode's bench figures: capacity unpaced, latency paced (ms)."""

    capacity_msg_s: float
    p50_ms: float
    p99_ms: float
    multicast_p99_ms: float

    @classmethod
    def median_of(cls, runs: Sequence[ModeFigures]) -> ModeFigures:
        """Each figure's median over ``runs`` (one run: itself)."""
        if not runs:
            raise ValueError("no runs to take the median of")
        return cls(
            statistics.median(r.capacity_msg_s for r in runs),
            statistics.median(r.p50_ms for r in runs),
            statistics.median(r.p99_ms for r in runs),
            statistics.median(r.multicast_p99_ms for r in runs),
        )

    def to_dict(self) -> dict[str, float]:
        """Plain data for JSON."""
        return {k: round(v, 2) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class ModeVerdict:
    """What the rule says of exactly-once (``eos``) against at-least-once (``alo``)."""

    #: ``1 - eos capacity / alo capacity`` (negative: exactly-once moved more).
    capacity_cost: float
    capacity_clause_broken: bool
    #: Exactly-once's multicast p99 is above the limit and at-least-once's is not.
    latency_clause_broken: bool
    #: Exactly-once's multicast p99 is above the limit, whatever at-least-once's.
    eos_p99_above_limit: bool
    alo_p99_above_limit: bool

    @property
    def keeps_default(self) -> bool:
        """Exactly-once stays the default: neither clause of the rule is broken."""
        return not (self.capacity_clause_broken or self.latency_clause_broken)

    def summary(self) -> str:
        """One paragraph: the verdict and why."""
        cost = f"exactly-once costs {self.capacity_cost:.1%} of at-least-once's capacity"
        limit = f"{MAX_CAPACITY_COST:.0%}"
        parts = [f"{cost} ({'over' if self.capacity_clause_broken else 'within'} {limit})"]
        p99 = f"{MAX_MULTICAST_P99_MS:g} ms"
        if self.latency_clause_broken:
            parts.append(f"its multicast p99 is above {p99} where at-least-once's is not")
        elif self.eos_p99_above_limit:
            parts.append(
                f"both modes' multicast p99 are above {p99}, so the mode does not push it there"
            )
        else:
            parts.append(f"its multicast p99 is within {p99}")
        verdict = (
            "exactly-once stays the default"
            if self.keeps_default
            else "the rule says exactly-once should not stay the default"
        )
        return f"{'; '.join(parts)}: {verdict}."

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (with the verdict)."""
        data = asdict(self)
        data["capacity_cost"] = round(self.capacity_cost, 4)
        data["keeps_default"] = self.keeps_default
        data["summary"] = self.summary()
        return data


def judge_modes(
    eos: ModeFigures,
    alo: ModeFigures,
    *,
    max_capacity_cost: float = MAX_CAPACITY_COST,
    max_multicast_p99_ms: float = MAX_MULTICAST_P99_MS,
) -> ModeVerdict:
    """The rule applied to exactly-once's and at-least-once's figures."""
    cost = 1 - eos.capacity_msg_s / alo.capacity_msg_s if alo.capacity_msg_s > 0 else 0.0
    eos_above = eos.multicast_p99_ms > max_multicast_p99_ms
    alo_above = alo.multicast_p99_ms > max_multicast_p99_ms
    return ModeVerdict(
        capacity_cost=cost,
        capacity_clause_broken=cost > max_capacity_cost,
        latency_clause_broken=eos_above and not alo_above,
        eos_p99_above_limit=eos_above,
        alo_p99_above_limit=alo_above,
    )
