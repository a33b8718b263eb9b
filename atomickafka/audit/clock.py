"""The live audit's event time (``docs/DESIGN.md`` §10.3).

The bound of rule 3 is measured in the time the deliveries were written (their Kafka
timestamps), so an audit that reads a backlog judges it as it was written, however
fast it reads, and the Spark job, which can only use event time, agrees with it. One
thing event time cannot see is a destination that stays silent while nothing else is
written either; so while the reader has read every partition to its end, time moves
on with the local clock from the newest record time read.
"""

from __future__ import annotations

__all__ = ["EventClock"]


class EventClock:
    """Event time in milliseconds: the newest record time read, moved on by the local
    (monotonic) clock while the reader is caught up. Pure: the caller passes the
    monotonic readings."""

    __slots__ = ("_idle_base", "_newest")

    def __init__(self) -> None:
        self._newest = 0
        self._idle_base: tuple[int, float] | None = None

    @property
    def newest_record_ms(self) -> int:
        """The newest record time read so far."""
        return self._newest

    def record(self, time_ms: int) -> None:
        """A record written at ``time_ms`` was read."""
        self._newest = max(self._newest, time_ms)

    def caught_up(self, caught_up: bool, monotonic_s: float) -> None:
        """Whether the reader is at the end of every partition, at ``monotonic_s``."""
        if not caught_up:
            self._idle_base = None
        elif self._idle_base is None:
            self._idle_base = (self._newest, monotonic_s)

    def now(self, monotonic_s: float) -> int:
        """Event time at ``monotonic_s``."""
        base = self._idle_base
        if base is None:
            return self._newest
        moved = base[0] + int((monotonic_s - base[1]) * 1000)
        return max(self._newest, moved)
