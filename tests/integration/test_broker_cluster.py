"""A three-broker KRaft cluster on loopback: replication factor 3, min ISR 2, acks=all."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.localkafka import broker_status, ensure_broker, free_port_block, stop_broker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (Linux /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text.encode() in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def topic_config(bootstrap: str, topic: str, key: str) -> str:
    """One config value of ``topic``, retried while the topic propagates to the brokers."""
    from confluent_kafka import KafkaException  # noqa: PLC0415 (after any fork)
    from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + 30
    while True:
        (future,) = admin.describe_configs([resource]).values()
        try:
            value: str = future.result(timeout=30)[key].value
            return value
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_three_broker_cluster(
    tmp_path: Path,
    unique_topic: str,
    create_topic: Callable[..., str],
    produce_values: Callable[..., None],
    consume_values: Callable[..., list[bytes]],
) -> None:
    data_dir = tmp_path / "cluster"
    base = free_port_block(6)
    try:
        bootstrap = ensure_broker(3, data_dir, port=base, timeout=180)
        assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 2},127.0.0.1:{base + 4}"
        statuses = broker_status(data_dir)
        assert [s.node_id for s in statuses] == [1, 2, 3]
        assert all(s.alive and s.listening for s in statuses)

        # create_topic waits until both partitions have a leader and all 3 replicas in sync.
        config = {"min.insync.replicas": "2"}
        create_topic(unique_topic, 2, 3, config, bootstrap=bootstrap)
        assert topic_config(bootstrap, unique_topic, "min.insync.replicas") == "2"

        values = [f"replicated-{i}".encode() for i in range(300)]
        produce_values(unique_topic, values, bootstrap=bootstrap, acks="all")
        consumed = consume_values(unique_topic, len(values), bootstrap=bootstrap)
        assert sorted(consumed) == sorted(values)
    finally:
        stopped = stop_broker(data_dir)
    assert stopped == 3
    assert not any(s.alive for s in broker_status(data_dir))
    assert processes_mentioning(str(data_dir)) == []
