"""The audit's PySpark job on the real broker (docs/DESIGN.md §10.6).

``atomickafka audit --spark`` (local mode, in its own process) audits two clean
multicast runs through real nodes (one layer, and three): no violation, and as many
records checked per topic as the topic delivered. Records written straight into the
delivery topics -- one out of order, one with another timestamp for a known id, one
missing at one destination, one duplicate, one at a topic that is not its destination
-- are each reported with their kind in the trigger that reads them; ``missing`` in the
first trigger after its bound passed, with no record written after it (Spark's
no-data micro-batches, driven by processing-time timeouts). The in-process audit, run on
the same topics, finds exactly the same. And the job's own parser reads what
``atomickafka.core.wire`` writes as ``core/reader`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from atomickafka.audit import spark_job
from atomickafka.audit.records import audited_delivery
from atomickafka.audit.service import audit_once
from atomickafka.core.reader import DELIVERY_LEAD_US, PlainRecord
from atomickafka.core.wire import Message, MessageType, encode_delivery, value_digest
from atomickafka.evaluation.suite.spark import session
from tests.integration.audit_support import (
    clean_run,
    delivery_value,
    wait_for,
    write_bad_records,
)

pytestmark = pytest.mark.integration

BOUND_S = 5.0
TRIGGER_S = 2.0


def _table(folder: Path) -> list[dict[str, Any]]:
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return []
    rows: list[dict[str, Any]] = pq.read_table(folder).to_pylist()
    return rows


def _counts(out: Path, outcome: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for row in _table(out / "counts"):
        if row["outcome"] == outcome:
            found[row["topic"]] = found.get(row["topic"], 0) + row["count"]
    return found


def _identities(rows: list[dict[str, Any]]) -> set[tuple[str, str, str, int | None]]:
    return {(r["outcome"], r["topic"], r["message_id"], r["offset"]) for r in rows}


def _batch_times(checkpoint: Path) -> dict[int, int]:
    """Each trigger's processing time (ms), from the offset log of Spark's checkpoint."""
    times = {}
    for entry in (checkpoint / "offsets").iterdir():
        if entry.name.isdigit():
            metadata = json.loads(entry.read_text().splitlines()[1])
            times[int(entry.name)] = int(metadata["batchTimestampMs"])
    return times


def _expiry_ms(first_ms: int) -> int:
    """When event time makes a message first delivered at ``first_ms`` expire: the end
    of that second plus the bound (docs/DESIGN.md §10.3)."""
    return (first_ms // spark_job.BUCKET_MS + 1) * spark_job.BUCKET_MS + int(BOUND_S * 1000)


@pytest.fixture
def spark_audit(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[[list[str], str], Path]]:
    """Start ``atomickafka audit --spark`` on some topics; return its output folder."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(topics: list[str], audit_topic: str) -> Path:
        out = tmp_path / "spark-out"
        log = (tmp_path / "spark.log").open("wb")
        argv = [sys.executable, "-m", "atomickafka", "audit", "--spark"]
        argv += ["--bootstrap-server", kafka_bootstrap, "--topics", ",".join(topics)]
        argv += ["--bound", str(BOUND_S), "--trigger-seconds", str(TRIGGER_S)]
        argv += ["--out", str(out), "--checkpoint", str(tmp_path / "spark-checkpoint")]
        argv += ["--audit-topic", audit_topic, "--max-seconds", "900"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        return out

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def test_spark_audit_equals_the_in_process_audit(
    kafka_bootstrap: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    spark_audit: Callable[[list[str], str], Path],
) -> None:
    one = [topic_factory("spark1") for _ in range(3)]
    three = [topic_factory("spark3") for _ in range(3)]
    deliveries = clean_run(kafka_bootstrap, one, 1, tmp_path)
    deliveries.update(clean_run(kafka_bootstrap, three, 3, tmp_path))
    topics = one + three
    expected = {t: len(d) for t, d in deliveries.items()}

    out = spark_audit(topics, topic_factory("atomickafka-audit"))
    wait_for(lambda: _counts(out, "checked") == expected, 300, f"Spark checking {expected}")
    assert _table(out / "violations") == []

    bad = write_bad_records(kafka_bootstrap, one, "bad1")
    bad3 = write_bad_records(kafka_bootstrap, three, "bad3")
    wanted = bad.expected | bad3.expected  # nothing is written after these
    wait_for(
        lambda: {r[:3] for r in _identities(_table(out / "violations"))} >= wanted,
        120,
        "the Spark job's violations",
        step_s=1.0,
    )
    violations = _table(out / "violations")
    assert {r[:3] for r in _identities(violations)} == wanted
    counts = _table(out / "counts")
    read_in = {(r["batch"], r["topic"]) for r in counts if r["outcome"] == "checked"}
    batch_ms = _batch_times(out.parent / "spark-checkpoint")
    slack = spark_job.IDLE_SLACK_MS
    first_ms = {"bad1-missing": bad.missing_first_ms, "bad3-missing": bad3.missing_first_ms}
    for row in violations:
        if row["outcome"] == "missing":  # the first trigger after its bound passed
            expiry, batch = _expiry_ms(first_ms[row["message_id"]]), row["batch"]
            assert batch_ms[batch - 1] - slack <= expiry <= batch_ms[batch] - slack, row
        else:  # the trigger that read the record
            assert (row["batch"], row["topic"]) in read_in, row
    assert _counts(out, "repeat") == {one[1]: 1, three[1]: 1}

    # the in-process audit on the same input finds the same
    report = audit_once(kafka_bootstrap, topics, bound_s=BOUND_S)
    assert {v.identity for v in report.violations} == _identities(violations)
    assert dict(report.totals.checked) == _counts(out, "checked")
    assert dict(report.totals.repeats) == _counts(out, "repeat")


#: A timestamp no node can have reached by the time of record 9 (``DELIVERY_LEAD_US``).
_AHEAD = (1_700_000_000_000 + 9) * 1000 + DELIVERY_LEAD_US + 1


def _record(topic: str, offset: int, value: bytes) -> PlainRecord:
    return PlainRecord(value, topic=topic, offset=offset, timestamp_ms=1_700_000_000_000 + offset)


def test_the_jobs_parser_reads_deliveries_as_the_reader_does() -> None:
    """Records as ``encode_delivery`` writes them (one layer and layered, with and without
    a send time, a JSON null value), and records that are not the topic's deliveries."""
    value = b'{"order":42,"items":[1,2]}'
    base = Message(
        messageID="c3f9a-17",
        messageType=MessageType.DELIVERY,
        topic=("payments", "audit"),
        value=value,
        senderID="node-audit",
        sentFromTopic="audit",
        timeStamp=1043,
        digest=value_digest(value),
        protocol="direct",
    )
    records = [
        _record("audit", 0, encode_delivery(base)),
        _record("audit", 1, encode_delivery(base._replace(partitionID=2, timeStamp=1044))),
        _record(
            "audit",
            2,
            encode_delivery(base._replace(messageID="x", sentAt=5, digest=value_digest(value, 5))),
        ),
        _record(
            "audit", 3, encode_delivery(base._replace(value=b"null", digest=value_digest(b"null")))
        ),
        _record("audit", 4, delivery_value("audit", "y", 7, ["audit", "audit", "b"])),
        _record("other", 5, encode_delivery(base)),  # written by another topic's node
        _record("audit", 6, b'{"messageType":"ClientMessage","messageID":"z"}'),
        _record("audit", 7, b"not json"),
        # not what audit's node can have written (issue 26): another writer's id, and a
        # timestamp ahead of every clock at the record's time
        _record("audit", 8, encode_delivery(base._replace(messageID="f", senderID="someone"))),
        _record("audit", 9, encode_delivery(base._replace(messageID="g", timeStamp=_AHEAD))),
    ]
    rows = [(r.topic(), r.partition(), r.offset(), r.timestamp()[1], r.value()) for r in records]
    # with the Kafka connector, as every session of the test process: a session started
    # without it first leaves a later one (test_sasl's) unable to find the kafka source
    spark = session("local[1]", kafka_source=True, app_name="atomickafka-audit-contract")
    try:
        raw = spark.createDataFrame(
            rows, "topic string, partition int, offset long, ms long, value binary"
        ).selectExpr("topic", "partition", "offset", "timestamp_millis(ms) AS timestamp", "value")
        parsed = {row["offset"]: row for row in spark_job.parse_deliveries(raw).collect()}
    finally:
        spark.stop()
    for record in records:
        expected = audited_delivery(record)
        row = parsed[record.offset()]
        if expected is None:
            assert not row["is_delivery"], record
            continue
        assert row["is_delivery"], record
        got = (
            row["topic"],
            row["partition"],
            row["offset"],
            row["time_ms"],
            row["message_id"],
            row["ts"],
            row["layer"],
            row["digest"],
            tuple(row["dests"]),
        )
        assert got == (
            expected.topic,
            expected.partition,
            expected.offset,
            expected.time_ms,
            expected.message_id,
            expected.timestamp,
            expected.layer,
            expected.digest,
            expected.destinations,
        ), record
