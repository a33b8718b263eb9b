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

from atomickafka.core.reader import delivery_order_key, read_delivery
from atomickafka.kafka.consumer import read_to_end
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
    # split runs exactly-once (the default, checked below), shared --at-least-once
    exactly_once = layout == "split"
    with running_cluster(
        kafka_bootstrap,
        topics,
        algorithm=algorithm,
        layout=layout,
        log_dir=tmp_path,
        exactly_once=exactly_once,
    ):
        sent = send_concurrently(kafka_bootstrap, workload, layout)
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), layout)
    assert len(sent) == MESSAGES
    assert any(s.via for s in sent), "the workload must include relays"
    assert any(len(s.destinations) == 1 for s in sent)
    assert any(len(s.destinations) == TOPICS for s in sent)
    assert_order_checked(sent, deliveries)
    if exactly_once:
        # a plain read_committed consumer of the delivery topic reads nothing but each
        # delivery, once, in increasing order (exactly-once delivery topics, §6.3)
        for topic in topics:
            records = read_to_end(kafka_bootstrap, delivery_topic(topic), [0])
            keys = [delivery_order_key(m) for m in map(read_delivery, records) if m is not None]
            assert len(records) == len(keys) == expected[topic], topic
            assert keys == sorted(set(keys)), topic
