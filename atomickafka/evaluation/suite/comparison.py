"""What a run may be compared with in the 2019 thesis, and how.

The thesis's clients sent 20,000 messages each and waited 5 ms after every send: its
runs were *paced* (at most 400 messages/s offered), so none could take less than
100 s. Two rules follow, and the report keeps both:

- **Like with like.** A run paced as the thesis's (``--pace-ms 5``) is compared with
  the thesis's run of its scenario; an unpaced run (clients send as fast as they can)
  measures *capacity*, and its comparison with the thesis's paced runs is labelled as
  such, apart; a run at another pace says which.
- **Rates when the sizes differ.** A run time is comparable only between runs of the
  same size (the thesis's 40,000 messages). Otherwise the speed-up comes from rates:
  our deliveries per second against the thesis's (its tables' per-node deliveries/s,
  added up), and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from atomickafka.evaluation.suite.results import RunInfo, RunMetrics
from atomickafka.evaluation.suite.thesis import (
    THESIS_CLIENTS,
    THESIS_MESSAGES,
    THESIS_PACE_MS,
    THESIS_RUNS,
    ThesisRun,
)

__all__ = ["Pacing", "ThesisComparison", "compare_with_thesis", "pacing_of"]


class Pacing(StrEnum):
    """How a run's clients sent, as against the thesis's."""

    AS_THESIS = "paced as the thesis"
    UNPACED = "unpaced"
    OTHER = "other pace"

    def describe(self, pace_ms: float) -> str:
        """A short phrase for tables and plots: ``paced 5 ms, as the thesis``,
        ``unpaced (capacity)``, ``paced 2 ms``."""
        if self is Pacing.AS_THESIS:
            return f"paced {THESIS_PACE_MS} ms, as the thesis"
        if self is Pacing.UNPACED:
            return "unpaced (capacity)"
        return f"paced {pace_ms:g} ms"

    def short(self, pace_ms: float) -> str:
        """``unpaced`` or ``paced 5 ms``."""
        return "unpaced" if self is Pacing.UNPACED else f"paced {pace_ms:g} ms"

    def heading(self, pace_ms: float) -> str:
        """The heading of the comparison with the thesis for runs of this pacing."""
        if self is Pacing.AS_THESIS:
            return f"Against the 2019 thesis, like for like: paced {THESIS_PACE_MS} ms, as it was"
        if self is Pacing.UNPACED:
            return "Capacity against the 2019 thesis: our unpaced runs, its paced runs"
        return f"Against the 2019 thesis: ours paced {pace_ms:g} ms, its {THESIS_PACE_MS} ms"

    def caveat(self) -> str:
        """What the comparison does not say."""
        if self is Pacing.AS_THESIS:
            offered = THESIS_CLIENTS * 1000 / THESIS_PACE_MS
            return (
                f"Both offered the same load: {THESIS_CLIENTS} clients, each waiting "
                f"{THESIS_PACE_MS} ms after every send (at most {offered:,.0f} messages/s), "
                f"so a run of the thesis's size takes at least {THESIS_MESSAGES / offered:,.0f} s."
            )
        if self is Pacing.UNPACED:
            return (
                "Our clients sent as fast as they could; the thesis's waited "
                f"{THESIS_PACE_MS} ms after every send, so its figures are those of a "
                "paced load and ours are capacity. For the like-for-like comparison, run "
                f"the suite with `--pace-ms {THESIS_PACE_MS}`."
            )
        return (
            f"The thesis's clients waited {THESIS_PACE_MS} ms after every send; a "
            "different pace offers a different load."
        )


def pacing_of(pace_ms: float) -> Pacing:
    """The pacing of a run whose clients waited ``pace_ms`` after every send."""
    if pace_ms <= 0:
        return Pacing.UNPACED
    if math.isclose(pace_ms, THESIS_PACE_MS):
        return Pacing.AS_THESIS
    return Pacing.OTHER


@dataclass(frozen=True, slots=True)
class ThesisComparison:
    """One of our runs beside the thesis's run of the same scenario."""

    scenario: str
    thesis: ThesisRun
    pacing: Pacing
    messages: int
    run_time_s: float
    messages_per_s: float
    deliveries_per_s: float

    @property
    def same_size(self) -> bool:
        """Our run sent the thesis's 40,000 messages: run times are comparable."""
        return self.messages == THESIS_MESSAGES

    @property
    def run_time_factor(self) -> float | None:
        """The thesis's run time over ours, only when the runs are of the same size."""
        if not self.same_size or self.run_time_s <= 0:
            return None
        return self.thesis.run_time_s / self.run_time_s

    @property
    def deliveries_factor(self) -> float | None:
        """Our deliveries per second over the thesis's (all nodes): valid at any size."""
        theirs = self.thesis.deliveries_per_s
        return self.deliveries_per_s / theirs if theirs > 0 else None


def compare_with_thesis(info: RunInfo, metrics: RunMetrics) -> ThesisComparison | None:
    """Our run beside the thesis's run of its scenario, or ``None`` when the thesis
    has no such scenario."""
    thesis = THESIS_RUNS.get(info.scenario)
    if thesis is None:
        return None
    return ThesisComparison(
        scenario=info.scenario,
        thesis=thesis,
        pacing=pacing_of(info.pace_ms),
        messages=metrics.messages,
        run_time_s=metrics.run_time_s,
        messages_per_s=metrics.messages_per_s,
        deliveries_per_s=metrics.deliveries_per_s,
    )
