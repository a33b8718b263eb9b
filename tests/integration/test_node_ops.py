"""Operating nodes on the real broker: the CLI, bad input, and a node killed mid-run."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from atomickafka.client import AtomicKafkaClient
from atomickafka.kafka.status import read_statuses, wait_for_nodes
from atomickafka.kafka.topics import dead_letter_topic, input_topic
from atomickafka.verify.checker import deliveries_from_json
from tests.integration.harness import (
    Sent,
    Workload,
    assert_order_checked,
    assert_records_checked,
    collect_deliveries,
    run_cli,
    running_cluster,
    send_concurrently,
)

pytestmark = pytest.mark.integration


def test_cli_send_tail_status(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b, c = (topic_factory() for _ in range(3))
    with running_cluster(kafka_bootstrap, [a, b, c], log_dir=tmp_path):
        wait_for_nodes(kafka_bootstrap, [a, b, c], timeout_s=60)
        one = run_cli("send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{b},{c}", "all")
        assert one.returncode == 0, one.stderr
        lines = "\n".join(f"line {i}" for i in range(20)) + "\n"
        many = run_cli(
            "send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{c}", stdin=lines
        )
        assert many.returncode == 0, many.stderr
        relayed = run_cli(
            "send", "--bootstrap-server", kafka_bootstrap, "--to", a, "--via", b, "relayed"
        )
        assert relayed.returncode == 0, relayed.stderr
        ids = [*one.stdout.split(), *many.stdout.split(), *relayed.stdout.split()]
        assert len(ids) == 22 and len(set(ids)) == 22

        tails = {}
        for topic in (a, b, c):
            out = run_cli(
                "tail",
                "--bootstrap-server",
                kafka_bootstrap,
                "--topic",
                topic,
                "--from-beginning",
                "--timeout-ms",
                "4000",
                "--json",
                "-X",
                "client.id=tail-test",
            )
            assert out.returncode == 0, out.stderr
            tails[topic] = [orjson.loads(line) for line in out.stdout.splitlines()]
        status = run_cli(
            "status", "--bootstrap-server", kafka_bootstrap, "--topics", f"{a},{b},{c}"
        )
        assert status.returncode == 0, status.stderr
        for topic in (a, b, c):
            assert topic in status.stdout

    assert [d["value"] for d in tails[b]] == ["all"]
    assert len(tails[a]) == 22 and len(tails[c]) == 21
    for record in tails[a]:
        assert {"messageID", "value", "timeStamp", "topic", "offset"} <= record.keys()
    sent = [Sent(ids[0], tuple(sorted((a, b, c))), "all", "")]
    sent += [Sent(mid, tuple(sorted((a, c))), f"line {i}", "") for i, mid in enumerate(ids[1:21])]
    sent.append(Sent(ids[21], (a,), "relayed", b))
    assert_records_checked(sent, deliveries_from_json(tails))


def test_cli_rejects_bad_arguments(kafka_bootstrap: str) -> None:
    bad_topic = run_cli("send", "--bootstrap-server", kafka_bootstrap, "--to", "no spaces!", "x")
    assert bad_topic.returncode == 2
    assert "not a valid Kafka topic name" in bad_topic.stderr
    bad_x = run_cli(
        "send", "--bootstrap-server", kafka_bootstrap, "--to", "t", "-X", "novalue", "x"
    )
    assert bad_x.returncode == 2
    assert "key=value" in bad_x.stderr


def test_malformed_records_are_set_aside(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b = topic_factory(), topic_factory()
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path):
        wait_for_nodes(kafka_bootstrap, [a, b], timeout_s=60)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        bad = [
            b"not json at all",
            orjson.dumps({"messageID": 7, "messageType": "ClientMessage", "topic": [a]}),
            orjson.dumps(
                {"messageID": "x", "messageType": "AckMessage", "topic": [a, b], "sentFromTopic": b}
            ),
            orjson.dumps({"messageID": "y", "messageType": "Bogus", "topic": [a]}),
            orjson.dumps(
                {
                    "messageID": "z",
                    "messageType": "ClientMessage",
                    "topic": [a, b],
                    "value": "x" * 950_000,
                }
            ),  # too big to copy into a Notify
        ]
        for value in bad:
            producer.produce(input_topic(a, "split"), value)
        assert producer.flush(10) == 0
        with AtomicKafkaClient(kafka_bootstrap) as client:
            mid = client.send("after the garbage", [a, b])
        deliveries = collect_deliveries(kafka_bootstrap, [a, b], {a: 1, b: 1}, "split")
        statuses = read_statuses(kafka_bootstrap)

    assert_order_checked([Sent(mid, tuple(sorted((a, b))), "after the garbage", "")], deliveries)
    assert statuses[a].dead_letters == len(bad)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "dlq-test"})
    try:
        consumer.assign([TopicPartition(dead_letter_topic(a), 0, OFFSET_BEGINNING)])
        reasons: list[tuple[str, bytes | None]] = []
        deadline = time.monotonic() + 20
        while len(reasons) < len(bad) and time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is None or record.error():
                continue
            headers = dict(record.headers() or [])
            reason = headers["atomickafka-error"] or b""
            text = reason.decode() if isinstance(reason, bytes) else reason
            reasons.append((text, record.value()))
    finally:
        consumer.close()
    kept = [value or b"" for _, value in reasons]
    assert kept == bad, "every bad record is kept verbatim"
    assert "limit" in reasons[4][0] and "900000" in reasons[4][0]
    assert "not valid JSON" in reasons[0][0]
    assert "messageID" in reasons[1][0]
    assert "timeStamp" in reasons[2][0]
    assert "messageType" in reasons[3][0]


def test_node_killed_mid_run_recovers(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """kill -9 one node while traffic flows: the supervisor restarts it, the node replays
    its input log, and the order checker still passes (nothing lost, nothing twice)."""
    topics = [topic_factory() for _ in range(4)]
    workload = Workload(topics, 4000, clients=2, seed=7)
    with running_cluster(kafka_bootstrap, topics, log_dir=tmp_path):
        before = wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        victim = before[topics[1]]
        first_half = Workload(topics, 2000, clients=2, seed=7)
        sent = send_concurrently(kafka_bootstrap, first_half, "split")
        time.sleep(0.3)
        os.kill(victim.pid, signal.SIGKILL)
        second_half = Workload(topics, 2000, clients=2, seed=8)
        sent += send_concurrently(kafka_bootstrap, second_half, "split")
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        after = read_statuses(kafka_bootstrap)
    assert workload.messages == len(sent)
    assert after[topics[1]].pid != victim.pid, "the killed node was restarted"
    assert_order_checked(sent, deliveries)
