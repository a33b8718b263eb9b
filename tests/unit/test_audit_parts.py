"""The live audit's parts around the rules, without Kafka: event time, the committed
position, the configuration, the records it reads, the counts it reports, and the Spark
job's file (it must run alone)."""

from __future__ import annotations

import sys

import pytest
from prometheus_client import generate_latest

from atomickafka.audit.clock import EventClock
from atomickafka.audit.config import AUDIT_TOPIC, AuditConfig
from atomickafka.audit.metrics import AuditMetrics, AuditTotals
from atomickafka.audit.position import decode_metadata, encode_metadata, replay_from_ms
from atomickafka.audit.records import (
    AuditedDelivery,
    Kind,
    Violation,
    audit_verdict,
    audited_delivery,
)
from atomickafka.audit.service import AuditReport, LiveAudit
from atomickafka.cli.audit_cmd import spark_job_path
from atomickafka.core.reader import (
    DELIVERY_LEAD_US,
    TYPE_HEADER,
    PlainRecord,
    Unaccepted,
    delivery_writers,
)
from atomickafka.core.signing import Signer
from atomickafka.core.wire import Message, MessageType, encode_delivery, value_digest
from atomickafka.errors import ConfigError
from atomickafka.node.config import ClusterConfig, NodeConfig
from tests.unit.test_eval_job import SPARK_RAW, imported_modules


def test_event_time_waits_for_the_partition_furthest_behind() -> None:
    clock = EventClock(["A", "B"])
    clock.record("A", 50_000)  # A's backlog is read far ahead of B's
    assert clock.now(0.0) == 0  # B has not been read at all yet
    clock.record("B", 1_000)
    assert clock.now(0.0) == 1_000
    clock.at_end("A", True, 0.0)
    clock.record("B", 2_000)
    assert clock.now(0.0) == 2_000  # A is read to its end: only B holds time back
    clock.at_end("B", True, 10.0)
    assert clock.now(10.0) == 50_000  # everything read: the newest record
    assert clock.now(13.5) == 53_500  # and time moves on while nothing arrives
    clock.at_end("B", False, 14.0)  # B gets a record again
    clock.record("B", 3_000)
    assert clock.now(20.0) == 3_000  # (the rules' own clock never goes back)
    assert clock.newest_record_ms == 50_000


def test_the_committed_metadata_round_trips_and_tolerates_strangers() -> None:
    text = encode_metadata((1043, 2, "m-7"), 1_700_000_000_123)
    state = decode_metadata(41, text)
    assert (state.offset, state.last_key, state.clock_ms) == (
        41,
        (1043, 2, "m-7"),
        1_700_000_000_123,
    )
    assert decode_metadata(5, encode_metadata(None, 9)).last_key is None
    for foreign in (None, "", "not json", '{"v": 99}', '{"v": 1, "lastKey": [1, "x", 2]}'):
        state = decode_metadata(7, foreign)
        assert state.offset == 7 and state.last_key is None
    assert replay_from_ms(100_000, 10_000) == 100_000 - 20_000 - 1_000
    assert replay_from_ms(5, 10_000) == 0


def test_the_configuration_round_trips_inside_the_clusters() -> None:
    audit = AuditConfig("b:9092", ("A", "B", "A"), bound_s=7, overrides={"x": "y"})
    assert audit.topics == ("A", "B")
    assert AuditConfig.from_dict(audit.to_dict()) == audit
    cluster = ClusterConfig(("A", "B"), NodeConfig("b:9092", "A"), audit=audit)
    assert ClusterConfig.from_dict(cluster.to_dict()) == cluster
    plain = ClusterConfig(("A",), NodeConfig("b:9092", "A"))
    assert ClusterConfig.from_dict(plain.to_dict()).audit is None
    with pytest.raises(ConfigError, match="topic"):
        AuditConfig("b:9092", ())
    with pytest.raises(ConfigError, match="positive"):
        AuditConfig("b:9092", ("A",), bound_s=0)
    with pytest.raises(ConfigError, match="cannot write"):
        AuditConfig("b:9092", ("A",), audit_topic="A")
    with pytest.raises(ConfigError, match="unknown"):
        AuditConfig.from_dict({**audit.to_dict(), "colour": "red"})


def _delivery(topic: str, sent_from: str, stamp: int = 12) -> bytes:
    value = b'{"x":1}'
    return encode_delivery(
        Message(
            "m-1",
            MessageType.PARTITION_DELIVERY if topic.startswith("layers") else MessageType.DELIVERY,
            ("A", "B"),
            value,
            "node-A",
            sent_from,
            stamp,
            1,
            value_digest(value),
            "direct",
        )
    )


def test_the_audit_reads_a_topics_own_deliveries_through_the_reader() -> None:
    record = PlainRecord(_delivery("A", "A"), topic="A", partition=0, offset=3, timestamp_ms=99)
    delivery = audited_delivery(record)
    assert delivery is not None
    assert delivery.key == (12, 1, "m-1")
    assert (delivery.offset, delivery.time_ms, delivery.destinations) == (3, 99, ("A", "B"))
    assert delivery.digest == value_digest(b'{"x":1}')
    assert audited_delivery(PlainRecord(_delivery("A", "B"), topic="A")) is None  # B's node
    assert audit_verdict(PlainRecord(_delivery("A", "B"), topic="A")) is Unaccepted.SKIPPED
    ahead = PlainRecord(_delivery("A", "A"), topic="A", timestamp_ms=0)
    assert isinstance(audit_verdict(ahead), AuditedDelivery)  # a record at time 0: not judged
    far = PlainRecord(_delivery("A", "A", stamp=DELIVERY_LEAD_US + 2_000), topic="A",
                      timestamp_ms=1)  # fmt: skip
    assert audit_verdict(far) is Unaccepted.FOREIGN
    signer = Signer([b"0123456789abcdef0123456789abcdef"])
    assert audit_verdict(record, signer) is Unaccepted.FORGED
    control = PlainRecord(b"{}", topic="A", headers=[(TYPE_HEADER, b"Bundle")])
    assert audited_delivery(control) is None
    assert audited_delivery(PlainRecord(b"garbage", topic="A")) is None


def test_counts_and_metrics() -> None:
    totals = AuditTotals()
    totals.checked["A"] += 3
    totals.repeats["A"] += 1
    violation = Violation(Kind.MISSING, "B", "m-1", "'m-1' missing at B after 10 s")
    totals.count(violation)
    metrics = AuditMetrics()
    metrics.prepare(("A", "B"))
    metrics.add(totals)
    text = generate_latest(metrics.registry).decode()
    assert 'atomickafka_audit_checked_total{topic="A"} 3.0' in text
    assert 'atomickafka_audit_checked_total{topic="B"} 0.0' in text
    assert 'atomickafka_audit_violations_total{kind="missing",topic="B"} 1.0' in text
    assert 'atomickafka_audit_missing_total{topic="B"} 1.0' in text
    assert 'atomickafka_audit_lag_seconds{topic="A"} 0.0' in text
    report = AuditReport(totals, [violation])
    assert (
        report.summary()
        == "audit FAILED: 1 missing (3 deliveries checked, 1 exact repeats dropped)"
    )
    assert AuditReport().summary() == "audit passed: 0 deliveries checked"
    assert totals.to_json()["violations"] == {"missing": 1}


def test_an_audit_keeps_its_first_violations_and_counts_them_all() -> None:
    """The evaluation's audit keeps a few violations (the bare pipe's order findings
    run into the thousands); what it counts is complete."""
    audit = LiveAudit(AuditConfig("127.0.0.1:9", ("A",), audit_topic=None), keep_violations=2)
    for n in range(5):
        audit._record_violation(Violation(Kind.ORDER, "A", f"m-{n}", "out of order"))
    assert [v.message_id for v in audit.report.violations] == ["m-0", "m-1"]
    assert len(LiveAudit(AuditConfig("127.0.0.1:9", ("A",))).report.violations) == 0


def test_the_spark_job_file_runs_alone() -> None:
    """``spark-submit`` runs the packaged file as it is: pyspark, pandas (which its
    stateful operators need) and the standard library, nothing of ours but the raw-form
    reader (shipped beside it with ``--py-files`` where the package is not installed)."""
    path = spark_job_path()
    assert path.name == "spark_job.py"
    imported = {name.split(".")[0] for name in imported_modules(path) - SPARK_RAW}
    allowed = {"pyspark", "pandas", "__future__"} | set(sys.stdlib_module_names)
    assert imported <= allowed, imported - allowed


def test_the_spark_job_names_the_same_kinds_and_settings() -> None:
    from atomickafka.audit import rules, spark_job  # noqa: PLC0415

    assert set(spark_job.KINDS) == {k.value for k in Kind}
    assert spark_job.DEFAULT_BOUND_S == rules.DEFAULT_BOUND_S
    assert spark_job.FORGET_FACTOR == rules.FORGET_FACTOR
    assert spark_job.BUCKET_MS == rules.BUCKET_MS
    assert spark_job.AUDIT_TOPIC == AUDIT_TOPIC
    assert (
        MessageType.DELIVERY.value,
        MessageType.PARTITION_DELIVERY.value,
    ) == spark_job.DELIVERY_TYPES
    assert spark_job.DELIVERY_LEAD_US == DELIVERY_LEAD_US
    writers = {f"{prefix}T" for prefix in spark_job.WRITER_PREFIXES}
    assert writers == delivery_writers("T")


def test_the_audit_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from atomickafka.cli import main  # noqa: PLC0415

    assert main(["audit", "--print-job"]) == 0
    assert capsys.readouterr().out.strip() == str(spark_job_path())
    assert main(["audit", "--topics", "A"]) == 2
    assert "--bootstrap-server and --topics are required" in capsys.readouterr().err
    assert main(["audit", "--bootstrap-server", "b:1", "--topics", "A", "--spark"]) == 2
    assert "--spark needs --out DIR and --checkpoint DIR" in capsys.readouterr().err
    assert main(["audit", "--bootstrap-server", "b:1", "--topics", "bad name!"]) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["cluster", "--help"])
    assert "--audit-bound" in capsys.readouterr().out
