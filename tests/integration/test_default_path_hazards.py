"""Issue 35's four hazards on the real broker, on the default path (control logs, the
direct lane, exactly-once), each with nodes run as separate ``atomickafka node``
processes that the test stops and starts, a short memory window (4 s: a record may be
2 s late) and the order checker on what the client reads:

1. a node killed while a new topic's node proposes multicasts naming it: when it comes
   back, what it reads waits for its members record naming the new topic for longer
   than half the window, then is taken up;
2. a relay copied into a control log by a plain producer: nothing is lost;
3. an unsigned apply marker forged into a control log by a plain producer: the topic
   goes on delivering (after the marker's 10 s lead);
4. a node stopped for longer than half the window, without a standby, while clients
   send to it: every acknowledged message is delivered after it returns.

Each failed on the code before issue 35 (the unit tests in
``tests/unit/test_default_path_hazards.py`` pin each rule down alone).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from atomickafka.client import AtomicKafkaClient
from atomickafka.client.plan import DEFAULT_DIRECT_RATE
from atomickafka.core.marker import MARKER_LEAD_MS, MAX_MARKER_RANGE, encode_marker
from atomickafka.core.placement import is_relay
from atomickafka.core.reader import read_dead_letter, read_messages
from atomickafka.kafka.consumer import make_consumer, read_to_end, watermarks
from atomickafka.kafka.status import wait_for_nodes
from atomickafka.kafka.topics import control_topic, dead_letter_topic, input_topic
from tests.integration.harness import Sent, assert_order_checked, collect_deliveries
from tests.integration.test_faults import assert_plain_consumers_see_each_delivery_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: A short memory window (s): a client copy may be half of it (2 s) late.
WINDOW_S = 4.0
#: Longer than a record may be late.
OVER_HALF_WINDOW_S = WINDOW_S / 2 + 1.5


@contextmanager
def node_process(bootstrap: str, topic: str, log_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``atomickafka node --topic TOPIC`` (the defaults: control logs, exactly-once,
    ``direct``) with the short window; stopped (killed) on the way out."""
    log = (log_dir / f"node-{topic}-{time.monotonic_ns()}.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "atomickafka", "node", "--bootstrap-server", bootstrap,
            "--topic", topic, "--memory-window", str(WINDOW_S), "--log-level", "info",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        log.close()


def start_nodes(
    stack: ExitStack, bootstrap: str, topics: Sequence[str], log_dir: Path
) -> dict[str, subprocess.Popen[bytes]]:
    since = time.time()
    procs = {t: stack.enter_context(node_process(bootstrap, t, log_dir)) for t in topics}
    wait_for_nodes(bootstrap, topics, timeout_s=90, since=since)
    return procs


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=30)


def client(bootstrap: str, *, lane: bool = True) -> AtomicKafkaClient:
    """A client that writes to a destination whose node is stopped or paused (its
    copies wait for the node); ``lane=False``: none in the direct lane, all in the
    input logs (a client without Write on the control logs)."""
    rate = DEFAULT_DIRECT_RATE if lane else 0.0
    return AtomicKafkaClient(bootstrap, allow_offline=True, direct_rate=rate)


def send_all(ak: AtomicKafkaClient, plan: Sequence[tuple[Sequence[str], str | None]]) -> list[Sent]:
    """Send one message per (destinations, via) and wait for the broker to have each."""
    sent = []
    for index, (destinations, via) in enumerate(plan):
        value = {"n": index}
        mid = ak.send(value, destinations, via=via)
        sent.append(Sent(mid, tuple(sorted(destinations)), value, via or ""))
    ak.flush()
    return sent


def check_delivered(bootstrap: str, topics: Sequence[str], sent: Sequence[Sent]) -> None:
    """Every message at every destination, once, in one order (the checker), and plain
    ``read_committed`` consumers see each delivery once, in order."""
    expected = Counter(t for s in sent for t in s.destinations)
    deliveries = collect_deliveries(bootstrap, topics, dict(expected), "split", timeout_s=120)
    assert_order_checked(sent, deliveries)
    assert_plain_consumers_see_each_delivery_once(bootstrap, topics, expected)


def input_end(bootstrap: str, topic: str) -> int:
    """The end offset of ``topic``'s input log: with its node caught up, the next input
    offset it applies."""
    consumer = make_consumer(bootstrap)
    try:
        return watermarks(consumer, TopicPartition(input_topic(topic, "split"), 0))[1]
    finally:
        consumer.close()


def dead_letter_reasons(bootstrap: str, topic: str) -> list[str]:
    return [
        read_dead_letter(r).reason for r in read_to_end(bootstrap, dead_letter_topic(topic), [0])
    ]


def test_a_proposal_that_waited_long_for_members_is_taken_up(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """A's node is killed; a new topic C gets a node, and multicasts to A and C are
    sent: C proposes them. A's node comes back after more than half the window: its
    copies and C's proposals wait for its members record naming C (A has not heard of
    C), written only now, and are then taken up -- not refused for their wait."""
    a, c = topic_factory(), topic_factory()
    with ExitStack() as stack:
        procs = start_nodes(stack, kafka_bootstrap, [a], tmp_path)
        stop(procs[a])
        start_nodes(stack, kafka_bootstrap, [c], tmp_path)
        with client(kafka_bootstrap) as ak:
            sent = send_all(ak, [([a, c], None), ([a, c], None), ([c], None)])
        time.sleep(OVER_HALF_WINDOW_S)
        start_nodes(stack, kafka_bootstrap, [a], tmp_path)
        check_delivered(kafka_bootstrap, [a, c], sent)


def test_a_relay_copied_into_a_control_log_loses_nothing(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """Two messages for B sent through A, each relayed into B's input log while B's
    node is stopped; a plain producer copies the second relay into B's control log. B
    comes back: the copy is set aside (a relay is never written to a control log) and
    both messages are delivered."""
    a, b = topic_factory(), topic_factory()
    with ExitStack() as stack:
        procs = start_nodes(stack, kafka_bootstrap, [a, b], tmp_path)
        stop(procs[b])
        sent: list[Sent] = []
        relays: list[object] = []
        with client(kafka_bootstrap) as ak:
            for _ in range(2):
                sent += send_all(ak, [([b], a)])
                deadline = time.monotonic() + 60
                while len(relays) < len(sent) and time.monotonic() < deadline:
                    time.sleep(0.3)
                    records = read_to_end(kafka_bootstrap, input_topic(b, "split"), [0])
                    relays = [r for r in records if any(map(is_relay, read_messages(r) or []))]
        assert len(relays) == 2, "A relayed each message in a record of its own"
        copy = relays[-1]
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(control_topic(b), copy.value(), copy.key(), headers=copy.headers())  # type: ignore[attr-defined]
        assert producer.flush(30) == 0
        start_nodes(stack, kafka_bootstrap, [b], tmp_path)
        check_delivered(kafka_bootstrap, [b], sent)
        reasons = dead_letter_reasons(kafka_bootstrap, b)
        assert any("relay" in r and "control log" in r for r in reasons), reasons


def test_a_forged_apply_marker_does_not_stop_the_topic(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """An unsigned marker in A's node's name, naming a million input offsets from the
    next one on, written into A's control log by a plain producer: A sets it aside once
    its input log holds a record written after it in that range (the node ticks its
    input log when the marker has waited its lead), and every multicast is delivered."""
    a, b = topic_factory(), topic_factory()
    with ExitStack() as stack:
        start_nodes(stack, kafka_bootstrap, [a, b], tmp_path)
        with client(kafka_bootstrap) as ak:
            sent = send_all(ak, [([a, b], None)])
            check_delivered(kafka_bootstrap, [a, b], sent)
            end = input_end(kafka_bootstrap, a)
            forged = encode_marker(f"node-{a}", a, end, end + MAX_MARKER_RANGE)
            producer = Producer({"bootstrap.servers": kafka_bootstrap})
            producer.produce(control_topic(a), forged)
            assert producer.flush(30) == 0
            forged_at = time.monotonic()
            sent += send_all(ak, [([a, b], None), ([a], None), ([a, b], None)])
            check_delivered(kafka_bootstrap, [a, b], sent)
        assert time.monotonic() - forged_at >= MARKER_LEAD_MS / 1000 - 1
        reasons = dead_letter_reasons(kafka_bootstrap, a)
        assert any("apply marker" in r for r in reasons), reasons


def test_copies_sent_while_a_node_is_down_are_delivered_when_it_returns(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """A's node is stopped (no standby) for longer than half the window while clients
    send to it, alone and with B, through A's input log (and a trickle through the
    direct lane, while A's last status still says it keeps up): the copies reached A's
    logs in time, so all are delivered when A's node comes back -- none is set aside
    as late."""
    a, b = topic_factory(), topic_factory()
    with ExitStack() as stack:
        procs = start_nodes(stack, kafka_bootstrap, [a, b], tmp_path)
        stop(procs[a])
        plan: list[tuple[Sequence[str], str | None]] = [([a], None), ([a, b], None)] * 3
        sent: list[Sent] = []
        for lane in (False, True):
            with client(kafka_bootstrap, lane=lane) as ak:
                sent += send_all(ak, plan)
        time.sleep(OVER_HALF_WINDOW_S)
        start_nodes(stack, kafka_bootstrap, [a], tmp_path)
        check_delivered(kafka_bootstrap, [a, b], sent)
        late = [r for r in dead_letter_reasons(kafka_bootstrap, a) if r.startswith("late")]
        assert late == [], late
