"""What every long-running shell shares: a stop flag, set by :meth:`Stoppable.stop` or by
SIGINT/SIGTERM, that its loop checks between batches."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

__all__ = ["Stoppable"]

log = logging.getLogger("atomickafka.node")


class Stoppable:
    """A loop that finishes its batch, flushes and returns once asked to stop."""

    def __init__(self) -> None:
        self._stop = threading.Event()

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
