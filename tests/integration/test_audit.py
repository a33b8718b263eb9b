"""The live audit, in-process, on the real broker (docs/DESIGN.md §10, docs/audit.md).

A clean multicast run through real nodes (one layer, and three) is audited live: no
violation, and the audit checked as many records per topic as the topic delivered. Then
records written straight into the delivery topics -- one out of order, one with another
timestamp for a known id, one missing at one destination, one duplicate, one at a topic
that is not its destination -- are each reported with their kind within 10 s, in the
audit topic and the Prometheus metrics (run with ``-s`` to see each violation's record,
as docs/audit.md quotes them).
A restarted audit resumes from its committed position without a false report.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from atomickafka.audit.config import AuditConfig
from atomickafka.audit.records import Violation
from atomickafka.audit.service import LiveAudit
from atomickafka.kafka.consumer import make_consumer, read_partitions
from atomickafka.localkafka import free_port_block
from atomickafka.node import launch
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.verify.checker import DeliveryRecord, SentMessage, check
from tests.integration.audit_support import (
    clean_run,
    delivery_value,
    wait_for,
    write_bad_records,
)
from tests.integration.harness import (
    Workload,
    assert_order_checked,
    collect_deliveries,
    send_concurrently,
)

pytestmark = pytest.mark.integration

#: Short enough that a missing message is reported within 10 s of its first delivery.
BOUND_S = 5.0


@contextmanager
def live_audit(config: AuditConfig) -> Iterator[tuple[LiveAudit, list[tuple[float, Violation]]]]:
    """The audit running in a thread; yields it and the violations with when they came."""
    found: list[tuple[float, Violation]] = []
    audit = LiveAudit(config, on_violation=lambda v: found.append((time.monotonic(), v)))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            audit.run(max_seconds=600)
        except BaseException as exc:  # surfaced below
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield audit, found
    finally:
        audit.stop()
        thread.join(60)
        assert not thread.is_alive(), "the audit did not stop"
        if failure:
            raise failure[0]


@pytest.mark.parametrize("partitions", [1, 3])
def test_live_audit_clean_run_then_each_violation_kind(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, partitions: int
) -> None:
    topics = [topic_factory("audit") for _ in range(3)]
    audit_topic = topic_factory("atomickafka-audit")
    port = free_port_block(1)
    config = AuditConfig(
        kafka_bootstrap,
        tuple(topics),
        bound_s=BOUND_S,
        group=f"audit-test-{uuid.uuid4().hex[:8]}",
        audit_topic=audit_topic,
        metrics_port=port,
        metrics_host="127.0.0.1",
        commit_interval_s=1.0,
    )
    with live_audit(config) as (audit, found):
        deliveries = clean_run(kafka_bootstrap, topics, partitions, tmp_path)
        expected = {t: len(d) for t, d in deliveries.items()}
        checked = audit.report.totals.checked
        wait_for(lambda: dict(checked) == expected, 60, f"checked {expected}, not {dict(checked)}")
        time.sleep(BOUND_S + 2)  # every message's bound passes: nothing may be missing
        assert found == [], [str(v) for _, v in found]
        assert sum(audit.report.totals.repeats.values()) == 0

        bad = write_bad_records(kafka_bootstrap, topics, f"bad{partitions}")
        wait_for(lambda: len(found) >= len(bad.expected), 10, "the five violations")
        kinds = {(v.kind.value, v.topic, v.message_id) for _, v in found}
        assert kinds == bad.expected
        assert all(at - bad.written_at <= 10 for at, _ in found)
        for _, violation in found:
            print(orjson.dumps(violation.to_json()).decode())
        wait_for(lambda: dict(audit.report.totals.repeats) == dict(bad.repeats), 10, "the repeat")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    text = metrics.decode()
    a, b, c = topics
    assert f'atomickafka_audit_checked_total{{topic="{b}"}} {expected[b] + 3}.0' in text
    assert f'atomickafka_audit_violations_total{{kind="order",topic="{a}"}} 1.0' in text
    assert f'atomickafka_audit_missing_total{{topic="{c}"}} 1.0' in text
    assert f'atomickafka_audit_repeats_total{{topic="{b}"}} 1.0' in text
    assert "atomickafka_audit_lag_seconds" in text
    # each violation is one JSON record in the audit topic
    consumer = make_consumer(kafka_bootstrap)
    try:
        records = read_partitions(consumer, audit_topic, [0])
    finally:
        consumer.close()
    written = {(r["kind"], r["topic"], r["messageID"]) for r in map(_json, records)}
    assert written == bad.expected


def _json(record: object) -> dict[str, object]:
    value = record.value()  # type: ignore[attr-defined]
    data: dict[str, object] = orjson.loads(value)
    return data


def test_a_restarted_audit_resumes_from_its_committed_position(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    """A message delivered at one destination before the restart and at the other after
    it is not missing; what was checked is not checked again; the order check goes on
    from the last key committed."""
    a, b = topics = (topic_factory("resume"), topic_factory("resume"))
    config = AuditConfig(
        kafka_bootstrap,
        topics,
        bound_s=60.0,  # longer than the restart: "split" is not missing, it is rebuilt
        group=f"audit-resume-{uuid.uuid4().hex[:8]}",
        audit_topic=None,
        commit_interval_s=0.5,
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    logs: dict[str, list[DeliveryRecord]] = {a: [], b: []}

    def deliver(topic: str, mid: str, ts: int, dests: list[str]) -> None:
        producer.produce(topic, delivery_value(topic, mid, ts, dests))
        producer.flush(30)
        logs[topic].append(DeliveryRecord(mid, tuple(sorted(dests)), ts, deliveredAt=topic))

    for i in range(5):
        deliver(a, f"m{i}", 10 + i, [a, b])
        deliver(b, f"m{i}", 10 + i, [a, b])
    deliver(a, "split", 100, [a, b])  # its delivery at b comes after the restart
    with live_audit(config) as (audit, found):
        wait_for(lambda: audit.report.totals.checked == {a: 6, b: 5}, 30, "the first reading")
    assert found == []
    deliver(b, "split", 100, [a, b])
    deliver(a, "late-low", 50, [a])  # below the last key committed at a
    with live_audit(config) as (audit, found):
        wait_for(lambda: sum(audit.report.totals.checked.values()) == 2, 30, "the new records")
        wait_for(lambda: bool(found), 10, "the order violation")
        assert audit.report.totals.checked == {a: 1, b: 1}
        assert audit.rules.open_messages == 0  # "split" was rebuilt, then completed at b
        assert audit.rules.tracked_messages == 7  # and the five m's and late-low within the bound
    assert [(v.kind.value, v.topic, v.message_id) for _, v in found] == [("order", a, "late-low")]
    sent = [SentMessage(f"m{i}", frozenset(topics)) for i in range(5)]
    sent += [SentMessage("split", frozenset(topics)), SentMessage("late-low", frozenset([a]))]
    report = check(sent, logs)  # the checker agrees: one record out of order at a
    assert {v.kind.value for v in report.violations} == {"timestamp-order"}


def test_cluster_runs_the_audit_beside_the_nodes(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """``cluster --audit``: the supervisor runs the audit as one more child; it checks
    what the nodes deliver and serves its metrics."""
    topics = (topic_factory("cluster"), topic_factory("cluster"))
    port = free_port_block(1)
    audit = AuditConfig(
        kafka_bootstrap,
        topics,
        group=f"audit-cluster-{uuid.uuid4().hex[:8]}",
        audit_topic=None,
        metrics_port=port,
        metrics_host="127.0.0.1",
        log_level="warning",
    )
    node = NodeConfig(kafka_bootstrap, topics[0], log_level="warning")
    config = ClusterConfig(topics, node, audit=audit)
    workload = Workload(list(topics), 50, clients=1, relay_share=0.0)
    with launch.running_cluster(config, log_path=tmp_path / "cluster.log"):
        sent = send_concurrently(kafka_bootstrap, workload, "split")
        expected = {t: sum(t in s.destinations for s in sent) for t in topics}
        deliveries = collect_deliveries(kafka_bootstrap, topics, expected, "split")

        def checked() -> dict[str, int]:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
            except OSError:
                return {}
            found = re.findall(
                r'^atomickafka_audit_checked_total\{topic="([^"]+)"\} (\S+)$',
                text.read().decode(),
                re.M,
            )
            return {topic: int(float(n)) for topic, n in found}

        wait_for(lambda: checked() == expected, 60, f"the audit checking {expected}")
    assert_order_checked(sent, deliveries)
    assert "violation" not in (tmp_path / "cluster.log").read_text()
