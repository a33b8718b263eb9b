"""An AtomicKafka deployment's Kafka topics, and the settings ordering needs of each.

For every AtomicKafka topic ``T`` (``docs/DESIGN.md`` §5): its input log (what a node
replays from its newest snapshot to rebuild its state: created to be kept forever, at
least for :attr:`Deployment.min_retention_ms`; stamped by the broker), its delivery
topic, its dead letters, the layer streams of a partitioned topic, and the shared
status topic. :meth:`Deployment.specs` is what ``atomickafka topics create`` creates:
the node's own specs (:func:`~atomickafka.node.runtime.node_topic_specs`) with the
settings of :data:`CREATE_CONFIGS` on top. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from atomickafka.kafka.admin import MIN_MESSAGE_BYTES, TopicSpec
from atomickafka.kafka.status import Status
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    control_topic,
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
)
from atomickafka.node.config import NodeConfig
from atomickafka.node.runtime import node_topic_specs

__all__ = [
    "CREATE_CONFIGS",
    "DEFAULT_MAX_DOWNTIME_S",
    "DEFAULT_SNAPSHOT_INTERVAL_S",
    "LOG_APPEND_TIME",
    "Deployment",
    "KafkaTopic",
    "TopicKind",
    "aligned_min_insync",
    "committed_log",
]

#: The timestamp type of input logs: the broker stamps each record when it appends it.
LOG_APPEND_TIME: Final = "LogAppendTime"
#: The nodes' default ``--snapshot-interval`` (s).
DEFAULT_SNAPSHOT_INTERVAL_S: Final = 30.0
#: How long a node may be down, by default, when judging a finite retention (s).
DEFAULT_MAX_DOWNTIME_S: Final = 86_400.0
#: Kafka's default ``max.message.bytes``: room for a 1,000,000-byte record and its batch.
_MAX_MESSAGE_BYTES: Final = str(MIN_MESSAGE_BYTES + 12)


class TopicKind(StrEnum):
    """What a Kafka topic is to AtomicKafka."""

    INPUT = "input log"
    DELIVERY = "deliveries"
    LAYERS = "layer streams"
    DEAD_LETTERS = "dead letters"
    STATUS = "statuses"


_KEEP_FOREVER: Final = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
#: On every topic: an out-of-sync replica never becomes leader, whatever the brokers'
#: default (acknowledged records would vanish, and a replay differ from what was
#: delivered).
_CLEAN_ELECTIONS: Final = {"unclean.leader.election.enable": "false"}

#: What ``topics create`` sets on each kind of topic (and aligns on existing ones).
CREATE_CONFIGS: Final[Mapping[TopicKind, Mapping[str, str]]] = {
    TopicKind.INPUT: {
        **_KEEP_FOREVER,
        **_CLEAN_ELECTIONS,
        "message.timestamp.type": LOG_APPEND_TIME,
        "max.message.bytes": _MAX_MESSAGE_BYTES,
    },
    TopicKind.LAYERS: {
        **_KEEP_FOREVER,
        **_CLEAN_ELECTIONS,
        "max.message.bytes": _MAX_MESSAGE_BYTES,
    },
    TopicKind.DELIVERY: {
        **_CLEAN_ELECTIONS,
        "cleanup.policy": "delete",
        "max.message.bytes": _MAX_MESSAGE_BYTES,
    },
    TopicKind.DEAD_LETTERS: {**_CLEAN_ELECTIONS, "max.message.bytes": _MAX_MESSAGE_BYTES},
    TopicKind.STATUS: {**_CLEAN_ELECTIONS, "cleanup.policy": "compact"},
}


def aligned_min_insync(replicas: int, current: str | None) -> str | None:
    """The ``min.insync.replicas`` ``topics create`` sets on an existing topic with
    ``replicas`` replicas and ``current`` (``None``: the broker's default, 1), or
    ``None`` to leave it: 2 where three or more replicas take writes acknowledged by
    one (doctor fails it), the replicas less one (at least 1) where it is above them
    (every write refused). Equal to the replicas (doctor warns) is left: it is a choice
    of refusing writes over a lost broker."""
    try:
        value = int(current or "1")
    except ValueError:
        return None
    if replicas >= 3 and value < 2:
        return "2"
    if value > replicas > 0:
        return str(max(1, replicas - 1))
    return None


@dataclass(frozen=True, slots=True)
class KafkaTopic:
    """One Kafka topic of a deployment: its name, what it is, which AtomicKafka topic
    it serves (``""`` for the status topic) and the partitions it needs."""

    name: str
    kind: TopicKind
    owner: str
    partitions: int = 1


@dataclass(frozen=True, slots=True)
class Deployment:
    """AtomicKafka topics served with one layout and one number of layers; the nodes'
    snapshot interval and the longest a node may be down, which bound how short the
    retention of the logs they replay may be (:attr:`min_retention_ms`)."""

    topics: tuple[str, ...]
    layout: Layout = Layout.SPLIT
    partitions: int = 1
    snapshot_interval_s: float = DEFAULT_SNAPSHOT_INTERVAL_S
    max_downtime_s: float = DEFAULT_MAX_DOWNTIME_S
    #: The nodes read control logs (``--control-log``, §7): ``atomickafka-ctl.T`` is a
    #: log they replay, checked as an input log.
    control_log: bool = True

    @property
    def min_retention_ms(self) -> int:
        """The shortest safe ``retention.ms`` of an input log or layer stream
        (docs/DESIGN.md §6.5): twice the snapshot interval -- the newest snapshot may
        be unreadable, and the one before it is then used -- plus the longest downtime,
        during which no snapshot is taken."""
        return int((2 * self.snapshot_interval_s + self.max_downtime_s) * 1000)

    def kafka_topics(self) -> dict[str, KafkaTopic]:
        """Every Kafka topic the deployment uses, by name (in the shared layout ``T`` is
        its own input log, and is checked as one)."""
        out: dict[str, KafkaTopic] = {}
        for topic in self.topics:
            out[delivery_topic(topic)] = KafkaTopic(topic, TopicKind.DELIVERY, topic)
            out[dead_letter_topic(topic)] = KafkaTopic(
                dead_letter_topic(topic), TopicKind.DEAD_LETTERS, topic
            )
            name = input_topic(topic, self.layout)
            out[name] = KafkaTopic(name, TopicKind.INPUT, topic, self.partitions)
            if self.control_log:
                name = control_topic(topic)
                out[name] = KafkaTopic(name, TopicKind.INPUT, topic, self.partitions)
            if self.partitions > 1:
                name = layers_topic(topic)
                out[name] = KafkaTopic(name, TopicKind.LAYERS, topic, self.partitions)
        out[STATUS_TOPIC] = KafkaTopic(STATUS_TOPIC, TopicKind.STATUS, "")
        return out

    def specs(self) -> dict[str, TopicSpec]:
        """What to create: the nodes' own specs (any topic a node needs), with
        :data:`CREATE_CONFIGS` on top of those this module knows."""
        specs: dict[str, TopicSpec] = {}
        for topic in self.topics:
            node = NodeConfig(
                "-",
                topic,
                layout=self.layout,
                partitions=self.partitions,
                control_log=self.control_log,
            )
            specs.update(node_topic_specs(node))
        for name, known in self.kafka_topics().items():
            spec = specs.get(name, TopicSpec())
            specs[name] = TopicSpec(
                max(spec.partitions, known.partitions),
                {**spec.configs, **CREATE_CONFIGS[known.kind]},
            )
        return specs


def committed_log(status: Status) -> str:
    """The log whose offset a node commits: its control log with ``--control-log``
    (§7), else its input log."""
    return (
        control_topic(status.topic)
        if status.control_log
        else input_topic(status.topic, status.layout)
    )
