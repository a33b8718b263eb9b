"""Three KRaft brokers, each in a host of its own, from the project's Maven jars.

Each broker is also a controller (the three are the quorum's voters), with replication
factor 3 and min ISR 2 as the loopback cluster (``localkafka``'s ``cluster`` template),
and three listeners on its host's address:

- ``PLAINTEXT`` (:data:`PORT`): between brokers, and for clients that connect directly;
  advertised as itself;
- ``PROXIED`` (:data:`PROXIED_PORT`): advertised as the fault proxy's address for this
  broker (the lab's gateway and a port of its own), so that a client bootstrapped
  through the proxy is told to reach every broker through it too (Kafka answers a
  metadata request with the advertised addresses of the listener it came in on);
- ``CONTROLLER`` (:data:`CONTROLLER_PORT`): the quorum.

Failure detection is set for a partitioned network rather than for a stable one: a
broker that stops heartbeating is fenced after 6 s (Kafka's default 9 s) and a replica
that stops fetching leaves the ISR after 10 s (30 s), so that writes with ``acks=all``
to partitions it followed stall for seconds, not half a minute, once it is cut off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from atomickafka.localkafka import (
    BrokerError,
    fetch_kafka,
    find_java,
    free_port_block,
    new_cluster_id,
    render_template,
)
from atomickafka.localkafka.processes import java_command
from atomickafka.netlab.hosts import Lab

__all__ = ["CONTROLLER_PORT", "PORT", "PROXIED_PORT", "NetBrokers"]

PORT: Final = 9092
CONTROLLER_PORT: Final = 9093
PROXIED_PORT: Final = 9094

_SERVER_PROPERTIES: Final = """\
# One broker of a three-broker KRaft cluster in a network namespace (atomickafka.netlab).
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://{address}:{port},PROXIED://{address}:{proxied_port},\
CONTROLLER://{address}:{controller_port}
advertised.listeners=PLAINTEXT://{address}:{port},PROXIED://{proxy}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,PROXIED:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={log_dirs}
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=1000
replica.lag.time.max.ms=10000
"""


class NetBrokers:
    """Brokers ``1..3`` on ``hosts`` of ``lab``, their files under ``data_dir``.

    :meth:`start` formats and starts them and waits until they serve; :meth:`stop` ends
    them (also those paused). ``proxy_routes`` are what the fault proxy must relay.
    """

    def __init__(self, lab: Lab, hosts: Sequence[str], data_dir: Path) -> None:
        self.lab = lab
        self.hosts = list(hosts)
        self.data_dir = data_dir
        self.cluster_id = new_cluster_id()
        base = free_port_block(len(self.hosts))
        #: The proxy's port for each broker, on the lab's gateway address.
        self.proxy_ports = {host: base + i for i, host in enumerate(self.hosts)}
        self.pids: dict[str, int] = {}
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        """Direct bootstrap servers (the ``PLAINTEXT`` listeners)."""
        return ",".join(f"{self.lab.address(h)}:{PORT}" for h in self.hosts)

    @property
    def proxied_bootstrap(self) -> str:
        """Bootstrap servers through the fault proxy."""
        return ",".join(f"{self.lab.gateway}:{p}" for p in self.proxy_ports.values())

    @property
    def proxy_routes(self) -> dict[tuple[str, int], tuple[str, int]]:
        """For :func:`~atomickafka.netlab.proxy.start_proxy`: each proxy port to its broker."""
        return {
            (self.lab.gateway, port): (self.lab.address(host), PROXIED_PORT)
            for host, port in self.proxy_ports.items()
        }

    def node_id(self, host: str) -> int:
        """The Kafka ``node.id`` of the broker on ``host``."""
        return self.hosts.index(host) + 1

    def host_of(self, node_id: int) -> str:
        """The host of broker ``node_id``."""
        return self.hosts[node_id - 1]

    def _folder(self, host: str) -> Path:
        return self.data_dir / f"broker-{host}"

    def _write_configs(self) -> None:
        voters = ",".join(
            f"{self.node_id(h)}@{self.lab.address(h)}:{CONTROLLER_PORT}" for h in self.hosts
        )
        for host in self.hosts:
            folder = self._folder(host)
            (folder / "logs").mkdir(parents=True, exist_ok=True)
            (folder / "server.properties").write_text(
                _SERVER_PROPERTIES.format(
                    node_id=self.node_id(host),
                    voters=voters,
                    address=self.lab.address(host),
                    port=PORT,
                    proxied_port=PROXIED_PORT,
                    controller_port=CONTROLLER_PORT,
                    proxy=f"{self.lab.gateway}:{self.proxy_ports[host]}",
                    log_dirs=folder / "data",
                )
            )
            log4j = render_template("log4j2.xml", {"LOG_FILE": folder / "logs" / "server.log"})
            (folder / "log4j2.xml").write_text(log4j)

    def _java(self, host: str, java: str, lib: Path, main: str, *args: str) -> list[str]:
        return [*self.lab.run_in(host), *java_command(java, lib, self._folder(host), main, *args)]

    def start(self, timeout_s: float = 180.0) -> None:
        """Format and start every broker, wait until all three serve (or raise
        :class:`~atomickafka.localkafka.BrokerError` with the logs' tails)."""
        java, lib = find_java(), fetch_kafka()
        self._write_configs()
        formats = [
            subprocess.run(
                self._java(
                    host,
                    java,
                    lib,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    self.cluster_id,
                    "-c",
                    str(self._folder(host) / "server.properties"),
                    "--ignore-formatted",
                ),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            for host in self.hosts
        ]
        for host, done in zip(self.hosts, formats, strict=True):
            if done.returncode != 0:
                raise BrokerError(f"formatting broker {host} failed: {done.stdout}{done.stderr}")
        for host in self.hosts:
            self.spawn(host, java, lib)
        self.wait_ready(timeout_s)

    def spawn(self, host: str, java: str | None = None, lib: Path | None = None) -> int:
        """Start the broker of ``host`` (again, after :meth:`kill`); its pid."""
        folder = self._folder(host)
        command = self._java(
            host,
            java or find_java(),
            lib or fetch_kafka(),
            "kafka.Kafka",
            str(folder / "server.properties"),
        )
        with (folder / "stdout.log").open("ab") as out:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[host] = child
        self.pids[host] = child.pid
        return child.pid

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until the brokers answer a metadata request naming all of them."""
        from confluent_kafka import KafkaException  # noqa: PLC0415 (only when used)
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        quiet = logging.getLogger("atomickafka.netlab.brokers")  # refused while they start
        quiet.setLevel(logging.ERROR)
        admin = AdminClient({"bootstrap.servers": self.bootstrap}, logger=quiet)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for host, child in self._children.items():
                if child.poll() is not None:
                    raise BrokerError(
                        f"broker {host} exited during start-up: {self.log_tail(host)}"
                    )
            with contextlib.suppress(KafkaException):
                if len(admin.list_topics(timeout=5).brokers) == len(self.hosts):
                    return
            time.sleep(0.5)
        raise BrokerError(f"the brokers did not serve within {timeout_s:.0f} s")

    def log_tail(self, host: str, lines: int = 20) -> str:
        """The last lines of a broker's log."""
        path = self._folder(host) / "logs" / "server.log"
        with contextlib.suppress(OSError):
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def signal(self, host: str, sig: signal.Signals) -> None:
        """Send ``sig`` to the broker of ``host`` (SIGSTOP pauses it, SIGCONT resumes)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pids[host], sig)

    def kill(self, host: str) -> None:
        """SIGKILL the broker of ``host`` and reap it."""
        self.signal(host, signal.SIGKILL)
        child = self._children.get(host)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)

    def stop(self) -> None:
        """End every broker: SIGCONT (a paused one), SIGTERM, SIGKILL after 20 s."""
        for host in self._children:
            self.signal(host, signal.SIGCONT)
            self.signal(host, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for host, child in self._children.items():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(host)
