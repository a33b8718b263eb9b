"""``atomickafka cluster``: one node process per topic, restarted when it dies."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType

__all__ = ["Supervisor"]

log = logging.getLogger("atomickafka.cluster")


@dataclass(slots=True)
class _Child:
    topic: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = 0.0
    history: list[float] = field(default_factory=list)


class Supervisor:
    """Keeps one ``atomickafka node`` process per topic alive.

    A child that exits is restarted after a back-off that doubles (up to
    ``max_backoff_s``) while it keeps failing fast. SIGINT/SIGTERM stop every child
    (SIGTERM, then SIGKILL after ``grace_s``) and return.
    """

    def __init__(
        self,
        topics: Sequence[str],
        node_args: Sequence[str],
        *,
        grace_s: float = 20.0,
        max_backoff_s: float = 10.0,
    ) -> None:
        base = [sys.executable, "-m", "atomickafka", "node", *node_args]
        self.children = [_Child(t, [*base, "--topic", t]) for t in topics]
        self.grace_s = grace_s
        self.max_backoff_s = max_backoff_s
        self._stopping = False

    def install_signal_handlers(self) -> None:
        """Stop on SIGINT and SIGTERM."""

        def _handler(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: stopping %d nodes", signum, len(self.children))
            self._stopping = True

        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)

    def run(self, *, max_seconds: float | None = None) -> int:
        """Supervise until stopped (or ``max_seconds`` passed); return an exit status."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        try:
            while not self._stopping:
                now = time.monotonic()
                for child in self.children:
                    self._tend(child, now)
                if deadline is not None and now >= deadline:
                    break
                time.sleep(0.2)
        finally:
            self._stop_all()
        return 0

    def _tend(self, child: _Child, now: float) -> None:
        proc = child.process
        if proc is not None:
            code = proc.poll()
            if code is None:
                return
            ran = now - child.started_at
            if ran > 30:
                child.restarts = 0  # it was healthy: a new failure starts a new back-off
            backoff = min(self.max_backoff_s, 0.5 * 2 ** min(child.restarts, 6))
            log.warning(
                "node %s (pid %d) exited with %d after %.1fs; restarting in %.1fs",
                child.topic,
                proc.pid,
                code,
                ran,
                backoff,
            )
            child.process = None
            child.restarts += 1
            child.next_start = now + backoff
        if now >= child.next_start:
            child.process = subprocess.Popen(child.argv)
            child.started_at = now
            log.info("node %s started (pid %d)", child.topic, child.process.pid)

    def _stop_all(self) -> None:
        running = [c.process for c in self.children if c.process and c.process.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + self.grace_s
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("node pid %d did not stop in %.0fs; killing it", proc.pid, self.grace_s)
                proc.kill()
                proc.wait(timeout=10)
        log.info("all nodes stopped")
