"""Issue 23 on the real broker: one stray record, or one operator mistake, never splits
a delivery or holds a topic (docs/DESIGN.md §4.9, §6.6). Each test ends with the
independent order checker.

- Strays written by a plain producer into the control logs of a running, unsigned
  cluster, about messages in flight: a Notify naming another protocol, a format-1
  Notify (no protocol) and an Abort, placed before and after the message's copies.
- A message naming a topic that has no node, in an input log before the nodes start:
  read before their first members record, refused 10 s of log time later, holding
  nothing behind it.
- A node restarted with another ``--algorithm``: refused in one line; restarted as it
  was, it goes on; all nodes stopped and restarted with ``--reconfigure``, the new
  protocol runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer

from atomickafka.client import AtomicKafkaClient
from atomickafka.core.engine import Algorithm
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import DEAD_LETTER_ERROR_HEADER, header_value
from atomickafka.core.wire import Message, MessageType, client_message, encode_client
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.status import read_statuses, wait_for_nodes
from atomickafka.kafka.topics import control_topic, dead_letter_topic, input_topic
from atomickafka.node.config import NodeConfig
from atomickafka.node.runtime import node_topic_specs
from atomickafka.verify.checker import SentMessage, check, deliveries_from_client
from atomickafka.verify.hostile import stray_in_flight
from tests.integration.harness import (
    Sent,
    Workload,
    collect_deliveries,
    run_cli,
    running_cluster,
    send_concurrently,
)

pytestmark = pytest.mark.integration


def dead_letter_reasons(bootstrap: str, topic: str, timeout_s: float = 8.0) -> list[str]:
    """The reasons of every dead letter ``topic``'s node wrote so far."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([dead_letter_topic(topic)])
    reasons: list[str] = []
    idle_until = time.monotonic() + 3.0
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < min(idle_until, deadline) or not reasons:
            if time.monotonic() > deadline:
                break
            record = consumer.poll(0.5)
            if record is None or record.error():
                continue
            idle_until = time.monotonic() + 2.0
            reason = header_value(record, DEAD_LETTER_ERROR_HEADER)
            reasons.append((reason or b"").decode(errors="replace"))
    finally:
        consumer.close()
    return reasons


def checked(
    sent: Sequence[Sent],
    bootstrap: str,
    topics: Sequence[str],
    *,
    all_or_none: frozenset[str] = frozenset(),
    extra: Sequence[SentMessage] = (),
) -> dict[str, list[str]]:
    """Read every topic's deliveries and run the order checker: each id in
    ``all_or_none`` may be delivered nowhere, or everywhere. Returns the ids per topic."""
    expected: dict[str, int] = {t: 0 for t in topics}
    for s in sent:
        for t in s.destinations:
            expected[t] += 1
    deliveries = collect_deliveries(bootstrap, topics, expected, "split", timeout_s=120)
    messages = [SentMessage(s.messageID, frozenset(s.destinations), s.value) for s in sent]
    report = check([*messages, *extra], deliveries_from_client(deliveries), all_or_none=all_or_none)
    assert report.ok, report.summary()
    return {t: [d.messageID for d in ds] for t, ds in deliveries.items()}


def test_strays_from_a_plain_producer_split_no_delivery_and_hold_no_topic(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """While clients send, a plain producer writes multicasts (as a client would) to
    every destination's input log, each with strays about it "from" its other
    destinations: an Abort before or after the copy, a Notify naming another protocol,
    a format-1 Notify. Each such message is delivered everywhere or nowhere; the rest
    of the traffic is delivered in one order; nothing is left pending."""
    a, b, c = (topic_factory() for _ in range(3))
    topics = [a, b, c]
    with running_cluster(kafka_bootstrap, topics, log_dir=tmp_path, name="strays"):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
        planted: list[SentMessage] = []

        def plant(i: int) -> None:
            mid = f"planted-{i}"
            destinations = tuple(sorted(topics))
            now = int(time.time() * 1000)
            message = client_message(mid, destinations, {"i": i}, "planter", sent_at=now)
            value = encode_client(message)
            (about,) = decode_any(value, None, [])
            first, second, third = topics[i % 3], topics[(i + 1) % 3], topics[(i + 2) % 3]
            strays: list[tuple[str, bytes]] = [
                (first, stray(MessageType.ABORT, about, second, "direct")),
                (second, stray(MessageType.NOTIFY, about, third, Algorithm.POC.value)),
                (third, stray(MessageType.NOTIFY, about, first, None)),
            ]
            before = i % 2 == 0  # a stray before the copy in one log, after it in the others
            # the strays where a node reads its peers' control records: its control log
            # (in its input log they would be set aside as misplaced at once, §7.1)
            if before:
                producer.produce(control_topic(first), strays[0][1])
            for topic in destinations:
                producer.produce(input_topic(topic, "split"), value)
            for topic, record in strays[0 if not before else 1 :]:
                producer.produce(control_topic(topic), record)
            planted.append(SentMessage(mid, frozenset(destinations), {"i": i}))

        sent: list[Sent] = []
        plan = Workload(topics, messages=60, clients=1, seed=23).plan(0)
        with AtomicKafkaClient(kafka_bootstrap) as client:
            for i, (dests, via, value, _key) in enumerate(plan):
                if i % 8 == 0:  # a planted multicast among every eight client messages
                    plant(i // 8)
                    producer.flush(10)
                mid = client.send(value, dests, via=via)
                sent.append(Sent(mid, dests, value, via or ""))
        hit = frozenset(m.messageID for m in planted)
        # waits for the client's messages (a planted one may be aborted everywhere),
        # then reads on until the topics are idle
        ids = checked(sent, kafka_bootstrap, topics, all_or_none=hit, extra=planted)
        for mid in hit:  # everywhere or nowhere, whatever each stray met
            assert len({mid in ids[t] for t in topics}) == 1, (mid, ids)
        statuses = read_statuses(kafka_bootstrap)
        assert all(statuses[t].pending == 0 for t in topics), {
            t: statuses[t].pending for t in topics
        }
        reasons = [r for t in topics for r in dead_letter_reasons(kafka_bootstrap, t)]
    assert any("protocol mismatch" in r for r in reasons), reasons
    assert any("no stated protocol" in r for r in reasons), reasons


def stray(kind: MessageType, about: Message, sender: str, protocol: str | None) -> bytes:
    """A stray about ``about`` from ``sender``'s node, with a plausible ``seq``."""
    return stray_in_flight(kind, about, sender, 1, protocol=protocol, layer=None, seq=(10**6, 0))


def test_a_topic_without_a_node_named_at_start_up_is_refused_and_holds_nothing(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Before the nodes start, A's input log holds a message to {A, X} -- X has no node --
    then one to A alone. The nodes read them before their first members record: the
    second is delivered at once, the first waits and is refused 10 s of log time later
    with a dead letter naming X; the traffic that follows is delivered in order."""
    a, b, x = topic_factory(), topic_factory(), topic_factory("absent")
    admin = admin_client(kafka_bootstrap)
    for topic in (a, b):
        ensure_topics(admin, node_topic_specs(NodeConfig(kafka_bootstrap, topic)))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    now = int(time.time() * 1000)
    absent = client_message("to-nowhere", (a, x), "lost", "c", sent_at=now)
    alone = client_message("alone", (a,), "here", "c", sent_at=now)
    producer.produce(input_topic(a, "split"), encode_client(absent))
    producer.produce(input_topic(a, "split"), encode_client(alone))
    producer.flush(10)
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path, name="absent"):
        wait_for_nodes(kafka_bootstrap, [a, b], timeout_s=60)
        sent = send_concurrently(
            kafka_bootstrap, Workload([a, b], messages=30, clients=2, seed=5), "split"
        )
        sent.append(Sent("alone", (a,), "here", ""))
        deadline = time.monotonic() + 60
        reasons: list[str] = []
        while time.monotonic() < deadline:
            reasons = dead_letter_reasons(kafka_bootstrap, a, timeout_s=4)
            if any("has no node" in r for r in reasons):
                break
        assert any("has no node" in r and x in r for r in reasons), reasons
        ids = checked(sent, kafka_bootstrap, [a, b])
    assert "to-nowhere" not in ids[a] and "alone" in ids[a]


def test_a_restart_with_another_protocol_is_refused_and_reconfigure_changes_it(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """§6.6: a node whose state was built under ``direct`` refuses to start with
    ``--algorithm poc`` (exit 2, one line naming --reconfigure), and with signing turned
    on; restarted as it was it goes on. Stopped cleanly everywhere and started with
    ``poc --reconfigure``, the cluster runs poc; every message of the three phases is
    delivered in one order."""
    a, b = topic_factory(), topic_factory()
    sent: list[Sent] = []
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path, name="direct-1"):
        wait_for_nodes(kafka_bootstrap, [a, b], timeout_s=60)
        sent += send_concurrently(kafka_bootstrap, Workload([a, b], 20, clients=1, seed=1), "split")
        checked(sent, kafka_bootstrap, [a, b])
    refused = run_cli(
        "node",
        "--bootstrap-server",
        kafka_bootstrap,
        "--topic",
        a,
        "--algorithm",
        "poc",
        "--max-seconds",
        "90",
        "--takeover-after",
        "1",
        timeout=120,
    )
    assert refused.returncode == 2, (refused.returncode, refused.stderr[-2000:])
    last = orjson.loads(refused.stderr.strip().splitlines()[-1])  # one JSON line, the last
    assert last["exitStatus"] == 2 and "protocol direct -> poc" in last["msg"], last
    assert "--reconfigure" in last["msg"] and "\n" not in last["msg"]
    secret = tmp_path / "secret"
    secret.write_bytes(b"stray-records-test-secret-0123456789")
    signing = run_cli(
        "node", "--bootstrap-server", kafka_bootstrap, "--topic", a, "--secret-file",
        str(secret), "--max-seconds", "90", "--takeover-after", "1", timeout=120,
    )  # fmt: skip
    assert signing.returncode == 2, (signing.returncode, signing.stderr[-2000:])
    assert "written without signing" in signing.stderr, signing.stderr[-2000:]
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path, name="direct-2"):
        wait_for_nodes(kafka_bootstrap, [a, b], timeout_s=60)
        sent += send_concurrently(kafka_bootstrap, Workload([a, b], 20, clients=1, seed=2), "split")
        checked(sent, kafka_bootstrap, [a, b])
    with running_cluster(
        kafka_bootstrap, [a, b], algorithm="poc", log_dir=tmp_path, name="poc", reconfigure=True
    ):
        wait_for_nodes(kafka_bootstrap, [a, b], timeout_s=60)
        statuses = read_statuses(kafka_bootstrap)
        assert {statuses[t].algorithm for t in (a, b)} == {Algorithm.POC}
        sent += send_concurrently(kafka_bootstrap, Workload([a, b], 20, clients=1, seed=3), "split")
        checked(sent, kafka_bootstrap, [a, b])
