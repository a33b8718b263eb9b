"""``atomickafka cluster``: one process per node (and per merger, and the live audit with
``--audit``), restarted when it dies.

The supervisor hands each child its :class:`~atomickafka.node.config.NodeConfig` as an
object (multiprocessing's ``spawn`` start method: a fresh interpreter, no Kafka client
crosses a fork) and restarts a child that exits, after a back-off that doubles while it
keeps failing fast.

With ``metrics_port`` set, the supervisor serves the metrics of every node and merger
child on that one port, and its restart counter (:mod:`atomickafka.metrics.cluster`).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from atomickafka.audit.config import AuditConfig
from atomickafka.logs import configure_logging
from atomickafka.metrics.cluster import ClusterMetrics
from atomickafka.node.config import ClusterConfig, NodeConfig

__all__ = ["Supervisor", "run_merger", "run_node"]

log = logging.getLogger("atomickafka.cluster")


def run_node(config: NodeConfig) -> int:
    """Run one node in this process until a signal stops it; return its exit status."""
    from atomickafka.node.runtime import NodeRuntime, NodeStartError  # noqa: PLC0415

    runtime = NodeRuntime(config)
    runtime.install_signal_handlers()
    try:
        return runtime.run()
    except NodeStartError as exc:
        log.error("node %s cannot start: %s", config.key, exc)
        return 2


def run_merger(config: NodeConfig) -> int:
    """Run one topic's merger in this process until a signal stops it."""
    from atomickafka.node.merger_runtime import MergerRuntime  # noqa: PLC0415

    runtime = MergerRuntime(config)
    runtime.install_signal_handlers()
    return runtime.run()


def _child(role: str, data: dict[str, Any]) -> None:
    """A child process's entry point (module level: ``spawn`` imports it by name)."""
    if role == "audit":
        from atomickafka.audit.service import run_audit  # noqa: PLC0415

        audit = AuditConfig.from_dict(data)
        configure_logging(audit.log_level)
        raise SystemExit(run_audit(audit))
    config = NodeConfig.from_dict(data)
    configure_logging(config.log_level)
    status = run_merger(config) if role == "merger" else run_node(config)
    raise SystemExit(status)


@dataclass(slots=True)
class _Child:
    role: str
    config: NodeConfig | AuditConfig
    process: BaseProcess | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = 0.0
    history: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        config = self.config
        if isinstance(config, AuditConfig) or self.role == "node":
            return config.key
        return f"{config.topic}/merger"


class Supervisor:
    """Keeps one process per node (and per merger) of a cluster alive.

    SIGINT/SIGTERM stop every child (SIGTERM, then SIGKILL after ``grace_s``).
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        copies = 2 if config.standby else 1  # an active instance and its standby
        self.children = [_Child("node", c) for c in config.node_configs() for _ in range(copies)]
        self.children += [
            _Child("merger", c) for c in config.merger_configs() for _ in range(copies)
        ]
        if config.audit is not None:
            self.children.append(_Child("audit", config.audit))
        self._context = multiprocessing.get_context("spawn")
        self._stopping = False
        #: Restarts per (role, key) since the supervisor started.
        self.restarts: dict[tuple[str, str], int] = {(c.role, c.name): 0 for c in self.children}
        self.metrics: ClusterMetrics | None = None

    def install_signal_handlers(self) -> None:
        """Stop on SIGINT and SIGTERM."""

        def _handler(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: stopping %d processes", signum, len(self.children))
            self._stopping = True

        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)

    def run(self, *, max_seconds: float | None = None) -> int:
        """Supervise until stopped (or ``max_seconds`` passed); return an exit status."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        node = self.config.node
        if node.metrics_port is not None:
            self.metrics = ClusterMetrics(node.metrics_host, node.metrics_port, self.restarts.copy)
            log.info("metrics of %d processes on %s", len(self.children), self.metrics.server.url)
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
            if self.metrics is not None:
                self.metrics.close()
        return 0

    def _tend(self, child: _Child, now: float) -> None:
        proc = child.process
        if proc is not None:
            if proc.is_alive():
                return
            code = proc.exitcode
            ran = now - child.started_at
            if ran > 30:
                child.restarts = 0  # it was healthy: a new failure starts a new back-off
            backoff = min(self.config.max_backoff_s, 0.5 * 2 ** min(child.restarts, 6))
            log.warning(
                "%s %s (pid %s) exited with %s after %.1fs; restarting in %.1fs",
                child.role,
                child.name,
                proc.pid,
                code,
                ran,
                backoff,
            )
            child.process = None
            child.restarts += 1
            self.restarts[(child.role, child.name)] += 1
            if self.metrics is not None:
                self.metrics.process_exited(proc.pid)
            child.next_start = now + backoff
        if now >= child.next_start:
            proc = self._context.Process(
                target=_child,
                args=(child.role, child.config.to_dict()),
                name=f"atomickafka-{child.role}-{child.name}",
            )
            with self._child_environment(child):
                proc.start()
            child.process = proc
            child.started_at = now
            log.info("%s %s started (pid %s)", child.role, child.name, proc.pid)

    def _child_environment(self, child: _Child) -> AbstractContextManager[None]:
        """Nodes and mergers record their metrics for the supervisor to serve; the
        audit serves its own (``--audit-metrics-port``)."""
        if self.metrics is None or child.role == "audit":
            return nullcontext()
        return self.metrics.child_environment()

    def _stop_all(self) -> None:
        running = [c.process for c in self.children if c.process and c.process.is_alive()]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + self.config.grace_s
        for proc in running:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                log.error("pid %s did not stop in %.0fs; killing it", proc.pid, self.config.grace_s)
                proc.kill()
                proc.join(timeout=10)
        log.info("all processes stopped")
