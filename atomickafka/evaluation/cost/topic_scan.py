"""Reading a run's Kafka topics: which topics, what each record is, and a scan of
them from a start offset to their current end.

The recording (:mod:`~atomickafka.evaluation.suite.recording`) keeps every record it reads;
the cost accounting (:mod:`~atomickafka.evaluation.cost.traffic`) counts them by type. Both
classify a record alike (:func:`classify`) and need no more than the Kafka client here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from confluent_kafka import Consumer, TopicPartition

from atomickafka.core.reader import UNDECODABLE, KafkaRecord, Peek, peek
from atomickafka.errors import TimedOutError
from atomickafka.kafka.connection import Where
from atomickafka.kafka.consumer import consume_batch, make_consumer, watermarks
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    control_topic,
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
)
from atomickafka.node.launch import cluster_keys

__all__ = [
    "STATUS_KIND",
    "Classified",
    "RecordedTopic",
    "Role",
    "classify",
    "cluster_topics",
    "destination_topics",
    "end_offset",
    "scan_topics",
    "sequencer_topics",
]

#: ``message_type`` of a status record.
STATUS_KIND: Final = "NodeStatus"


class Role(StrEnum):
    """What a recorded Kafka topic is to its node (the ``role`` column)."""

    INPUT = "input"
    DELIVERY = "delivery"
    DEAD_LETTER = "dead-letter"
    LAYERS = "layers"
    STATUS = "status"


@dataclass(frozen=True, slots=True)
class RecordedTopic:
    """A Kafka topic of the run: whose it is, its role, whether it holds the node's
    deliveries, and (for the shared status topic) where the run starts and which keys
    are the run's."""

    kafka_topic: str
    node: str
    role: Role
    holds_deliveries: bool = False
    start_offset: int = 0
    keys: frozenset[str] | None = None


def cluster_topics(
    topics: Sequence[str],
    layout: Layout,
    partitions: int,
    status_start: int,
    *,
    control_log: bool = False,
) -> list[RecordedTopic]:
    """Every Kafka topic an AtomicKafka cluster over ``topics`` writes, with its owner
    and role; its records in the status topic from ``status_start``, its keys only.
    With ``control_log``, each node's control log counts as its input too (§7)."""
    out: list[RecordedTopic] = []
    for topic in topics:
        inbox = input_topic(topic, layout)
        out.append(RecordedTopic(inbox, topic, Role.INPUT, holds_deliveries=inbox == topic))
        if control_log:
            out.append(RecordedTopic(control_topic(topic), topic, Role.INPUT))
        if inbox != topic:
            out.append(RecordedTopic(delivery_topic(topic), topic, Role.DELIVERY, True))
        out.append(RecordedTopic(dead_letter_topic(topic), topic, Role.DEAD_LETTER))
        if partitions > 1:
            out.append(RecordedTopic(layers_topic(topic), topic, Role.LAYERS))
    keys = frozenset(cluster_keys(topics, partitions))
    status = RecordedTopic(STATUS_TOPIC, "", Role.STATUS, start_offset=status_start, keys=keys)
    return [*out, status]


def sequencer_topics(
    sequencer_topic: str, sequencer_id: str, topics: Sequence[str]
) -> list[RecordedTopic]:
    """The single sequencer's topics: its one-partition input, and the destinations."""
    return [RecordedTopic(sequencer_topic, sequencer_id, Role.INPUT), *destination_topics(topics)]


def destination_topics(topics: Sequence[str]) -> list[RecordedTopic]:
    """The destinations' topics, holding their deliveries (all the bare pipe writes)."""
    return [RecordedTopic(t, t, Role.DELIVERY, holds_deliveries=True) for t in topics]


def end_offset(where: Where, topic: str) -> int:
    """The end offset of partition 0 of ``topic`` (0 if it does not exist yet): where a
    run's records in a shared topic (the status topic) start. ``where``: the connection
    (with its librdkafka settings, e.g. SASL), or a bootstrap string."""
    consumer = make_consumer(where)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return watermarks(consumer, TopicPartition(topic, 0))[1]
    finally:
        consumer.close()


@dataclass(frozen=True, slots=True)
class Classified:
    """What a record of a run's topic is: the node it belongs to, its type, its writer,
    and what :func:`~atomickafka.core.reader.peek` saw."""

    node: str
    kind: str
    writer: str | None
    seen: Peek


def classify(where: RecordedTopic, record: KafkaRecord) -> Classified:
    """What ``record``, read from ``where``, is. A status record's node is its key and
    its type :data:`STATUS_KIND`; a dead letter's writer is the node that set it aside."""
    seen = peek(record)
    node, kind, writer = where.node, seen.kind, seen.sender_id
    if where.role is Role.STATUS:
        key = record.key()
        node = key.decode(errors="replace") if isinstance(key, bytes) else key or ""
        kind = STATUS_KIND if kind != UNDECODABLE else UNDECODABLE
        writer = f"node-{node}"
    elif where.role is Role.DEAD_LETTER:
        writer = f"node-{node}"
    return Classified(node, kind, writer, seen)


def _assign_from_start(
    consumer: Consumer, topics: Sequence[RecordedTopic]
) -> dict[tuple[str, int], int]:
    """Assign ``consumer`` every non-empty partition of ``topics`` from its start offset;
    return each assigned partition's current end offset (where reading it stops)."""
    metadata = consumer.list_topics(timeout=30).topics
    ends: dict[tuple[str, int], int] = {}
    assigned: list[TopicPartition] = []
    for spec in topics:
        meta = metadata.get(spec.kafka_topic)
        if meta is None or meta.error is not None:
            continue  # never created (e.g. no dead letters in the baseline)
        for partition in meta.partitions:
            low, high = watermarks(consumer, TopicPartition(spec.kafka_topic, partition))
            start = max(low, spec.start_offset)
            if high > start:
                ends[(spec.kafka_topic, partition)] = high
                assigned.append(TopicPartition(spec.kafka_topic, partition, start))
    consumer.assign(assigned)
    return ends


def _is_the_runs(spec: RecordedTopic, record: KafkaRecord) -> bool:
    """Whether ``record`` belongs to the run: any record of a run's own topic, only the
    run's keys in a shared one (the status topic)."""
    if spec.keys is None:
        return True
    key = record.key()
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    return text is not None and text in spec.keys


def _read_up_to_ends(consumer: Consumer, ends: dict[tuple[str, int], int]) -> None:
    """Drop from ``ends`` the partitions the consumer has read to their end: by position,
    since a transactional topic's last offset is a marker, never returned as a record."""
    positions = consumer.position([TopicPartition(t, p) for t, p in ends])
    for tp in positions:
        if tp.offset >= ends[(tp.topic, tp.partition)]:
            del ends[(tp.topic, tp.partition)]


def scan_topics(
    where: Where,
    topics: Sequence[RecordedTopic],
    on_record: Callable[[RecordedTopic, KafkaRecord], None],
    timeout_s: float,
) -> None:
    """Pass every record of every partition of ``topics``, from its start offset to its
    end now, to ``on_record`` (a status topic's records only for its ``keys``)."""
    consumer = make_consumer(
        where, None, **{"enable.partition.eof": False, "fetch.wait.max.ms": 20}
    )
    try:
        ends = _assign_from_start(consumer, topics)
        by_name = {t.kafka_topic: t for t in topics}
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for record in consume_batch(consumer, 10_000, 0.5):
                name, partition = record.topic() or "", record.partition() or 0
                end = ends.get((name, partition))
                if record.error() is not None or end is None or (record.offset() or 0) >= end:
                    continue
                if _is_the_runs(by_name[name], record):
                    on_record(by_name[name], record)
            if ends:
                _read_up_to_ends(consumer, ends)
        if ends:
            raise TimedOutError(
                f"reading a run: {len(ends)} partitions not read to their end in {timeout_s:.0f}s"
            )
    finally:
        consumer.close()
