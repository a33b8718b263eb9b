"""``cluster``'s one endpoint: the metrics of every node and merger it supervises, and
its restarts (``atomickafka_cluster_restarts_total``).

The children record their metrics in prometheus-client's multiprocess mode, in files
of a directory of this supervisor's own (created at start, named after its pid, removed
at the end -- or, after a SIGKILL, by the next ``cluster`` that starts on the host --
so two ``cluster`` processes on one host never mix their files); the supervisor serves them,
added up across processes, on the one ``--metrics-port``. Counters of a child that died
stay in the sums (so they never go down across a restart); its gauges are dropped
(:meth:`ClusterMetrics.process_exited`). The live audit (``cluster --audit``) keeps
its own endpoint (``--audit-metrics-port``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from atomickafka.metrics.serving import MetricsServer, serve

__all__ = [
    "DIRECTORY_PREFIX",
    "MULTIPROCESS_ENV",
    "ClusterMetrics",
    "RestartsCollector",
    "remove_orphaned_directories",
]

#: The environment variable that puts prometheus-client into multiprocess mode; it must
#: be set before a process creates its first metric, so it is given to children at start.
MULTIPROCESS_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"

#: Restarts per (role, key) of a child: ``node``/``T``, ``merger``/``T/merger``, ...
RestartTotals = Mapping[tuple[str, str], int]
#: A supervisor's metrics directory: ``<tmp>/atomickafka-metrics-<its pid>-<random>``.
DIRECTORY_PREFIX: Final = "atomickafka-metrics-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_orphaned_directories(folder: str | None = None) -> list[str]:
    """Remove the metrics directories of supervisors that are gone (a ``cluster``
    killed with SIGKILL cannot remove its own): those of this user named after a pid
    that no longer runs. Return what was removed."""
    where = folder or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(where)
    except OSError:
        return removed
    for name in names:
        pid_text = name.removeprefix(DIRECTORY_PREFIX).split("-", 1)[0]
        if not name.startswith(DIRECTORY_PREFIX) or not pid_text.isdigit():
            continue
        path = os.path.join(where, name)
        try:
            owned = os.stat(path).st_uid == os.getuid()
        except OSError:
            continue
        if owned and not _alive(int(pid_text)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class RestartsCollector:
    """``atomickafka_cluster_restarts_total{role,key}``, read from the supervisor's own
    count at each scrape."""

    def __init__(self, totals: Callable[[], RestartTotals]) -> None:
        self._totals = totals

    def collect(self) -> Iterable[Metric]:
        """The restart counter of every child."""
        family = CounterMetricFamily(
            "atomickafka_cluster_restarts",
            "Times the supervisor restarted a child process that had exited",
            labels=["role", "key"],
        )
        for (role, key), n in sorted(dict(self._totals()).items()):
            family.add_metric([role, key], n)
        yield family


class ClusterMetrics:
    """The supervisor's endpoint and the directory its children record into."""

    def __init__(self, host: str, port: int, restarts: Callable[[], RestartTotals]) -> None:
        remove_orphaned_directories()
        self.directory = tempfile.mkdtemp(prefix=f"{DIRECTORY_PREFIX}{os.getpid()}-")
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.directory)  # type: ignore[no-untyped-call]
        registry.register(RestartsCollector(restarts))
        try:
            self.server: MetricsServer = serve(registry, port, host)
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    @contextmanager
    def child_environment(self) -> Iterator[None]:
        """While the block runs (a child process being started), the environment a
        child inherits puts its metrics into this cluster's directory."""
        before = os.environ.get(MULTIPROCESS_ENV)
        os.environ[MULTIPROCESS_ENV] = self.directory
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(MULTIPROCESS_ENV, None)
            else:
                os.environ[MULTIPROCESS_ENV] = before

    def process_exited(self, pid: int | None) -> None:
        """Drop the gauges of child ``pid``, which exited (its counters stay summed)."""
        if pid is not None:
            mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Stop serving and remove the directory."""
        self.server.close()
        shutil.rmtree(self.directory, ignore_errors=True)
