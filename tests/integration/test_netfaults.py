"""Faults between machines (issue 39): hosts in network namespaces of their own, a
delayed commit that no later transaction may absorb, and the nemesis.

The lab (:mod:`atomickafka.netlab`) needs root, as CI runs; everything it creates it
removes, also when a test fails, and the next lab removes what a killed run left. The
nemesis runs one seed here, with every fault kind once (about three minutes of wall
time with its three brokers); ``ATOMICKAFKA_NEMESIS_SEEDS=1,2,3`` runs more seeds and
``ATOMICKAFKA_NEMESIS_SECONDS=600`` a longer schedule (``atomickafka soak --nemesis``
writes the report with its plot).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from atomickafka.evaluation.nemesis.command import NemesisSettings, run_nemesis
from atomickafka.evaluation.nemesis.deployment import Deployment
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.topics import node_group
from atomickafka.netlab.hosts import STATE_DIR, Lab, remove_stale
from atomickafka.node.batch import OutKind, OutRecord
from atomickafka.node.config import NodeConfig
from atomickafka.node.runtime import NodeRuntime
from atomickafka.node.writers import TransactionalWriter
from tests.integration.test_faults import assert_plain_consumers_see_each_delivery_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: Kafka's API key of EndTxn: the request that commits (or aborts) a transaction.
END_TXN = 26


def _namespaces() -> str:
    return subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout


def test_a_lab_removes_what_it_created_and_what_a_killed_run_left() -> None:
    with Lab(["x1", "x2"]) as lab:
        assert lab.host("x1").namespace in _namespaces()
        lab.cut("x1")
        lab.block("x2", ["x1"])
    assert lab.host("x1").namespace not in _namespaces()
    # a run killed before it could clean up: its namespaces stay, its pid is gone
    child = subprocess.Popen(
        [sys.executable, "-c", "from atomickafka.netlab.hosts import Lab; import time\n"
         "lab = Lab(['k1']); print(lab.host('k1').namespace, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    namespace = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert namespace in _namespaces()
    assert namespace in remove_stale()
    assert namespace not in _namespaces()
    assert not any(p.read_text().count(namespace) for p in STATE_DIR.glob("*.json"))


def test_a_zombie_given_its_lease_back_does_not_wait_out_an_open_transaction(
    kafka_bootstrap: str, topic_factory: Any
) -> None:
    """Found by the nemesis: an instance cut off, taken over, then given the lease back
    when the instance that took over is cut off in turn, read its group's committed
    offset as a stable read -- which waits while the other's transaction (cut off with
    it) holds pending offsets, up to the transaction timeout (60 s), the lease held and
    nothing written. It reads the last committed offset, at once."""
    topic = topic_factory()
    source = f"atomickafka-in.{topic}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(source, 1, 1)]).values():
        future.result(30)
    group = node_group(topic)
    metadata = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    group_metadata = metadata.consumer_group_metadata()

    def offsets_in_a_transaction(txn_id: str, offset: int, commit: bool) -> Any:
        from confluent_kafka import Producer  # noqa: PLC0415

        producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id})
        producer.init_transactions(30)
        producer.begin_transaction()
        part = [TopicPartition(source, 0, offset)]
        producer.send_offsets_to_transaction(part, group_metadata, 30)
        if commit:
            producer.commit_transaction(30)
        return producer

    offsets_in_a_transaction(f"{topic}-a", 5, commit=True)
    pending = offsets_in_a_transaction(f"{topic}-b", 9, commit=False)  # cut off, open
    config = NodeConfig(kafka_bootstrap, topic)
    node = object.__new__(NodeRuntime)
    node.config = config
    node._consumer = Consumer(  # the node's own: read_committed (stable offsets)
        config.connection.consumer_config(group, **{"isolation.level": "read_committed"})
    )
    node._input, node._partition = source, 0
    node.batch = SimpleNamespace(position=5)  # type: ignore[assignment]
    started = time.monotonic()
    assert node._still_ours()  # nothing committed past 5: the pending 9 is not committed
    assert time.monotonic() - started < 8
    node.batch = SimpleNamespace(position=4)  # type: ignore[assignment]
    assert not node._still_ours()
    node._consumer.close()
    metadata.close()
    pending.abort_transaction(30)


# ---------------------------------------------------------------- the deployment


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Three brokers, two node hosts running every nemesis topic, a client host and the
    fault proxy: started once for the file (its brokers take most of a minute)."""
    with Deployment(tmp_path_factory.mktemp("deployment"), NemesisSettings(Path()).topics) as d:
        yield d


def _records(topic: str, prefix: str, n: int = 3) -> list[OutRecord]:
    return [OutRecord(OutKind.DELIVERY, topic, f"{prefix}{i}".encode(), 0) for i in range(n)]


def _committed_values(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == -191:  # the end of the partition
                    break
                continue
            values.append((message.value() or b"").decode())
    finally:
        consumer.close()
    return values


def test_a_delayed_commit_is_absorbed_by_no_later_transaction(deployment: Deployment) -> None:
    """Jepsen's 2024 Kafka anomaly, provoked: the fault proxy holds a transaction's
    commit request (EndTxn) on its way to the coordinator, as a partition would; the
    commit times out. The writer does not call it again on that producer: a new one
    (whose init bumps the epoch and aborts the transaction) writes the batch again, and
    later transactions commit while the old request is still held. Released then, the
    old request is refused as fenced: every batch is read once, in order, and the
    committed offset is the last batch's."""
    name = f"delayed-{os.getpid()}-{time.monotonic_ns()}"
    brokers, proxy = deployment.brokers, deployment.proxy
    assert proxy is not None
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap})
    topics = [NewTopic(f"{name}-in", 1, 3), NewTopic(f"{name}-out", 1, 3)]
    for future in admin.create_topics(topics).values():
        future.result(60)
    connection = Connection(brokers.proxied_bootstrap)
    consumer = Consumer(connection.consumer_config(f"{name}-group"))
    writer = TransactionalWriter(connection, name, consumer, f"{name}-in")
    writer.commit_timeout_s, writer.retry_s = 5.0, 90.0
    out = f"{name}-out"
    writer.write(_records(out, "a"), {0: 10})
    writer.begin()
    for record in _records(out, "b"):
        writer.produce(record)
    writer._producer.flush(30)  # the records are written; only the commit is left
    assert proxy.hold("root", [END_TXN]) >= 1
    finished = threading.Event()

    def commit() -> None:
        writer.finish(_records(out, "b"), {0: 20})
        finished.set()

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    # with the old rule (call the commit again on the same producer) it waits for the
    # held request for as long as it is held
    assert finished.wait(45), "the writer waited for its delayed commit"
    assert writer.replaced >= 1 and writer.unknown_outcomes == 1
    writer.write(_records(out, "c"), {0: 30})
    stats = proxy.stats()["root"]
    assert stats["held_bytes"] > 0  # the old commit is still on its way
    proxy.release()
    time.sleep(3)  # it arrives now, after two later transactions began
    writer.write(_records(out, "d"), {0: 40})
    values = _committed_values(brokers.bootstrap, out)
    assert values == [f"{p}{i}" for p in "abcd" for i in range(3)]
    (tp,) = consumer.committed([TopicPartition(f"{name}-in", 0)], timeout=30)
    assert tp.offset == 40
    writer.close()
    consumer.close()


# ---------------------------------------------------------------- the nemesis


def _seeds() -> list[int]:
    text = os.environ.get("ATOMICKAFKA_NEMESIS_SEEDS", "1")
    return [int(s) for s in text.split(",") if s.strip()]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", _seeds())
def test_the_nemesis(seed: int, tmp_path: Path, deployment: Deployment) -> None:
    """A seeded schedule of every fault kind against two node hosts, three brokers and
    a client host; then every check: the order checker, plain read_committed consumers,
    every acknowledged send delivered everywhere and an unacknowledged one everywhere or
    nowhere, no topic stuck, takeovers in time, fences logged and counted."""
    seconds = float(os.environ.get("ATOMICKAFKA_NEMESIS_SECONDS", "0"))
    settings = NemesisSettings(out=tmp_path / "nemesis", seconds=seconds, seed=seed)

    def plain_consumers(deployment: Deployment, sends: list[dict[str, Any]]) -> None:
        delivered = {m for s in sends if s["ack"] is not None for m in [s["id"]]}
        expected = Counter(t for s in sends if s["id"] in delivered for t in s["to"])
        unacknowledged = [s for s in sends if s["id"] is not None and s["ack"] is None]
        if not unacknowledged:  # else the count is the checker's (all or none)
            assert_plain_consumers_see_each_delivery_once(
                deployment.bootstrap, deployment.topics, expected
            )

    # the first seed runs on the file's deployment; others each on one of their own
    results = run_nemesis(settings, plain_consumers, deployment if seed == _seeds()[0] else None)
    # How soon a takeover came is a speed, reported (the report's verdict and the print
    # below), not asserted: the suite must pass on a busy machine (CI's rule); that
    # every cut was taken over, by another host, counted in its metrics, is asserted.
    failed = [
        c
        for c in results["checks"]
        if not c["ok"] and not (c["name"] == "takeovers" and c.get("taken_over"))
    ]
    assert not failed, (failed, settings.out)
    kinds = {f["kind"] for f in results["faults"]}
    assert len(kinds) == 7
    order = next(c for c in results["checks"] if c["name"] == "order")
    assert order["violations"] == {} and order["acknowledged"] > 0
    expected = Counter(t for s in results["sends"] if s["ack"] is not None for t in s["to"])
    assert all(order["delivered"][t] >= expected[t] for t in expected)
    assert (tmp_path / "nemesis" / "timeline.png").stat().st_size > 0
    print(f"nemesis seed {seed}: {results['wall_s']:.0f} s wall", results["checks"])
