"""Which OS process plays which part in a run, and the CPU time each spends in a window.

The processes of a run, and how each is told apart:

- the **broker**: the ``java ... kafka.Kafka`` process listening on the bootstrap's port
  (:func:`find_broker`; a broker on another machine is not measured);
- the **nodes** and **mergers**: children of the cluster's supervisor (the process
  ``running_cluster`` starts); each publishes its pid in its status, which names its
  topic, layer and role (:func:`cluster_processes`); the supervisor itself, and any
  child no status names (multiprocessing's resource tracker), are counted apart;
- a sequencer baseline's fan-out process (a Python **sequencer**, or the Kafka
  Streams application's JVM, the **streams app**), the bare hops' **relays**, the
  **clients** and the **measuring consumer**: their pids are known to whoever started
  them.

:class:`CpuMeter` samples each tracked process's CPU time (user + system, from the OS
through psutil) at the start and the end of a window. Everything it reads of a process
goes through :class:`ProcessInfo`, which ``psutil.Process`` satisfies, so tests give
it a synthetic process tree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Protocol

import psutil

from atomickafka.jsonnames import camel_keys
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.status import Role, Status

__all__ = [
    "ORDERING_ROLES",
    "CpuMeter",
    "CpuWindow",
    "ProcessCpu",
    "ProcessInfo",
    "ProcessRole",
    "bootstrap_port",
    "cluster_processes",
    "find_broker",
    "track_broker",
    "track_cluster",
]


class ProcessRole(StrEnum):
    """What a process is to the run."""

    BROKER = "broker"
    NODE = "node"
    MERGER = "merger"
    SEQUENCER = "sequencer"
    #: The Kafka Streams baseline's JVM (its fan-out process).
    STREAMS = "streams app"
    #: A relaying consumer-producer of the chained bare hops (no ordering).
    RELAY = "relay"
    SUPERVISOR = "supervisor"
    CLIENT = "client"
    MEASURER = "measuring consumer"
    OTHER = "other"


#: The processes that order messages: what a deployment runs per topic (or once, for
#: a sequencer baseline), as against the load's clients, the measurement and Kafka itself.
ORDERING_ROLES: Final = frozenset(
    {ProcessRole.NODE, ProcessRole.MERGER, ProcessRole.SEQUENCER, ProcessRole.STREAMS}
)


class ProcessInfo(Protocol):
    """What is read of a process (``psutil.Process`` has all of it)."""

    @property
    def pid(self) -> int:
        """The process id."""
        ...

    def cpu_times(self) -> Any:
        """CPU seconds so far, with ``user`` and ``system`` attributes."""
        ...

    def children(self, recursive: bool = False) -> Sequence[ProcessInfo]:
        """The processes it started."""
        ...

    def cmdline(self) -> list[str]:
        """Its command line."""
        ...

    def net_connections(self, kind: str = "inet") -> Sequence[Any]:
        """Its sockets, each with ``laddr`` (``.port``) and ``status``."""
        ...


#: Opens a process by pid (``psutil.Process``); raises ``psutil.Error`` when it is gone.
ProcessOpener = Callable[[int], ProcessInfo]


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    """CPU seconds one process spent over a window (``None``: it was not there at both
    ends, so its share is unknown)."""

    name: str
    role: ProcessRole
    pid: int
    cpu_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "name": self.name,
            "role": self.role.value,
            "pid": self.pid,
            "cpuSeconds": self.cpu_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessCpu:
        """Inverse of :meth:`to_dict`, also of the snake_case names of earlier files."""
        cpu = camel_keys(data).get("cpuSeconds")
        return cls(
            str(data["name"]),
            ProcessRole(data["role"]),
            int(data["pid"]),
            None if cpu is None else float(cpu),
        )


def _cpu_seconds(proc: ProcessInfo) -> float | None:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user) + float(times.system)


def bootstrap_port(bootstrap: str) -> int | None:
    """The port of the first broker of ``bootstrap`` when it is on this machine
    (``127.0.0.1``, ``localhost``, ``::1`` or this host's name), else ``None``."""
    first = bootstrap.split(",", maxsplit=1)[0].strip()
    host, _, port = first.rpartition(":")
    host = host.strip("[]")
    local = {"127.0.0.1", "localhost", "::1", "0.0.0.0", os.uname().nodename}
    if host not in local or not port.isdigit():
        return None
    return int(port)


def find_broker(port: int, processes: Iterable[ProcessInfo]) -> ProcessInfo | None:
    """The ``kafka.Kafka`` JVM among ``processes`` that listens on ``port``."""
    for proc in processes:
        try:
            if "kafka.Kafka" not in proc.cmdline():
                continue
            sockets = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets):
            return proc
    return None


def _status_name(status: Status) -> tuple[ProcessRole, str]:
    if status.role is Role.MERGER:
        return ProcessRole.MERGER, f"merger {status.topic}"
    return ProcessRole.NODE, f"node {status.key}"


def _other_name(proc: ProcessInfo) -> str:
    try:
        command = " ".join(proc.cmdline())
    except psutil.Error:
        command = ""
    if "resource_tracker" in command:
        return f"resource tracker {proc.pid}"
    return f"supervisor child {proc.pid}"


def cluster_processes(
    supervisor: ProcessInfo, statuses: Iterable[Status]
) -> list[tuple[ProcessInfo, ProcessRole, str]]:
    """The supervisor and every process under it, each with its role and name: a
    child whose pid a status names is that node (``node T``, ``node T/1`` for layer 1)
    or merger (``merger T``); other children are ``OTHER``."""
    by_pid = {s.pid: s for s in statuses if s.pid}
    out: list[tuple[ProcessInfo, ProcessRole, str]] = [
        (supervisor, ProcessRole.SUPERVISOR, "supervisor")
    ]
    try:
        children = supervisor.children(recursive=True)
    except psutil.Error:
        return out
    for child in children:
        status = by_pid.get(child.pid)
        if status is None:
            out.append((child, ProcessRole.OTHER, _other_name(child)))
        else:
            role, name = _status_name(status)
            out.append((child, role, name))
    return out


@dataclass(frozen=True, slots=True)
class CpuWindow:
    """A measured window: its wall-clock bounds (ms since the epoch, to match Kafka
    timestamps), its length, and each tracked process's CPU seconds in it."""

    start_ms: int
    end_ms: int
    seconds: float
    processes: tuple[ProcessCpu, ...]


class CpuMeter:
    """The CPU time of tracked processes over one window: :meth:`track` them,
    :meth:`start`, :meth:`stop`. A process gone before :meth:`stop` (or tracked after
    :meth:`start`) has no figure: its ``cpu_s`` is ``None``."""

    def __init__(self, opener: ProcessOpener = psutil.Process) -> None:
        self._opener = opener
        self._tracked: dict[int, tuple[ProcessInfo, ProcessRole, str]] = {}
        self._start: dict[int, float | None] = {}
        self._started: tuple[float, float] | None = None  # monotonic, wall clock
        #: The last window :meth:`stop` measured.
        self.window: CpuWindow | None = None

    def track(self, pid: int, role: ProcessRole, name: str) -> None:
        """Measure process ``pid`` (skipped, silently, if it is already gone)."""
        try:
            proc = self._opener(pid)
        except psutil.Error:
            return
        self.track_process(proc, role, name)

    def track_process(self, proc: ProcessInfo, role: ProcessRole, name: str) -> None:
        """Measure ``proc``."""
        self._tracked[proc.pid] = (proc, role, name)

    def track_all(self, processes: Iterable[tuple[ProcessInfo, ProcessRole, str]]) -> None:
        """Measure each of ``processes`` (as :func:`cluster_processes` lists them)."""
        for proc, role, name in processes:
            self.track_process(proc, role, name)

    def start(self) -> None:
        """Start the window: read every tracked process's CPU time now."""
        self._started = (time.monotonic(), time.time())
        self._start = {pid: _cpu_seconds(proc) for pid, (proc, _, _) in self._tracked.items()}

    def stop(self) -> CpuWindow:
        """End the window: each process's CPU seconds in it (also kept in :attr:`window`)."""
        if self._started is None:
            raise RuntimeError("CpuMeter.stop() before start()")
        out = []
        for pid, (proc, role, name) in self._tracked.items():
            before, after = self._start.get(pid), _cpu_seconds(proc)
            used = None if before is None or after is None else max(0.0, after - before)
            out.append(ProcessCpu(name, role, pid, used))
        began, began_wall = self._started
        self.window = CpuWindow(
            int(began_wall * 1000), int(time.time() * 1000), time.monotonic() - began, tuple(out)
        )
        return self.window


def track_broker(meter: CpuMeter, connection: Connection) -> bool:
    """Have ``meter`` measure the broker ``connection`` reaches first when it runs on
    this machine; return whether it was found."""
    port = bootstrap_port(connection.bootstrap)
    broker = None if port is None else find_broker(port, psutil.process_iter())
    if broker is not None:
        meter.track_process(broker, ProcessRole.BROKER, "broker")
    return broker is not None


def track_cluster(meter: CpuMeter, supervisor_pid: int, statuses: Iterable[Status]) -> None:
    """Have ``meter`` measure the cluster supervised by ``supervisor_pid``, its nodes
    and mergers named by ``statuses`` (:func:`cluster_processes`)."""
    try:
        supervisor = psutil.Process(supervisor_pid)
    except psutil.Error:
        return
    meter.track_all(cluster_processes(supervisor, statuses))
