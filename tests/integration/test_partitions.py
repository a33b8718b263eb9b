"""Partitioned topics on the real broker (docs/DESIGN.md §8): 5 topics x 3 partition
layers, overlapping destination sets, relays, 10,000 messages, one layer idle for the
first half; the checker passes on what ``deliveries()`` returns at every topic, and each
merged stream is in (timeStamp, layer, messageID) order."""

from __future__ import annotations

import os
import signal
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.kafka.status import read_statuses
from tests.integration.harness import (
    Workload,
    assert_order_checked,
    collect_deliveries,
    run_cli,
    running_cluster,
    send_concurrently,
)

pytestmark = pytest.mark.integration

TOPICS = 5
LAYERS = 3
MESSAGES = 10_000


def keys_of_layers(layers: set[int], count: int = 20) -> list[str]:
    """Partition keys that map to ``layers`` (as the client maps keys: crc32 mod N)."""
    out: list[str] = []
    n = 0
    while len(out) < count:
        key = f"k{n}"
        if zlib.crc32(key.encode()) % LAYERS in layers:
            out.append(key)
        n += 1
    return out


@pytest.mark.parametrize("algorithm", ["direct", "optimized"])
def test_partitioned_topics_keep_one_total_order(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path, algorithm: str
) -> None:
    topics = [topic_factory() for _ in range(TOPICS)]
    busy = Workload(topics, MESSAGES // 2, clients=3, seed=11, keys=keys_of_layers({0, 1}))
    everyone = Workload(topics, MESSAGES // 2, clients=3, seed=12, keys=keys_of_layers({0, 1, 2}))
    with running_cluster(
        kafka_bootstrap, topics, algorithm=algorithm, partitions=LAYERS, log_dir=tmp_path
    ):
        sent = send_concurrently(kafka_bootstrap, busy, "split")  # layer 2 idle
        sent += send_concurrently(kafka_bootstrap, everyone, "split")
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        statuses = read_statuses(kafka_bootstrap)
        status = run_cli(
            "status", "--bootstrap-server", kafka_bootstrap, "--topics", ",".join(topics)
        )
    assert len(sent) == MESSAGES
    assert any(s.via for s in sent) and any(len(s.destinations) == TOPICS for s in sent)
    assert_order_checked(sent, deliveries)
    for topic in topics:
        got = deliveries[topic]
        assert {d.layer for d in got} == {0, 1, 2}, topic
        keys = [(d.timeStamp, d.layer or 0, d.messageID) for d in got]
        assert keys == sorted(keys), f"{topic}: merged stream out of order"
        merger = statuses[f"{topic}/merger"]
        assert merger.role == "merger" and merger.pending == 0
        assert [state.layer for state in merger.layers] == list(range(LAYERS))
        for layer in range(LAYERS):
            assert statuses[f"{topic}/{layer}"].layer == layer
    assert status.returncode == 0 and f"{topics[0]}/merger" in status.stdout


def test_a_merger_killed_mid_run_resumes_without_loss_or_repeats(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """kill -9 one topic's merger while traffic flows: the supervisor restarts it, it
    resumes after the last delivery written, and the checker still passes."""
    topics = [topic_factory() for _ in range(3)]
    with running_cluster(kafka_bootstrap, topics, partitions=2, log_dir=tmp_path):
        victim = read_statuses(kafka_bootstrap)[f"{topics[0]}/merger"]
        sent = send_concurrently(
            kafka_bootstrap, Workload(topics, 1500, clients=2, seed=3), "split"
        )
        os.kill(victim.pid, signal.SIGKILL)
        sent += send_concurrently(
            kafka_bootstrap, Workload(topics, 1500, clients=2, seed=4), "split"
        )
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        after = read_statuses(kafka_bootstrap)[f"{topics[0]}/merger"]
    assert after.pid != victim.pid, "the killed merger was restarted"
    assert_order_checked(sent, deliveries)
    keys = [(d.timeStamp, d.layer or 0, d.messageID) for d in deliveries[topics[0]]]
    assert keys == sorted(keys)
