"""Issue 38, item 1, the mixed-version test on the real broker (docs/DESIGN.md §4.16):
nodes run with ``--notify-values every`` (as upgraded nodes during a rolling upgrade
from a release that refuses lean Notifies) and nodes writing lean Notifies (the default,
``carrier``) order the same multicasts to three and four topics together, checked by the
order checker and by plain ``read_committed`` consumers. Each log then holds lean
Notifies from the ``carrier`` nodes only, and no node set anything aside.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from atomickafka.core.protocols import routed_by_id
from atomickafka.core.raw import decode_any
from atomickafka.core.wire import MessageError, MessageType, client_message, encode_client
from atomickafka.kafka.consumer import read_to_end
from atomickafka.kafka.status import wait_for_nodes
from atomickafka.kafka.topics import dead_letter_topic, input_topic
from tests.integration.harness import (
    Sent,
    Workload,
    assert_order_checked,
    collect_deliveries,
    node_log_records,
    running_cluster,
    send_concurrently,
)
from tests.integration.test_faults import assert_plain_consumers_see_each_delivery_once

pytestmark = pytest.mark.integration


def notifies(bootstrap: str, topic: str) -> Counter[str]:
    """The Notifies in ``topic``'s input and control logs, lean or full, by sender."""
    seen: Counter[str] = Counter()
    for record in node_log_records(bootstrap, topic):
        try:
            messages = decode_any(record.value() or b"", record.key(), record.headers())
        except MessageError:
            continue
        for m in messages:
            if m.messageType is MessageType.NOTIFY:
                form = "lean" if m.value is None else "full"
                seen[f"{form} from {m.sentFromTopic}"] += 1
    return seen


def test_every_and_carrier_nodes_order_the_same_traffic(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    full_a, full_b, lean_a, lean_b = (topic_factory() for _ in range(4))
    topics = [full_a, full_b, lean_a, lean_b]
    with (
        running_cluster(
            kafka_bootstrap,
            [full_a, full_b],
            log_dir=tmp_path,
            name="every",
            notify_values="every",
        ),  # fmt: skip
        running_cluster(kafka_bootstrap, [lean_a, lean_b], log_dir=tmp_path, name="carrier"),
    ):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        workload = Workload(topics, messages=80, clients=2, single_share=0.1, multicast_min=3)
        sent = send_concurrently(kafka_bootstrap, workload, "split")
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        assert_order_checked(sent, deliveries)
        assert_plain_consumers_see_each_delivery_once(kafka_bootstrap, topics, expected)
        seen: Counter[str] = Counter()
        for topic in topics:
            seen.update(notifies(kafka_bootstrap, topic))
    assert seen[f"lean from {lean_a}"] and seen[f"lean from {lean_b}"], seen
    assert not seen[f"lean from {full_a}"] and not seen[f"lean from {full_b}"], seen
    assert seen[f"full from {full_a}"] and seen[f"full from {lean_a}"], seen
    for topic in topics:
        assert read_to_end(kafka_bootstrap, dead_letter_topic(topic), [0], timeout_s=20) == []


def test_a_client_that_dies_between_its_copies_leaves_each_message_everywhere(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """All or none, on the broker (§4.16): multicasts to four topics of which the client
    wrote one copy only before it died -- to the message's carrier, or to another
    destination, whose lean Notifies then reach the others through the carrier -- are
    delivered at every destination, in one order, once each (the checker and plain
    ``read_committed`` consumers)."""
    topics = sorted(topic_factory() for _ in range(4))
    destinations = tuple(topics)
    with running_cluster(kafka_bootstrap, topics, log_dir=tmp_path, name="carrier"):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
        sent: list[Sent] = []
        at_carrier = elsewhere = 0
        for n in range(24):
            mid = f"dies-{n}"
            carrier = routed_by_id(destinations, mid)
            only = carrier if n % 2 else next(t for t in topics if t != carrier)
            at_carrier += only == carrier
            elsewhere += only != carrier
            message = client_message(
                mid, destinations, {"n": n}, "dies", sent_at=int(time.time() * 1000)
            )
            producer.produce(input_topic(only, "split"), encode_client(message))
            sent.append(Sent(mid, destinations, {"n": n}, only))
        assert producer.flush(30) == 0
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        assert_order_checked(sent, deliveries)
        assert_plain_consumers_see_each_delivery_once(kafka_bootstrap, topics, expected)
    assert at_carrier and elsewhere
