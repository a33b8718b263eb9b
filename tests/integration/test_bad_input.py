"""Bad input never stops or stalls a topic, on the real broker (docs/DESIGN.md §4.9, §5.3).

Each test is one way a record, or a typo, used to take a topic down: a destination
without a node, lines `send` cannot read, nodes of another protocol, a reused
messageID, a timestamp near 2**64. Each ends with the topic still delivering and the
order checker passing; what was refused is in the dead-letter topic with a reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from atomickafka.client import AtomicKafkaClient
from atomickafka.core.engine import DEFAULT_ALGORITHM
from atomickafka.kafka.consumer import make_consumer, read_partitions
from atomickafka.kafka.status import read_statuses
from atomickafka.kafka.topics import control_topic, dead_letter_topic, input_topic
from tests.integration.harness import (
    Sent,
    assert_order_checked,
    collect_deliveries,
    run_cli,
    run_cli_raw,
    running_cluster,
)

pytestmark = pytest.mark.integration


def dead_letters(bootstrap: str, topic: str, want: int, timeout_s: float = 20) -> list[str]:
    """The reasons of ``topic``'s dead letters, once there are at least ``want``."""
    deadline = time.monotonic() + timeout_s
    while True:
        consumer = make_consumer(bootstrap)
        try:
            records = read_partitions(consumer, dead_letter_topic(topic), [0])
        except TimeoutError:
            records = []
        finally:
            consumer.close()
        reasons = []
        for record in records:
            headers = dict(record.headers() or [])
            reason = headers.get("atomickafka-error") or b""
            reasons.append(reason.decode() if isinstance(reason, bytes) else str(reason))
        if len(reasons) >= want or time.monotonic() > deadline:
            return reasons
        time.sleep(0.5)


def produce_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(10) == 0


def client_record(mid: str, destinations: list[str], value: object) -> bytes:
    return orjson.dumps(
        {"messageID": mid, "messageType": "ClientMessage", "topic": destinations, "value": value}
    )


def test_a_destination_without_a_node_is_refused_and_a_stuck_head_is_named(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, ghost = topic_factory(), topic_factory()
    with running_cluster(kafka_bootstrap, [ghost], log_dir=tmp_path, name="ghost"):
        pass  # ghost has had a node (it is a member, §4.9.5), which has stopped since
    with running_cluster(kafka_bootstrap, [a], log_dir=tmp_path, log_level="info", stuck_after_s=2):
        typo = run_cli("send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{ghost}", "x")
        assert typo.returncode == 2, typo.stderr
        assert ghost in typo.stderr and "--allow-offline" in typo.stderr
        assert typo.stdout == ""  # no id for a message that was not sent
        anyway = run_cli(
            "send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{ghost}",
            "--via", a, "--allow-offline", "waits for ghost",
        )  # fmt: skip
        assert anyway.returncode == 0, anyway.stderr
        stuck_id = anyway.stdout.strip()
        deadline = time.monotonic() + 30
        status = ""
        while time.monotonic() < deadline and ghost not in status:
            time.sleep(1)
            status = run_cli("status", "--bootstrap-server", kafka_bootstrap).stdout
        assert f"{stuck_id} holds the head" in status and ghost in status, status
        statuses = read_statuses(kafka_bootstrap)
        head = statuses[a].head
        assert head is not None and head.message_id == stuck_id
        assert head.waiting_for == (ghost,)
    log = (tmp_path / f"cluster-{DEFAULT_ALGORITHM}-split-1.log").read_text()
    assert f"message {stuck_id} has held the queue head" in log
    assert f"the proposals of {ghost}" in log


def test_a_destination_that_never_had_a_node_is_aborted_after_the_grace_period(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """A message naming a topic no node has ever served (a plain producer, or
    --allow-offline with a typo) waits the grace period for a members record naming it,
    then is refused and aborted: it never holds the queue (issue 15, §4.9.5)."""
    a, nosuch = topic_factory(), topic_factory()
    with running_cluster(kafka_bootstrap, [a], log_dir=tmp_path):
        anyway = run_cli(
            "send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{nosuch}",
            "--allow-offline", "never delivered",
        )  # fmt: skip
        assert anyway.returncode == 0, anyway.stderr
        with AtomicKafkaClient(kafka_bootstrap) as client:
            after = client.send("after", [a])
        got = collect_deliveries(kafka_bootstrap, [a], {a: 1}, "split")
        reasons = dead_letters(kafka_bootstrap, a, 1, timeout_s=40)
    assert [d.messageID for d in got[a]] == [after]  # not held behind the other
    assert any("has no node" in r for r in reasons), reasons
    assert_order_checked([Sent(after, (a,), "after", "")], got)


def test_send_skips_lines_it_cannot_send_and_prints_ids_only_for_sent_ones(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a = topic_factory()
    lines = b"first\n\xff\xfe not utf-8\nsecond\n" + b"x" * 900_001 + b"\nthird\n"
    with running_cluster(kafka_bootstrap, [a], log_dir=tmp_path):
        out = run_cli_raw("send", "--bootstrap-server", kafka_bootstrap, "--to", a, stdin=lines)
        stdout, stderr = out.stdout.decode(), out.stderr.decode()
        assert out.returncode == 1
        ids = stdout.split()
        assert len(ids) == 3, stdout
        assert "line 2: not valid UTF-8" in stderr
        assert "line 4:" in stderr and "900000" in stderr
        got = collect_deliveries(kafka_bootstrap, [a], {a: 3}, "split")
    assert [d.value for d in got[a]] == ["first", "second", "third"]
    assert [d.messageID for d in got[a]] == ids
    sent = [
        Sent(mid, (a,), v, "") for mid, v in zip(ids, ["first", "second", "third"], strict=True)
    ]
    assert_order_checked(sent, got)


def test_nodes_of_another_protocol_set_records_aside_and_say_so(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b = topic_factory(), topic_factory()
    with (
        running_cluster(kafka_bootstrap, [a], algorithm="optimized", log_dir=tmp_path),
        running_cluster(kafka_bootstrap, [b], algorithm="poc", log_dir=tmp_path, log_level="info"),
    ):
        mixed = run_cli("send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{b}", "x")
        assert mixed.returncode == 2 and "different protocols" in mixed.stderr
        # A client that does not look (a plain producer) writes anyway: b refuses a's Notify
        # and, since a version whose destinations run different protocols can never be
        # decided, aborts it: a stops waiting for b (issue 15, item 7).
        produce_raw(kafka_bootstrap, input_topic(a, "split"), [client_record("m1", [a, b], 1)])
        reasons = dead_letters(kafka_bootstrap, b, 1)
        a_reasons = dead_letters(kafka_bootstrap, a, 1)
        deadline = time.monotonic() + 20
        while (
            time.monotonic() < deadline
            and not read_statuses(kafka_bootstrap)[b].protocol_mismatches
        ):
            time.sleep(0.5)
        status = run_cli("status", "--bootstrap-server", kafka_bootstrap).stdout
    assert any(
        "protocol mismatch" in r and "runs optimized, this node runs poc" in r for r in reasons
    )
    assert "records of another protocol set aside" in status
    assert any(r.startswith("aborted: destination") and b in r for r in a_reasons), a_reasons
    log = (tmp_path / "cluster-poc-split-1.log").read_text()
    assert "protocol mismatch" in log and "set aside in" in log


def test_a_reused_id_and_a_wild_timestamp_stall_nothing(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b, c = (topic_factory() for _ in range(3))
    with running_cluster(kafka_bootstrap, [a, b, c], log_dir=tmp_path):
        produce_raw(kafka_bootstrap, input_topic(a, "split"), [client_record("dup", [a, b], "one")])
        collect_deliveries(kafka_bootstrap, [a, b], {a: 1, b: 1}, "split")
        # The same id for {b, c}: b refuses it and tells c, which must not wait for b.
        produce_raw(kafka_bootstrap, input_topic(c, "split"), [client_record("dup", [b, c], "two")])
        # A stray Ack with a timestamp near 2**64, and one in range but far ahead.
        protocol = str(DEFAULT_ALGORITHM)
        stray = {"messageID": "dup", "messageType": "AckMessage", "topic": [a, b],
                 "sentFromTopic": b, "protocol": protocol, "digest": "0" * 16}  # fmt: skip
        produce_raw(
            kafka_bootstrap,
            control_topic(a),  # where a's peers' Acks are read (DESIGN §7.1)
            [
                orjson.dumps({**stray, "timeStamp": 2**64 - 2}),
                orjson.dumps({**stray, "timeStamp": 2**53 - 1}),
            ],
        )
        with AtomicKafkaClient(kafka_bootstrap) as client:
            after = client.send("after", [a, b, c])
        got = collect_deliveries(kafka_bootstrap, [a, b, c], {a: 2, b: 2, c: 1}, "split")
        c_reasons = dead_letters(kafka_bootstrap, c, 1)
        b_reasons = dead_letters(kafka_bootstrap, b, 1)
        a_reasons = dead_letters(kafka_bootstrap, a, 2)
    assert [d.messageID for d in got[c]] == [after]
    assert [d.messageID for d in got[a]] == ["dup", after] == [d.messageID for d in got[b]]
    assert any("aborted" in r for r in c_reasons)
    assert any("reused" in r for r in b_reasons)
    assert any("timeStamp" in r for r in a_reasons)
    assert any("ahead of the log's time" in r or "conflict" in r for r in a_reasons)
    sent = [Sent(after, tuple(sorted((a, b, c))), "after", "")]
    assert_order_checked(sent, {t: [d for d in got[t] if d.messageID == after] for t in got})


def test_a_topic_that_cannot_take_our_records_stops_the_node_with_the_fix(
    kafka_bootstrap: str, topic_factory: Callable[[], str], create_topic: Callable[..., str]
) -> None:
    """A delivery topic limited to 2,000-byte records would reject whole batches of
    deliveries (a batch is one "message" to the broker): the node refuses to start and
    says which config to raise, rather than losing deliveries at run time."""
    a = topic_factory()
    create_topic(a, config={"max.message.bytes": "2000"})
    out = run_cli(
        "node", "--bootstrap-server", kafka_bootstrap, "--topic", a, "--max-seconds", "20"
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{a} (2000)" in out.stderr and "max.message.bytes=1048576" in out.stderr
