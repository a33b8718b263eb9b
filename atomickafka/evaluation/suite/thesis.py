"""The 2019 thesis's figures (tables 5.1-5.6, run times), as data (DESIGN.md §6).

Setup there: 5 topics with one node each on 5 machines, 2 clients of 20,000 messages
each writing to topics 1 and 3, a 5 ms wait after every send, a Kafka of 3 brokers and
ZooKeeper on 4 more machines (12 shared quad-core Xeon E5606 machines, gigabit LAN).
"Incoming" counted a node's own Delivery records too (one shared topic per node).
Nothing checked the delivered order, and no latency was recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "THESIS_CLIENTS",
    "THESIS_MESSAGES",
    "THESIS_PACE_MS",
    "THESIS_RUNS",
    "THESIS_SETUP",
    "ThesisNode",
    "ThesisRun",
]


@dataclass(frozen=True, slots=True)
class ThesisNode:
    """One row of a thesis table: a node's run averages in messages per second."""

    incoming: float
    outgoing: float
    deliveries: float


@dataclass(frozen=True, slots=True)
class ThesisRun:
    """One thesis scenario: its table (nodes 1-5, in order) and its run time."""

    table: str
    nodes: tuple[ThesisNode, ...]
    run_time_s: float

    @property
    def messages_per_s(self) -> float:
        """Messages sent over the run time (both clients' 40,000)."""
        return THESIS_MESSAGES / self.run_time_s

    @property
    def deliveries_per_s(self) -> float:
        """The five nodes' deliveries per second, added up."""
        return sum(n.deliveries for n in self.nodes)


def _nodes(*rows: tuple[float, float, float]) -> tuple[ThesisNode, ...]:
    return tuple(ThesisNode(*row) for row in rows)


#: Messages per scenario: 2 clients x 20,000.
THESIS_CLIENTS: Final = 2
THESIS_MESSAGES: Final = 40_000
#: The clients' wait after every send.
THESIS_PACE_MS: Final = 5

THESIS_RUNS: Final[dict[str, ThesisRun]] = {
    "baseline": ThesisRun(
        "5.1",
        _nodes(
            (180.8, 90.7, 90.9),
            (198.3, 99.4, 99.1),
            (156.5, 78.3, 78.1),
            (166.6, 83.3, 83.0),
            (201.0, 93.5, 93.4),
        ),
        270,
    ),
    "90-10": ThesisRun(
        "5.2",
        _nodes(
            (57.6, 42.9, 18.0),
            (15.5, 11.7, 3.7),
            (65.6, 44.6, 17.6),
            (15.7, 11.9, 3.8),
            (15.9, 12.1, 3.9),
        ),
        810,
    ),
    "80-20": ThesisRun(
        "5.3",
        _nodes(
            (62.3, 52.9, 13.3),
            (19.2, 15.0, 3.7),
            (39.0, 37.3, 7.7),
            (19.4, 15.3, 3.8),
            (19.5, 15.3, 3.8),
        ),
        1185,
    ),
    "70-30": ThesisRun(
        "5.4",
        _nodes(
            (50.9, 53.5, 9.4),
            (23.8, 18.8, 4.8),
            (45.4, 49.6, 8.5),
            (23.9, 18.9, 4.8),
            (24.0, 19.0, 4.8),
        ),
        1215,
    ),
    "60-40": ThesisRun(
        "5.5",
        _nodes(
            (59.3, 69.7, 9.0),
            (31.6, 25.5, 5.8),
            (51.1, 62.4, 7.9),
            (31.8, 25.8, 5.8),
            (32.2, 26.1, 5.9),
        ),
        1395,
    ),
    "50-50": ThesisRun(
        "5.6",
        _nodes(
            (65.7, 76.5, 10.1),
            (30.7, 24.3, 5.4),
            (35.3, 51.6, 5.3),
            (30.9, 24.9, 5.5),
            (31.0, 24.6, 5.4),
        ),
        1980,
    ),
}

THESIS_SETUP: Final = (
    "2019 thesis: 5 node machines, Kafka of 3 brokers + ZooKeeper on 4 more, 12 shared "
    "quad-core Xeon E5606 (2.13 GHz, 16 GB) machines on gigabit LAN; 2 clients x 20,000 "
    "messages, 5 ms wait after every send; shared layout (one topic per node)."
)
