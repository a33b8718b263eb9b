"""Gathering what ``doctor`` judges, from Kafka: the brokers, the deployment's topics,
the nodes' statuses and committed offsets, and -- where a replayed log was cut -- the
snapshots that may still cover it. Every request is bounded in time; librdkafka's own
lines are kept out of the output."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from atomickafka.doctor.deployment import Deployment, TopicKind, committed_log
from atomickafka.doctor.facts import (
    ClusterFacts,
    DeploymentFacts,
    PartitionFacts,
    Snapshots,
    TopicFacts,
    TransactionsProbe,
)
from atomickafka.errors import TimedOutError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.consumer import read_to_end, retry_transient, until_partition_ends
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.status import Role, Status, read_statuses
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    merger_key,
    node_group,
    node_key,
    snapshot_topic,
)
from atomickafka.node.snapshots import newest_snapshots

__all__ = [
    "DOCTOR_TRANSACTIONAL_ID",
    "api_versions",
    "count_records",
    "discover",
    "gather_cluster",
    "gather_deployment",
    "gather_snapshots",
    "gather_topics",
    "probe_transactions",
]

#: The transactional id ``doctor`` tries (one id, reused: nothing piles up).
DOCTOR_TRANSACTIONAL_ID: Final = "atomickafka-doctor"
_TIMEOUT_S: Final = 10.0
#: A cluster's first transactional producer creates its transaction log: allow for it.
_TRANSACTIONS_TIMEOUT_S: Final = 20.0
_API_LINE: Final = re.compile(r"ApiKey \w+ \((\d+)\) Versions (\d+)\.\.(\d+)")
#: Broker configs the checks read.
_BROKER_KEYS: Final = ("unclean.leader.election.enable", "auto.create.topics.enable")


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _quiet() -> tuple[logging.Logger, _Kept]:
    kept = _Kept()
    logger = logging.Logger("atomickafka.doctor.librdkafka", logging.DEBUG)
    logger.addHandler(kept)
    return logger, kept


def _admin(connection: Connection, **extra: str) -> AdminClient:
    logger, _ = _quiet()
    return AdminClient({**connection.admin_config(), **extra}, logger=logger)


def api_versions(connection: Connection) -> dict[int, tuple[int, int]]:
    """The protocol versions the bootstrap broker offers, read from librdkafka's
    negotiation (its ``feature`` debug lines; empty when they did not come)."""
    logger, kept = _quiet()
    admin = AdminClient({**connection.admin_config(), "debug": "feature"}, logger=logger)
    admin.list_topics(timeout=_TIMEOUT_S)
    admin.poll(0.2)
    out: dict[int, tuple[int, int]] = {}
    for line in kept.lines:
        match = _API_LINE.search(line)
        if match:
            key, low, high = (int(g) for g in match.groups())
            out[key] = (low, high)
    return out


def probe_transactions(
    connection: Connection,
    timeout_s: float = _TRANSACTIONS_TIMEOUT_S,
) -> TransactionsProbe:
    """Start a transactional producer with :data:`DOCTOR_TRANSACTIONAL_ID`, within
    ``timeout_s``: does the cluster give out producer ids and run transactions?"""
    logger, _ = _quiet()
    started = time.monotonic()
    producer = RecordProducer(connection, logger, **{"transactional.id": DOCTOR_TRANSACTIONAL_ID})
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        text = getattr(err, "str", lambda: str(err))()
        return TransactionsProbe(False, time.monotonic() - started, text)
    finally:
        producer.flush(0)
    return TransactionsProbe(True, time.monotonic() - started)


def gather_cluster(connection: Connection, *, transactions: bool = True) -> ClusterFacts:
    """The brokers, their protocol versions and configs, and (``transactions``) whether
    a transactional producer starts."""
    admin = _admin(connection)
    brokers = tuple(sorted(admin.list_topics(timeout=_TIMEOUT_S).brokers))
    configs: dict[int, dict[str, str]] = {}
    for broker in brokers:  # librdkafka takes one broker resource per call
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        for future in admin.describe_configs([resource]).values():
            entries = future.result(timeout=_TIMEOUT_S)
            configs[broker] = {k: str(entries[k].value) for k in _BROKER_KEYS if k in entries}
    return ClusterFacts(
        brokers,
        api_versions(connection),
        configs,
        probe_transactions(connection) if transactions else None,
    )


def gather_topics(
    connection: Connection,
    names: Iterable[str],
    *,
    count: Iterable[str] = (),
) -> dict[str, TopicFacts]:
    """Each topic of ``names`` as the cluster has it: partitions, replicas, in-sync
    replicas, first and next offsets, and its configs; the topics of ``count`` also
    with their records counted (:func:`count_records`)."""
    admin = _admin(connection)
    metadata = admin.list_topics(timeout=_TIMEOUT_S).topics
    wanted = list(dict.fromkeys(names))
    present = [n for n in wanted if n in metadata and metadata[n].error is None]
    configs: dict[str, dict[str, str]] = {}
    if present:
        resources = [ConfigResource(ResourceType.TOPIC, n) for n in present]
        configs = retry_transient(
            lambda: _configs(admin, resources), "topic configs", 3 * _TIMEOUT_S
        )
    offsets = _offsets(admin, {n: list(metadata[n].partitions) for n in present})
    out: dict[str, TopicFacts] = {}
    for name in wanted:
        if name not in present:
            out[name] = TopicFacts(name, exists=False)
            continue
        parts = tuple(
            PartitionFacts(
                p.id,
                p.leader,
                tuple(p.replicas),
                tuple(p.isrs),
                *offsets.get((name, p.id), (None, None)),
            )
            for p in sorted(metadata[name].partitions.values(), key=lambda p: p.id)
        )
        out[name] = TopicFacts(name, True, parts, configs.get(name, {}))
    for name in dict.fromkeys(count):
        facts = out.get(name)
        if facts is not None and facts.exists:
            counted = count_records(connection, facts)
            out[name] = dataclasses.replace(facts, records=counted)
    return out


#: The most offsets :func:`count_records` reads, and for how long (s): past either it
#: gives up, and the offsets are shown as an upper bound.
COUNT_MAX_OFFSETS: Final = 200_000
COUNT_TIMEOUT_S: Final = 10.0


def count_records(
    connection: Connection,
    facts: TopicFacts,
    *,
    max_offsets: int = COUNT_MAX_OFFSETS,
    timeout_s: float = COUNT_TIMEOUT_S,
) -> int | None:
    """The committed records of ``facts``' partitions, read ``read_committed`` from
    their first offset to their end: offsets overcount them (a transaction's marker
    takes one, and an aborted transaction's records are no records to a reader).
    ``None`` when their offsets span more than ``max_offsets`` or the read takes longer
    than ``timeout_s``."""
    spans = {p.partition: (p.low, p.high) for p in facts.partitions}
    if any(low is None or high is None for low, high in spans.values()):
        return None
    todo = {p for p, (low, high) in spans.items() if (high or 0) > (low or 0)}
    if sum((high or 0) - (low or 0) for low, high in spans.values()) > max_offsets:
        return None
    if not todo:
        return 0
    settings: dict[str, str | int | bool] = {
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    }
    logger, _ = _quiet()
    group = f"atomickafka-doctor-{uuid.uuid4().hex[:12]}"
    consumer = Consumer(connection.consumer_config(group, **settings), logger=logger)
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(facts.name, p, spans[p][0] or 0) for p in todo])
        return sum(1 for _ in until_partition_ends(consumer, todo, deadline, facts.name))
    except TimedOutError:
        return None
    finally:
        consumer.close()


def _configs(admin: AdminClient, resources: list[ConfigResource]) -> dict[str, dict[str, str]]:
    """Each topic's configs (a just-created topic may be unknown to one broker a while:
    the caller retries)."""
    out = {}
    for resource, future in admin.describe_configs(resources).items():
        entries = future.result(timeout=_TIMEOUT_S)
        out[resource.name] = {k: str(e.value) for k, e in entries.items()}
    return out


def _offsets(
    admin: AdminClient, partitions: Mapping[str, list[int]]
) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    """``(first, next)`` offset of each partition; ``None`` where it could not be read."""
    out: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    parts = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
    if not parts:
        return out
    found: dict[str, dict[tuple[str, int], int]] = {"low": {}, "high": {}}
    earliest, latest = OffsetSpec.earliest(), OffsetSpec.latest()  # type: ignore[no-untyped-call]
    for label, spec in (("low", earliest), ("high", latest)):
        futures: dict[Any, Any] = admin.list_offsets({tp: spec for tp in parts})
        for tp, future in futures.items():
            try:
                found[label][(tp.topic, tp.partition)] = int(
                    future.result(timeout=_TIMEOUT_S).offset
                )
            except KafkaException:
                continue
    for tp in parts:
        key = (tp.topic, tp.partition)
        out[key] = (found["low"].get(key), found["high"].get(key))
    return out


def _committed(
    admin: AdminClient, statuses: Mapping[str, Status], deployment: Deployment
) -> dict[str, int]:
    """Each node's committed input offset (-1: none), by status key."""
    out: dict[str, int] = {}
    for key, status in statuses.items():
        if status.topic not in deployment.topics or status.role is not Role.NODE:
            continue
        part = TopicPartition(committed_log(status), status.layer or 0)
        group = node_group(status.topic, status.layer if status.partitions > 1 else None)
        request = [ConsumerGroupTopicPartitions(group, [part])]
        try:
            for future in admin.list_consumer_group_offsets(request).values():
                result = future.result(timeout=_TIMEOUT_S)
                out[key] = max(-1, int(result.topic_partitions[0].offset))
        except KafkaException:
            continue
    return out


def gather_deployment(connection: Connection, deployment: Deployment) -> DeploymentFacts:
    """The deployment's topics, the statuses of its nodes and their committed offsets."""
    names = deployment.kafka_topics()
    dead_letters = [n for n, t in names.items() if t.kind is TopicKind.DEAD_LETTERS]
    topics = gather_topics(connection, names, count=dead_letters)
    status_topic = topics.get(STATUS_TOPIC)
    published = status_topic is not None and status_topic.exists
    statuses = read_statuses(connection) if published else {}
    admin = _admin(connection)
    committed = _committed(admin, statuses, deployment)
    snapshots = gather_snapshots(connection, deployment, topics)
    return DeploymentFacts(topics, statuses, committed, time.time(), snapshots)


def gather_snapshots(
    connection: Connection,
    deployment: Deployment,
    topics: Mapping[str, TopicFacts],
) -> Snapshots:
    """The snapshots of every role of each AtomicKafka topic whose input log or layer
    stream no longer starts at offset 0 (only those snapshot topics are read, whole;
    signatures are not checked), their states left out."""
    cut = set()
    for name, topic in deployment.kafka_topics().items():
        facts = topics.get(name)
        replayed = topic.kind in (TopicKind.INPUT, TopicKind.LAYERS)
        if replayed and facts is not None and any(p.low for p in facts.partitions):
            cut.add(topic.owner)
    if not cut:
        return {}
    present = _admin(connection).list_topics(timeout=_TIMEOUT_S).topics
    out: dict[str, tuple[Any, ...]] = {}
    for owner in sorted(cut):
        name = snapshot_topic(owner)
        records = read_to_end(connection, name, [0]) if name in present else []
        rows = [(_bytes(r.key()), r.value()) for r in records]
        layered = deployment.partitions > 1
        roles = [node_key(owner, p if layered else None) for p in range(deployment.partitions)]
        for role in [*roles, merger_key(owner)] if layered else roles:
            out[role] = tuple(
                dataclasses.replace(s, state={}) if s.state is not None else s
                for s in newest_snapshots(rows, role)
            )
    return out


def _bytes(key: str | bytes | None) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


def discover(connection: Connection) -> Deployment | None:
    """The deployment the status topic describes: every topic whose node has not stopped
    cleanly, with the layout and layer count most of its nodes report (``None`` when no
    node has published)."""
    admin = _admin(connection)
    if STATUS_TOPIC not in admin.list_topics(timeout=_TIMEOUT_S).topics:
        return None
    statuses = [s for s in read_statuses(connection).values() if not s.is_stopped]
    if not statuses:
        return None
    topics = tuple(sorted({s.topic for s in statuses}))
    shapes = [(s.layout, s.partitions) for s in statuses if s.role is Role.NODE]
    layout, partitions = max(set(shapes), key=shapes.count) if shapes else (Layout.SPLIT, 1)
    control_log = any(s.control_log for s in statuses if s.role is Role.NODE)
    return Deployment(topics, Layout(layout), partitions, control_log=control_log)
