"""The thesis's scenarios (chapter 5) and what each client sends in them.

A scenario is named by its mix: ``baseline`` sends every message to one topic, ``90-10``
multicasts 10 % of each client's messages to every topic and sends the other 90 % to
the client's own topic, and so on to ``50-50``. Any ``A-B`` with ``A + B = 100`` is
accepted. Clients write to topics 1 and 3 as in the thesis (more clients take topics 5,
2, 4, then start over), and the multicast messages are spread evenly through each
client's sequence, so a run's load is the same from start to end.

A multicast goes to every topic, as in the thesis, or, with a *fan-out* ``(lo, hi)``,
to its client's own topic and ``k - 1`` others, ``k`` drawn from ``lo..hi`` and the
others at random (seeded per client, so a plan is the same every time).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from atomickafka.errors import ConfigError
from atomickafka.evaluation.load.destinations import DestinationMix

__all__ = [
    "THESIS_SCENARIOS",
    "ClientPlan",
    "Scenario",
    "home_topics",
    "parse_scenarios",
    "plan_clients",
    "scenario",
]

#: The six runs of thesis chapter 5, in its order.
THESIS_SCENARIOS: Final = ("baseline", "90-10", "80-20", "70-30", "60-40", "50-50")

_MIX: Final = re.compile(r"(\d{1,3})-(\d{1,3})")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named mix: ``multicast_percent`` % of every client's messages go to all topics."""

    name: str
    multicast_percent: int

    @property
    def share(self) -> float:
        """The multicast share as a fraction (0.0 to 1.0)."""
        return self.multicast_percent / 100


def scenario(name: str) -> Scenario:
    """The scenario called ``name`` (``baseline`` or ``A-B`` with ``A + B = 100``)."""
    text = name.strip()
    if text == "baseline":
        return Scenario("baseline", 0)
    match = _MIX.fullmatch(text)
    if match is None or int(match.group(1)) + int(match.group(2)) != 100:
        raise ConfigError(
            f"unknown scenario {name!r}: use baseline or A-B with A+B=100 (e.g. 90-10)"
        )
    return Scenario(text, int(match.group(2)))


def parse_scenarios(text: str) -> list[Scenario]:
    """Scenarios from a comma-separated list, in the order given, without repeats."""
    out: list[Scenario] = []
    for part in text.split(","):
        if not part.strip():
            continue
        item = scenario(part)
        if any(s.multicast_percent == item.multicast_percent for s in out):
            raise ConfigError(f"scenario {item.name!r} is listed twice")
        out.append(item)
    if not out:
        raise ConfigError("no scenario given")
    return out


@dataclass(frozen=True, slots=True)
class ClientPlan:
    """What one client sends: its id, its own topic, each message's destinations."""

    index: int
    client_id: str
    home_topic: str
    destinations: tuple[tuple[str, ...], ...]

    @property
    def multicasts(self) -> int:
        """How many of the messages go to more than one topic."""
        return sum(len(d) > 1 for d in self.destinations)


def home_topics(topics: Sequence[str], clients: int) -> list[str]:
    """Each client's own topic: topics 1, 3, 5, … then 2, 4, … (the thesis used 1 and 3)."""
    order = [*topics[0::2], *topics[1::2]]
    return [order[i % len(order)] for i in range(clients)]


def plan_clients(
    chosen: Scenario,
    topics: Sequence[str],
    clients: int,
    messages_per_client: int,
    *,
    fanout: tuple[int, int] | None = None,
    seed: int = 0,
    mix: DestinationMix | None = None,
) -> list[ClientPlan]:
    """Every client's plan for ``chosen`` on ``topics``; with ``mix`` (the many-topic
    workload) each message's destinations are drawn from it instead (seeded per client).

    Message ``j`` of a client is a multicast when ``⌊(j+1)·p/100⌋ > ⌊j·p/100⌋``: exactly
    ``⌊n·p/100⌋`` of ``n`` messages are, evenly spaced. A multicast goes to every topic,
    or with ``fanout`` to as many as drawn (see the module's docstring).
    """
    if not topics:
        raise ConfigError("a scenario needs at least one topic")
    if clients < 1 or messages_per_client < 1:
        raise ConfigError("need at least one client and one message per client")
    if fanout is not None and not 2 <= fanout[0] <= fanout[1]:
        raise ConfigError(f"a fan-out is LO-HI with 2 <= LO <= HI, not {fanout}")
    percent = chosen.multicast_percent
    plans = []
    for index, home in enumerate(home_topics(topics, clients)):
        if mix is not None:
            drawn = mix.plan(topics, messages_per_client, seed * 1000 + index)
            plans.append(ClientPlan(index, f"client-{index + 1}", home, tuple(drawn)))
            continue
        alone = (home,)
        spread = _Spread(topics, home, fanout, random.Random(f"{seed}-{index}"))
        dests = tuple(
            spread.draw() if (j + 1) * percent // 100 > j * percent // 100 else alone
            for j in range(messages_per_client)
        )
        plans.append(ClientPlan(index, f"client-{index + 1}", home, dests))
    return plans


class _Spread:
    """A client's multicast destinations: every topic, or its own and others drawn."""

    def __init__(
        self,
        topics: Sequence[str],
        home: str,
        fanout: tuple[int, int] | None,
        rng: random.Random,
    ) -> None:
        self._everywhere = tuple(topics)
        self._others = [t for t in topics if t != home]
        self._home, self._fanout, self._rng = home, fanout, rng

    def draw(self) -> tuple[str, ...]:
        if self._fanout is None:
            return self._everywhere
        low, high = (min(bound, len(self._everywhere)) for bound in self._fanout)
        count = self._rng.randint(low, high)
        return tuple(sorted([self._home, *self._rng.sample(self._others, count - 1)]))
