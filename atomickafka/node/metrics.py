"""What a node or merger measures about itself: rates over the last status interval, how
long the head of its queue has been waiting (the stuck-message warning), and the part
of a status every role fills in the same way.

Measuring is a step of its own, taken by the status publisher once per interval
(:meth:`Rates.take`, :meth:`HeadWatch.observe`); reading the results, as ``status()``
does, changes nothing.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from atomickafka.core.signing import Signer
from atomickafka.kafka.status import Role, Status
from atomickafka.node.config import NodeConfig

__all__ = ["HeadWatch", "Progress", "Rates", "status_of"]


@dataclass(slots=True)
class Rates:
    """Per-second rates of a few counters over the interval between the last two
    :meth:`take` calls; :attr:`last` holds them (zeros until the second take)."""

    size: int
    last: tuple[float, ...] = ()
    _time: float | None = None
    _counts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.last = (0.0,) * self.size

    def take(self, counts: Sequence[int], now: float) -> tuple[float, ...]:
        """End the current interval at ``now`` with the counters at ``counts``; return
        (and keep in :attr:`last`) its rates, rounded to 0.1/s."""
        current = tuple(counts)
        if len(current) != self.size:
            raise ValueError(f"{len(current)} counters, not {self.size}")
        if self._time is not None:
            elapsed = max(now - self._time, 1e-9)
            self.last = tuple(
                round((c - p) / elapsed, 1) for c, p in zip(current, self._counts, strict=True)
            )
        self._time, self._counts = now, current
        return self.last


@dataclass(slots=True)
class Progress:
    """How fast a node works through its input while it has a backlog (its *pace*), in
    offsets per second over the last ``window_s`` or more of work.

    Only intervals that begin with a backlog count: an idle node's rate is the trickle
    it was sent, not what it can do, and a window that spans idle seconds would make the
    first burst after them look like a minute of work (measured in the bench's capacity
    run with control logs: clients held back for 3.2 s of a 5 s run). So the pace is
    taken over a window that restarts whenever the node was found idle, once it spans
    ``min_span_s`` (the statuses of a lagging node come every quarter second and a step
    can span one: a single interval could say 0, or twice the rate), and is kept while
    the node idles: the next burst is judged at the pace the node last showed."""

    window_s: float = 2.0
    min_span_s: float = 0.5
    #: The pace at the last :meth:`take` (0.0 until the node first had a backlog for
    #: ``min_span_s``).
    rate: float = 0.0
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))
    _backlog: bool = False  # whether the node had a backlog at the last sample

    def take(self, done: int, now: float, backlog: bool = True) -> float:
        """Note that the node had applied ``done`` offsets by ``now`` and whether it
        has a backlog now; return its pace over the window (the newest sample at least
        ``window_s`` old, or every sample since it was last found idle)."""
        samples = self._samples
        if not self._backlog:  # the interval from the last sample began idle
            samples.clear()
        samples.append((now, done))
        self._backlog = backlog
        while len(samples) > 2 and now - samples[1][0] >= self.window_s:
            samples.popleft()
        then, before = samples[0]
        if now - then >= self.min_span_s:
            self.rate = (done - before) / (now - then)
        return self.rate

    def drain_s(self, lag: int, cap_s: float, at_least: int = 0) -> float:
        """How long ``lag`` offsets would take at :attr:`rate`, at most ``cap_s``; 0.0
        when nothing moved (a transaction's commit marker can leave an idle node one
        offset behind for good; a stalled one shows in how long its input waited), and
        for fewer than ``at_least`` offsets (``at_least`` is also what :meth:`take`
        should count as a backlog): a handful of records is no backlog, whatever the
        pace."""
        if lag < max(1, at_least) or self.rate <= 0:
            return 0.0
        return min(lag / self.rate, cap_s)


@dataclass(slots=True)
class HeadWatch:
    """Since when the queue head has been the head, and when to warn that it is stuck.

    Only the head is watched (O(1) per status tick, no scan of pending messages): it is
    what every later message waits for.
    """

    stuck_after_s: float
    _head: str | None = None
    _since: float = 0.0
    _warned_at: dict[str, float] = field(default_factory=dict)

    def observe(self, head: str | None, now: float) -> None:
        """The queue head is ``head`` (``None``: empty queue) at ``now``."""
        if head != self._head:
            self._head, self._since = head, now
            self._warned_at.clear()

    def age(self, now: float) -> float | None:
        """Seconds the observed head has been the head (``None``: empty queue)."""
        return None if self._head is None else round(now - self._since, 3)

    def stuck(self, now: float) -> float | None:
        """The head's age when it is time to warn about it (once per ``stuck_after_s``)."""
        head = self._head
        if head is None:
            return None
        age = now - self._since
        last = self._warned_at.get(head, self._since)
        if age >= self.stuck_after_s and now - last >= self.stuck_after_s:
            self._warned_at[head] = now
            return age
        return None


def status_of(
    config: NodeConfig, role: Role, key: str, node_id: str, signer: Signer | None = None
) -> Status:
    """A status taken now with only who publishes it filled in (topic, role, protocol,
    layout, layers, the heartbeat time, the process, the secrets it accepts); the
    caller adds its counters with :func:`dataclasses.replace`."""
    return Status(
        signing_keys=() if signer is None else signer.key_ids(),
        key=key,
        topic=config.topic,
        role=role,
        node_id=node_id,
        algorithm=config.algorithm,
        layout=config.layout,
        time=time.time(),
        pid=os.getpid(),
        partitions=config.partitions,
    )
