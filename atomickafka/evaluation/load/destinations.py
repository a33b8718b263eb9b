"""The many-topic workload: each message's destination set drawn from a stated
distribution, where genuine multicast should win.

The thesis's workload (and the bench's default) multicasts to every topic: a
sequencer's best case, since it carries every message through one process whatever its
destinations. Real traffic is many topics with small destination sets (an order to
``orders`` and ``payments``, not to every topic). A :class:`DestinationMix` draws such
sets:

- ``many`` (:data:`MANY`): 90 % of messages to one topic, 10 % to 2-3 topics, every
  topic equally likely;
- ``hot`` (:data:`HOT`): the same sizes, but a tenth of the topics (at least one) are
  *hot*: together they take half of all picks, the others share the rest.

A draw is seeded (:meth:`DestinationMix.plan`), so AtomicKafka and every baseline get
the same messages.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from atomickafka.errors import ConfigError

__all__ = ["DEFAULT_TOPIC_COUNTS", "HOT", "MANY", "MIXES", "DestinationMix", "parse_topic_counts"]

#: The topic counts of the many-topic workload.
DEFAULT_TOPIC_COUNTS: Final = (5, 10, 20)


@dataclass(frozen=True, slots=True)
class DestinationMix:
    """Draws destination sets: ``single_share`` of messages to one topic, the others to
    ``fanout[0]``..``fanout[1]`` distinct topics; with ``hot_share`` > 0 the first
    ``hot_fraction`` of the topics (at least one) take that share of all picks."""

    name: str
    single_share: float = 0.9
    fanout: tuple[int, int] = (2, 3)
    hot_fraction: float = 0.0
    hot_share: float = 0.0

    def hot_topics(self, count: int) -> int:
        """How many of ``count`` topics are hot."""
        return max(1, int(count * self.hot_fraction)) if self.hot_share > 0 else 0

    def weights(self, count: int) -> list[float]:
        """Each topic's chance to be picked (they add up to 1)."""
        hot = self.hot_topics(count)
        if hot == 0 or hot >= count:
            return [1 / count] * count
        cold = (1 - self.hot_share) / (count - hot)
        return [self.hot_share / hot] * hot + [cold] * (count - hot)

    def draw(self, topics: Sequence[str], rng: random.Random) -> tuple[str, ...]:
        """One message's destinations (sorted)."""
        low, high = (min(bound, len(topics)) for bound in self.fanout)
        size = 1 if rng.random() < self.single_share else rng.randint(low, high)
        pool, weights = list(topics), self.weights(len(topics))
        chosen = []
        for _ in range(size):  # weighted, without replacement
            index = rng.choices(range(len(pool)), weights)[0]
            chosen.append(pool.pop(index))
            weights.pop(index)
        return tuple(sorted(chosen))

    def plan(self, topics: Sequence[str], count: int, seed: int = 0) -> list[tuple[str, ...]]:
        """``count`` messages' destinations, the same for the same seed."""
        if not topics:
            raise ConfigError("the many-topic workload needs at least one topic")
        rng = random.Random(f"{self.name}-{seed}")
        return [self.draw(topics, rng) for _ in range(count)]

    def describe(self) -> str:
        """The distribution in words, for every table that shows it."""
        lo, hi = self.fanout
        text = (
            f"{self.single_share:.0%} of messages to one topic, {1 - self.single_share:.0%} "
            f"to {lo}-{hi} distinct topics"
        )
        if self.hot_share > 0:
            return (
                f"{text}; topics weighted: the first {self.hot_fraction:.0%} (at least one) "
                f"take {self.hot_share:.0%} of the picks"
            )
        return f"{text}, every topic equally likely"


MANY: Final = DestinationMix("many")
HOT: Final = DestinationMix("hot", hot_fraction=0.1, hot_share=0.5)
#: The mixes by name.
MIXES: Final = {mix.name: mix for mix in (MANY, HOT)}


def parse_topic_counts(text: str) -> tuple[int, ...]:
    """Topic counts from a comma-separated list (``5,10,20``), each at least 2."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"topic counts are whole numbers, e.g. 5,10,20, not {text!r}") from None
    if not counts or any(n < 2 for n in counts):
        raise ConfigError(f"topic counts must each be at least 2, not {text!r}")
    return tuple(dict.fromkeys(counts))
