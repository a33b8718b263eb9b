"""What ``doctor`` gathers from a cluster before judging it: plain data, so that every
check is a pure function of it (:mod:`atomickafka.doctor.gather` fills it in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from atomickafka.kafka.status import Status
from atomickafka.node.snapshots import LoadedSnapshot

__all__ = [
    "ClusterFacts",
    "DeploymentFacts",
    "PartitionFacts",
    "Snapshots",
    "TopicFacts",
    "TransactionsProbe",
]


@dataclass(frozen=True, slots=True)
class TransactionsProbe:
    """How ``init_transactions`` with a throwaway transactional id went."""

    ok: bool
    seconds: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """The brokers: how many, what protocol versions they offer (API key to
    ``(min, max)`` version; empty when unknown), their configs (broker id to name to
    value), and whether transactions work."""

    brokers: tuple[int, ...]
    api_versions: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    broker_configs: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    transactions: TransactionsProbe | None = None


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """One partition: leader (-1: none), replicas, in-sync replicas, and its log's
    first and next offsets (``None``: not read)."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    low: int | None = None
    high: int | None = None


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """One Kafka topic as the cluster has it (``exists`` False: the rest is empty)."""

    name: str
    exists: bool
    partitions: tuple[PartitionFacts, ...] = ()
    configs: Mapping[str, str] = field(default_factory=dict)
    #: The committed records its partitions hold, counted by reading them
    #: (``read_committed``); ``None`` when they were not counted (too many to read).
    records: int | None = None

    @property
    def replication_factor(self) -> int:
        """The smallest replica count of its partitions (0 when it has none)."""
        return min((len(p.replicas) for p in self.partitions), default=0)

    @property
    def offsets(self) -> int:
        """The offsets its partitions span now (those whose offsets were read): an upper
        bound of its records, since a transaction's commit or abort marker takes an
        offset, and so does every record of an aborted transaction."""
        return sum(
            p.high - p.low for p in self.partitions if p.high is not None and p.low is not None
        )


#: Each role's snapshots (``T``, ``T/p``, ``T/merger``), newest first; read only for the
#: owners of a log that no longer starts at offset 0. Their states are left out: a
#: readable one has an empty dict.
Snapshots = Mapping[str, tuple[LoadedSnapshot, ...]]


@dataclass(frozen=True, slots=True)
class DeploymentFacts:
    """The AtomicKafka side: every topic's Kafka topics, each node's and merger's last
    status, each node's committed input offset (status key to offset; -1 none), and
    the snapshots of the roles whose logs were cut."""

    topics: Mapping[str, TopicFacts]
    statuses: Mapping[str, Status]
    committed: Mapping[str, int]
    now: float
    snapshots: Snapshots = field(default_factory=dict)
