"""Creating the topics AtomicKafka needs, with the configs it relies on."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from atomickafka.errors import ConfigError
from atomickafka.kafka.connection import Where, connection_of
from atomickafka.kafka.consumer import retry_transient
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER

__all__ = [
    "MIN_MESSAGE_BYTES",
    "TopicSpec",
    "admin_client",
    "ensure_topics",
    "partition_count",
    "too_small",
]

log = logging.getLogger(__name__)

#: The input log is what recovery replays: it must not expire under the node.
KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
#: Topics AtomicKafka writes must take record batches of 1 MiB (Kafka's default
#: ``max.message.bytes`` is 1,048,588): its records and producer batches go up to
#: 1,000,000 bytes plus batch headers.
MIN_MESSAGE_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic AtomicKafka needs: how many partitions, and configs it must have."""

    partitions: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


def admin_client(where: Where) -> AdminClient:
    """An AdminClient of the connection ``where`` (or of a bare bootstrap string),
    logging through :data:`~atomickafka.kafka.settings.LIBRDKAFKA_LOGGER`."""
    return AdminClient(connection_of(where).admin_config(), logger=LIBRDKAFKA_LOGGER)


def _replication_factor(admin: AdminClient) -> int:
    brokers = len(admin.list_topics(timeout=10).brokers)
    return max(1, min(3, brokers))


def _enforce_configs(admin: AdminClient, specs: Mapping[str, TopicSpec]) -> None:
    """Set ``specs``' configs on topics that exist already (e.g. auto-created by a client
    that wrote before the node started: an input log must not keep the 7-day default)."""
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in spec.configs.items()
            ],
        )
        for name, spec in specs.items()
        if spec.configs
    ]
    if not resources:
        return
    for resource, future in admin.incremental_alter_configs(resources).items():
        future.result(timeout=60)
        log.debug("configs of %s enforced", resource.name)


def too_small(admin: AdminClient, topics: Iterable[str]) -> dict[str, int]:
    """The topics of ``topics`` whose ``max.message.bytes`` is below
    :data:`MIN_MESSAGE_BYTES`, with their value."""
    out: dict[str, int] = {}
    for name in dict.fromkeys(topics):
        # a topic another process has just created may be unknown here for a moment
        entry = retry_transient(
            lambda name=name: _describe(admin, name).get("max.message.bytes"),  # type: ignore[misc]
            f"configs of {name}",
        )
        if entry is not None and entry.value is not None and int(entry.value) < MIN_MESSAGE_BYTES:
            out[name] = int(entry.value)
    return out


def _describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    configs: dict[str, Any] = future.result(timeout=30)
    return configs


def partition_count(admin: AdminClient, topic: str) -> int | None:
    """How many partitions ``topic`` has, or ``None`` if it does not exist."""
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None:
        return None
    return len(meta.partitions)


def ensure_topics(
    admin: AdminClient,
    wanted: Mapping[str, TopicSpec] | Iterable[str],
    *,
    replication_factor: int | None = None,
) -> list[str]:
    """Create the missing topics of ``wanted``; return the names created.

    Topics get a replication factor of ``replication_factor``, by default
    ``min(3, brokers)``; with three or more replicas ``min.insync.replicas`` is 2 unless
    the spec says otherwise, so acks=all writes survive one loss. An existing topic
    gets the configs it must have; one with fewer partitions than wanted is an error
    (raised as :class:`~atomickafka.errors.ConfigError`: a layer without its partition
    would stall).
    """
    specs = dict(wanted) if isinstance(wanted, Mapping) else {n: TopicSpec() for n in wanted}
    existing = retry_transient(lambda: admin.list_topics(timeout=10).topics, "topic metadata")
    for name, spec in specs.items():
        meta = existing.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) < spec.partitions:
            raise ConfigError(
                f"topic {name} has {len(meta.partitions)} partitions, {spec.partitions} are "
                "needed (one per layer); add partitions with kafka-topics --alter"
            )
    _enforce_configs(admin, {n: s for n, s in specs.items() if n in existing})
    missing = [name for name in specs if name not in existing]
    if not missing:
        return []
    rf = replication_factor or _replication_factor(admin)
    new = []
    for name in missing:
        config = dict(specs[name].configs)
        if rf >= 3:
            config.setdefault("min.insync.replicas", "2")
        new.append(NewTopic(name, specs[name].partitions, rf, config=config))
    created = []
    for name, future in admin.create_topics(new, operation_timeout=30).items():
        try:
            future.result(timeout=60)
            created.append(name)
            log.info("created topic %s", name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    if created:
        retry_transient(lambda: _ready(admin, created), "new topics' metadata", 30.0)
    return created


def _ready(admin: AdminClient, names: list[str]) -> None:
    """Raise a transient error until every topic of ``names`` has a leader for each
    partition and its configs can be described: on several brokers a new topic's
    metadata spreads for a while, and a request that reaches a broker without it is
    answered "unknown topic or partition" (seen in the three-broker doctor test)."""
    topics = admin.list_topics(timeout=10).topics
    for name in names:
        meta = topics.get(name)
        if (
            meta is None
            or meta.error is not None
            or not meta.partitions
            or any(p.leader < 0 for p in meta.partitions.values())
        ):
            raise KafkaException(
                KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{name}: no leader yet")
            )
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    for future in admin.describe_configs(resources).values():
        future.result(timeout=10)
