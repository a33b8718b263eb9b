"""Where AtomicKafka's records live: topic layouts and names (``docs/DESIGN.md`` §5).

Two layouts (``--layout``):

``split`` (default)
    Topic ``T`` holds only Delivery records, in final order, so any plain Kafka
    consumer of ``T`` reads the ordered stream. The input log of ``T``'s node (client
    records and bundles) is the topic ``atomickafka-in.T``.
``shared``
    The thesis layout: client records, bundles and Delivery records all live in ``T``
    and readers filter (the :mod:`atomickafka.client` library does).

A partitioned topic (``--partitions N``, split layout only) has an input log of N
partitions, one per layer; each layer's node writes its decided messages and
watermarks to partition ``p`` of ``atomickafka-layers.T``, and the topic's merger
writes the merged stream to ``T``. Per topic, records a node sets aside go to
``atomickafka-dlq.T`` with the reason in a header, and every node and merger publishes
its status to the compacted topic ``atomickafka-status``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from confluent_kafka import Message as KafkaMessage

from atomickafka.core.reader import TYPE_HEADER, header_value

__all__ = [
    "CONTROL_PREFIX",
    "DEAD_LETTER_PREFIX",
    "INPUT_PREFIX",
    "LAYERS_PREFIX",
    "SNAPSHOT_PREFIX",
    "STATUS_TOPIC",
    "TYPE_HEADER",
    "Layout",
    "control_topic",
    "dead_letter_topic",
    "delivery_topic",
    "header_type",
    "input_topic",
    "layers_topic",
    "merger_key",
    "node_group",
    "node_key",
    "snapshot_topic",
]

INPUT_PREFIX: Final = "atomickafka-in."
#: A node's control log (§7; the default, ``--no-control-log`` runs without).
CONTROL_PREFIX: Final = "atomickafka-ctl."
LAYERS_PREFIX: Final = "atomickafka-layers."
DEAD_LETTER_PREFIX: Final = "atomickafka-dlq."
SNAPSHOT_PREFIX: Final = "atomickafka-snap."
STATUS_TOPIC: Final = "atomickafka-status"


class Layout(StrEnum):
    """Where a node's input log and its deliveries live."""

    SPLIT = "split"
    SHARED = "shared"


def input_topic(topic: str, layout: Layout | str) -> str:
    """The Kafka topic holding ``topic``'s input log (client records and bundles)."""
    return topic if Layout(layout) is Layout.SHARED else INPUT_PREFIX + topic


def control_topic(topic: str) -> str:
    """The Kafka topic holding ``topic``'s control log (§7):
    its peers' bundles, its own ticks, members records and apply markers; one partition
    per layer, as the input log."""
    return CONTROL_PREFIX + topic


def delivery_topic(topic: str) -> str:
    """The Kafka topic receiving ``topic``'s Delivery records: ``topic`` itself, in both
    layouts (the merger writes there too)."""
    return topic


def layers_topic(topic: str) -> str:
    """Where the layers of partitioned ``topic`` write their decided messages."""
    return LAYERS_PREFIX + topic


def dead_letter_topic(topic: str) -> str:
    """Where the node of ``topic`` sets aside records it cannot take."""
    return DEAD_LETTER_PREFIX + topic


def snapshot_topic(topic: str) -> str:
    """The compacted topic holding the snapshots of ``topic``'s nodes and merger."""
    return SNAPSHOT_PREFIX + topic


def node_key(topic: str, layer: int | None = None) -> str:
    """The status key (and the stable identity) of a node: ``T``, or ``T/p`` for layer
    ``p`` of a partitioned topic; ``T/merger`` names the topic's merger."""
    return topic if layer is None else f"{topic}/{layer}"


def merger_key(topic: str) -> str:
    """The status key of partitioned ``topic``'s merger."""
    return f"{topic}/merger"


def node_group(topic: str, layer: int | None = None) -> str:
    """The consumer group whose committed offset records a node's progress."""
    return f"atomickafka-node.{node_key(topic, layer).replace('/', '.')}"


def header_type(record: KafkaMessage) -> bytes | None:
    """The record's ``atomickafka-type`` header, or ``None``."""
    return header_value(record, TYPE_HEADER)
