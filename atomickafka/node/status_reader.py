"""Reading the status records nodes publish to the status topic."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from atomickafka.kafka.settings import consumer_config
from atomickafka.kafka.consumer import watermarks
from atomickafka.node.metrics import NodeStatus
from atomickafka.kafka.topics import STATUS_TOPIC

__all__ = ["read_statuses", "wait_for_nodes"]

log = logging.getLogger(__name__)


def read_statuses(
    bootstrap: str, overrides: dict[str, str] | None = None, timeout_s: float = 5.0
) -> dict[str, NodeStatus]:
    """The latest status each node published, keyed by topic."""
    consumer = Consumer(
        consumer_config(bootstrap, f"atomickafka-status-{uuid.uuid4().hex[:8]}", overrides)
    )
    try:
        meta = consumer.list_topics(STATUS_TOPIC, timeout=timeout_s).topics.get(STATUS_TOPIC)
        if meta is None or meta.error is not None:
            return {}
        parts = [TopicPartition(STATUS_TOPIC, p, OFFSET_BEGINNING) for p in meta.partitions]
        ends = {p.partition: watermarks(consumer, p, timeout_s)[1] for p in parts}
        consumer.assign(parts)
        latest: dict[str, NodeStatus] = {}
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(parts) and time.monotonic() < deadline:
            for record in consumer.consume(num_messages=1000, timeout=0.2):
                if record.error() is not None:
                    continue
                part, offset = record.partition(), record.offset()
                assert part is not None and offset is not None
                if offset + 1 >= ends[part]:
                    done.add(part)
                if record.value() is None:
                    continue
                try:
                    status = NodeStatus.from_dict(orjson.loads(record.value() or b"{}"))
                except (orjson.JSONDecodeError, TypeError):
                    continue  # a tombstone or a record that is not a status
                latest[status.topic] = status
        return latest
    finally:
        consumer.close()


def wait_for_nodes(
    bootstrap: str, topics: Iterable[str], *, timeout_s: float = 60.0, since: float | None = None
) -> dict[str, NodeStatus]:
    """Wait until every topic's node has published a live, not-replaying status."""
    wanted = set(topics)
    since = time.time() if since is None else since
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            statuses = read_statuses(bootstrap, timeout_s=5.0)
        except KafkaException as exc:  # e.g. the status topic's leader not elected yet
            log.debug("status topic not readable yet: %s", exc)
            statuses = {}
        live = {
            t: s for t, s in statuses.items() if t in wanted and s.time >= since and not s.replaying
        }
        if len(live) == len(wanted):
            return live
        if time.monotonic() >= deadline:
            missing = ", ".join(sorted(wanted - set(live)))
            raise TimeoutError(f"nodes not up after {timeout_s:.0f}s: {missing}")
        time.sleep(0.5)
