"""Where AtomicKafka's records live: topic layouts, names and creation.

Two layouts (``--layout``):

``split`` (default)
    Topic ``T`` holds only Delivery records, in final order, so any plain Kafka
    consumer of ``T`` reads the ordered stream. The node's input log (client and
    control records) is the topic ``atomickafka-in.T``.
``shared``
    The thesis layout: client, control and Delivery records all live in ``T`` and
    readers filter (the :mod:`client` library does).

Per topic, malformed input records are set aside in ``atomickafka-dlq.T`` with the
reason in a header, and every node publishes its status to the compacted topic
``atomickafka-status`` keyed by topic. Each AtomicKafka topic has one partition
(partitioned topics are served by the merger).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

__all__ = [
    "DEAD_LETTER_PREFIX",
    "INPUT_PREFIX",
    "STATUS_TOPIC",
    "TYPE_HEADER",
    "Layout",
    "dead_letter_topic",
    "delivery_topic",
    "ensure_topics",
    "input_topic",
    "is_delivery_record",
    "node_group",
    "node_topics",
]

log = logging.getLogger(__name__)

INPUT_PREFIX: Final = "atomickafka-in."
DEAD_LETTER_PREFIX: Final = "atomickafka-dlq."
STATUS_TOPIC: Final = "atomickafka-status"
#: Record header carrying the messageType, so readers can skip records without parsing.
TYPE_HEADER: Final = "atomickafka-type"


class Layout(StrEnum):
    """Where a node's input log and its deliveries live."""

    SPLIT = "split"
    SHARED = "shared"


def input_topic(topic: str, layout: Layout | str) -> str:
    """The Kafka topic holding ``topic``'s input log (client and control records)."""
    return topic if Layout(layout) is Layout.SHARED else INPUT_PREFIX + topic


def delivery_topic(topic: str, layout: Layout | str) -> str:
    """The Kafka topic receiving ``topic``'s Delivery records (``topic`` itself)."""
    del layout  # both layouts deliver into the topic itself
    return topic


def is_delivery_record(record: KafkaMessage) -> bool:
    """True when the record's type header says it is a Delivery (no parsing needed)."""
    headers = record.headers()
    if not headers:
        return False
    pairs = headers.items() if isinstance(headers, dict) else headers
    return any(key == TYPE_HEADER and value == b"DeliveryMessage" for key, value in pairs)


def dead_letter_topic(topic: str) -> str:
    """Where the node of ``topic`` sets aside records it cannot read."""
    return DEAD_LETTER_PREFIX + topic


def node_group(topic: str) -> str:
    """The consumer group whose committed offset records the node's progress."""
    return f"atomickafka-node.{topic}"


def node_topics(topic: str, layout: Layout | str) -> dict[str, dict[str, str]]:
    """Every Kafka topic the node of ``topic`` needs, with its topic-level configs."""
    keep_forever = {"retention.ms": "-1", "retention.bytes": "-1"}
    topics: dict[str, dict[str, str]] = {
        delivery_topic(topic, layout): {},
        dead_letter_topic(topic): {},
        STATUS_TOPIC: {"cleanup.policy": "compact"},
    }
    # The input log is what recovery replays: it must not expire under the node.
    topics[input_topic(topic, layout)] = keep_forever
    return topics


def _replication_factor(admin: AdminClient) -> int:
    brokers = len(admin.list_topics(timeout=10).brokers)
    return max(1, min(3, brokers))


def _enforce_configs(admin: AdminClient, specs: Mapping[str, Mapping[str, str]]) -> None:
    """Set ``specs``' configs on topics that exist already (e.g. auto-created by a client
    that wrote before the node started: an input log must not keep the 7-day default)."""
    if not specs:
        return
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in configs.items()
            ],
        )
        for name, configs in specs.items()
    ]
    for resource, future in admin.incremental_alter_configs(resources).items():
        future.result(timeout=60)
        log.debug("configs of %s enforced", resource.name)


def ensure_topics(
    admin: AdminClient, wanted: Mapping[str, Mapping[str, str]] | Iterable[str]
) -> list[str]:
    """Create the missing topics of ``wanted`` (name -> configs); return those created.

    Topics get one partition and a replication factor of ``min(3, brokers)``; with three
    or more brokers ``min.insync.replicas`` is 2, so acks=all writes survive one loss.
    """
    specs = dict(wanted) if isinstance(wanted, Mapping) else {name: {} for name in wanted}
    existing = set(admin.list_topics(timeout=10).topics)
    _enforce_configs(admin, {n: c for n, c in specs.items() if n in existing and c})
    missing = [name for name in specs if name not in existing]
    if not missing:
        return []
    rf = _replication_factor(admin)
    new = []
    for name in missing:
        config = dict(specs[name])
        if rf >= 3:
            config.setdefault("min.insync.replicas", "2")
        new.append(NewTopic(name, num_partitions=1, replication_factor=rf, config=config))
    created = []
    for name, future in admin.create_topics(new, operation_timeout=30).items():
        try:
            future.result(timeout=60)
            created.append(name)
            log.info("created topic %s", name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created
