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
the time since it was taken: a node working through its backlog is that much less behind
each second since. Before it comes to that, it paces itself (:class:`Pace`, issue 38
item 5): per destination a token bucket whose rate follows what the destination's nodes
drain. Each time a new status is read, a destination whose nodes are more than the
*target* (:data:`PACE_TARGET_SHARE` of ``max_lag_s``) behind has its rate cut to what
the client sent it since, in proportion (target over backlog, within :data:`PACE_CUT`; a
paced rate by at most half at once), at most once per :data:`PACE_CUT_EVERY_S` (a cut
shows in the statuses that long after); one below the target has it raised
(:func:`raised`): in proportion to the room left under the target, half way towards the
rate at which its backlog last grew (the *ceiling*) or by :data:`PACE_PROBE` past it,
and by up to :data:`PACE_RAISE` times when the nodes have no backlog at all; one with no
backlog and a rate far above what the client sends (something) is no longer paced; one
over the target whose backlog shrinks while the client sends has it raised by
:data:`PACE_PROBE`. Each status is judged once (a node below the hold publishes once a
second; the client reads every quarter second), and the time a client was held back does
not count as time it sent in. Held back at a threshold alone, unpaced clients wrote
seconds of the nodes' work in the quarter second before the next status stopped them,
and the nodes delivered in waves with seconds of almost nothing between
(docs/performance.md).
Pacing decides only when a copy is written, never where or what: no replay depends on
it.
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
    "PACE_APPROACH",
    "PACE_CUT",
    "PACE_CUT_EVERY_S",
    "PACE_PROBE",
    "PACE_RAISE",
    "PACE_TARGET_SHARE",
    "Copy",
    "DirectLane",
    "NodeView",
    "Pace",
    "copies",
    "lagging",
    "lane_targets",
    "raised",
    "worst_behind",
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
#: Pacing (:class:`Pace`) aims to keep a destination's nodes at most this share of
#: ``max_lag_s`` behind, below where holding back begins.
PACE_TARGET_SHARE: Final = 0.5
#: The least and most a rate is cut to, as a share of what the client sent: the target
#: over the backlog, within these.
PACE_CUT: Final = (0.5, 0.9)
#: A rate is cut at most once in this time (s): a status a quarter second old, read a
#: quarter second later, shows a cut only then.
PACE_CUT_EVERY_S: Final = 0.5
#: The most a rate is raised by at once (with no backlog at all); under the target, in
#: proportion to the room left under it.
PACE_RAISE: Final = 1.5
#: Under the target, a rate moves this share of the way to its ceiling (the rate at
#: which the backlog last grew) per status judged...
PACE_APPROACH: Final = 0.5
#: ... or, where it is more (near or past the ceiling), this share of itself: the nodes
#: may drain more than they did then.
PACE_PROBE: Final = 0.1
#: The least time (s) what a client sent since the last judgment is spread over, however
#: long it was held back meanwhile.
_PACE_LEAST_SENDING_S: Final = 0.05
#: A rate further above what the client sends than this (with no backlog) paces nothing.
_PACE_SLACK: Final = 8.0
#: The least rate a destination is paced at (msg/s).
_PACE_FLOOR: Final = 10.0
#: How many seconds of the rate a bucket holds (the burst a paced client may write).
_PACE_BURST_S: Final = 0.05


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


def worst_behind(topic: str, views: Mapping[str, Sequence[NodeView]]) -> float | None:
    """How far the furthest behind live node of ``topic`` is now (as :func:`lagging`
    judges it); ``None`` when no live node of it is known."""
    behind = [max(0.0, n.behind_now_s) for n in views.get(topic, ()) if n.live]
    return max(behind) if behind else None


class _Bucket:
    """One destination's pace: its rate (``None``: unpaced), tokens, what was sent (and
    how long the client was held back) since its rate was last judged, the newest status
    judged, and the rate at which the backlog last grew (its ceiling)."""

    __slots__ = (
        "at", "behind_s", "ceiling", "cut_at", "held_s", "judged_at", "rate", "sent", "stamp",
        "tokens",
    )  # fmt: skip

    def __init__(self, now: float) -> None:
        self.rate: float | None = None
        self.ceiling: float | None = None  # what was sent when the backlog last grew
        self.behind_s = 0.0  # how far behind the nodes were when last judged
        self.tokens = 0.0
        self.at = self.judged_at = now
        self.cut_at = float("-inf")
        self.stamp = float("-inf")  # when the newest status judged was taken
        self.sent = 0
        self.held_s = 0.0


class Pace:
    """Per destination, a token bucket whose rate follows what the destination's nodes
    drain (the module's *Back-pressure*): :meth:`judge` sets a rate from a fresh view
    of the nodes, :meth:`take` says how long to wait before writing ``n`` more messages
    to some destinations, :meth:`held` how long the client was held back.
    ``target_s``: how far behind (s) the nodes are kept."""

    __slots__ = ("_buckets", "target_s")

    def __init__(self, target_s: float) -> None:
        if target_s <= 0:
            raise ConfigError(f"the pace's target must be above 0 s: {target_s}")
        self.target_s = target_s
        self._buckets: dict[str, _Bucket] = {}

    def rate(self, topic: str) -> float | None:
        """``topic``'s rate (msg/s), ``None`` while it is not paced."""
        bucket = self._buckets.get(topic)
        return None if bucket is None else bucket.rate

    def ceiling(self, topic: str) -> float | None:
        """The rate at which ``topic``'s backlog last grew (msg/s; ``None``: none since
        it was last unpaced): a raise approaches it, and passes it only slowly."""
        bucket = self._buckets.get(topic)
        return None if bucket is None else bucket.ceiling

    @property
    def topics(self) -> list[str]:
        """The destinations written to, whose rates :meth:`judge` keeps."""
        return list(self._buckets)

    def held(self, topics: Iterable[str], seconds: float) -> None:
        """The client was held back ``seconds`` for ``topics`` (back-pressure's
        threshold): what it sent since the last judgment was sent in that much less
        time."""
        for topic in topics:
            bucket = self._buckets.get(topic)
            if bucket is not None:
                bucket.held_s += max(0.0, seconds)

    def judge(
        self, topic: str, behind_s: float, now: float, *, stamp: float | None = None
    ) -> float | None:
        """Set ``topic``'s rate from how far behind its nodes are now (``behind_s``,
        :func:`worst_behind`) and what was sent to it since it was last judged; return
        the rate.
        ``stamp``: when the newest of the statuses judged was taken; one judged already
        (not newer) changes nothing: a status read again says nothing new, and judging
        it again raised a rate four times a second on one status a second old.

        Above the target and not shrinking, the rate is cut to what was sent times the
        target over the backlog (within :data:`PACE_CUT`; never below the rate's least
        share at once), at most once per :data:`PACE_CUT_EVERY_S`; what was sent then is
        the *ceiling*. A client that sent nothing (held back) says the last cut is
        enough; a backlog that shrinks while it sends, that the rate may grow by
        :data:`PACE_PROBE` (without it a rate stayed where a cut left it for as long as
        the nodes' own round trips kept them over the target); time held back
        does not count as time sending. At or below the target the rate is raised
        (:func:`raised`); with no backlog and far above what was sent (not nothing: a
        client held back sends nothing), dropped."""
        bucket = self._buckets.get(topic)
        if bucket is None:
            return None  # nothing sent there: nothing to pace
        if stamp is not None:
            if stamp <= bucket.stamp:
                return bucket.rate  # judged on this status already
            bucket.stamp = stamp
        elapsed = now - bucket.judged_at
        if elapsed <= 0:
            return bucket.rate
        sending = max(elapsed - bucket.held_s, min(elapsed, _PACE_LEAST_SENDING_S))
        sent_per_s = bucket.sent / sending
        growing = behind_s >= bucket.behind_s
        bucket.judged_at, bucket.sent, bucket.held_s = now, 0, 0.0
        bucket.behind_s = behind_s
        if behind_s > self.target_s:
            if growing and sent_per_s > 0 and now - bucket.cut_at >= PACE_CUT_EVERY_S:
                low, high = PACE_CUT
                share = min(high, max(low, self.target_s / behind_s))
                base = sent_per_s if bucket.rate is None else min(bucket.rate, sent_per_s)
                rate = max(_PACE_FLOOR, base * share)
                if bucket.rate is not None:  # never below half at once: what was sent
                    # in a quarter second between holds and other destinations' waits
                    # is a poor measure, and a rate cut to it crawled back for seconds
                    rate = max(rate, bucket.rate * low)
                bucket.ceiling = max(base, rate)
                self._set(bucket, rate, now)
                bucket.cut_at = now
            elif not growing and sent_per_s > 0 and bucket.rate is not None:
                # shrinking while the client sends: it sends below what the nodes drain
                # (a node whose own round trips keep it over the target stays there)
                self._set(bucket, bucket.rate * (1.0 + PACE_PROBE), now)
        elif bucket.rate is not None:
            if behind_s <= 0 and 0 < sent_per_s * _PACE_SLACK < bucket.rate:
                # no backlog, and the client sends far below the rate: unpaced (one that
                # sent nothing was held back, or idles: neither says the rate is not
                # needed, and a rate not needed grows here until it is far above)
                bucket.rate = bucket.ceiling = None
            else:  # in proportion to the room left under the target
                room = 1.0 if behind_s <= 0 else 1.0 - behind_s / self.target_s
                self._set(bucket, raised(bucket.rate, bucket.ceiling, room), now)
        return bucket.rate

    @staticmethod
    def _set(bucket: _Bucket, rate: float, now: float) -> None:
        if bucket.rate is None:  # paced from now: a full bucket
            bucket.tokens, bucket.at = rate * _PACE_BURST_S, now
        bucket.rate = rate

    def take(self, topics: Iterable[str], n: int, now: float) -> float:
        """Take ``n`` tokens of each of ``topics``' buckets at ``now`` (monotonic s);
        return how long to wait (s) until they are earned, 0 when they were there. A
        bucket holds at most :data:`_PACE_BURST_S` of its rate; what is taken beyond is
        owed, and the wait pays it."""
        wait = 0.0
        for topic in topics:
            bucket = self._buckets.get(topic)
            if bucket is None:
                bucket = self._buckets[topic] = _Bucket(now)
            bucket.sent += n
            rate = bucket.rate
            if rate is None:
                continue
            full = max(1.0, rate * _PACE_BURST_S)
            bucket.tokens = min(full, bucket.tokens + max(0.0, now - bucket.at) * rate) - n
            bucket.at = now
            if bucket.tokens < 0:
                wait = max(wait, -bucket.tokens / rate)
        return wait


def raised(rate: float, ceiling: float | None, room: float) -> float:
    """``rate`` raised with ``room`` (0..1) left under the pace's target: by
    :data:`PACE_APPROACH` of the way to ``ceiling`` (the rate at which the backlog last
    grew) or :data:`PACE_PROBE` of itself, whichever is more, times the room; with no
    backlog at all (the nodes wait for input: the rate is too low, whatever the
    ceiling) or no ceiling, by up to :data:`PACE_RAISE` times. Approaching the ceiling,
    not multiplying, keeps a rate from overshooting by half again into the backlog it
    was cut for."""
    room = min(1.0, max(0.0, room))
    step = rate * (PACE_RAISE - 1.0) if ceiling is None or room >= 1.0 else 0.0
    if ceiling is not None:
        step = max(step, (ceiling - rate) * PACE_APPROACH, rate * PACE_PROBE)
    return rate + step * room


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
