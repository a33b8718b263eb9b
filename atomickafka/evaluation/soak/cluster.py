"""The soak's cluster: ``atomickafka cluster`` run as a subprocess, as an operator runs
it, and what the soak reads of it.

- :func:`cluster_argv` is the command line for a :class:`ClusterOptions` (standby,
  delivery mode, snapshots on or off, the takeover's session timeout), with the
  supervisor's Prometheus endpoint on a loopback port; the connection's librdkafka
  settings go in a properties file (``--command-config``, written by
  :func:`write_settings`, readable by its owner only), never on the command line,
  where ``ps`` would show a password;
- :class:`ClusterCommand` starts it, waits until every node has published a live,
  not-replaying status, and stops it (SIGTERM, then SIGKILL after a minute);
- :meth:`ClusterCommand.node_processes` lists the node processes under the supervisor
  (a topic has two with ``--standby``), :meth:`ClusterCommand.metric` reads one series
  of the endpoint (``atomickafka_node_recovery_seconds`` of a topic, say).

Snapshots are turned off by making them never due: a snapshot is taken after
``--snapshot-every`` input records or ``--snapshot-interval`` seconds
(``node/batch.py``), and a node takes none when it stops, so with both beyond any run a
restarted node replays its whole input log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

import psutil
from prometheus_client.parser import text_string_to_metric_families

from atomickafka.errors import ConfigError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.status import wait_for_nodes
from atomickafka.localkafka import free_port_block
from atomickafka.node.launch import stop_supervisor

__all__ = [
    "NEVER_RECORDS",
    "NEVER_SECONDS",
    "ClusterCommand",
    "ClusterOptions",
    "cluster_argv",
    "metric_value",
    "node_of_cmdline",
    "write_settings",
]

#: ``--snapshot-every`` and ``--snapshot-interval`` beyond any run: no snapshot is due.
NEVER_RECORDS: Final = 10**15
NEVER_SECONDS: Final = 1e12


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """How the soak runs ``atomickafka cluster`` (``None``: the command's default)."""

    standby: bool = False
    exactly_once: bool = True
    snapshots: bool = True
    takeover_after_s: float | None = None
    log_level: str = "warning"

    def describe(self) -> str:
        """A few words for reports: ``exactly-once, snapshots, standby (2 s)``."""
        parts = ["exactly-once" if self.exactly_once else "at-least-once"]
        parts.append("snapshots" if self.snapshots else "no snapshots")
        if self.standby:
            after = "" if self.takeover_after_s is None else f" ({self.takeover_after_s:g} s)"
            parts.append(f"standby{after}")
        return ", ".join(parts)


def write_settings(connection: Connection, path: Path) -> None:
    """Write ``connection``'s librdkafka settings to ``path`` as a properties file
    (``key=value`` lines, as ``--command-config`` reads them), readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{key}={value}\n" for key, value in connection.settings.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def cluster_argv(
    connection: Connection,
    topics: Sequence[str],
    options: ClusterOptions,
    metrics_port: int,
    settings_file: Path | None = None,
) -> list[str]:
    """The ``atomickafka cluster`` command line for ``options`` (this interpreter's
    ``python -m atomickafka``) on ``connection``, serving metrics on
    127.0.0.1:``metrics_port``. A connection with librdkafka settings needs the
    ``settings_file`` they are written to (:func:`write_settings`)."""
    argv = [sys.executable, "-m", "atomickafka", "cluster"]
    argv += ["--bootstrap-server", connection.bootstrap]
    if connection.settings:
        if settings_file is None:
            raise ConfigError("the cluster's librdkafka settings need a file to be passed in")
        argv += ["--command-config", str(settings_file)]
    argv += ["--topics", ",".join(topics), "--log-level", options.log_level]
    argv += ["--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"]
    if options.standby:
        argv.append("--standby")
    if not options.exactly_once:
        argv.append("--at-least-once")
    if not options.snapshots:
        argv += ["--snapshot-every", str(NEVER_RECORDS)]
        argv += ["--snapshot-interval", f"{NEVER_SECONDS:g}"]
    if options.takeover_after_s is not None:
        argv += ["--takeover-after", f"{options.takeover_after_s:g}"]
    return argv


def node_of_cmdline(cmdline: Sequence[str]) -> str | None:
    """The status key of a node process from its command line (the supervisor's
    children are titled ``atomickafka node KEY``), or ``None`` for another process."""
    words = " ".join(cmdline).split()
    if len(words) == 3 and words[:2] == ["atomickafka", "node"]:
        return words[2]
    return None


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels`` in a Prometheus
    text exposition; the sum when several match (a counter kept per process); ``None``
    when none does."""
    found: list[float] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                found.append(sample.value)
    return sum(found) if found else None


class ClusterCommand:
    """``atomickafka cluster`` over ``topics`` for a ``with`` block (the block starts once
    every node is live), its log in ``log_path``; it reaches Kafka through
    ``connection`` (its settings written beside the log, :func:`write_settings`)."""

    def __init__(
        self,
        connection: Connection,
        topics: Sequence[str],
        options: ClusterOptions,
        log_path: Path,
        *,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.connection = connection
        self.topics = tuple(topics)
        self.options = options
        self.metrics_port = free_port_block(1)
        self._settings_file = log_path.with_suffix(".properties") if connection.settings else None
        self.argv = cluster_argv(
            connection, self.topics, options, self.metrics_port, self._settings_file
        )
        self._log_path = log_path
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ClusterCommand:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._settings_file is not None:
            write_settings(self.connection, self._settings_file)
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_nodes(self.connection, self.topics, timeout_s=self._start_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """The supervisor's pid."""
        assert self._proc is not None, "the cluster was not started"
        return self._proc.pid

    def alive(self) -> bool:
        """The supervisor still runs."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the supervisor (it stops every child), SIGKILL it after a minute."""
        if self._proc is not None:
            stop_supervisor(self._proc)

    def node_processes(self) -> dict[str, list[int]]:
        """The pids of the node processes under the supervisor now, by status key."""
        out: dict[str, list[int]] = {}
        try:
            children = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return out
        for child in children:
            try:
                key = node_of_cmdline(child.cmdline())
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            if key is not None:
                out.setdefault(key, []).append(child.pid)
        return out

    def metrics_text(self, timeout_s: float = 5.0) -> str:
        """The supervisor's Prometheus exposition now ("" when it does not answer)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                return bytes(response.read()).decode()
        except OSError:
            return ""

    def metric(self, name: str, **labels: str) -> float | None:
        """One series of the endpoint (:func:`metric_value`)."""
        return metric_value(self.metrics_text(), name, **labels)

    def wait_for_processes(self, per_key: int, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until every topic has ``per_key`` node processes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            running = self.node_processes()
            if all(len(running.get(t, [])) >= per_key for t in self.topics):
                return True
            time.sleep(0.5)
        return False
