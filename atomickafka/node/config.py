"""The configuration of a node and of a cluster of nodes: every default in one place.

A :class:`NodeConfig` is everything one node process needs. The ``cluster`` command
builds one :class:`ClusterConfig` and hands each child process its own
:class:`NodeConfig` (:meth:`ClusterConfig.node_configs`), as an object: no command line
is rebuilt on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final

from atomickafka.audit.config import AuditConfig
from atomickafka.core.compact import BINARY, CONTROL_FORMATS
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.memory import DEFAULT_WINDOW_MS
from atomickafka.core.protocols import CARRIER, NOTIFY_VALUES
from atomickafka.core.wire import MAX_VALUE_BYTES
from atomickafka.errors import ConfigError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.guarantees import refuse_unsafe
from atomickafka.kafka.properties import masked
from atomickafka.kafka.topics import Layout, node_key

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_COMMIT_INTERVAL_S",
    "DEFAULT_POLL_TIMEOUT_S",
    "DEFAULT_STUCK_AFTER_S",
    "ClusterConfig",
    "HostConfig",
    "NodeConfig",
]

#: Input records a node takes per batch (one engine step, one commit unit).
DEFAULT_BATCH_SIZE: Final = 2000
#: How long a node's poll waits for its first input record (s); it returns as soon as
#: one is there (:func:`~atomickafka.kafka.consumer.consume_batch`).
DEFAULT_POLL_TIMEOUT_S: Final = 0.05
#: How often a node commits its transaction, or its offsets, while records arrive (s).
DEFAULT_COMMIT_INTERVAL_S: Final = 0.1
#: A queue head older than this (seconds) is logged as stuck, naming what it waits for.
DEFAULT_STUCK_AFTER_S: Final = 10.0


@dataclass(frozen=True, slots=True, repr=False)
class NodeConfig:
    """Everything one node needs to run (see ``docs/DESIGN.md`` §5 for the topics).

    ``overrides`` are the user's librdkafka settings; those that would break the
    guarantees are refused (:mod:`atomickafka.kafka.guarantees`), and secrets among
    them never show in the ``repr``.
    """

    bootstrap: str
    topic: str
    algorithm: Algorithm = DEFAULT_ALGORITHM
    layout: Layout = Layout.SPLIT
    #: Partition layers of the topic (§8); with more than one, ``layer`` says which
    #: layer this node runs, and its deliveries go to the topic's merger.
    partitions: int = 1
    layer: int | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)
    batch_size: int = DEFAULT_BATCH_SIZE
    poll_timeout_s: float = DEFAULT_POLL_TIMEOUT_S
    status_interval_s: float = 1.0
    #: How often the writer commits its transaction (exactly-once) or the input offsets
    #: (at-least-once) while records arrive, and how soon after the last commit an idle
    #: node commits (s, §6.3): only ``read_committed`` readers wait for it.
    commit_interval_s: float = DEFAULT_COMMIT_INTERVAL_S
    create_topics: bool = True
    max_value_bytes: int = MAX_VALUE_BYTES
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S
    log_level: str = "info"
    #: One Kafka transaction per batch (§6): plain consumers of the delivery topics see
    #: every delivery exactly once; off, outputs are acknowledged, then committed.
    exactly_once: bool = True
    #: How long settled message ids are remembered, in log time (§4.13).
    window_ms: int = DEFAULT_WINDOW_MS
    #: A snapshot after this many input records, or this many seconds (§6).
    snapshot_every_records: int = 50_000
    snapshot_every_s: float = 30.0
    #: Signing secrets, one per line (§4.14); ``None``: records are not signed.
    secret_file: str | None = None
    #: How long the lease group waits for a silent active instance (standby takeover).
    session_timeout_ms: int = 6000
    #: Port of the Prometheus endpoint (``/metrics``; 0: any free port, logged);
    #: ``None``: none. Under ``cluster`` the supervisor serves every child's on it.
    metrics_port: int | None = None
    #: Address the endpoint listens on.
    metrics_host: str = "0.0.0.0"
    #: How deliveries are written (§3.8): ``json`` (an envelope, the default) or ``raw``
    #: (the value as sent, the key as sent, the user's headers, AtomicKafka's metadata in
    #: headers: what existing consumers read as any topic). Raw is not the default because
    #: it costs measurably more (docs/performance.md: 25-35 % less capacity at 0-10 %
    #: multicast), and issue 17 made it the default only if it cost nothing measurable.
    delivery_format: str = "json"
    #: How control records (bundles, ticks) are written (§3.9): ``binary`` (the compact
    #: form, the default) or ``json`` (the form releases before it read: a rolling
    #: upgrade from such a release runs the upgraded nodes with ``json`` until every
    #: node is upgraded, docs/operators.md *Upgrade*). Every node reads both.
    control_format: str = BINARY
    #: What a ``direct`` node's Notifies carry (§4.16): ``carrier`` (the value only from
    #: and to the message's carrier: O(k) copies of it per multicast, the default) or
    #: ``every`` (the value in every Notify, the only form releases before it accept: a
    #: rolling upgrade from such a release runs the upgraded nodes with ``every`` until
    #: every node is upgraded, docs/operators.md *Upgrade*). Every node reads both.
    notify_values: str = CARRIER
    #: Read peers' proposals from a control log of the node's own (§7): its peers'
    #: bundles, its ticks and members records and its apply markers go to
    #: ``atomickafka-ctl.T``, read before the client records of ``atomickafka-in.T``,
    #: which apply where the node's markers place them. A deployment-wide setting:
    #: every node of a deployment runs with it or none does (§7, *Switching*).
    control_log: bool = True
    #: Take up another protocol, delivery format or signing than the node's state was
    #: built with, when the node was stopped cleanly with nothing in flight (§6.6).
    reconfigure: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", Algorithm(self.algorithm))
        object.__setattr__(self, "layout", Layout(self.layout))
        object.__setattr__(self, "overrides", dict(self.overrides))
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be at least 1, not {self.batch_size}")
        if not 0 < self.commit_interval_s <= 60:
            raise ConfigError(
                f"commit interval must be above 0 and at most 60 s, not {self.commit_interval_s}"
            )
        if self.partitions < 1:
            raise ConfigError(f"partitions must be at least 1, not {self.partitions}")
        if self.partitions > 1 and self.layout is Layout.SHARED:
            raise ConfigError("partitioned topics need the split layout (--layout split)")
        if self.delivery_format not in ("raw", "json"):
            raise ConfigError(f"delivery format must be raw or json, not {self.delivery_format!r}")
        if self.control_format not in CONTROL_FORMATS:
            raise ConfigError(f"control format must be binary or json, not {self.control_format!r}")
        if self.notify_values not in NOTIFY_VALUES:
            raise ConfigError(f"notify values must be carrier or every, not {self.notify_values!r}")
        if self.layer is not None and not 0 <= self.layer < self.partitions:
            raise ConfigError(f"layer {self.layer} is not one of 0..{self.partitions - 1}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics port {self.metrics_port} is not one of 0..65535")
        refuse_unsafe(self.overrides, node=True)

    def __repr__(self) -> str:
        shown = self.to_dict() | {"overrides": masked(self.overrides)}
        return f"NodeConfig({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @property
    def layered(self) -> bool:
        """True when the topic is partitioned: the node is one layer's."""
        return self.partitions > 1

    @property
    def connection(self) -> Connection:
        """How this node reaches Kafka: ``bootstrap`` and the user's ``overrides``."""
        return Connection(self.bootstrap, self.overrides)

    @property
    def partition(self) -> int:
        """The partition of the input log this node reads (its layer, or 0)."""
        return self.layer or 0

    @property
    def key(self) -> str:
        """The node's status key and identity: ``T`` or ``T/p``."""
        return node_key(self.topic, self.layer if self.layered else None)

    @property
    def node_id(self) -> str:
        """Stable across restarts, so that replayed outputs equal the originals."""
        return f"node-{self.key}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data, secrets included (to hand the configuration on; for logs, mask
        them with :func:`~atomickafka.kafka.properties.masked`)."""
        data = asdict(self)
        data["algorithm"] = self.algorithm.value
        data["layout"] = self.layout.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown node settings: {', '.join(sorted(unknown))}")
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """One node per topic, all sharing ``node`` but for the topic."""

    topics: tuple[str, ...]
    node: NodeConfig
    #: Seconds a stopping child gets after SIGTERM before it is killed.
    grace_s: float = 20.0
    #: Longest wait before restarting a child that keeps failing.
    max_backoff_s: float = 10.0
    #: Run a standby beside every node and merger (it takes over when the active dies).
    standby: bool = False
    #: The live audit to run beside the nodes (``cluster --audit``), if any.
    audit: AuditConfig | None = None
    #: Topics whose nodes one process hosts, sharing its Kafka clients (a
    #: :class:`HostConfig` per group; 1: a process per node).
    topics_per_process: int = 1

    def __post_init__(self) -> None:
        if not self.topics:
            raise ConfigError("a cluster needs at least one topic")
        if len(set(self.topics)) != len(self.topics):
            raise ConfigError("the cluster's topics must be distinct")
        if self.topics_per_process < 1:
            raise ConfigError("--topics-per-process must be at least 1")
        if self.topics_per_process > 1 and not self.node.exactly_once:
            raise ConfigError(
                "--topics-per-process shares one transactional producer among the hosted "
                "nodes: it needs exactly-once (drop --at-least-once, or host one topic "
                "per process)"
            )
        if self.topics_per_process > 1 and self.node.layered:
            raise ConfigError(
                "--topics-per-process hosts whole topics: partitioned topics (--partitions "
                "above 1) run a process per layer"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (to hand the whole configuration to another process)."""
        return {
            "topics": list(self.topics),
            "node": self.node.to_dict(),
            "grace_s": self.grace_s,
            "max_backoff_s": self.max_backoff_s,
            "standby": self.standby,
            "audit": None if self.audit is None else self.audit.to_dict(),
            "topics_per_process": self.topics_per_process,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown cluster settings: {', '.join(sorted(unknown))}")
        settings = {k: v for k, v in data.items() if k not in ("topics", "node", "audit")}
        audit = data.get("audit")
        return cls(
            tuple(data["topics"]),
            NodeConfig.from_dict(data["node"]),
            audit=None if audit is None else AuditConfig.from_dict(audit),
            **settings,
        )

    def node_configs(self) -> list[NodeConfig]:
        """The configuration of each topic's node (of each layer's, when partitioned);
        no child serves metrics itself (the supervisor serves them all)."""
        child = replace(self.node, metrics_port=None)
        if not self.node.layered:
            return [replace(child, topic=topic, layer=None) for topic in self.topics]
        return [
            replace(child, topic=topic, layer=layer)
            for topic in self.topics
            for layer in range(self.node.partitions)
        ]

    def host_configs(self) -> list[HostConfig]:
        """The nodes grouped into processes, :attr:`topics_per_process` topics each, in
        the order of :attr:`topics` (empty: a process per node)."""
        if self.topics_per_process <= 1:
            return []
        nodes = self.node_configs()
        size = self.topics_per_process
        return [HostConfig(tuple(nodes[i : i + size])) for i in range(0, len(nodes), size)]

    def merger_configs(self) -> list[NodeConfig]:
        """One merger per topic when the topics are partitioned, else none."""
        if not self.node.layered:
            return []
        child = replace(self.node, metrics_port=None)
        return [replace(child, topic=topic, layer=None) for topic in self.topics]


@dataclass(frozen=True)
class HostConfig:
    """Several topics' nodes in one process that share its Kafka clients: one consumer,
    one control producer, one transactional producer and one lease (``cluster
    --topics-per-process``, :mod:`atomickafka.node.host`). Each node keeps its own
    topics, consumer group, snapshots and status; the group's name (:attr:`key`) names
    the lease and the transactional id, so the same topics hosted together again
    (a restart, a standby) fence the instance before."""

    nodes: tuple[NodeConfig, ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ConfigError("a host process needs at least one node")
        if len({n.key for n in self.nodes}) != len(self.nodes):
            raise ConfigError("a host process's nodes must be distinct")

    @property
    def key(self) -> str:
        """The group's name: its nodes' keys joined by ``+`` (``orders+payments``)."""
        return "+".join(n.key for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (to hand the whole configuration to another process)."""
        return {"nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostConfig:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(NodeConfig.from_dict(n) for n in data["nodes"]))
