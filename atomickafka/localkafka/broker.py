"""Start, stop and inspect a local KRaft cluster of one or three brokers in a data dir.

This module ties the others together: :mod:`~atomickafka.localkafka.jars` for Java and the
jars, :mod:`~atomickafka.localkafka.configs` for the config files,
:mod:`~atomickafka.localkafka.processes` for the JVMs and
:mod:`~atomickafka.localkafka.state` for ``state.json``. A data dir is locked while a
command changes it, so concurrent starts and stops from several processes are safe.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from atomickafka.localkafka.configs import (
    CLIENT_PROPERTIES,
    CLIENT_TOML,
    client_settings,
    write_configs,
)
from atomickafka.localkafka.errors import BrokerError, Log, log_stderr
from atomickafka.localkafka.jars import fetch_kafka, find_java, kafka_version
from atomickafka.localkafka.locks import file_lock
from atomickafka.localkafka.ports import (
    ephemeral_range,
    in_ephemeral_range,
    port_accepts,
    port_taken,
)
from atomickafka.localkafka.processes import (
    alive_brokers,
    exit_note,
    format_storage,
    is_our_broker,
    log_tail,
    spawn,
    terminate,
)
from atomickafka.localkafka.state import (
    STATE_FILE,
    BrokerSpec,
    ClusterState,
    broker_dir,
    layout,
    load_state,
    new_cluster_id,
    resolve_data_dir,
    save_state,
)

__all__ = [
    "DEFAULT_PORT",
    "SUPPORTED_SIZES",
    "BrokerStatus",
    "broker_status",
    "ensure_broker",
    "purge_data_dir",
    "running_bootstrap",
    "stop_broker",
]

#: Client port of the first broker; its controller uses the next port.
DEFAULT_PORT = 19092
#: Cluster sizes with a config template.
SUPPORTED_SIZES = (1, 3)


@dataclass(frozen=True)
class BrokerStatus:
    """Observed state of one broker process."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None
    alive: bool
    listening: bool
    log_file: Path


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger(f"{__name__}.librdkafka")
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
        for spec in state.brokers:
            if spec.pid is None or not is_our_broker(spec.pid, data_dir, spec.node_id):
                raise BrokerError(
                    f"broker {spec.node_id} (port {spec.port}) exited during start-up"
                    f"{exit_note(spec.pid)}:\n" + log_tail(data_dir, spec.node_id)
                )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            tails = "\n".join(log_tail(data_dir, b.node_id) for b in state.brokers)
            raise BrokerError(
                f"the broker did not serve requests in time (data dir {data_dir}); "
                f"retry with a larger --timeout if the machine is busy.\n{tails}"
            )
        if all(port_accepts(b.port) for b in state.brokers):
            if admin is None:  # created only once the ports listen: no connect-refused noise
                config: dict[str, Any] = {
                    "bootstrap.servers": state.bootstrap,
                    "logger": _quiet_logger(),  # accepted at run time, missing from the stubs
                    **client_settings(state),
                }
                admin = AdminClient(config)
            try:
                metadata = admin.list_topics(timeout=max(0.5, min(5.0, remaining)))
                if len(metadata.brokers) >= len(state.brokers):
                    return
            except KafkaException:
                pass
        time.sleep(0.25)


def _check_compatible(
    state: ClusterState, brokers: int, port: int | None, data_dir: Path, sasl: bool
) -> None:
    if state.sasl != sasl:
        has, flag = ("SASL", "add --sasl") if state.sasl else ("no SASL", "omit --sasl")
        raise BrokerError(
            f"{data_dir} holds a cluster with {has}; {flag}, use another --data-dir, or "
            f"`atomickafka broker stop --purge --data-dir {data_dir}` first"
        )
    if len(state.brokers) != brokers:
        raise BrokerError(
            f"{data_dir} holds a {len(state.brokers)}-broker cluster, not {brokers}; use "
            f"--brokers {len(state.brokers)}, another --data-dir, or "
            f"`atomickafka broker stop --purge --data-dir {data_dir}` first"
        )
    if port is not None and state.brokers[0].port != port:
        raise BrokerError(
            f"{data_dir} holds a cluster on port {state.brokers[0].port}, not {port}; omit --port, "
            f"use another --data-dir, or `atomickafka broker stop --purge --data-dir {data_dir}`"
        )


def _check_acls(state: ClusterState, acls: bool, data: Path) -> None:
    """A data dir's cluster keeps whether it checks ACLs."""
    if state.acls != acls:
        raise BrokerError(
            f"{data} holds a cluster {'with' if state.acls else 'without'} ACLs; "
            f"{'add' if state.acls else 'omit'} --acls, or use another --data-dir"
        )


def _check_ports_free(
    state: ClusterState, data: Path, *, reused: bool, brokers: list[BrokerSpec] | None = None
) -> None:
    """Every port the cluster (or ``brokers`` of it) needs is free on 127.0.0.1, or one
    line says which not."""
    chosen = state.brokers if brokers is None else brokers
    taken = [p for b in chosen for p in (b.port, b.controller_port) if port_taken(p)]
    if taken:
        hint = "or pick another base port with --port"
        if reused:
            hint = f"or use another --data-dir ({data} keeps its ports)"
        raise BrokerError(
            f"port(s) {', '.join(map(str, taken))} on 127.0.0.1 already in use; "
            f"stop what uses them {hint}"
        )


def _check_not_ephemeral(state: ClusterState) -> None:
    """A new cluster's ports are below the kernel's ephemeral range: there, a client's
    connection may take a port while its broker is down, and the broker then fails to
    start again (seen: 13 failed restarts in 104 s, no broker for 2.5 minutes)."""
    ports = [p for b in state.brokers for p in (b.port, b.controller_port)]
    clashing = in_ephemeral_range(ports)
    if clashing:
        low, high = ephemeral_range()
        raise BrokerError(
            f"port(s) {', '.join(map(str, clashing))} are in the kernel's ephemeral range "
            f"({low}-{high}, /proc/sys/net/ipv4/ip_local_port_range): client connections "
            f"take such ports, and a broker that stops could not listen there again; use a "
            f"--port at most {low - 2 * len(state.brokers)} (the default is {DEFAULT_PORT})"
        )


def _restart_stopped(
    data: Path, state: ClusterState, alive: list[BrokerSpec], deadline: float, log: Log
) -> str:
    """Start the brokers of ``state`` that are not among ``alive``, leaving those alone
    (restarting a healthy broker of three only costs the cluster its quorum); return the
    bootstrap once every broker serves."""
    running = {b.node_id for b in alive}
    stopped = [replace(b, pid=None) for b in state.brokers if b.node_id not in running]
    _check_ports_free(state, data, reused=True, brokers=stopped)
    ids = ", ".join(str(b.node_id) for b in stopped)
    log(f"{len(alive)} of {len(state.brokers)} brokers still run; starting broker(s) {ids}")
    java, lib = find_java(), fetch_kafka(log)
    format_storage(java, lib, data, state)  # a broker whose storage is gone gets it back
    return _spawn(java, lib, data, state, stopped, deadline, log).bootstrap


def _spawn(
    java: str,
    lib: Path,
    data: Path,
    state: ClusterState,
    which: list[BrokerSpec],
    deadline: float,
    log: Log,
) -> ClusterState:
    """Start ``which`` of ``state``'s brokers, recording each pid as it starts, and wait
    until every broker serves; return the state. On a failure the brokers started here
    are stopped (and recorded without a pid) before the error goes on."""
    by_id = {b.node_id: b for b in state.brokers}
    started: list[BrokerSpec] = []

    def recorded() -> ClusterState:
        return replace(state, brokers=tuple(by_id[b.node_id] for b in state.brokers))

    try:
        for spec in which:
            started.append(replace(spec, pid=spawn(java, lib, data, spec)))
            by_id[spec.node_id] = started[-1]
            save_state(data, recorded())
        _wait_ready(data, recorded(), deadline)
    except BaseException:
        if started:
            log(f"stopping the {len(started)} broker process(es) started here")
        terminate(data, started, 15.0, log)
        by_id.update((b.node_id, replace(b, pid=None)) for b in started)
        save_state(data, recorded())
        raise
    log(f"ready: {state.bootstrap}")
    return recorded()


def _without_pids(state: ClusterState) -> ClusterState:
    return replace(state, brokers=tuple(replace(b, pid=None) for b in state.brokers))


def ensure_broker(
    brokers: int = 1,
    data_dir: Path | str | None = None,
    port: int | None = None,
    timeout: float = 90.0,
    log: Log = log_stderr,
    *,
    sasl: bool = False,
    acls: bool = False,
) -> str:
    """Make sure a cluster of ``brokers`` brokers runs from ``data_dir``; return its bootstrap.

    With ``sasl`` its client listener takes SASL PLAIN logins only
    (:data:`~atomickafka.localkafka.state.SASL_USERS`), and the data dir holds the client
    settings (:func:`~atomickafka.localkafka.configs.write_client_configs`); with
    ``acls`` too an authorizer checks Kafka ACLs, and only ``admin`` is a super user.

    Reuses a running cluster (and the cluster id and ports of a stopped one), otherwise
    fetches the jars if needed, writes configs, formats storage and starts the brokers,
    waiting at most ``timeout`` seconds for them to serve requests. ``port`` is the client
    port of the first broker (default :data:`DEFAULT_PORT`). Raises :class:`BrokerError`
    with an actionable message (missing Java or Maven, a port taken, a broker that died).
    """
    if acls and not sasl:
        raise BrokerError("--acls needs --sasl: ACLs name the users who log in")
    if brokers not in SUPPORTED_SIZES:
        raise BrokerError(f"--brokers must be one of {SUPPORTED_SIZES}, not {brokers}")
    data = resolve_data_dir(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with file_lock(data / ".lock", timeout + 30, f"data dir {data}"):
        state = previous = load_state(data)
        if state is not None:
            _check_compatible(state, brokers, port, data, sasl)
            _check_acls(state, acls, data)
            alive = alive_brokers(data, state.brokers)
            if len(alive) == len(state.brokers):
                _wait_ready(data, state, deadline)
                log(f"already running from {data}")
                return state.bootstrap
            if alive:
                if state.kafka_version != kafka_version():
                    raise BrokerError(
                        f"{data} was created with Kafka {state.kafka_version}, this "
                        f"installation pins {kafka_version()}; stop its brokers "
                        f"(`atomickafka broker stop --purge --data-dir {data}`) first"
                    )
                return _restart_stopped(data, state, alive, deadline, log)
            state = _without_pids(state)
        else:
            state = ClusterState(
                new_cluster_id(),
                kafka_version(),
                layout(brokers, port or DEFAULT_PORT),
                sasl,
                acls,
            )
            _check_not_ephemeral(state)
        return _start_brokers(data, state, previous, brokers, deadline, log)


def _start_brokers(
    data: Path,
    state: ClusterState,
    previous: ClusterState | None,
    brokers: int,
    deadline: float,
    log: Log,
) -> str:
    """Check the ports, fetch the jars, write the configs, format the storage and start
    the brokers of ``state``; their bootstrap."""
    _check_ports_free(state, data, reused=previous is not None)
    java = find_java()
    lib = fetch_kafka(log) if state.kafka_version == kafka_version() else None
    if lib is None:
        raise BrokerError(
            f"{data} was created with Kafka {state.kafka_version}, this installation pins "
            f"{kafka_version()}; `atomickafka broker stop --purge --data-dir {data}` first"
        )
    write_configs(data, state)
    log(f"starting {brokers} broker(s), Kafka {state.kafka_version}, data dir {data}")
    format_storage(java, lib, data, state)
    return _spawn(java, lib, data, state, list(state.brokers), deadline, log).bootstrap


def stop_broker(
    data_dir: Path | str | None = None, timeout: float = 30.0, log: Log = log_stderr
) -> int:
    """Stop every broker started from ``data_dir``; return how many processes were stopped.

    Sends SIGTERM to each broker's process group (a clean shutdown), then SIGKILL to what
    is left after ``timeout`` seconds. Data stay on disk; a later start reuses them.
    """
    data = resolve_data_dir(data_dir)
    state = load_state(data)
    if state is None:
        return 0
    with file_lock(data / ".lock", timeout + 120, f"data dir {data}"):
        state = load_state(data)
        if state is None:
            return 0
        stopped = terminate(data, state.brokers, timeout, log)
        save_state(data, _without_pids(state))
    return stopped


def purge_data_dir(data_dir: Path | str | None = None) -> None:
    """Delete the cluster files of a stopped data dir (state, broker folders); keep other files."""
    data = resolve_data_dir(data_dir)
    if any(s.alive for s in broker_status(data)):
        raise BrokerError(f"brokers still run from {data}; stop them first")
    state = load_state(data)
    if state is not None:
        for spec in state.brokers:
            shutil.rmtree(broker_dir(data, spec.node_id), ignore_errors=True)
    for name in (STATE_FILE, ".lock", CLIENT_PROPERTIES, CLIENT_TOML):
        (data / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        data.rmdir()  # only when nothing else is in it


def broker_status(data_dir: Path | str | None = None) -> list[BrokerStatus]:
    """Status of each broker recorded in ``data_dir`` (empty list when none was started)."""
    data = resolve_data_dir(data_dir)
    state = load_state(data)
    if state is None:
        return []
    result = []
    for spec in state.brokers:
        alive = spec.pid is not None and is_our_broker(spec.pid, data, spec.node_id)
        result.append(
            BrokerStatus(
                node_id=spec.node_id,
                port=spec.port,
                controller_port=spec.controller_port,
                pid=spec.pid if alive else None,
                alive=alive,
                listening=alive and port_accepts(spec.port),
                log_file=broker_dir(data, spec.node_id) / "logs" / "server.log",
            )
        )
    return result


def running_bootstrap(data_dir: Path | str | None = None) -> str | None:
    """Bootstrap servers of the cluster in ``data_dir`` if all its brokers run, else ``None``."""
    statuses = broker_status(data_dir)
    if statuses and all(s.alive for s in statuses):
        return ",".join(f"127.0.0.1:{s.port}" for s in statuses)
    return None
