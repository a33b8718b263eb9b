"""Where a simulator's scheduling choices come from.

:class:`RandomChooser` wraps a :class:`random.Random` (a run is a pure function of the
seed); :class:`DataChooser` draws every choice from Hypothesis's ``data`` object, so a
failing schedule shrinks to fewer misbehaviours and smaller batches and indices.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["Chooser", "DataChooser", "RandomChooser", "pick"]

_T = TypeVar("_T")


class Chooser(Protocol):
    """Where the scheduler's choices come from."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]`` (both included)."""
        ...

    def chance(self, probability: float) -> bool:
        """True with ``probability``; a shrinking chooser prefers False."""
        ...


class RandomChooser:
    """Choices from a :class:`random.Random` (or a seed): deterministic given the seed."""

    def __init__(self, rng: random.Random | int) -> None:
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        return self.rng.randint(low, high)

    def chance(self, probability: float) -> bool:
        """True with ``probability``."""
        return probability > 0 and self.rng.random() < probability


class DataChooser:
    """Choices drawn from Hypothesis's ``data`` object (``st.data()``).

    Every choice is a draw, so Hypothesis can shrink a failing schedule towards fewer
    misbehaviours (``chance`` shrinks to False) and smaller batches and indices.
    """

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st  # noqa: PLC0415 (tests only)

        self._data = data
        self._st = st

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``, drawn."""
        if low == high:
            return low
        value: int = self._data.draw(self._st.integers(low, high))
        return value

    def chance(self, probability: float) -> bool:
        """True with roughly ``probability``; shrinks to False."""
        if probability <= 0:
            return False
        threshold = 1000 - max(1, round(probability * 1000))
        drawn: int = self._data.draw(self._st.integers(0, 999))
        return drawn >= threshold


def pick(chooser: Chooser, items: Sequence[_T]) -> _T:
    """One of ``items``, chosen."""
    return items[chooser.integer(0, len(items) - 1)]
