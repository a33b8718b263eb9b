"""The exactly-once baselines are what they claim (issue 36): each one's fan-out process
is SIGKILLed mid-run and started again, and plain ``read_committed`` consumers of the
destinations then hold every message once, in one order (the order checker on every
record they read, nothing de-duplicated).

One JVM per start of the Kafka Streams application (two here: before and after the
kill); small message counts.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from atomickafka.core.wire import decode_record
from atomickafka.evaluation.load.baselines import Baseline, start_baseline
from atomickafka.evaluation.load.sequencer import SequencerSender
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.connection import Connection
from atomickafka.verify.checker import check, deliveries_from_wire, sent_from_pairs

pytestmark = pytest.mark.integration

MESSAGES = 1500
RATE = 500.0  # msg/s: the sends span the kill and the restart


def _send_paced(
    sender: SequencerSender, plan: Sequence[tuple[tuple[str, ...], Any]], sent: list[str]
) -> None:
    start = time.monotonic()
    for i, (dests, value) in enumerate(plan):
        delay = start + i / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent.append(sender.send(value, dests))
    sender.flush(60)


def _read_committed(bootstrap: str, topics: Sequence[str]) -> Consumer:
    """A plain ``read_committed`` consumer of partition 0 of ``topics``, from the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kill-test-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, 0, 0) for t in topics])
    return consumer


class _Tally:
    """Every record a ``read_committed`` consumer reads, by topic, as it comes."""

    def __init__(self, bootstrap: str, topics: Sequence[str]) -> None:
        self.consumer = _read_committed(bootstrap, topics)
        self.records: dict[str, list[Any]] = {t: [] for t in topics}

    def poll(self) -> None:
        for msg in self.consumer.consume(1000, 0.1):
            assert msg.error() is None, f"consume error: {msg.error()}"
            self.records[msg.topic() or ""].append(msg)

    def wait_until(self, counts: Mapping[str, int], what: str, timeout_s: float) -> None:
        """Read until every topic holds at least its count (then a little longer, so
        that a record written twice would be read too)."""
        deadline = time.monotonic() + timeout_s
        while any(len(self.records[t]) < n for t, n in counts.items()):
            assert time.monotonic() < deadline, f"{what} not within {timeout_s:.0f} s"
            self.poll()


@pytest.mark.parametrize("baseline", [Baseline.SEQ_EOS, Baseline.STREAMS], ids=str)
def test_killed_mid_run_it_delivers_every_message_once_in_order(
    baseline: Baseline, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    topics = [f"kill-{baseline}-{run}-t{i}" for i in range(1, 4)]
    sequencer = f"kill-{baseline}-{run}-seq"
    where = Connection(kafka_bootstrap)
    ensure_topics(admin_client(where), [sequencer, *topics])
    rng = random.Random(36)
    plan = [
        (tuple(sorted(rng.sample(topics, rng.randint(1, 3)))), {"i": i, "pad": "x" * 100})
        for i in range(MESSAGES)
    ]
    sent: list[str] = []
    expected = {t: sum(t in dests for dests, _ in plan) for t in topics}
    tally = _Tally(kafka_bootstrap, topics)
    process = start_baseline(baseline, where, sequencer, tmp_path)
    restarted = None
    sender = SequencerSender(where, sequencer, "kill-test")
    thread = threading.Thread(target=_send_paced, args=(sender, plan, sent))
    thread.start()
    try:
        # mid-run: some transactions committed, the sender still writing
        tally.wait_until({topics[0]: 20}, "the first deliveries", 60.0)
        assert thread.is_alive(), "the sends ended before the kill: raise MESSAGES"
        process.kill()
        restarted = start_baseline(baseline, where, sequencer, tmp_path)
        thread.join(120)
        assert not thread.is_alive() and len(sent) == MESSAGES
        tally.wait_until(expected, "every delivery", 120.0)  # the restarted one catches up
        restarted.stop()  # it commits what is open and ends: nothing more is written
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            tally.poll()
    finally:
        sender.close()
        process.kill()
        if restarted is not None:
            restarted.kill()
        tally.consumer.close()
    logs = {
        t: [m for r in records for m in decode_record(r.value())]
        for t, records in tally.records.items()
    }
    pairs = {mid: (dests, value) for mid, (dests, value) in zip(sent, plan, strict=True)}
    report = check(sent_from_pairs(pairs), deliveries_from_wire(logs))
    assert report.ok, report.summary()  # no loss, no repeat, one order
    assert {t: len(logs[t]) for t in topics} == expected
