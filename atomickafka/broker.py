"""Start, stop and inspect a local Apache Kafka (KRaft, one or three brokers) without Docker.

A *data dir* holds one cluster: ``state.json`` (cluster id, ports, PIDs) and one folder per
broker (``node-<id>/`` with its ``server.properties``, ``log4j2.xml``, ``data/`` and ``logs/``).
Broker ``i`` (0-based) listens on ``port + 2*i`` (clients) and ``port + 2*i + 1`` (controller),
on 127.0.0.1 only. Brokers run detached in their own session, so they outlive the command
that started them; :func:`stop_broker` ends them (SIGTERM to the process group, then SIGKILL).

    bootstrap = ensure_broker()          # "127.0.0.1:19092", started if not running
    stop_broker(default_data_dir())
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from atomickafka.kafka_runtime import (
    BrokerError,
    Log,
    cache_dir,
    fetch_kafka,
    file_lock,
    find_java,
    kafka_version,
    log_stderr,
    render_template,
)

__all__ = [
    "DEFAULT_PORT",
    "BrokerError",
    "ClusterState",
    "NodeSpec",
    "NodeStatus",
    "broker_status",
    "default_data_dir",
    "ensure_broker",
    "free_port_block",
    "new_cluster_id",
    "purge_data_dir",
    "running_bootstrap",
    "stop_broker",
]

#: Client port of the first broker; its controller uses the next port.
DEFAULT_PORT = 19092
#: Cluster sizes with a config template.
SUPPORTED_SIZES = (1, 3)
STATE_FILE = "state.json"
JVM_OPTS = ("-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
LOG_TAIL_LINES = 25

# Brokers started by this process; kept so they are reaped (no zombies) and so that
# Popen does not warn about children still running when it is collected.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class NodeSpec:
    """One broker of a cluster: its node id, ports and, while it runs, its PID."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None


@dataclass(frozen=True)
class ClusterState:
    """What ``state.json`` records about the cluster in a data dir."""

    cluster_id: str
    kafka_version: str
    nodes: tuple[NodeSpec, ...] = field(default_factory=tuple)

    @property
    def bootstrap(self) -> str:
        """Bootstrap servers of every broker, ``127.0.0.1:port,...``."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def voters(self) -> str:
        """Static ``controller.quorum.voters`` value."""
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)


@dataclass(frozen=True)
class NodeStatus:
    """Observed state of one broker process."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None
    alive: bool
    listening: bool
    log_file: Path


def default_data_dir() -> Path:
    """Data dir used when none is given: ``<cache>/run``."""
    return cache_dir() / "run"


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes as 22 chars of URL-safe base64."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like a CLI option
            return text


def _node_dir(data_dir: Path, node_id: int) -> Path:
    return data_dir / f"node-{node_id}"


def _load_state(data_dir: Path) -> ClusterState | None:
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        nodes = tuple(
            NodeSpec(int(n["node_id"]), int(n["port"]), int(n["controller_port"]), n.get("pid"))
            for n in raw["nodes"]
        )
        return ClusterState(str(raw["cluster_id"]), str(raw["kafka_version"]), nodes)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BrokerError(
            f"{path} is unreadable ({exc}); stop any broker by hand and delete {data_dir}"
        ) from exc


def _save_state(data_dir: Path, state: ClusterState) -> None:
    payload = {
        "cluster_id": state.cluster_id,
        "kafka_version": state.kafka_version,
        "bootstrap": state.bootstrap,
        "nodes": [
            {
                "node_id": n.node_id,
                "port": n.port,
                "controller_port": n.controller_port,
                "pid": n.pid,
            }
            for n in state.nodes
        ],
    }
    tmp = data_dir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(data_dir / STATE_FILE)


def _is_our_broker(pid: int, data_dir: Path, node_id: int) -> bool:
    """True when ``pid`` is alive (not a zombie) and is the broker of that node dir."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]
        return False
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            return False
        config = str(_node_dir(data_dir, node_id) / "server.properties").encode()
        return b"kafka.Kafka" in cmdline and config in cmdline
    try:  # no /proc (macOS): trust the PID
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _port_accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port_block(count: int, low: int = 20000, high: int = 32000) -> int:
    """Return a base port ``p`` such that ``p .. p+count-1`` are all free on 127.0.0.1.

    The default range stays below Linux's ephemeral ports (32768+), which clients use.
    """
    bases = list(range(low, high - count, count))
    random.shuffle(bases)
    for base in bases[:500]:
        if not any(_port_taken(p) for p in range(base, base + count)):
            return base
    raise BrokerError(f"no {count} consecutive free ports between {low} and {high}")


def _layout(brokers: int, base_port: int) -> tuple[NodeSpec, ...]:
    return tuple(
        NodeSpec(node_id=i + 1, port=base_port + 2 * i, controller_port=base_port + 2 * i + 1)
        for i in range(brokers)
    )


def _log_tail(data_dir: Path, node_id: int) -> str:
    node_dir = _node_dir(data_dir, node_id)
    parts = []
    for path in (node_dir / "stdout.log", node_dir / "logs" / "server.log"):
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
    return "\n".join(parts) or f"  (no log in {node_dir})"


def _write_configs(data_dir: Path, state: ClusterState) -> None:
    template = "single/server.properties" if len(state.nodes) == 1 else "cluster/server.properties"
    for node in state.nodes:
        node_dir = _node_dir(data_dir, node.node_id)
        (node_dir / "logs").mkdir(parents=True, exist_ok=True)
        values = {
            "NODE_ID": node.node_id,
            "PORT": node.port,
            "CONTROLLER_PORT": node.controller_port,
            "VOTERS": state.voters,
            "LOG_DIRS": node_dir / "data",
        }
        (node_dir / "server.properties").write_text(render_template(template, values))
        log4j = render_template("log4j2.xml", {"LOG_FILE": node_dir / "logs" / "server.log"})
        (node_dir / "log4j2.xml").write_text(log4j)


def _java_cmd(java: str, lib: Path, node_dir: Path, main: str, *args: str) -> list[str]:
    return [
        java,
        *JVM_OPTS,
        f"-Dlog4j2.configurationFile={node_dir / 'log4j2.xml'}",
        f"-Dkafka.logs.dir={node_dir / 'logs'}",
        "-cp",
        f"{lib}/*",
        main,
        *args,
    ]


def _format_storage(java: str, lib: Path, data_dir: Path, state: ClusterState) -> None:
    """Run ``StorageTool format`` for every node not formatted yet, in parallel."""
    pending: list[tuple[NodeSpec, subprocess.Popen[str]]] = []
    for node in state.nodes:
        node_dir = _node_dir(data_dir, node.node_id)
        if (node_dir / "data" / "meta.properties").exists():
            continue
        cmd = _java_cmd(
            java, lib, node_dir, "kafka.tools.StorageTool", "format",
            "-t", state.cluster_id, "-c", str(node_dir / "server.properties"),
            "--ignore-formatted",
        )  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=node_dir
        )
        pending.append((node, proc))
    for node, proc in pending:
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode != 0:
            raise BrokerError(
                f"formatting the storage of broker {node.node_id} failed "
                f"(exit {proc.returncode}):\n{output.strip()}"
            )


def _spawn(java: str, lib: Path, data_dir: Path, node: NodeSpec) -> int:
    node_dir = _node_dir(data_dir, node.node_id)
    cmd = _java_cmd(java, lib, node_dir, "kafka.Kafka", str(node_dir / "server.properties"))
    with (node_dir / "stdout.log").open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=node_dir,
            start_new_session=True,  # own session and process group: survives our exit
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("atomickafka.broker.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def _wait_ready(data_dir: Path, state: ClusterState, deadline: float) -> None:
    """Wait until every broker process serves metadata requests, or raise with its log."""
    from confluent_kafka import KafkaException  # noqa: PLC0415 (import only when needed)
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin: AdminClient | None = None
    while True:
        for node in state.nodes:
            if node.pid is None or not _is_our_broker(node.pid, data_dir, node.node_id):
                raise BrokerError(
                    f"broker {node.node_id} (port {node.port}) exited during start-up:\n"
                    + _log_tail(data_dir, node.node_id)
                )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            tails = "\n".join(_log_tail(data_dir, n.node_id) for n in state.nodes)
            raise BrokerError(
                f"the broker did not serve requests in time (data dir {data_dir}); "
                f"retry with a larger --timeout if the machine is busy.\n{tails}"
            )
        if all(_port_accepts(n.port) for n in state.nodes):
            if admin is None:  # created only once the ports listen: no connect-refused noise
                config: dict[str, Any] = {
                    "bootstrap.servers": state.bootstrap,
                    "logger": _quiet_logger(),  # accepted at run time, missing from the stubs
                }
                admin = AdminClient(config)
            try:
                metadata = admin.list_topics(timeout=max(0.5, min(5.0, remaining)))
                if len(metadata.brokers) >= len(state.nodes):
                    return
            except KafkaException:
                pass
        time.sleep(0.25)


def _check_compatible(state: ClusterState, brokers: int, port: int | None, data_dir: Path) -> None:
    if len(state.nodes) != brokers:
        raise BrokerError(
            f"{data_dir} holds a {len(state.nodes)}-broker cluster, not {brokers}; use "
            f"--brokers {len(state.nodes)}, another --data-dir, or "
            f"`atomickafka broker stop --purge --data-dir {data_dir}` first"
        )
    if port is not None and state.nodes[0].port != port:
        raise BrokerError(
            f"{data_dir} holds a cluster on port {state.nodes[0].port}, not {port}; omit --port, "
            f"use another --data-dir, or `atomickafka broker stop --purge --data-dir {data_dir}`"
        )


def ensure_broker(
    brokers: int = 1,
    data_dir: Path | str | None = None,
    port: int | None = None,
    timeout: float = 90.0,
    log: Log = log_stderr,
) -> str:
    """Make sure a cluster of ``brokers`` brokers runs from ``data_dir``; return its bootstrap.

    Reuses a running cluster (and the cluster id and ports of a stopped one), otherwise
    fetches the jars if needed, writes configs, formats storage and starts the brokers,
    waiting at most ``timeout`` seconds for them to serve requests. ``port`` is the client
    port of the first broker (default :data:`DEFAULT_PORT`). Raises :class:`BrokerError`
    with an actionable message (missing Java or Maven, a port taken, a broker that died).
    """
    if brokers not in SUPPORTED_SIZES:
        raise BrokerError(f"--brokers must be one of {SUPPORTED_SIZES}, not {brokers}")
    data = Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()
    data.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with file_lock(data / ".lock", timeout + 30, f"data dir {data}"):
        state = previous = _load_state(data)
        if state is not None:
            _check_compatible(state, brokers, port, data)
            alive = [n for n in state.nodes if n.pid and _is_our_broker(n.pid, data, n.node_id)]
            if len(alive) == len(state.nodes):
                _wait_ready(data, state, deadline)
                log(f"already running from {data}")
                return state.bootstrap
            if alive:
                log(f"{len(alive)} of {len(state.nodes)} brokers still run; restarting all")
                _terminate(data, alive, 30.0, log)
            state = replace(state, nodes=tuple(replace(n, pid=None) for n in state.nodes))
        else:
            state = ClusterState(
                new_cluster_id(), kafka_version(), _layout(brokers, port or DEFAULT_PORT)
            )
        taken = [p for n in state.nodes for p in (n.port, n.controller_port) if _port_taken(p)]
        if taken:
            hint = "or pick another base port with --port"
            if previous is not None:
                hint = f"or use another --data-dir ({data} keeps its ports)"
            raise BrokerError(
                f"port(s) {', '.join(map(str, taken))} on 127.0.0.1 already in use; "
                f"stop what uses them {hint}"
            )
        java = find_java()
        lib = fetch_kafka(log) if state.kafka_version == kafka_version() else None
        if lib is None:
            raise BrokerError(
                f"{data} was created with Kafka {state.kafka_version}, this tree pins "
                f"{kafka_version()}; `atomickafka broker stop --purge --data-dir {data}` first"
            )
        _write_configs(data, state)
        log(f"starting {brokers} broker(s), Kafka {state.kafka_version}, data dir {data}")
        _format_storage(java, lib, data, state)
        started: list[NodeSpec] = []
        try:
            for node in state.nodes:
                started.append(replace(node, pid=_spawn(java, lib, data, node)))
                state = replace(state, nodes=(*started, *state.nodes[len(started) :]))
                _save_state(data, state)
            _wait_ready(data, state, deadline)
        except BaseException:
            if started:
                log(f"stopping the {len(started)} broker process(es) started here")
            _terminate(data, started, 15.0, log)
            _save_state(
                data, replace(state, nodes=tuple(replace(n, pid=None) for n in state.nodes))
            )
            raise
        log(f"ready: {state.bootstrap}")
        return state.bootstrap


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # the broker leads its own group (start_new_session)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _alive_nodes(data_dir: Path, nodes: Iterable[NodeSpec]) -> list[NodeSpec]:
    return [n for n in nodes if n.pid is not None and _is_our_broker(n.pid, data_dir, n.node_id)]


def _wait_gone(data_dir: Path, nodes: list[NodeSpec], timeout: float) -> list[NodeSpec]:
    """Wait up to ``timeout`` s for ``nodes`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = _alive_nodes(data_dir, nodes)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _terminate(data_dir: Path, nodes: Iterable[NodeSpec], timeout: float, log: Log) -> int:
    """SIGTERM the process groups of ``nodes``, SIGKILL what remains after ``timeout`` s."""
    running = _alive_nodes(data_dir, nodes)
    pids = [n.pid for n in running if n.pid is not None]
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    left = _wait_gone(data_dir, running, timeout)
    for node in left:
        log(f"broker {node.node_id} (pid {node.pid}) still runs after {timeout:.0f} s; SIGKILL")
        if node.pid is not None:
            _signal_group(node.pid, signal.SIGKILL)
    left = _wait_gone(data_dir, left, 10.0)
    for pid in pids:  # whatever the broker left in its process group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _CHILDREN.pop(pid, None)
    if left:
        stuck = ",".join(str(n.pid) for n in left)
        raise BrokerError(f"broker process(es) {stuck} survived SIGKILL; see `ps -p {stuck}`")
    return len(running)


def stop_broker(
    data_dir: Path | str | None = None, timeout: float = 30.0, log: Log = log_stderr
) -> int:
    """Stop every broker started from ``data_dir``; return how many processes were stopped.

    Sends SIGTERM to each broker's process group (a clean shutdown), then SIGKILL to what
    is left after ``timeout`` seconds. Data stay on disk; a later start reuses them.
    """
    data = Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()
    state = _load_state(data)
    if state is None:
        return 0
    with file_lock(data / ".lock", timeout + 120, f"data dir {data}"):
        state = _load_state(data)
        if state is None:
            return 0
        stopped = _terminate(data, state.nodes, timeout, log)
        _save_state(data, replace(state, nodes=tuple(replace(n, pid=None) for n in state.nodes)))
    return stopped


def purge_data_dir(data_dir: Path | str | None = None) -> None:
    """Delete the cluster files of a stopped data dir (state, node folders); keep other files."""
    data = Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()
    if any(s.alive for s in broker_status(data)):
        raise BrokerError(f"brokers still run from {data}; stop them first")
    state = _load_state(data)
    if state is not None:
        for node in state.nodes:
            shutil.rmtree(_node_dir(data, node.node_id), ignore_errors=True)
    for name in (STATE_FILE, ".lock"):
        (data / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        data.rmdir()  # only when nothing else is in it


def broker_status(data_dir: Path | str | None = None) -> list[NodeStatus]:
    """Status of each broker recorded in ``data_dir`` (empty list when none was started)."""
    data = Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()
    state = _load_state(data)
    if state is None:
        return []
    result = []
    for node in state.nodes:
        alive = node.pid is not None and _is_our_broker(node.pid, data, node.node_id)
        result.append(
            NodeStatus(
                node_id=node.node_id,
                port=node.port,
                controller_port=node.controller_port,
                pid=node.pid if alive else None,
                alive=alive,
                listening=alive and _port_accepts(node.port),
                log_file=_node_dir(data, node.node_id) / "logs" / "server.log",
            )
        )
    return result


def running_bootstrap(data_dir: Path | str | None = None) -> str | None:
    """Bootstrap servers of the cluster in ``data_dir`` if all its brokers run, else ``None``."""
    statuses = broker_status(data_dir)
    if statuses and all(s.alive for s in statuses):
        return ",".join(f"127.0.0.1:{s.port}" for s in statuses)
    return None
