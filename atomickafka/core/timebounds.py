"""How far ahead of real time a Lamport timestamp may be (docs/DESIGN.md §4.11).

A node's clock moves to every timestamp it accepts (§4.2), so one record carrying a
huge timestamp could exhaust it, and a node pushed far ahead by such a record would
then propose above what its peers accept. The bound is therefore not the receiver's
own clock (which differs from node to node) but real time, as the log itself states
it: every input log is written with ``message.timestamp.type=LogAppendTime``, so each
record carries the broker's append time, the same on replay. Honest timestamps are
Lamport counters that grow by one per proposal: far below the microseconds since the
epoch (about 2^50.6 today; ``MAX_TIMESTAMP`` is 2^53 - 1, reached in the year 2255).

For a record whose log time is ``t`` (ms), the node's *now* is the largest log time
seen so far, in microseconds, and a timestamp ``ts``

- is applied when ``ts <= now + CLOCK_LEAD_US``;
- is *held* -- kept aside, not applied, nothing changed -- while
  ``now + CLOCK_LEAD_US < ts <= now + CLOCK_HOLD_US``, and applied once the log's time
  has caught up (any delay is allowed in an asynchronous system; the node writes a
  clock tick into its own log while it holds anything, so its log's time moves);
- is refused beyond ``now + CLOCK_HOLD_US``.

So no clock ever passes ``now + CLOCK_LEAD_US`` plus the proposals made since, a stray
record can lead a clock by a minute at most, and an honest proposal derived from such
a clock waits a few microseconds of log time at its receiver instead of being refused.
At most :data:`MAX_HELD` messages are held; past that the one furthest ahead is
refused (an honest one is held for microseconds, so it is never the one furthest ahead).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from sortedcontainers import SortedList

from atomickafka.core.wire import Message

__all__ = ["CLOCK_HOLD_US", "CLOCK_LEAD_US", "MAX_HELD", "HeldMessages", "Verdict", "judge"]

#: How far ahead of its log time (µs) a timestamp is applied at once: one minute.
CLOCK_LEAD_US: Final = 60_000_000
#: How far ahead a timestamp may be at all; between the two it waits: one hour.
CLOCK_HOLD_US: Final = 3_600_000_000
#: Most messages held at once.
MAX_HELD: Final = 10_000


class Verdict(IntEnum):
    """What :func:`judge` says of a timestamp: apply it, hold it, or refuse it."""

    APPLY = 0
    HOLD = 1
    REFUSE = 2


def judge(ts: int, now_us: int) -> Verdict:
    """A :class:`Verdict` for timestamp ``ts`` when the log's time is ``now_us``."""
    if ts <= now_us + CLOCK_LEAD_US:
        return Verdict.APPLY
    if ts <= now_us + CLOCK_HOLD_US:
        return Verdict.HOLD
    return Verdict.REFUSE


def due_at(ts: int) -> int:
    """The log time (µs) from which timestamp ``ts`` is applied."""
    return ts - CLOCK_LEAD_US


class HeldMessages:
    """Messages waiting for the log's time to reach theirs, soonest first."""

    def __init__(self) -> None:
        self._items: SortedList = SortedList()  # (due_at_us, arrival, message)
        self._arrivals = 0
        self._count = 0  # len(self._items)

    def __len__(self) -> int:
        return self._count  # (not len(SortedList): Python code, asked for every record)

    def hold(self, message: Message, ts: int) -> Message | None:
        """Hold ``message`` (its timestamp is ``ts``); return the message that no longer
        fits (the one furthest ahead, possibly ``message`` itself), or ``None``."""
        self._arrivals += 1
        self._items.add((due_at(ts), self._arrivals, message))
        if len(self._items) <= MAX_HELD:
            self._count = len(self._items)
            return None
        pushed_out: Message = self._items.pop(-1)[2]
        self._count = len(self._items)
        return pushed_out

    def due(self, now_us: int) -> list[Message]:
        """Remove and return every held message whose time has come, in order."""
        out: list[Message] = []
        items = self._items
        while items and items[0][0] <= now_us:
            out.append(items.pop(0)[2])
        self._count = len(items)
        return out

    @property
    def next_due_us(self) -> int | None:
        """When the next held message is due (log time, µs), or ``None``."""
        return self._items[0][0] if self._items else None

    def messages(self) -> list[Message]:
        """Every held message, in release order (for snapshots)."""
        return [item[2] for item in self._items]
