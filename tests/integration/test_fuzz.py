"""Ten thousand hostile records on a signed cluster (issue 15, docs/DESIGN.md §4.9, §4.14).

Alongside valid 50 % multicast traffic from a client holding the secret, a fuzzer
writes at least 10,000 hostile records straight into the input logs (and the delivery
topics): bad JSON, missing and wrong-typed fields, huge and boundary timestamps,
oversized values, colliding ids, unknown destinations, stray ticks and acks, records
that are not JSON, foreign records in ``T``, unsigned and wrongly signed control
records. Most are *validly signed* -- a buggy member -- so that they reach the decoder
and the engine rather than stopping at the signature check.

The valid traffic must be delivered in order (the checker passes), every hostile record
written into an input log must be accounted for -- in the node's dead-letter topic with
its reason and origin, or ignored and counted -- no node or merger may restart, and no
topic may stall.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from atomickafka.client import AtomicKafkaClient, DeliveryReader
from atomickafka.core.reader import (
    read_dead_letter,
)
from atomickafka.core.signing import SIGNATURE_HEADER, Signer
from atomickafka.core.timebounds import CLOCK_HOLD_US
from atomickafka.core.wire import MAX_TIMESTAMP, encode_bundle, value_digest
from atomickafka.core.wire import Message as Wire
from atomickafka.core.wire import MessageType as Kind
from atomickafka.kafka.consumer import read_to_end
from atomickafka.kafka.status import read_statuses
from atomickafka.kafka.topics import dead_letter_topic, delivery_topic, input_topic
from tests.integration.harness import Sent, assert_order_checked, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SECRET = "fuzz-0123456789abcdef-fuzz-0123456789abcdef"
HOSTILE = 10_200
VALID = 1_600
FAST: dict[str, Any] = {"session_timeout_ms": 2000, "snapshot_every_s": 5.0}


def _client(mid: object, dests: object, value: object = 1, **more: object) -> bytes:
    """A ClientMessage as a plain JSON record, fields as given (valid or not)."""
    record: dict[str, object] = {"messageType": "ClientMessage", "value": value, **more}
    if mid is not None:
        record["messageID"] = mid
    if dests is not None:
        record["topic"] = dests
    return orjson.dumps(record)


def _bundle(kind: Kind, dests: list[str], sender: str, ts: int, protocol: str = "direct") -> bytes:
    """One control message from ``sender``'s node, bundled as a node writes it."""
    value = b'"v"'
    message = Wire(
        f"h-{random.randrange(10**9)}", kind, tuple(sorted(dests)),
        value if kind is Kind.NOTIFY else None, f"node-{sender}", sender, ts,
        digest=value_digest(value), protocol=protocol,
    )  # fmt: skip
    # as a node of ``protocol`` writes it: the bundle's header names the protocol
    return encode_bundle([message], sender_id=f"node-{sender}", sent_from=sender, protocol=protocol)


def _now_us() -> int:
    return int(time.time() * 1_000_000)


def _now_ms() -> int:
    return int(time.time() * 1000)


#: Each hostile kind: (name, whether it is validly signed, how to make one for a, b).
KINDS: list[tuple[str, bool, Callable[[random.Random, str, str], bytes]]] = [
    ("bad-json", True, lambda r, a, b: r.randbytes(r.randint(1, 80))),
    ("not-an-object", True, lambda r, a, b: orjson.dumps([1, "x", None])),
    ("missing-id", True, lambda r, a, b: _client(None, [a])),
    ("missing-topic", True, lambda r, a, b: _client("x", None)),
    ("wrong-type-id", True, lambda r, a, b: _client(7, [a])),
    ("bad-destination", True, lambda r, a, b: _client("x", ["bad name!"])),
    ("unknown-type", True, lambda r, a, b: orjson.dumps({"messageType": "Gossip", "topic": [a]})),
    ("ts-over-max", True, lambda r, a, b: _bundle(Kind.ACK, [a, b], b, MAX_TIMESTAMP + 1)),
    ("ts-at-max", True, lambda r, a, b: _bundle(Kind.NOTIFY, [a, b], b, MAX_TIMESTAMP)),
    (
        "ts-beyond-hold",
        True,
        lambda r, a, b: _bundle(Kind.ACK, [a, b], b, _now_us() + CLOCK_HOLD_US + 10**9),
    ),
    (
        "oversized-value",
        True,
        lambda r, a, b: _client(f"big-{r.randrange(10**9)}", [a], "x" * 950_000),
    ),
    (
        "unknown-destination",
        True,
        lambda r, a, b: _client(f"u-{r.randrange(10**9)}", [a, "nosuch"], sentAt=_now_ms()),
    ),
    (
        "colliding-id",
        True,
        lambda r, a, b: _client("collide", [a, b] if r.random() < 0.5 else [a], r.randrange(5)),
    ),
    (
        "stray-tick",
        True,
        lambda r, a, b: orjson.dumps(
            {"messageType": "TickMessage", "senderID": "mallory", "timeStamp": _now_us()}
        ),
    ),
    ("other-protocol", True, lambda r, a, b: _bundle(Kind.NOTIFY, [a, b], b, 5, "poc")),
    ("unsigned-ack", False, lambda r, a, b: _bundle(Kind.ACK, [a, b], b, 3)),
    ("unsigned-client", False, lambda r, a, b: _client("x", [a])),
    ("wrongly-signed", False, lambda r, a, b: _bundle(Kind.NOTIFY, [a, b], b, 4)),
]
_FORGED_SIGNATURE = (SIGNATURE_HEADER, b"v1:" + b"0" * 64)


@dataclass
class Fuzzer:
    """Hostile records for ``topics``' input logs, noting each one's kind and place."""

    topics: list[str]
    partitions: int
    rng: random.Random
    signer: Signer
    written: list[tuple[str, str]] = field(default_factory=list)  # (kind, topic/part@offset)
    counts: Counter[str] = field(default_factory=Counter)

    def write(self, producer: Producer, count: int) -> None:
        """Write ``count`` hostile records into random input logs and partitions."""

        def noted(name: str) -> Callable[[Any, Any], None]:
            def on_delivery(err: Any, msg: Any) -> None:
                assert err is None, err
                self.written.append((name, f"{msg.topic()}/{msg.partition()}@{msg.offset()}"))

            return on_delivery

        for _ in range(count):
            name, signed, make = self.rng.choice(KINDS)
            a, b = self.rng.sample(self.topics, 2)
            value = make(self.rng, a, b)
            topic = input_topic(a, "split")
            headers: list[tuple[str, str | bytes | None]] = []
            if name == "wrongly-signed":
                headers = [_FORGED_SIGNATURE]
            elif signed:
                headers = list(self.signer.signed_headers(topic, None, value))
            partition = self.rng.randrange(self.partitions)
            producer.produce(
                topic, value, partition=partition, headers=headers or None, on_delivery=noted(name)
            )
            self.counts[name] += 1
            producer.poll(0)
        producer.flush(60)


def _foreign_in_t(bootstrap: str, topics: list[str]) -> int:
    """Records a plain producer writes into the delivery topics (clients must drop them)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in topics:
        forged = {"messageID": "forged", "senderID": "someone", "messageType": "DeliveryMessage",
                  "value": 1, "topic": [topic], "sentFromTopic": topic, "timeStamp": 2**50,
                  "formatVersion": 2, "digest": "0" * 16}  # fmt: skip
        for value in (b"not json", orjson.dumps(forged)):
            producer.produce(delivery_topic(topic), value)
    producer.flush(30)
    return 2 * len(topics)


@pytest.mark.parametrize("partitions", [1, 3], ids=["unpartitioned", "3-layers"])
def test_ten_thousand_hostile_records_stop_nothing(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path, partitions: int
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    signer = Signer([SECRET.encode()])
    topics = [topic_factory() for _ in range(4)]
    fuzzer = Fuzzer(topics, partitions, random.Random(partitions), signer)
    with running_cluster(
        kafka_bootstrap, topics, partitions=partitions, log_dir=tmp_path, name="fuzz",
        secret_file=str(secret_file), log_level="warning", **FAST,
    ):  # fmt: skip
        before = {k: s.pid for k, s in read_statuses(kafka_bootstrap).items() if s.topic in topics}
        sent: list[Sent] = []
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
        hostile = threading.Thread(target=fuzzer.write, args=(producer, HOSTILE))
        hostile.start()
        rng = random.Random(7)
        with AtomicKafkaClient(kafka_bootstrap, secret_file=str(secret_file)) as client:
            for i in range(VALID):
                dests = rng.sample(topics, rng.randint(2, 4)) if i % 2 else [rng.choice(topics)]
                value = {"i": i}
                sent.append(Sent(client.send(value, dests), tuple(sorted(dests)), value, ""))
        hostile.join(timeout=300)
        foreign = _foreign_in_t(kafka_bootstrap, topics)
        expected = Counter(t for s in sent for t in s.destinations)
        valid_ids = {s.messageID for s in sent}
        got: dict[str, list[Any]] = {}
        forged = 0
        for topic in topics:
            with DeliveryReader(kafka_bootstrap, topic, secret_file=str(secret_file)) as reader:
                deadline = time.monotonic() + 180
                items: list[Any] = []
                while sum(d.messageID in valid_ids for d in items) < expected[topic]:
                    items += list(reader.deliveries(timeout_s=3))
                    if time.monotonic() > deadline:
                        break
                forged += reader.forged + reader.foreign  # forged, or not our writer
            got[topic] = [d for d in items if d.messageID in valid_ids]
        _wait_until_settled(kafka_bootstrap, topics)
        after = {k: s for k, s in read_statuses(kafka_bootstrap).items() if s.topic in topics}
        letters = {
            t: read_to_end(kafka_bootstrap, dead_letter_topic(t), [0], timeout_s=180)
            for t in topics
        }
    assert len(fuzzer.written) >= 10_000
    # no node or merger restarted, and none is left holding anything
    assert {k: after[k].pid for k in before} == before
    assert len(before) == len(topics) * (partitions + (partitions > 1)), before
    assert {k: s.pending for k, s in after.items() if s.pending} == {}
    # the valid traffic is delivered, in order
    assert_order_checked(sent, got)
    # every hostile record is accounted for: set aside with its reason where it was read
    origins: dict[str, str] = {}
    for records in letters.values():
        for record in records:
            letter = read_dead_letter(record)
            if letter.source is not None and letter.source_offset is not None:
                origins[f"{letter.source}@{letter.source_offset}"] = letter.reason
    accepted = {"colliding-id"}  # the first version of a colliding id is a message
    unaccounted = Counter(
        name for name, where in fuzzer.written if where not in origins and name not in accepted
    )
    assert not unaccounted, unaccounted
    reasons = Counter(origins[w].split(":")[0] for n, w in fuzzer.written if w in origins)
    _write_outcomes(tmp_path / "outcomes.json", fuzzer.written, origins)
    assert forged >= len(topics)  # the forged deliveries written into T were dropped
    print(
        f"{len(fuzzer.written)} hostile records, kinds {dict(fuzzer.counts)}; "
        f"reasons {dict(reasons.most_common(12))}; foreign in T {foreign}, dropped {forged}"
    )


def _write_outcomes(path: Path, written: list[tuple[str, str]], origins: dict[str, str]) -> None:
    """Per hostile kind, what its records got (a reason, or taken as a message)."""
    outcomes: dict[str, Counter[str]] = {}
    for name, where in written:
        got = origins[where][:90] if where in origins else "taken as a message (first version)"
        outcomes.setdefault(name, Counter())[got] += 1
    table = {k: c.most_common() for k, c in outcomes.items()}
    path.write_bytes(orjson.dumps(table, option=orjson.OPT_INDENT_2))


def _wait_until_settled(bootstrap: str, topics: list[str], timeout_s: float = 120) -> None:
    """Until every node and merger of ``topics`` reports nothing pending."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = read_statuses(bootstrap)
        mine = [s for s in statuses.values() if s.topic in topics]
        if mine and all(s.pending == 0 for s in mine):
            return
        time.sleep(1)
