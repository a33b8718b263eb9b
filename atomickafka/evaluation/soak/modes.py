"""Phase 4 of the soak: the nodes' two delivery modes, measured by ``atomickafka bench``
in the same invocation.

Each repeat runs the bench (:func:`~atomickafka.evaluation.bench.command.run_bench`, at 50 %
multicast, no baseline) once with exactly-once nodes and once with at-least-once
nodes, alternating which goes first. The bench's unpaced run gives the capacity
(messages/s delivered), its paced run (``paced_rate``, 1,000 msg/s) the latency; each
figure's median over the repeats goes to the rule
(:func:`~atomickafka.evaluation.soak.figures.judge_modes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from atomickafka.evaluation.bench.command import BenchResult, BenchSetup, run_bench
from atomickafka.evaluation.soak.common import load_average
from atomickafka.evaluation.soak.figures import ModeFigures, judge_modes
from atomickafka.kafka.connection import Connection

__all__ = ["ModeSettings", "run_modes"]

_MODES = {"exactly-once": True, "at-least-once": False}


@dataclass(frozen=True, slots=True)
class ModeSettings:
    """The bench's size and shape for the comparison (``fanout`` ``None``: every
    multicast to every topic, the bench's default)."""

    messages: int = 20_000
    paced_rate: float = 1000.0
    share: float = 0.5
    topics: int = 5
    fanout: tuple[int, int] | None = None
    record_size: int = 200
    repeats: int = 2


def _figures(results: list[BenchResult], share: float) -> tuple[ModeFigures, dict[str, Any]]:
    name = f"amcast-{round(share * 100)}%"
    unpaced = next(r for r in results if r.name == name)
    paced = next(r for r in results if r.name == f"{name}@half")
    multicast_p99 = paced.multicast_p99_ms if paced.multicast_p99_ms is not None else paced.p99_ms
    figures = ModeFigures(unpaced.messages_per_s, paced.p50_ms, paced.p99_ms, multicast_p99)
    rows = {"unpaced": unpaced.to_dict(), "paced": paced.to_dict()}
    for row in rows.values():
        row.pop("cost", None)  # the bench's CPU accounting: not what is compared here
    complete = unpaced.delivered_ok and paced.delivered_ok
    return figures, {"figures": figures.to_dict(), "complete": complete, "bench": rows}


def run_modes(connection: Connection, settings: ModeSettings) -> dict[str, Any]:
    """Bench both modes ``settings.repeats`` times on ``connection``'s Kafka; return
    every run, the medians and the rule's verdict."""
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in _MODES}
    figures: dict[str, list[ModeFigures]] = {mode: [] for mode in _MODES}
    order = list(_MODES)
    load_before = load_average()
    for repeat in range(settings.repeats):
        for mode in order if repeat % 2 == 0 else reversed(order):
            results = run_bench(
                BenchSetup(connection, exactly_once=_MODES[mode]),
                messages=settings.messages,
                record_size=settings.record_size,
                shares=(settings.share,),
                warmup=repeat == 0 and mode == order[0],
                paced_rate=settings.paced_rate,
                low_rate=None,  # one paced run, at paced_rate
                topics=settings.topics,
                fanout=settings.fanout,
            )
            found, row = _figures(results, settings.share)
            row["load_1m"] = load_average()[0]
            figures[mode].append(found)
            runs[mode].append(row)
    eos = ModeFigures.median_of(figures["exactly-once"])
    alo = ModeFigures.median_of(figures["at-least-once"])
    return {
        "settings": asdict(settings),
        "runs": runs,
        "median": {"exactly-once": eos.to_dict(), "at-least-once": alo.to_dict()},
        "verdict": judge_modes(eos, alo).to_dict(),
        "load_before": load_before,
        "load_after": load_average(),
    }
