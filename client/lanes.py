"""The client's direct lane (docs/DESIGN.md §7.1): which copies of a message go straight
to their destination's control log instead of its input log.

A node with a control log applies its input log's records only where its own apply
marker comes back through the control log: one more round trip for every client record.
A copy written to the control log itself is applied where it stands, like a peer's
bundle, and skips that trip. It also stands in front of the proposals written after it,
which is what the control log is there to avoid under a flood. So a client uses the
direct lane only for a trickle: at most ``rate`` copies a second per destination (a
token bucket holding ``burst``), and only while the destination's node says it is not
behind (the caller's part: the statuses). What exceeds it goes to the input log, as
without the lane. Either way the node's one input order is its control log, so the lane
changes when a copy is applied, never what any replay decides.
"""

from __future__ import annotations

from typing import Final

from atomickafka.errors import ConfigError

__all__ = ["DEFAULT_DIRECT_BURST", "DEFAULT_DIRECT_RATE", "DIRECT_BEHIND_S", "DirectLane"]

#: Copies a second per destination a client may write to its control log.
DEFAULT_DIRECT_RATE: Final = 2_000.0
#: How many of them it may write at once after a pause.
DEFAULT_DIRECT_BURST: Final = 200
#: A destination whose node is further behind than this (s, its status's
#: :attr:`~atomickafka.kafka.status.Status.behind_s`) gets no direct copies.
DIRECT_BEHIND_S: Final = 0.1


class DirectLane:
    """A token bucket per destination: :meth:`take` says whether one more copy to that
    destination may go to its control log now."""

    __slots__ = ("_buckets", "burst", "rate")

    def __init__(self, rate: float = DEFAULT_DIRECT_RATE, burst: int = DEFAULT_DIRECT_BURST):
        if rate < 0 or burst < 0:
            raise ConfigError(f"the direct lane's rate and burst must be >= 0: {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}  # topic -> (tokens, at)

    @property
    def open(self) -> bool:
        """Whether any copy may take the lane at all (a rate and a burst above 0)."""
        return self.rate > 0 and self.burst > 0

    def close(self) -> None:
        """Take no copy any more (a control log refused one: no Write on it)."""
        self.rate, self.burst = 0.0, 0
        self._buckets.clear()

    def take(self, topic: str, now: float) -> bool:
        """Take a token of ``topic``'s bucket at ``now`` (monotonic seconds), if one is
        left."""
        tokens, at = self._buckets.get(topic, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[topic] = (tokens, now)
            return False
        self._buckets[topic] = (tokens - 1.0, now)
        return True
