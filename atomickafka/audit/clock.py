"""The live audit's event time (``docs/DESIGN.md`` §10.3).

The bound of rule 3 is measured in the time the deliveries were written (their Kafka
timestamps), so an audit that reads a backlog judges it as it was written, however
fast it reads, and the Spark job, which can only use event time, agrees with it.

A reader does not read its partitions in step: librdkafka may hand over the backlog of
one partition long before another's. So event time is the newest record time read of
the partition that is furthest behind, among those that still have records to read
(a per-partition watermark): a message first read in one partition is not judged
missing in another until that one has been read past the bound. When every partition
has been read to its end, event time is the newest record time read, moved on by the
local clock while nothing new arrives: a destination that stays silent while nothing
else is written either is still reported.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = ["EventClock"]


class EventClock:
    """Event time in milliseconds over a set of partitions (see the module docstring).
    Pure: the caller says what was read and passes the monotonic readings."""

    __slots__ = ("_behind", "_idle_base", "_newest", "_partition_newest")

    def __init__(self, partitions: Iterable[Hashable] = ()) -> None:
        self._newest = 0
        self._partition_newest: dict[Hashable, int] = {}
        self._behind: set[Hashable] = set(partitions)
        self._idle_base: tuple[int, float] | None = None

    @property
    def newest_record_ms(self) -> int:
        """The newest record time read so far, in any partition."""
        return self._newest

    def record(self, partition: Hashable, time_ms: int) -> None:
        """A record of ``partition`` written at ``time_ms`` was read."""
        self._newest = max(self._newest, time_ms)
        if time_ms > self._partition_newest.get(partition, 0):
            self._partition_newest[partition] = time_ms

    def at_end(self, partition: Hashable, at_end: bool, monotonic_s: float) -> None:
        """Whether ``partition`` has been read to its end, at ``monotonic_s``."""
        if at_end:
            self._behind.discard(partition)
            if not self._behind and self._idle_base is None:
                self._idle_base = (self._newest, monotonic_s)
        else:
            self._behind.add(partition)
            self._idle_base = None

    def now(self, monotonic_s: float) -> int:
        """Event time at ``monotonic_s``."""
        if self._behind:
            return min(self._partition_newest.get(p, 0) for p in self._behind)
        base = self._idle_base
        if base is None:
            return self._newest
        return max(self._newest, base[0] + int((monotonic_s - base[1]) * 1000))
