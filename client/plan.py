"""The client's decisions, pure (docs/DESIGN.md §5.3, §7.1): given what the statuses say
of the destinations' nodes and the clock, where each copy of a message goes -- which
logs (the routing rule, :func:`atomickafka.core.protocols.route`) and, with control
logs, which lane -- and whether to hold back. :class:`~atomickafka.client.AtomicKafkaClient`
drives it with the statuses it reads from Kafka; the simulators drive it with views of
their nodes, so that the simulated clients decide as the real one does.

*The direct lane.* A node with a control log applies its input log's records only where
its own apply marker comes back through the control log: one more round trip for every
client record. A copy written to the control log itself is applied where it stands,
like a peer's bundle, and skips that trip. It also stands in front of the proposals
written after it, which is what the control log is there to avoid under a flood. So a
copy takes the direct lane only for a trickle: at most ``rate`` copies a second per
destination (a token bucket holding ``burst``, :class:`DirectLane`), and only while every
live node of the destination reads a control log and is at most :data:`DIRECT_BEHIND_S`
behind (:func:`lane_targets`). What exceeds it goes to the input log, as without the
lane. Either way the node's one input order is its control log, so the lane changes when
a copy is applied, never what any replay decides.

*Back-pressure.* A client holds back while a destination's node is more than
``max_lag_s`` behind its input (:func:`lagging`), judging each node by its status less
the time since it was taken: a node working through its backlog is that much less
behind each second since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from atomickafka.core.protocols import routed_by_id
from atomickafka.errors import ConfigError

__all__ = [
    "DEFAULT_DIRECT_BURST",
    "DEFAULT_DIRECT_RATE",
    "DEFAULT_MAX_LAG_S",
    "DIRECT_BEHIND_S",
    "Copy",
    "DirectLane",
    "NodeView",
    "copies",
    "lagging",
    "lane_targets",
]

#: Copies a second per destination a client may write to its control log.
DEFAULT_DIRECT_RATE: Final = 2_000.0
#: How many of them it may write at once after a pause.
DEFAULT_DIRECT_BURST: Final = 200
#: A destination whose node is further behind its input than this (its status's
#: ``inputLagSeconds`` or ``inputDrainSeconds``: the oldest unread record has waited, or
#: the unread ones would take, longer) makes send() wait (docs/DESIGN.md §5.3): queues
#: stay bounded.
DEFAULT_MAX_LAG_S: Final = 0.25
#: A destination whose node is further behind than this (s, its status's
#: :attr:`~atomickafka.kafka.status.Status.behind_s`) gets no direct copies.
DIRECT_BEHIND_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a client knows of one node of a destination (each layer's, on a
    partitioned topic): whether it is live, whether it reads a control log, how far
    behind its input its status said it was (``behind_s``) and how long ago that was
    (``since_s``)."""

    topic: str
    live: bool
    control_log: bool
    behind_s: float
    since_s: float = 0.0

    @property
    def behind_now_s(self) -> float:
        """How far behind it is now, judged as back-pressure judges it: a node working
        through its backlog is that much less behind each second since its status."""
        return self.behind_s - max(0.0, self.since_s)


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy of a message: the destination (or relay) whose log it goes to, and
    whether it takes the direct lane (its control log) or the input log."""

    topic: str
    direct: bool


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


def lane_targets(targets: Iterable[str], views: Mapping[str, Sequence[NodeView]]) -> set[str]:
    """The targets whose copies may take the direct lane: every node of the topic is
    live, reads a control log and said it was at most :data:`DIRECT_BEHIND_S` behind
    (as reported, not aged: the lane is taken only on a status that says so)."""
    out = set()
    for target in targets:
        nodes = views.get(target, ())
        if nodes and all(n.live and n.control_log and n.behind_s <= DIRECT_BEHIND_S for n in nodes):
            out.add(target)
    return out


def lagging(
    topics: Iterable[str], views: Mapping[str, Sequence[NodeView]], max_lag_s: float
) -> tuple[str, float] | None:
    """The first of ``topics`` with a live node more than ``max_lag_s`` behind its input,
    and how far behind it is; ``None`` when none is (back-pressure holds the client
    while one is)."""
    for topic in topics:
        for node in views.get(topic, ()):
            if node.live and node.behind_now_s > max_lag_s:
                return topic, node.behind_now_s
    return None


def copies(
    message_id: str,
    targets: Sequence[str],
    by_id: bool,
    lanes: Iterable[str],
    lane: DirectLane,
    now: float,
) -> list[Copy]:
    """The copies of one message: to every target (``poc``/``optimized`` without a
    relay: to the one its id picks, ``by_id``), each in the direct lane when its target
    is one of ``lanes`` and the lane has a token for it now."""
    chosen = (routed_by_id(targets, message_id),) if by_id else tuple(targets)
    open_lanes = set(lanes) if lane.open else set()
    return [Copy(t, t in open_lanes and lane.take(t, now)) for t in chosen]
