"""What every long-running shell shares: a stop flag, set by :meth:`Stoppable.stop` or by
SIGINT/SIGTERM, that its loop checks between batches, and the loop's clock (a status
every interval, an optional end)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Final

from atomickafka.kafka.settings import REPEATED_LINES

__all__ = ["LAGGING_STATUS_INTERVAL_S", "LAGGING_STATUS_S", "Stoppable"]

log = logging.getLogger("atomickafka.node")

#: A shell whose input has waited longer than this publishes its status every
#: :data:`LAGGING_STATUS_INTERVAL_S` instead of every interval: the clients that hold
#: back for it (docs/DESIGN.md §5.3) see the lag grow, and end, within a quarter second.
LAGGING_STATUS_S: Final = 0.25
LAGGING_STATUS_INTERVAL_S: Final = 0.25


class Stoppable:
    """A loop that finishes its batch, flushes and returns once asked to stop."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._status_interval_s = 1.0
        self._next_status = 0.0
        #: Set by a shell whose last status showed its input waiting (LAGGING_STATUS_S).
        self._lagging = False
        self._next_check = 0.0  # when to look again whether the input began to wait
        self._ends_at: float | None = None

    def _start_clock(self, status_interval_s: float, max_seconds: float | None) -> None:
        """Start the loop's clock: a status at once and then every ``status_interval_s``;
        the end after ``max_seconds`` (``None``: only when stopped)."""
        now = time.monotonic()
        self._status_interval_s, self._next_status = status_interval_s, now
        self._ends_at = None if max_seconds is None else now + max_seconds

    def _tick(self, now: float) -> bool:
        """Publish the status when it is due (every interval, every quarter second while
        the input waits, and at once when it begins to wait); return True once the
        run's time is up."""
        if not self._lagging and now >= self._next_check and now < self._next_status:
            self._next_check = now + LAGGING_STATUS_INTERVAL_S
            if self._behind_s() > LAGGING_STATUS_S:
                self._next_status = now  # a flood began: the clients hear of it now
        if now >= self._next_status:
            self._publish_status(now)
            interval = self._status_interval_s
            if self._lagging:
                interval = min(interval, LAGGING_STATUS_INTERVAL_S)
            self._next_status = now + interval
            REPEATED_LINES.flush()  # the count of librdkafka lines that stopped coming
        return self._ends_at is not None and now >= self._ends_at

    def _publish_status(self, now: float) -> None:
        """Measure and publish the shell's status (each shell says how)."""
        raise NotImplementedError

    def _behind_s(self) -> float:
        """How far behind its input the shell is, in seconds, cheaply (no request to
        the broker); a shell whose clients do not hold back for it says 0."""
        return 0.0

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Ask the loop to finish its batch, flush, commit and return."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """Stop cleanly on SIGINT and SIGTERM."""

        def _handler(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: stopping", signum)
            self.stop()

        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)
