"""What the nemesis watches while it runs: which instance of every topic is active, on
which host, and when that changed (the takeovers), from the nodes' status topic.

A :class:`StatusRecorder` follows the status topic on a thread (twice a second), maps
each status's pid to the node host it runs in, and records a :class:`Takeover` whenever
a topic's live active instance is another process than before. Statuses are published
once a second, so a takeover is seen up to a second after the new instance went live.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atomickafka.kafka.connection import Connection
from atomickafka.kafka.status import StatusWatch

__all__ = ["Active", "StatusRecorder", "Takeover"]

#: A status older than this (s) does not say who is active now.
FRESH_S = 3.0


@dataclass(frozen=True)
class Active:
    """A topic's active instance as its last live status says."""

    pid: int
    host: str | None
    since: float  # wall time of the first live status of this pid


@dataclass(frozen=True)
class Takeover:
    """A topic's active instance changed: at ``at`` (wall time of the new instance's
    first live status), from ``before`` to ``after``."""

    topic: str
    at: float
    before: Active | None
    after: Active

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "topic": self.topic,
            "at": self.at,
            "from": None if self.before is None else vars(self.before),
            "to": vars(self.after),
        }


class StatusRecorder:
    """Follows the status topic on a thread; see the module."""

    def __init__(
        self, bootstrap: str, topics: tuple[str, ...], host_of: Callable[[int], str | None]
    ) -> None:
        self.topics = topics
        self.takeovers: list[Takeover] = []
        self.active: dict[str, Active] = {}
        self._host_of = host_of
        self._hosts: dict[int, str | None] = {}
        self._watch = StatusWatch(Connection(bootstrap), window_s=None)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="status-recorder", daemon=True)

    def start(self) -> StatusRecorder:
        """Start following."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):  # a broker cut off: read again next time
                self._observe(self._watch.refresh())

    def _observe(self, statuses: dict[str, Any]) -> None:
        now = time.time()
        for topic in self.topics:
            status = statuses.get(topic)
            if status is None or now - status.time > FRESH_S or status.replaying:
                continue
            with self._lock:
                current = self.active.get(topic)
                if current is not None and current.pid == status.pid:
                    continue
                if status.pid not in self._hosts:
                    self._hosts[status.pid] = self._host_of(status.pid)
                after = Active(status.pid, self._hosts[status.pid], status.time)
                self.active[topic] = after
                self.takeovers.append(Takeover(topic, status.time, current, after))

    def active_on(self, host: str) -> list[str]:
        """The topics whose active instance runs on ``host`` now."""
        with self._lock:
            return [t for t, a in self.active.items() if a.host == host]

    def active_pid(self, topic: str) -> int | None:
        """The pid of ``topic``'s active instance, if known."""
        with self._lock:
            active = self.active.get(topic)
        return None if active is None else active.pid

    def wait_all_active(self, timeout_s: float) -> bool:
        """Wait until every topic has a live active instance."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if all(t in self.active for t in self.topics):
                    return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        """Stop following."""
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(Exception):
            self._watch.close()
