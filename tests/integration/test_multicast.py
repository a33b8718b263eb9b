"""End to end on the real broker: 5 topics, 4 concurrent clients, 10,000 messages.

Random overlapping destination sets, relays and single-destination messages, for both
algorithms and both layouts; the independent order checker must pass on what
``deliveries()`` returns at every topic.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from atomickafka.kafka.topics import delivery_topic
from tests.integration.harness import (
    Workload,
    assert_order_checked,
    collect_deliveries,
    running_cluster,
    send_concurrently,
)

pytestmark = pytest.mark.integration

MESSAGES = 10_000
TOPICS = 5


@pytest.mark.parametrize("layout", ["split", "shared"])
@pytest.mark.parametrize("algorithm", ["direct", "optimized", "poc"])
def test_total_order_on_real_broker(
    kafka_bootstrap: str,
    topic_factory: Callable[[], str],
    tmp_path: Path,
    algorithm: str,
    layout: str,
) -> None:
    topics = [topic_factory() for _ in range(TOPICS)]
    workload = Workload(
        topics, MESSAGES, clients=4, seed=zlib.crc32(f"{algorithm}-{layout}".encode())
    )
    with running_cluster(
        kafka_bootstrap, topics, algorithm=algorithm, layout=layout, log_dir=tmp_path
    ):
        sent = send_concurrently(kafka_bootstrap, workload, layout)
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), layout)
    assert len(sent) == MESSAGES
    assert any(s.via for s in sent), "the workload must include relays"
    assert any(len(s.destinations) == 1 for s in sent)
    assert any(len(s.destinations) == TOPICS for s in sent)
    assert_order_checked(sent, deliveries)
    if layout == "split":
        # the delivery topic holds nothing but each delivery, once
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "wm"})
        try:
            for topic in topics:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(delivery_topic(topic), 0), timeout=10
                )
                assert high - low == expected[topic], topic
        finally:
            consumer.close()
