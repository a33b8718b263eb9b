"""Observing a batch of values into a Prometheus histogram at once.

A node writes thousands of deliveries a second; ``Histogram.observe`` per delivery
takes a lock and (in multiprocess mode) writes a shared file each time, a few µs per
call. :class:`BatchObserver` counts a batch's values per bucket in plain Python and
adds each bucket's count once, through the histogram's own per-bucket values, so the
cost per value is one ``bisect``. When a prometheus-client release no longer has those
values, it falls back to ``observe`` per value (the result is the same).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import Histogram

__all__ = ["BatchObserver"]


class BatchObserver:
    """Adds batches of observations to one histogram child (one label set)."""

    def __init__(self, child: Histogram) -> None:
        self._child = child
        bounds = getattr(child, "_upper_bounds", None)
        buckets = getattr(child, "_buckets", None)
        total = getattr(child, "_sum", None)
        fast = bounds is not None and buckets is not None and total is not None
        self._bounds: list[float] = list(bounds) if fast and bounds is not None else []
        self._buckets: list[Any] = list(buckets) if fast and buckets is not None else []
        self._sum: Any = total if fast else None

    def observe_all(self, values: Iterable[float]) -> int:
        """Observe every value of ``values``; return how many there were."""
        if self._sum is None:
            n = 0
            for value in values:
                self._child.observe(value)
                n += 1
            return n
        bounds = self._bounds
        counts = [0] * len(bounds)
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        n = sum(counts)
        if n:
            for index, count in enumerate(counts):
                if count:
                    self._buckets[index].inc(count)
            self._sum.inc(total)
        return n
