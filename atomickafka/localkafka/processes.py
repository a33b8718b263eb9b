"""Broker processes: the JVM command line, storage formatting, spawning and ending brokers.

Brokers run detached in their own session, so they outlive the command that started them;
:func:`terminate` ends them (SIGTERM to the process group, then SIGKILL). A recorded PID
counts as our broker only if ``/proc`` shows ``kafka.Kafka`` run with that broker's config.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from atomickafka.localkafka.errors import BrokerError, Log
from atomickafka.localkafka.state import BrokerSpec, ClusterState, broker_dir

__all__ = [
    "alive_brokers",
    "exit_note",
    "format_storage",
    "is_our_broker",
    "java_command",
    "log_tail",
    "spawn",
    "terminate",
]

JVM_OPTS = ("-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
LOG_TAIL_LINES = 25

# Brokers started by this process; kept so they are reaped (no zombies) and so that
# Popen does not warn about children still running when it is collected.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
# How the brokers started here that have ended ended (Popen's return code), for errors.
_EXIT_CODES: dict[int, int] = {}


def exit_note(pid: int | None) -> str:
    """`` (exit code N)`` or `` (killed by signal N)`` for a broker started here that has
    ended, else ``""``."""
    code = _EXIT_CODES.get(pid) if pid is not None else None
    if code is None:
        return ""
    return f" (killed by signal {-code})" if code < 0 else f" (exit code {code})"


def is_our_broker(pid: int, data_dir: Path, node_id: int) -> bool:
    """True when ``pid`` is alive (not a zombie) and is the broker of that broker dir."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True  # our own child, still running (poll reaps a dead one)
        _EXIT_CODES[pid] = child.returncode
        del _CHILDREN[pid]
        # Popen says 0 when it cannot wait for the child (ECHILD, a child another waiter
        # reaped): a live process there is only believed dead if /proc agrees, below.
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            return False
        config = str(broker_dir(data_dir, node_id) / "server.properties").encode()
        return b"kafka.Kafka" in cmdline and config in cmdline
    try:  # no /proc (macOS): trust the PID
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive_brokers(data_dir: Path, brokers: Iterable[BrokerSpec]) -> list[BrokerSpec]:
    """Those of ``brokers`` whose recorded PID is still their running broker."""
    return [b for b in brokers if b.pid is not None and is_our_broker(b.pid, data_dir, b.node_id)]


def log_tail(data_dir: Path, node_id: int) -> str:
    """The last errors and lines of a broker's logs, indented, for an error message."""
    folder = broker_dir(data_dir, node_id)
    parts = []
    for path in (folder / "stdout.log", folder / "logs" / "server.log"):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        errors = [  # each ERROR line with the exception message on the line after it
            line
            + ("\n    " + lines[i + 1] if i + 1 < len(lines) and lines[i + 1][:1] != "[" else "")
            for i, line in enumerate(lines)
            if " ERROR " in line or " FATAL " in line
        ]
        if errors:
            shown = "\n".join("    " + line for line in errors[-10:])
            parts.append(f"  --- last errors in {path} ---\n{shown}")
        if lines:
            tail = "\n".join("    " + line for line in lines[-LOG_TAIL_LINES:])
            parts.append(f"  --- last lines of {path} ---\n{tail}")
    return "\n".join(parts) or f"  (no log in {folder})"


def java_command(java: str, lib: Path, folder: Path, main: str, *args: str) -> list[str]:
    """The JVM command line running ``main`` of the Kafka jars in ``lib`` with the
    broker files (``log4j2.xml``, ``logs/``) of ``folder``."""
    return [
        java,
        *JVM_OPTS,
        f"-Dlog4j2.configurationFile={folder / 'log4j2.xml'}",
        f"-Dkafka.logs.dir={folder / 'logs'}",
        "-cp",
        f"{lib}/*",
        main,
        *args,
    ]


def format_storage(java: str, lib: Path, data_dir: Path, state: ClusterState) -> None:
    """Run ``StorageTool format`` for every broker not formatted yet, in parallel."""
    pending: list[tuple[BrokerSpec, subprocess.Popen[str]]] = []
    for spec in state.brokers:
        folder = broker_dir(data_dir, spec.node_id)
        if (folder / "data" / "meta.properties").exists():
            continue
        cmd = java_command(
            java, lib, folder, "kafka.tools.StorageTool", "format",
            "-t", state.cluster_id, "-c", str(folder / "server.properties"),
            "--ignore-formatted",
        )  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder
        )
        pending.append((spec, proc))
    for spec, proc in pending:
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode != 0:
            raise BrokerError(
                f"formatting the storage of broker {spec.node_id} failed "
                f"(exit {proc.returncode}):\n{output.strip()}"
            )


def spawn(java: str, lib: Path, data_dir: Path, spec: BrokerSpec) -> int:
    """Start the broker ``spec`` detached (own session, output to ``stdout.log``); its PID."""
    folder = broker_dir(data_dir, spec.node_id)
    cmd = java_command(java, lib, folder, "kafka.Kafka", str(folder / "server.properties"))
    with (folder / "stdout.log").open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,  # own session and process group: survives our exit
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # the broker leads its own group (start_new_session)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(data_dir: Path, brokers: list[BrokerSpec], timeout: float) -> list[BrokerSpec]:
    """Wait up to ``timeout`` s for ``brokers`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = alive_brokers(data_dir, brokers)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def terminate(data_dir: Path, brokers: Iterable[BrokerSpec], timeout: float, log: Log) -> int:
    """SIGTERM the process groups of ``brokers``, SIGKILL what remains after ``timeout`` s.

    Returns how many were running; raises :class:`BrokerError` if one survives SIGKILL.
    """
    running = alive_brokers(data_dir, brokers)
    pids = [b.pid for b in running if b.pid is not None]
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    left = _wait_gone(data_dir, running, timeout)
    for spec in left:
        log(f"broker {spec.node_id} (pid {spec.pid}) still runs after {timeout:.0f} s; SIGKILL")
        if spec.pid is not None:
            _signal_group(spec.pid, signal.SIGKILL)
    left = _wait_gone(data_dir, left, 10.0)
    for pid in pids:  # whatever the broker left in its process group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _CHILDREN.pop(pid, None)
    if left:
        stuck = ",".join(str(b.pid) for b in left)
        raise BrokerError(f"broker process(es) {stuck} survived SIGKILL; see `ps -p {stuck}`")
    return len(running)
