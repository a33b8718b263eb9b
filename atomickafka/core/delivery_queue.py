"""The delivery queue of a node: its undelivered messages by ``(timeStamp, messageID)``.

Rule 4 (docs/DESIGN.md §4.4): the queue holds every undelivered message known here, at
its local proposal or, once decided, at its final timestamp; only a decided head is
delivered. The engine adds a message's key, moves it (remove, add) when its timestamp
changes, looks at the head and pops it. :class:`DeliveryQueue` does exactly that: a
binary heap (:mod:`heapq`, in C) with lazy removal, so that every operation is a few
C calls where ``sortedcontainers.SortedList`` (which it replaces) ran Python code for
each, which the compiled core cannot speed up. It keeps SortedList's semantics for the
operations it has: a sorted multiset of keys; ``remove`` of a key it does not hold
raises :class:`ValueError`, ``[0]`` and ``pop(0)`` of an empty queue :class:`IndexError`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

__all__ = ["DeliveryQueue", "QueueKey"]

#: A queued message's place: ``(timeStamp, messageID)``.
QueueKey = tuple[int, str]


class DeliveryQueue:
    """A sorted multiset of :data:`QueueKey`: ``add``, ``remove``, ``[0]`` (the
    smallest), ``pop(0)``, ``islice``, ``len``.

    The heap holds every key added and not yet popped from it; a removed key stays in
    it, counted in ``_stale``, until it reaches the top, where it is dropped at once (so
    the top is always held). ``_held`` counts the keys held, for ``remove`` and
    ``islice``.
    """

    def __init__(self) -> None:
        self._heap: list[QueueKey] = []
        self._held: dict[QueueKey, int] = {}
        self._stale: dict[QueueKey, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, key: QueueKey) -> None:
        """Hold ``key`` (once more, if held already)."""
        held = self._held
        held[key] = held.get(key, 0) + 1
        heapq.heappush(self._heap, key)
        self._size += 1

    def remove(self, key: QueueKey) -> None:
        """Hold ``key`` once less; :class:`ValueError` if it is not held."""
        held = self._held
        count = held.get(key, 0)
        if count == 0:
            raise ValueError(f"{key!r} not in the queue")
        if count == 1:
            del held[key]
        else:
            held[key] = count - 1
        stale = self._stale
        stale[key] = stale.get(key, 0) + 1
        self._size -= 1
        self._drop_stale()

    def __getitem__(self, index: int) -> QueueKey:
        """``queue[0]``: the smallest key (the only index the engine reads)."""
        if index != 0:
            raise IndexError("a DeliveryQueue gives its head only: queue[0]")
        if not self._size:
            raise IndexError("the queue is empty")
        return self._heap[0]

    def pop(self, index: int) -> QueueKey:
        """``queue.pop(0)``: remove and return the smallest key."""
        if index != 0:
            raise IndexError("a DeliveryQueue pops its head only: queue.pop(0)")
        if not self._size:
            raise IndexError("the queue is empty")
        key = heapq.heappop(self._heap)
        held = self._held
        count = held[key]
        if count == 1:
            del held[key]
        else:
            held[key] = count - 1
        self._size -= 1
        self._drop_stale()
        return key

    def islice(self, start: int = 0, stop: int | None = None) -> Iterator[QueueKey]:
        """The held keys from the ``start``-th smallest to before the ``stop``-th, in
        order (for introspection: a pass over the queue)."""
        keys = [key for key, count in self._held.items() for _ in range(count)]
        wanted = len(keys) if stop is None else min(stop, len(keys))
        return iter(heapq.nsmallest(wanted, keys)[start:])

    def _drop_stale(self) -> None:
        """Drop removed keys from the top of the heap, so that its top is held."""
        stale = self._stale
        if not stale:
            return
        heap = self._heap
        while heap:
            top = heap[0]
            count = stale.get(top, 0)
            if count == 0:
                return
            heapq.heappop(heap)
            if count == 1:
                del stale[top]
            else:
                stale[top] = count - 1
