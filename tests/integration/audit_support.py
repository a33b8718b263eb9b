"""What the audit's integration tests share: a clean run through real nodes, and the bad
records written straight into delivery topics, one per violation kind."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from atomickafka.client import Delivery
from atomickafka.core.wire import Message, MessageType, encode_delivery, value_digest
from tests.integration.harness import (
    Workload,
    assert_order_checked,
    collect_deliveries,
    running_cluster,
    send_concurrently,
)

#: Far above any timestamp a short run's nodes reach: the bad records' keys.
HIGH = 1 << 40


def clean_run(
    bootstrap: str, topics: Sequence[str], partitions: int, log_dir: Path, messages: int = 200
) -> dict[str, list[Delivery]]:
    """Multicast ``messages`` through real nodes over ``topics``; every destination's
    deliveries, which the order checker has passed."""
    workload = Workload(list(topics), messages, clients=2, relay_share=0.0, seed=partitions)
    with running_cluster(bootstrap, topics, partitions=partitions, log_dir=log_dir):
        sent = send_concurrently(bootstrap, workload, "split")
        expected: dict[str, int] = {}
        for s in sent:
            for t in s.destinations:
                expected[t] = expected.get(t, 0) + 1
        deliveries = collect_deliveries(bootstrap, topics, expected, "split")
    assert_order_checked(sent, deliveries)
    assert {t: len(d) for t, d in deliveries.items()} == {t: expected.get(t, 0) for t in topics}
    return deliveries


def delivery_value(
    topic: str, mid: str, ts: int, dests: Sequence[str], value: bytes = b'{"bad":1}'
) -> bytes:
    """A Delivery record of ``topic``'s node, as the wire format writes it."""
    message = Message(
        messageID=mid,
        messageType=MessageType.DELIVERY,
        topic=tuple(sorted(dests)),
        value=value,
        senderID=f"node-{topic}",
        sentFromTopic=topic,
        timeStamp=ts,
        digest=value_digest(value),
        protocol="direct",
    )
    return encode_delivery(message)


@dataclass(frozen=True, slots=True)
class BadRecords:
    """What :func:`write_bad_records` wrote and which violation each must show, as
    ``(kind, topic, messageID)``."""

    expected: frozenset[tuple[str, str, str]]
    written_at: float  # time.monotonic()
    repeats: Mapping[str, int]  # exact repeats written, per topic
    #: The Kafka time (ms) of the one delivery of the message missing at its other
    #: destination: the bound runs from there.
    missing_first_ms: int


def write_bad_records(bootstrap: str, topics: Sequence[str], tag: str) -> BadRecords:
    """Write, straight into the delivery topics: one record out of order, one with another
    timestamp for an id known from another destination, one missing at one destination,
    one duplicate (the same id again, with another value), one delivered at a topic that
    is not among its destinations, and one exact repeat (which must not be a
    violation)."""
    a, b, c = topics[0], topics[1], topics[2]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    times: list[int] = []

    def put(topic: str, value: bytes) -> None:
        producer.produce(
            topic, value, on_delivery=lambda _err, msg: times.append(msg.timestamp()[1])
        )
        producer.flush(30)  # one at a time: each topic's order is the order written

    put(a, delivery_value(a, f"{tag}-order", 1, [a]))  # below a's last key
    put(a, delivery_value(a, f"{tag}-mismatch", HIGH, [a, b]))
    put(b, delivery_value(b, f"{tag}-mismatch", HIGH + 1, [a, b]))  # another timestamp
    put(a, delivery_value(a, f"{tag}-missing", HIGH + 2, [a, c]))  # never at c
    missing_first_ms = times[-1]
    put(c, delivery_value(c, f"{tag}-dup", HIGH + 3, [c]))
    put(c, delivery_value(c, f"{tag}-dup", HIGH + 4, [c], value=b'{"bad":2}'))  # duplicate
    repeat = delivery_value(b, f"{tag}-repeat", HIGH + 5, [b])
    put(b, repeat)
    put(b, repeat)  # an exact repeat: dropped and counted, not a violation
    put(a, delivery_value(a, f"{tag}-stray", HIGH + 6, [a]))
    put(b, delivery_value(b, f"{tag}-stray", HIGH + 6, [a]))  # b is not a destination
    written_at = time.monotonic()
    expected = frozenset(
        {
            ("order", a, f"{tag}-order"),
            ("mismatch", b, f"{tag}-mismatch"),
            ("missing", c, f"{tag}-missing"),
            ("duplicate", c, f"{tag}-dup"),
            ("not-a-destination", b, f"{tag}-stray"),
        }
    )
    return BadRecords(expected, written_at, {b: 1}, missing_first_ms)


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, step_s: float = 0.2
) -> None:
    """Wait until ``condition()`` holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step_s)
