"""A data dir and its ``state.json``: which brokers a cluster has, their ports and PIDs.

A data dir holds one cluster: ``state.json`` (cluster id, Kafka version, ports, PIDs) and one
folder per broker, ``node-<id>/`` (named after Kafka's ``node.id``). Broker ``i`` (0-based)
listens on ``port + 2*i`` (clients) and ``port + 2*i + 1`` (controller), on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from atomickafka.localkafka.errors import BrokerError
from atomickafka.localkafka.jars import cache_dir

__all__ = [
    "SASL_USERS",
    "STATE_FILE",
    "BrokerSpec",
    "ClusterState",
    "broker_dir",
    "default_data_dir",
    "layout",
    "load_state",
    "new_cluster_id",
    "resolve_data_dir",
    "save_state",
]

STATE_FILE = "state.json"
#: The users of a local broker started with ``--sasl`` (SASL PLAIN; loopback only, for
#: development and tests): name to password. ``admin`` is the brokers' own login and,
#: with ``--acls``, the one super user; ``node`` and ``ops`` are there for ACL examples.
SASL_USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "node": "node-secret",
    "ops": "ops-secret",
}


@dataclass(frozen=True)
class BrokerSpec:
    """One broker of a cluster: its Kafka ``node.id``, ports and, while it runs, its PID."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None


@dataclass(frozen=True)
class ClusterState:
    """What ``state.json`` records about the cluster in a data dir."""

    cluster_id: str
    kafka_version: str
    brokers: tuple[BrokerSpec, ...] = field(default_factory=tuple)
    #: Clients log in with SASL PLAIN (``broker start --sasl``; users in :data:`SASL_USERS`).
    sasl: bool = False
    #: An authorizer checks ACLs (``--acls``, with ``sasl``): only ``admin`` may do all.
    acls: bool = False

    @property
    def bootstrap(self) -> str:
        """Bootstrap servers of every broker, ``127.0.0.1:port,...``."""
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    @property
    def voters(self) -> str:
        """Static ``controller.quorum.voters`` value."""
        return ",".join(f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in self.brokers)


def default_data_dir() -> Path:
    """Data dir used when none is given: ``<cache>/run``."""
    return cache_dir() / "run"


def resolve_data_dir(data_dir: Path | str | None) -> Path:
    """``data_dir`` as an absolute path, or :func:`default_data_dir` when not given."""
    return Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()


def broker_dir(data_dir: Path, node_id: int) -> Path:
    """Folder of broker ``node_id``: config, ``data/``, ``logs/`` and ``stdout.log``."""
    return data_dir / f"node-{node_id}"


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes as 22 chars of URL-safe base64."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like a CLI option
            return text


def layout(brokers: int, base_port: int) -> tuple[BrokerSpec, ...]:
    """Brokers ``1..brokers``; broker ``i`` (0-based) gets ports ``base_port + 2*i`` and +1."""
    return tuple(
        BrokerSpec(node_id=i + 1, port=base_port + 2 * i, controller_port=base_port + 2 * i + 1)
        for i in range(brokers)
    )


def load_state(data_dir: Path) -> ClusterState | None:
    """The cluster recorded in ``data_dir``, or ``None`` when none was ever started there."""
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        brokers = tuple(
            BrokerSpec(int(b["node_id"]), int(b["port"]), int(b["controller_port"]), b.get("pid"))
            for b in raw["nodes"]
        )
        return ClusterState(
            str(raw["cluster_id"]),
            str(raw["kafka_version"]),
            brokers,
            bool(raw.get("sasl")),
            bool(raw.get("acls")),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BrokerError(
            f"{path} is unreadable ({exc}); stop any broker by hand and delete {data_dir}"
        ) from exc


def save_state(data_dir: Path, state: ClusterState) -> None:
    """Write ``state.json`` atomically (a temp file renamed over the old one)."""
    payload = {
        "cluster_id": state.cluster_id,
        "kafka_version": state.kafka_version,
        "bootstrap": state.bootstrap,
        "sasl": state.sasl,
        "acls": state.acls,
        "nodes": [  # the key predates BrokerSpec; kept so existing data dirs stay readable
            {
                "node_id": b.node_id,
                "port": b.port,
                "controller_port": b.controller_port,
                "pid": b.pid,
            }
            for b in state.brokers
        ],
    }
    tmp = data_dir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(data_dir / STATE_FILE)
