"""The nemesis's deployment: brokers, node hosts and a client host in a lab.

Three KRaft brokers (``b1``-``b3``), two or three node hosts (``n1``...) each running
``atomickafka cluster`` for every topic -- so every topic has an instance on every node
host, and whichever holds the lease has its standbys on the other hosts -- and a client
host (``c1``). The node hosts reach the brokers through the fault proxy (their
bootstrap is the proxy's, and the brokers advertise it back), so their links can be
delayed and made lossy; the client and the checks reach the brokers directly. Every
process started here is ended in :meth:`Deployment.close`, and the lab then removes
every namespace (killing whatever still runs in one) and link.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

from atomickafka.errors import ConfigError
from atomickafka.netlab.brokers import NetBrokers
from atomickafka.netlab.hosts import Lab
from atomickafka.netlab.proxy import ProxyControl, start_proxy

__all__ = ["BROKER_HOSTS", "CLIENT_HOST", "METRICS_PORT", "Deployment"]

BROKER_HOSTS: Final = ("b1", "b2", "b3")
CLIENT_HOST: Final = "c1"
#: Each node host's ``cluster`` serves its metrics on this port of the host's address.
METRICS_PORT: Final = 9464
#: The memory window the nodes run with: docs/DESIGN.md §6.3 tells operators whose
#: brokers fail over to run with twice the longest stall plus a restart.
MEMORY_WINDOW_S: Final = 120.0


class Deployment:
    """The lab, its brokers, the proxy and a ``cluster`` on every node host.

    ``node_hosts`` (2 or 3) run every topic of ``topics`` with ``--takeover-after
    lease_s``; logs and broker files go under ``workdir``. Use it as a context manager.
    """

    def __init__(
        self,
        workdir: Path,
        topics: Sequence[str],
        *,
        node_hosts: int = 2,
        lease_s: float = 3.0,
        seed: int = 0,
        log_level: str = "info",
    ) -> None:
        if node_hosts not in (2, 3):
            raise ConfigError("the nemesis runs 2 or 3 node hosts")
        self.workdir = workdir
        self.topics = tuple(topics)
        self.lease_s = lease_s
        self.log_level = log_level
        self.node_hosts = tuple(f"n{i + 1}" for i in range(node_hosts))
        self.clusters: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self.proxy: ProxyControl | None = None
        self.lab = Lab([*BROKER_HOSTS, *self.node_hosts, CLIENT_HOST])
        try:
            self.brokers = NetBrokers(self.lab, BROKER_HOSTS, workdir / "brokers")
            self.brokers.start()
            names = {self.lab.address(h): h for h in self.node_hosts}
            names[self.lab.gateway] = "root"
            self.proxy = start_proxy(
                self.brokers.proxy_routes, names, seed, str(workdir / "proxy.log")
            )
            for host in self.node_hosts:
                self.start_cluster(host)
        except BaseException:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        """The brokers, directly (the client, the checks)."""
        return self.brokers.bootstrap

    def log_path(self, host: str) -> Path:
        """The log of ``host``'s ``cluster``."""
        return self.workdir / f"cluster-{host}.log"

    def start_cluster(self, host: str) -> None:
        """Start ``atomickafka cluster`` for every topic inside ``host``."""
        assert self.brokers is not None
        log = self.log_path(host).open("ab")
        self._logs.append(log)
        command = [
            *self.lab.run_in(host),
            sys.executable,
            "-m",
            "atomickafka",
            "cluster",
            "--bootstrap-server",
            self.brokers.proxied_bootstrap,
            "--topics",
            ",".join(self.topics),
            "--takeover-after",
            f"{self.lease_s:g}",
            "--memory-window",
            f"{MEMORY_WINDOW_S:g}",
            "--metrics-port",
            str(METRICS_PORT),
            "--log-level",
            self.log_level,
        ]
        self.clusters[host] = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )

    def host_of(self, pid: int) -> str | None:
        """The node host ``pid`` runs in (``None``: none, or it is gone)."""
        for host in self.node_hosts:
            if pid in self.lab.pids(host):
                return host
        return None

    def run_client(self, args: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        """Start ``python -m ARGS`` inside the client host."""
        log = (self.workdir / log_name).open("ab")
        self._logs.append(log)
        return subprocess.Popen(
            [*self.lab.run_in(CLIENT_HOST), sys.executable, "-m", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def metrics_text(self, host: str, timeout_s: float = 10.0) -> str:
        """What ``host``'s ``cluster`` serves on its metrics endpoint ("" if nothing)."""
        import urllib.request  # noqa: PLC0415 (only here)

        url = f"http://{self.lab.address(host)}:{METRICS_PORT}/metrics"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=timeout_s) as got:
            return str(got.read().decode())
        return ""

    def resume_everything(self) -> None:
        """SIGCONT every process of the node hosts (a paused node included)."""
        for host in self.node_hosts:
            for pid in self.lab.pids(host):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop the clusters (SIGTERM, then what is left is killed with the lab), the
        proxy and the brokers; remove the lab."""
        with contextlib.suppress(Exception):
            self.resume_everything()
        for process in self.clusters.values():
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + 30
        for process in self.clusters.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        if self.proxy is not None:
            self.proxy.close()
        brokers = getattr(self, "brokers", None)
        if brokers is not None:
            brokers.stop()
        self.lab.close()  # kills whatever still runs in a namespace
        for process in self.clusters.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        for log in self._logs:
            log.close()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
