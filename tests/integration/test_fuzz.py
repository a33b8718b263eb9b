"""Ten thousand hostile records on a signed cluster (issue 15, docs/DESIGN.md §4.9, §4.14).

Alongside valid 50 % multicast traffic from a client holding the secret, a fuzzer
writes at least 10,000 hostile records straight into the input and control logs (about
half each: a client may write a node's control log, its direct lane): bad JSON, missing
and wrong-typed fields, huge and boundary timestamps, oversized values, colliding ids,
unknown destinations, stray ticks and acks, records that are not JSON, unsigned and
wrongly signed control records, Decideds for ids never heard of, and compact control
records (docs/DESIGN.md §3.9) that are garbage, cut short, of a newer version, out of
bounds, of another protocol or unsigned, and, in the control logs only, apply markers
(§7) that are malformed, unsigned, wrongly signed, of another node or of another layer.
Most are *validly
signed* -- a buggy member -- so that they reach the decoder and the engine rather than
stopping at the signature check.
Then 100 foreign records go into every delivery topic ``T``: not JSON, other record
types, a Delivery of another topic, foreign Deliveries with huge timestamps, and
Deliveries forged under ``T``'s own node or merger id (unsigned, wrongly signed); on
the 3-layer run every merger is then killed, so that it resumes with them at the end of
``T``; then more valid traffic.

The valid traffic must be delivered in order (the checker passes). Every hostile record
is accounted for: in the node's dead-letter topic with its reason and origin; or
ignored and counted -- a colliding id's repeat in the node's status (``duplicates``),
a record in ``T`` in the readers' counters (``skipped``, ``foreign``, ``forged``) and,
on the 3-layer run, in the restarted merger's (its status and its log line); only the
first version of a colliding id a node takes is a message. No node restarts (the
mergers only when killed), and no topic stalls. The test prints (``-s``) and writes
(``fuzz-outcomes-*.md`` in its temporary directory) the table of what each kind got.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
from confluent_kafka import Producer

from atomickafka.client import AtomicKafkaClient, Delivery, DeliveryReader
from atomickafka.core.compact import BINARY, COMPACT_VERSION, JSON, MAGIC, control_encoders
from atomickafka.core.engine import MEMBERS_GRACE_MS
from atomickafka.core.marker import MAX_MARKER_RANGE, encode_marker
from atomickafka.core.reader import DeadLetter, read_dead_letter
from atomickafka.core.reasons import Reason
from atomickafka.core.signing import SIGNATURE_HEADER, Signer
from atomickafka.core.timebounds import CLOCK_HOLD_US
from atomickafka.core.wire import (
    MAX_TIMESTAMP,
    encode_delivery,
    encode_tick,
    value_digest,
)
from atomickafka.core.wire import Message as Wire
from atomickafka.core.wire import MessageType as Kind
from atomickafka.kafka.consumer import read_to_end
from atomickafka.kafka.status import Status, read_statuses
from atomickafka.kafka.topics import (
    CONTROL_PREFIX,
    INPUT_PREFIX,
    control_topic,
    dead_letter_topic,
    delivery_topic,
    input_topic,
)
from atomickafka.metrics.records import dead_letter_reason
from tests.integration.harness import Sent, assert_order_checked, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SECRET = "fuzz-0123456789abcdef-fuzz-0123456789abcdef"
HOSTILE = 10_200
VALID = 1_600
#: Valid messages sent after the foreign records went into ``T`` (and the mergers
#: restarted): a merger that trusted one of them would suppress these.
VALID_AFTER = 200
#: Foreign records written into each delivery topic.
IN_T = 100
#: Exact copies of each delivered version of the colliding id written again at the end.
REPEATS = 3
FAST: dict[str, Any] = {"session_timeout_ms": 2000, "snapshot_every_s": 5.0}


def _client(mid: object, dests: object, value: object = 1, **more: object) -> bytes:
    """A ClientMessage as a plain JSON record, fields as given (valid or not)."""
    record: dict[str, object] = {"messageType": "ClientMessage", "value": value, **more}
    if mid is not None:
        record["messageID"] = mid
    if dests is not None:
        record["topic"] = dests
    return orjson.dumps(record)


def _bundle(
    kind: Kind,
    dests: list[str],
    sender: str,
    ts: int,
    protocol: str = "direct",
    control_format: str = JSON,
) -> bytes:
    """One control message from ``sender``'s node, bundled as a node writes it (in
    ``control_format``, docs/DESIGN.md §3.9)."""
    value = b'"v"'
    message = Wire(
        f"h-{random.randrange(10**9)}", kind, tuple(sorted(dests)),
        value if kind in (Kind.NOTIFY, Kind.DECIDED) else None, f"node-{sender}", sender, ts,
        digest=value_digest(value), protocol=protocol,
    )  # fmt: skip
    # as a node of ``protocol`` writes it: the bundle's header names the protocol
    encode, _ = control_encoders(control_format)
    return encode([message], sender_id=f"node-{sender}", sent_from=sender, protocol=protocol)


def _compact(kind: Kind, dests: list[str], sender: str, ts: int, protocol: str = "direct") -> bytes:
    """:func:`_bundle` in the compact form."""
    return _bundle(kind, dests, sender, ts, protocol, BINARY)


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
        # dated, so that an exact copy of the version delivered, written after the node
        # forgot it (a busy run: more than the memory window later), is refused as late
        # and never delivered again (§4.13); undated, it would be a new message then
        lambda r, a, b: _client(
            "collide", [a, b] if r.random() < 0.5 else [a], r.randrange(5), sentAt=_now_ms()
        ),
    ),
    (
        "stray-tick",
        True,
        lambda r, a, b: orjson.dumps(
            {"messageType": "TickMessage", "senderID": "mallory", "timeStamp": _now_us()}
        ),
    ),
    ("other-protocol", True, lambda r, a, b: _bundle(Kind.NOTIFY, [a, b], b, 5, "poc")),
    # a decision, with its value, about a message its reader never heard of (§4.9)
    ("decided-unknown-id", True, lambda r, a, b: _bundle(Kind.DECIDED, [a, b], b, 5)),
    ("unsigned-ack", False, lambda r, a, b: _bundle(Kind.ACK, [a, b], b, 3)),
    ("unsigned-client", False, lambda r, a, b: _client("x", [a])),
    ("wrongly-signed", False, lambda r, a, b: _bundle(Kind.NOTIFY, [a, b], b, 4)),
    # the compact control form (§3.9): garbage after its first byte, a bundle cut inside
    # its value, a newer version, bounds, protocols, signatures
    (
        "compact-garbage",
        True,
        lambda r, a, b: bytes([MAGIC, COMPACT_VERSION]) + r.randbytes(r.randint(0, 80)),
    ),
    ("compact-cut", True, lambda r, a, b: _compact(Kind.NOTIFY, [a, b], b, 5)[: -r.randint(1, 3)]),
    (
        "compact-newer",
        True,
        lambda r, a, b: bytes([MAGIC, COMPACT_VERSION + 1]) + _compact(Kind.ACK, [a, b], b, 3)[2:],
    ),
    ("compact-ts-over-max", True, lambda r, a, b: _compact(Kind.ACK, [a, b], b, MAX_TIMESTAMP + 1)),
    ("compact-other-protocol", True, lambda r, a, b: _compact(Kind.NOTIFY, [a, b], b, 5, "poc")),
    ("compact-decided-unknown-id", True, lambda r, a, b: _compact(Kind.DECIDED, [a, b], b, 5)),
    ("compact-unsigned-ack", False, lambda r, a, b: _compact(Kind.ACK, [a, b], b, 3)),
]

#: Apply markers (§7), written into control logs only, each for the node of ``a`` in
#: layer ``p`` (``None``: unpartitioned) (name, whether validly signed, how to make one
#: for a, p). None may apply: a validly signed marker in the node's own name is the
#: node's own (a member holding the secret is trusted, §4.14), so the signed ones here
#: are of another node, of another layer, or malformed.
MARKER_KINDS: list[tuple[str, bool, Callable[[random.Random, str, int | None], bytes]]] = [
    ("marker-malformed", True, lambda r, a, p: _raw_marker(a, 5, r.choice([5, 1, -1, "x"]))),
    ("marker-range-too-large", True, lambda r, a, p: _raw_marker(a, 0, MAX_MARKER_RANGE + 1)),
    (
        "marker-of-another-node",
        True,
        lambda r, a, p: encode_marker("node-mallory", a, 0, r.randint(1, 10**6)),
    ),
    (
        "marker-of-another-layer",
        True,
        lambda r, a, p: encode_marker(_node_id(a, (p or 0) + 100), a, 0, 10**6, (p or 0) + 100),
    ),
    # in the node's own name, naming offsets nobody wrote: signed, it would stall the node
    ("marker-unsigned", False, lambda r, a, p: encode_marker(_node_id(a, p), a, 0, 10**6, p)),
    ("marker-wrongly-signed", False, lambda r, a, p: encode_marker(_node_id(a, p), a, 0, 10**6, p)),
]
_FORGED_SIGNATURE = (SIGNATURE_HEADER, b"v1:" + b"0" * 64)


def _raw_marker(topic: str, start: object, end: object) -> bytes:
    """An apply marker in the name of ``topic``'s node, its range as given (valid or not)."""
    return orjson.dumps({"messageType": "ApplyMarker", "senderID": f"node-{topic}",
                         "sentFromTopic": topic, "from": start, "until": end,
                         "formatVersion": 1})  # fmt: skip


#: The share of the hostile records of :data:`KINDS` written into control logs.
CONTROL_SHARE = 0.5


def _node_id(topic: str, layer: int | None) -> str:
    """The node id of ``topic``'s node (``layer``: of a partitioned topic's layer)."""
    return f"node-{topic}" if layer is None else f"node-{topic}/{layer}"


def _node_of(log: str) -> str:
    """``T/p`` for ``atomickafka-in.T/p`` or ``atomickafka-ctl.T/p``: the node reading it."""
    return log.removeprefix(INPUT_PREFIX).removeprefix(CONTROL_PREFIX)


@dataclass
class Fuzzer:
    """Hostile records for ``topics``' input and control logs, noting each one's kind
    and place."""

    topics: list[str]
    partitions: int
    rng: random.Random
    signer: Signer
    written: list[tuple[str, str]] = field(default_factory=list)  # (kind, topic/part@offset)
    counts: Counter[str] = field(default_factory=Counter)

    def write(self, producer: Producer, count: int) -> None:
        """Write ``count`` hostile records into random input and control logs and
        partitions; one in ten into a control log is an apply marker."""

        def noted(name: str) -> Callable[[Any, Any], None]:
            def on_delivery(err: Any, msg: Any) -> None:
                assert err is None, err
                self.written.append((name, f"{msg.topic()}/{msg.partition()}@{msg.offset()}"))

            return on_delivery

        for _ in range(count):
            a, b = self.rng.sample(self.topics, 2)
            partition = self.rng.randrange(self.partitions)
            layer = partition if self.partitions > 1 else None
            control = self.rng.random() < CONTROL_SHARE
            if control and self.rng.random() < 0.1:
                name, signed, make_marker = self.rng.choice(MARKER_KINDS)
                value = make_marker(self.rng, a, layer)
            else:
                name, signed, make = self.rng.choice(KINDS)
                value = make(self.rng, a, b)
            topic = control_topic(a) if control else input_topic(a, "split")
            headers: list[tuple[str, str | bytes | None]] = []
            if name in ("wrongly-signed", "marker-wrongly-signed"):
                headers = [_FORGED_SIGNATURE]
            elif signed:
                headers = list(self.signer.signed_headers(topic, None, value))
            producer.produce(
                topic, value, partition=partition, headers=headers or None, on_delivery=noted(name)
            )
            self.counts[name] += 1
            producer.poll(0)
        producer.flush(60)


# ---------------------------------------------------------------------------- records in T


def _delivery_in_t(topic: str, sender: str, sent_from: str, ts: int, mid: str) -> bytes:
    value = b'"forged"'
    message = Wire(mid, Kind.DELIVERY, (topic,), value, sender, sent_from, ts,
                   digest=value_digest(value), protocol="direct")  # fmt: skip
    return encode_delivery(message)


#: Each kind of foreign record in ``T``: (name, the reader's counter that counts it,
#: how to make one for topic t, another topic u, t's own writer id and a number i).
#: ``forged`` ones carry t's own node's (or merger's) id and a timestamp above anything
#: real: trusted, they would hide every later delivery as a repeat, or make a restarted
#: merger suppress them.
IN_T_KINDS: list[tuple[str, str, Callable[[str, str, str, int], bytes]]] = [
    ("t-not-json", "skipped", lambda t, u, w, i: b"\x00plain producer record " + bytes([i % 256])),
    ("t-client-message", "skipped", lambda t, u, w, i: _client(f"t-c-{i}", [t])),
    ("t-tick", "skipped", lambda t, u, w, i: encode_tick(w, MAX_TIMESTAMP - i, None)),
    ("t-bundle", "skipped", lambda t, u, w, i: _bundle(Kind.NOTIFY, [t, u], u, 5)),
    (
        "t-delivery-of-another-topic",
        "skipped",
        lambda t, u, w, i: _delivery_in_t(t, f"node-{u}", u, 7, f"t-o-{i}"),
    ),
    (
        "t-foreign-delivery-huge-ts",
        "foreign",
        lambda t, u, w, i: _delivery_in_t(t, "someone", t, 2**50 + i, f"t-f-{i}"),
    ),
    (
        "t-forged-unsigned",
        "forged",
        lambda t, u, w, i: _delivery_in_t(t, w, t, MAX_TIMESTAMP - i, f"t-u-{i}"),
    ),
    (
        "t-forged-wrongly-signed",
        "forged",
        lambda t, u, w, i: _delivery_in_t(t, w, t, MAX_TIMESTAMP - i, f"t-w-{i}"),
    ),
]


def _foreign_in_t(
    bootstrap: str, topics: list[str], partitions: int, rng: random.Random
) -> dict[str, Counter[str]]:
    """``IN_T`` foreign records into each delivery topic, as a plain producer writes
    them (the wrongly signed ones with a signature header made up); per topic, how many
    of each kind."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    written: dict[str, Counter[str]] = {}
    for topic in topics:
        other = rng.choice([t for t in topics if t != topic])
        writer = f"merger-{topic}" if partitions > 1 else f"node-{topic}"
        counts = written[topic] = Counter()
        for i in range(IN_T):
            name, _, make = rng.choice(IN_T_KINDS)
            headers: list[tuple[str, str | bytes | None]] | None = None
            if name == "t-forged-wrongly-signed":
                headers = [_FORGED_SIGNATURE]
            producer.produce(delivery_topic(topic), make(topic, other, writer, i), headers=headers)
            counts[name] += 1
    assert producer.flush(30) == 0
    return written


# ---------------------------------------------------------------------------- the run


def _send(client: AtomicKafkaClient, topics: list[str], count: int, seed: int) -> list[Sent]:
    """``count`` valid messages, every other one a multicast."""
    rng = random.Random(seed)
    sent: list[Sent] = []
    for i in range(count):
        dests = rng.sample(topics, rng.randint(2, len(topics))) if i % 2 else [rng.choice(topics)]
        value = {"i": i, "seed": seed}
        sent.append(Sent(client.send(value, dests), tuple(sorted(dests)), value, ""))
    return sent


def _read_until(
    readers: dict[str, DeliveryReader], got: dict[str, list[Delivery]], sent: list[Sent]
) -> None:
    """Read each topic until every valid message sent to it is there (at most 120 s)."""
    expected = Counter(t for s in sent for t in s.destinations)
    valid = {s.messageID for s in sent}
    deadline = time.monotonic() + 120
    for topic, reader in readers.items():
        items = got.setdefault(topic, [])
        while sum(d.messageID in valid for d in items) < expected[topic]:
            items += list(reader.deliveries(timeout_s=0.5))
            if time.monotonic() > deadline:
                break


def _restart_mergers(bootstrap: str, topics: list[str], log: Path) -> dict[str, int]:
    """SIGKILL every merger of ``topics``; wait until each has been started again and
    resumed (at most 60 s); return how many foreign records each said it passed at the
    end of ``T`` (its log line)."""
    old = {t: read_statuses(bootstrap)[f"{t}/merger"].pid for t in topics}
    for pid in old.values():
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = read_statuses(bootstrap)
        back = [now.get(f"{t}/merger") for t in topics]
        if all(s is not None and s.pid != old[s.topic] and not s.replaying for s in back):
            break
        time.sleep(0.5)
    found = re.findall(r"merger (\S+): (\d+) records at the end of", log.read_text())
    return {topic: int(n) for topic, n in found}


def _repeat_delivered_collisions(
    bootstrap: str, got: dict[str, list[Delivery]], partitions: int, signer: Signer
) -> dict[str, list[str]]:
    """Write :data:`REPEATS` exact copies of each version of the colliding id a node
    delivered into that node's log (validly signed): each must be ignored and counted
    as a repeat. Per node key, where the copies went."""
    producer = Producer({"bootstrap.servers": bootstrap})
    where: dict[str, list[str]] = {}

    def noted(key: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            where[key].append(f"{msg.topic()}/{msg.partition()}@{msg.offset()}")

        return on_delivery

    for topic, items in got.items():
        for delivery in items:
            if delivery.messageID != "collide":
                continue
            key = topic if partitions == 1 else f"{topic}/{delivery.layer or 0}"
            where[key] = []
            value = _client(
                "collide", list(delivery.destinations), delivery.value, sentAt=delivery.sentAt
            )
            log = input_topic(topic, "split")
            headers: list[tuple[str, str | bytes | None]] = list(
                signer.signed_headers(log, None, value)
            )
            for _ in range(REPEATS):
                producer.produce(log, value, partition=delivery.layer or 0,
                                 headers=headers, on_delivery=noted(key))  # fmt: skip
    assert producer.flush(30) == 0
    return where


def _duplicates_grew(
    bootstrap: str, before: dict[str, Status], grown: dict[str, list[str]], timeout_s: float = 60
) -> tuple[dict[str, Status], set[str]]:
    """The statuses once every node key of ``grown`` counts as duplicates each of its
    copies that was not set aside as late (at most ``timeout_s``), one status interval
    later, so that nothing else is counted; and the copies set aside as late. A copy
    written more than the memory window after its version was delivered (a busy run)
    finds the id forgotten and is late by its ``sentAt`` (§4.13)."""
    deadline = time.monotonic() + timeout_s
    topics = sorted({_node_of(w.split("@")[0]).split("/")[0] for ws in grown.values() for w in ws})
    while True:
        late = _late_letters(bootstrap, topics)
        now = read_statuses(bootstrap)
        done = all(
            now[k].duplicates >= before[k].duplicates + len([c for c in w if c not in late])
            for k, w in grown.items()
        )
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    time.sleep(1.2)
    return read_statuses(bootstrap), _late_letters(bootstrap, topics)


def _late_letters(bootstrap: str, topics: list[str]) -> set[str]:
    """Where the records ``topics``' nodes set aside as late were (``log/partition@offset``)."""
    late = set()
    for topic in topics:
        for record in read_to_end(bootstrap, dead_letter_topic(topic), [0], timeout_s=180):
            letter = read_dead_letter(record)
            if letter.code is Reason.LATE and letter.source is not None:
                late.add(f"{letter.source}@{letter.source_offset}")
    return late


def _letters_once_refused(
    bootstrap: str, topics: list[str], fuzzer: Fuzzer, timeout_s: float = 90
) -> dict[str, list[Any]]:
    """The dead letters of ``topics``, read again until every message naming a topic
    without a node is among them (bounded). The grace a members record gives such a
    message counts from where the node applied it: with a control log, where its apply
    marker came back (DESIGN §7.1), which under the fuzzer's flood is seconds after it
    was written, so no fixed wait after the flood covers it."""
    awaited = {where for name, where in fuzzer.written if name == "unknown-destination"}
    deadline = time.monotonic() + timeout_s
    while True:
        letters = {
            t: read_to_end(bootstrap, dead_letter_topic(t), [0], timeout_s=180) for t in topics
        }
        refused = set()
        for records in letters.values():
            for record in records:
                letter = read_dead_letter(record)
                refused.add(f"{letter.source}@{letter.source_offset}")
        if awaited <= refused or time.monotonic() >= deadline:
            return letters
        time.sleep(1.0)


def _wait_until_settled(bootstrap: str, topics: list[str], timeout_s: float = 120) -> None:
    """Until every node and merger of ``topics`` reports nothing pending."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = read_statuses(bootstrap)
        mine = [s for s in statuses.values() if s.topic in topics]
        if mine and all(s.pending == 0 for s in mine):
            return
        time.sleep(0.5)


@dataclass
class Run:
    """What one run wrote, read and found, for the assertions and the table."""

    fuzzer: Fuzzer
    sent: list[Sent]
    got: dict[str, list[Delivery]]
    readers: dict[str, DeliveryReader]
    in_t: dict[str, Counter[str]]
    before: dict[str, int]
    after: dict[str, Status]
    letters: dict[str, list[Any]]
    passed_by_merger: dict[str, int]
    restarts: list[str]


@pytest.mark.parametrize("partitions", [1, 3], ids=["unpartitioned", "3-layers"])
def test_ten_thousand_hostile_records_stop_nothing(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path, partitions: int
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    topics = [topic_factory() for _ in range(4)]
    fuzzer = Fuzzer(topics, partitions, random.Random(partitions), Signer([SECRET.encode()]))
    log = tmp_path / "cluster-fuzz.log"
    with running_cluster(
        kafka_bootstrap, topics, partitions=partitions, log_dir=tmp_path, name="fuzz",
        secret_file=str(secret_file), log_level="warning", **FAST,
    ):  # fmt: skip
        before = {k: s.pid for k, s in read_statuses(kafka_bootstrap).items() if s.topic in topics}
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
        hostile = threading.Thread(target=fuzzer.write, args=(producer, HOSTILE))
        hostile.start()
        readers = {t: DeliveryReader(kafka_bootstrap, t, secret_file=str(secret_file))
                   for t in topics}  # fmt: skip
        got: dict[str, list[Delivery]] = {}
        with AtomicKafkaClient(kafka_bootstrap, secret_file=str(secret_file)) as client:
            sent = _send(client, topics, VALID, seed=7)
            hostile.join(timeout=300)
            fuzzed_at = time.monotonic()
            _read_until(readers, got, sent)
            _wait_until_settled(kafka_bootstrap, topics)
            in_t = _foreign_in_t(kafka_bootstrap, topics, partitions, random.Random(11))
            passed = _restart_mergers(kafka_bootstrap, topics, log) if partitions > 1 else {}
            sent += _send(client, topics, VALID_AFTER, seed=8)
        _read_until(readers, got, sent)
        for topic, reader in readers.items():  # anything after the last expected one
            got[topic] += list(reader.deliveries(timeout_s=1.0))
            reader.close()
        _wait_until_settled(kafka_bootstrap, topics)
        # a message naming a destination without a node is refused by the first members
        # record written MEMBERS_GRACE_MS after it; the node writes one every second
        time.sleep(max(0.0, fuzzed_at + MEMBERS_GRACE_MS / 1000 + 1.0 - time.monotonic()))
        settled = read_statuses(kafka_bootstrap)
        repeats = _repeat_delivered_collisions(kafka_bootstrap, got, partitions, fuzzer.signer)
        statuses, late = _duplicates_grew(kafka_bootstrap, settled, repeats)
        after = {k: s for k, s in statuses.items() if s.topic in topics}
        letters = _letters_once_refused(kafka_bootstrap, topics, fuzzer)
    restarts = [ln for ln in log.read_text().splitlines() if "restarting in" in ln]
    run = Run(fuzzer, sent, got, readers, in_t, before, after, letters, passed, restarts)
    _assert_nothing_stopped(run, topics, partitions)
    assert repeats, "no node delivered a version of the colliding id"
    for key, copies in repeats.items():  # ignored, and counted exactly, unless late
        counted = [c for c in copies if c not in late]
        assert after[key].duplicates == settled[key].duplicates + len(counted), (key, late)
        fuzzer.written += [("colliding-id-repeat", where) for where in copies]
    table = _assert_accounted(run, topics, partitions)
    path = tmp_path / f"fuzz-outcomes-{partitions}.md"
    path.write_text(table)
    print(f"\n{table}\n(written to {path})")


def _assert_nothing_stopped(run: Run, topics: list[str], partitions: int) -> None:
    """No node restarted (a merger only once, when killed), none holds anything, and the
    valid traffic -- before and after the records in ``T`` -- is delivered in order."""
    assert len(run.fuzzer.written) >= 10_000
    assert len(run.before) == len(topics) * (partitions + (partitions > 1)), run.before
    mergers = {f"{t}/merger" for t in topics} if partitions > 1 else set()
    nodes = {k: pid for k, pid in run.before.items() if k not in mergers}
    assert {k: run.after[k].pid for k in nodes} == nodes, run.restarts
    assert all(run.after[k].pid != run.before[k] for k in mergers), run.restarts
    assert len(run.restarts) == len(mergers), run.restarts
    assert {k: s.pending for k, s in run.after.items() if s.pending} == {}
    valid = {s.messageID for s in run.sent}
    assert_order_checked(run.sent, {t: [d for d in ds if d.messageID in valid]
                                    for t, ds in run.got.items()})  # fmt: skip


_REPEAT_IGNORED: Final = (
    "ignored: a repeat of the version delivered; the node's status `duplicates` grew by "
    "exactly one per copy (a copy written after the memory window is set aside as late)"
)


def _assert_accounted(run: Run, topics: list[str], partitions: int) -> str:
    """Every hostile record is dead-lettered with its reason, or ignored and counted by
    the counter that counts it; return the table of outcomes per kind."""
    origins: dict[str, DeadLetter] = {}
    for records in run.letters.values():
        for record in records:
            letter = read_dead_letter(record)
            if letter.source is not None and letter.source_offset is not None:
                origins[f"{letter.source}@{letter.source_offset}"] = letter
    outcomes: dict[tuple[str, str], Counter[str]] = {}
    taken: set[str] = set()  # the nodes (T or T/p) that took a version of the colliding id
    ignored: Counter[str] = Counter()  # per node key
    for name, where in run.fuzzer.written:
        log_name = where.split("@")[0]
        log_kind = "control logs" if log_name.startswith(CONTROL_PREFIX) else "input logs"
        node = _node_of(log_name)
        if name == "colliding-id-repeat":  # ignored; set aside only as late (§4.13)
            got = _repeat_outcome(origins.get(where), topics)
        elif where in origins:
            got = _dead_lettered(origins[where], topics)
        elif name == "colliding-id" and node not in taken:
            taken.add(node)
            got = "taken: the first version a node hears of is a message"
        elif name == "colliding-id":
            topic, part = node.split("/")
            ignored[topic if partitions == 1 else f"{topic}/{part}"] += 1
            got = "ignored: a repeat of a known version; counted in the node's status `duplicates`"
        else:
            got = "UNACCOUNTED"
        outcomes.setdefault((name, log_kind), Counter())[got] += 1
    unaccounted = {k[0]: c["UNACCOUNTED"] for k, c in outcomes.items() if c["UNACCOUNTED"]}
    assert not unaccounted, unaccounted
    for key, count in ignored.items():
        assert run.after[key].duplicates >= count, (key, count, run.after[key].duplicates)
    _account_for_t(run, outcomes, partitions)
    return _table(outcomes)


def _repeat_outcome(letter: DeadLetter | None, topics: list[str]) -> str:
    """What an exact copy of a delivered version got: ignored (counted as a repeat), or,
    written after its node forgot the id, set aside as late -- never anything else."""
    if letter is None:
        return _REPEAT_IGNORED
    return _dead_lettered(letter, topics) if letter.code is Reason.LATE else "UNACCOUNTED"


def _dead_lettered(letter: DeadLetter, topics: list[str]) -> str:
    """A dead letter's outcome for the table: its reason's label (as the metrics count
    it, from its code) and the reason's text, with topic names and numbers made generic."""
    text = letter.reason
    for topic in topics:
        text = text.replace(topic, "T")
    text = re.sub(r"\{T(, T)*\}", "{...}", text)
    text = re.sub(r"\d{4,}", "N", re.sub(r"digest [0-9a-f]{16}", "digest D", text))
    text = re.sub(r" \(got .*", " (got ...)", text)  # what garbage held: one row per reason
    text = text if len(text) <= 90 else text[:87] + "..."
    return f"dead-lettered, `{dead_letter_reason(letter.code)}`: {text}"


def _account_for_t(
    run: Run, outcomes: dict[tuple[str, str], Counter[str]], partitions: int
) -> None:
    """Each reader counted exactly what was written into its ``T`` (by its own counter:
    ``forged`` apart from ``foreign``), and each restarted merger passed all of it."""
    counters = {name: counter for name, counter, _ in IN_T_KINDS}
    for topic, written in run.in_t.items():
        reader = run.readers[topic]
        want: Counter[str] = Counter()
        for name, n in written.items():
            want[counters[name]] += n
        got = {"skipped": reader.skipped, "foreign": reader.foreign, "forged": reader.forged}
        assert got == {k: want[k] for k in got}, (topic, got, want)
        if partitions > 1:
            assert run.passed_by_merger.get(topic) == IN_T, (topic, run.passed_by_merger)
            status = run.after[f"{topic}/merger"]
            assert status.dead_letters >= IN_T, (topic, status.dead_letters)
        for name, n in written.items():
            got_t = f"ignored by readers, counted in `DeliveryReader.{counters[name]}`"
            if partitions > 1:
                got_t += "; a restarted merger passes it (log line, status `dead_letters`)"
            outcomes.setdefault((name, "T"), Counter())[got_t] += n


def _table(outcomes: dict[tuple[str, str], Counter[str]]) -> str:
    """A Markdown table: kind, where it was written, how many, what each got."""
    lines = ["| kind | written into | records | what they got |", "|---|---|---|---|"]
    for (name, where), got in sorted(outcomes.items(), key=lambda kv: (kv[0][1] == "T", kv[0])):
        what = "; ".join(f"{text} x{n}" for text, n in got.most_common())
        lines.append(f"| {name} | {where} | {sum(got.values())} | {what} |")
    return "\n".join(lines)
