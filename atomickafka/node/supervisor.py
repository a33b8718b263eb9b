"""``atomickafka cluster``: one process per node (and per merger, and the live audit with
``--audit``), restarted when it dies.

The supervisor hands each child its :class:`~atomickafka.node.config.NodeConfig` as an
object (multiprocessing's ``spawn`` start method: a fresh interpreter, no Kafka client
crosses a fork) and restarts a child that exits, after a back-off that doubles while it
keeps failing fast. It does not restart a child that cannot work at all: one whose
settings or topics are wrong (exit status :data:`EXIT_CANNOT_START`), or one that
cannot reach Kafka (:data:`EXIT_UNREACHABLE`) while the supervisor cannot reach it
either; it stops every child then, and :attr:`Supervisor.failure` says why.

Each child is titled after what it runs (``atomickafka node orders/2``, in ``ps`` and
``top``), logs JSON lines, and ends when its supervisor ends, even by SIGKILL: Linux's
``PR_SET_PDEATHSIG`` sends it SIGTERM, and a thread watching the parent's pid covers
what that misses (then SIGKILL after :data:`ORPHAN_GRACE_S`).

With ``metrics_port`` set, the supervisor serves the metrics of every node and merger
child on that one port, and its restart counter (:mod:`atomickafka.metrics.cluster`).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, Final

from setproctitle import setproctitle

from atomickafka.audit.config import AuditConfig
from atomickafka.errors import ConfigError
from atomickafka.kafka.properties import secret_values
from atomickafka.kafka.reach import is_unreachable, probe
from atomickafka.logs import configure_logging, hide_in_logs
from atomickafka.metrics.cluster import ClusterMetrics
from atomickafka.node.config import ClusterConfig, HostConfig, NodeConfig
from atomickafka.node.role_shell import EXIT_WEDGED, RoleShell

__all__ = [
    "EXIT_CANNOT_START",
    "EXIT_UNREACHABLE",
    "ORPHAN_GRACE_S",
    "Supervisor",
    "process_title",
    "run_host",
    "run_merger",
    "run_node",
]

log = logging.getLogger("atomickafka.cluster")

#: A child's exit status when it cannot start with its settings (not restarted).
EXIT_CANNOT_START: Final = 2
#: A child's exit status when Kafka cannot be reached (restarted only if it can be).
EXIT_UNREACHABLE: Final = 3
#: How long an orphaned child may take to stop cleanly before it kills itself (s).
ORPHAN_GRACE_S: Final = 15.0
#: How long children get to stop when Kafka is unreachable (a flush cannot succeed).
_UNREACHABLE_GRACE_S: Final = 3.0
_PR_SET_PDEATHSIG: Final = 1


def _run_role(runtime: RoleShell, what: str) -> int:
    """Run a role's instance in this process until a signal stops it; its exit status
    (:data:`EXIT_CANNOT_START` when its settings or topics are wrong)."""
    from atomickafka.node.runtime import NodeStartError  # noqa: PLC0415

    runtime.install_signal_handlers()
    try:
        return runtime.run()
    except NodeStartError as exc:
        log.error("%s %s cannot start: %s", what, runtime.role_key, exc)
        return EXIT_CANNOT_START


def run_node(config: NodeConfig) -> int:
    """Run one node in this process until a signal stops it; return its exit status."""
    from atomickafka.node.runtime import NodeRuntime  # noqa: PLC0415

    return _run_role(NodeRuntime(config), "node")


def run_merger(config: NodeConfig) -> int:
    """Run one topic's merger in this process until a signal stops it."""
    from atomickafka.node.merger_runtime import MergerRuntime  # noqa: PLC0415

    return _run_role(MergerRuntime(config), "merger")


def run_host(config: HostConfig) -> int:
    """Run a host process's nodes in this process until a signal stops it."""
    from atomickafka.node.host import HostRuntime  # noqa: PLC0415

    return _run_role(HostRuntime(config), "host")


def process_title(role: str, config: NodeConfig) -> str:
    """What ``ps`` shows for a child: ``atomickafka node T`` (``T/p`` for layer ``p``),
    ``atomickafka merger T``."""
    what = config.topic if role == "merger" else config.key
    return f"atomickafka {role} {what}"


def _die_with_parent(parent: int) -> None:
    """End this process when ``parent`` does: SIGTERM from the kernel (Linux), and a
    watch on the parent's pid wherever that is missing or missed."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover (no libc prctl)
            log.warning("cannot ask to be stopped with the supervisor; watching its pid")

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.error("supervisor (pid %d) is gone; stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        log.error("did not stop in %.0f s after the supervisor died; exiting", ORPHAN_GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _child(role: str, data: dict[str, Any], parent: int = 0) -> None:
    """A child process's entry point (module level: ``spawn`` imports it by name)."""
    if role == "audit":
        from atomickafka.audit.service import run_audit  # noqa: PLC0415

        audit = AuditConfig.from_dict(data)
        configure_logging(audit.log_level)
        raise SystemExit(run_audit(audit))
    host = HostConfig.from_dict(data) if role == "host" else None
    config = host.nodes[0] if host is not None else NodeConfig.from_dict(data)
    hide_in_logs(secret_values(config.overrides))
    configure_logging(config.log_level)
    setproctitle(f"atomickafka host {host.key}" if host else process_title(role, config))
    if parent:
        _die_with_parent(parent)
    try:
        if host is not None:
            status = run_host(host)
        else:
            status = run_merger(config) if role == "merger" else run_node(config)
    except ConfigError as exc:
        log.error("%s %s cannot start: %s", role, config.key, exc)
        status = EXIT_CANNOT_START
    except Exception as exc:
        if not is_unreachable(exc):
            log.exception("%s %s failed", role, config.key)
            raise SystemExit(1) from None
        log.error("%s %s cannot reach Kafka at %s: %s", role, config.key, config.bootstrap, exc)
        status = EXIT_UNREACHABLE
    if status == EXIT_WEDGED:
        # a librdkafka call still blocks on another thread: a normal exit would try to
        # destroy that client and could hang with it
        logging.shutdown()
        os._exit(status)
    raise SystemExit(status)


@dataclass(slots=True)
class _Child:
    role: str
    config: NodeConfig | AuditConfig | HostConfig
    process: BaseProcess | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = 0.0
    history: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        config = self.config
        if isinstance(config, AuditConfig | HostConfig) or self.role == "node":
            return config.key
        return f"{config.topic}/merger"


class Supervisor:
    """Keeps one process per node (and per merger) of a cluster alive.

    SIGINT/SIGTERM stop every child (SIGTERM, then SIGKILL after ``grace_s``).
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        copies = 2 if config.standby else 1  # an active instance and its standby
        hosts = config.host_configs()
        if hosts:  # several topics' nodes in each process, sharing its Kafka clients
            self.children = [_Child("host", h) for h in hosts for _ in range(copies)]
        else:
            self.children = [
                _Child("node", c) for c in config.node_configs() for _ in range(copies)
            ]
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
        #: Why the supervisor stopped on its own (``None``: stopped by a signal or time).
        self.failure: str | None = None

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
        status = 0
        grace = self.config.grace_s
        node = self.config.node
        if node.metrics_port is not None:
            self.metrics = ClusterMetrics(node.metrics_host, node.metrics_port, self.restarts.copy)
            log.info("metrics of %d processes on %s", len(self.children), self.metrics.server.url)
        try:
            while not self._stopping:
                now = time.monotonic()
                for child in self.children:
                    status = self._tend(child, now)
                    if status:
                        break
                if status or (deadline is not None and now >= deadline):
                    break
                time.sleep(0.2)
        finally:
            if self.failure is not None:
                log.error("stopping every process: %s", self.failure)
                grace = min(grace, _UNREACHABLE_GRACE_S)
            self._stop_all(grace)
            if self.metrics is not None:
                self.metrics.close()
        return status

    def _cannot_go_on(self, child: _Child, code: int | None) -> int:
        """The status to stop the whole cluster with after ``child`` exited with
        ``code``, or 0 to restart it."""
        if code == EXIT_CANNOT_START:
            self.failure = f"{child.role} {child.name} cannot start (see its log line above)"
            return EXIT_CANNOT_START
        if code == EXIT_UNREACHABLE:
            try:
                probe(self.config.node.connection)
            except Exception as exc:
                if not is_unreachable(exc):
                    raise
                self.failure = str(exc)
                return 1
        return 0

    def _tend(self, child: _Child, now: float) -> int:
        """Start ``child`` when due, note it when it died; return a non-zero status when
        the cluster cannot go on."""
        proc = child.process
        if proc is not None:
            if proc.is_alive():
                return 0
            code = proc.exitcode
            stop = self._cannot_go_on(child, code)
            if stop:
                return stop
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
                args=(child.role, child.config.to_dict(), os.getpid()),
                name=f"atomickafka-{child.role}-{child.name}",
            )
            with self._child_environment(child):
                proc.start()
            child.process = proc
            child.started_at = now
            log.info("%s %s started (pid %s)", child.role, child.name, proc.pid)
        return 0

    def _child_environment(self, child: _Child) -> AbstractContextManager[None]:
        """Nodes and mergers record their metrics for the supervisor to serve; the
        audit serves its own (``--audit-metrics-port``)."""
        if self.metrics is None or child.role == "audit":
            return nullcontext()
        return self.metrics.child_environment()

    def _stop_all(self, grace_s: float) -> None:
        running = [c.process for c in self.children if c.process and c.process.is_alive()]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in running:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                log.error("pid %s did not stop in %.0fs; killing it", proc.pid, grace_s)
                proc.kill()
                proc.join(timeout=10)
        log.info("all processes stopped")
