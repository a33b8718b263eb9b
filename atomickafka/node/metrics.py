"""What a node measures about itself: rates over the last status interval, and how long
the head of its queue has been waiting (the stuck-message warning)."""

from __future__ import annotations

from dataclasses import dataclass, field

from atomickafka.core.engine import EngineStats

__all__ = ["HeadWatch", "Rates"]


@dataclass(slots=True)
class Rates:
    """Records in (Kafka records read), messages out and deliveries per second, over
    the interval since the last :meth:`take`."""

    records: int = 0
    _last_time: float | None = None
    _last: tuple[int, int, int] = (0, 0, 0)

    def count(self, records: int) -> None:
        """One processed batch of ``records`` Kafka records."""
        self.records += records

    def take(self, stats: EngineStats, now: float) -> tuple[float, float, float]:
        """``(records in/s, outputs/s, deliveries/s)``; starts a new interval."""
        current = (self.records, stats.records_out, stats.deliveries)
        if self._last_time is None:
            self._last_time, self._last = now, current
            return (0.0, 0.0, 0.0)
        elapsed = max(now - self._last_time, 1e-9)
        rates = tuple(round((c - p) / elapsed, 1) for c, p in zip(current, self._last, strict=True))
        self._last_time, self._last = now, current
        return rates[0], rates[1], rates[2]


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

    def age(self, head: str | None, now: float) -> float | None:
        """Seconds ``head`` has been at the head of the queue (``None``: empty queue)."""
        if head != self._head:
            self._head, self._since = head, now
            self._warned_at.clear()
        return None if head is None else round(now - self._since, 3)

    def stuck(self, head: str | None, now: float) -> float | None:
        """The head's age when it is time to warn about it (once per ``stuck_after_s``)."""
        if head is None or head != self._head:
            return None
        age = now - self._since
        last = self._warned_at.get(head, self._since)
        if age >= self.stuck_after_s and now - last >= self.stuck_after_s:
            self._warned_at[head] = now
            return age
        return None
