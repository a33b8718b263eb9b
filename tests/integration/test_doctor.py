"""``doctor`` and ``topics`` against real brokers: a correct deployment passes (exit 0),
a deliberately unsafe setting is reported with its fix (exit 1); a log cut below every
snapshot fails doctor and a node refuses to start on it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from atomickafka.kafka.admin import await_configs
from atomickafka.kafka.topics import dead_letter_topic, input_topic
from tests.integration.harness import run_cli, running_cluster

pytestmark = pytest.mark.integration


def set_topic_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    """Set ``key`` of ``topic``, and wait until every broker shows it: a describe
    served by a broker that has not applied it yet would still read the old value."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    await_configs(admin, {topic: {key: value}})


def doctor(
    bootstrap: str, topic: str, *options: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = run_cli("doctor", "--bootstrap-server", bootstrap, "--topics", topic, "--json", *options)
    assert out.stderr == "", out.stderr
    return out, orjson.loads(out.stdout)


def failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["severity"] == "fail"]


def test_doctor_passes_a_correct_deployment_and_fails_a_short_input_retention(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    topic = topic_factory()
    log = input_topic(topic, "split")
    created = run_cli("topics", "create", "--bootstrap-server", kafka_bootstrap, "--topics", topic)
    assert created.returncode == 0, created.stdout + created.stderr
    assert f"{log}: created" in created.stdout
    with running_cluster(kafka_bootstrap, [topic], log_dir=tmp_path):
        out, report = doctor(kafka_bootstrap, topic)
        assert out.returncode == 0, failures(report)
        assert report["ok"] is True and report["topics"] == [topic]
        checked = {(f["code"], f["subject"]) for f in report["findings"]}
        assert {("transactions", kafka_bootstrap), ("node", topic), ("topic-settings", log)} <= (
            checked
        )

        set_topic_config(kafka_bootstrap, log, "retention.ms", "3600000")  # one hour
        out, report = doctor(kafka_bootstrap, topic)
        assert out.returncode == 1
        (finding,) = failures(report)
        assert finding["code"] == "retention" and finding["subject"] == log
        assert "retention.ms=3600000 (1 h)" in finding["message"]
        assert (
            f"--entity-name {log} --add-config retention.ms=-1,retention.bytes=-1"
            in (finding["fix"])
        )
        text = run_cli("topics", "check", "--bootstrap-server", kafka_bootstrap, "--topics", topic)
        assert text.returncode == 1
        assert f"FAIL  retention                {log}:" in text.stdout
        assert "fix: kafka-configs.sh" in text.stdout
        describe_shows_the_settings(kafka_bootstrap, topic, log)

        records_are_counted_not_offsets(kafka_bootstrap, topic)
        set_topic_config(kafka_bootstrap, log, "retention.ms", str(2 * 86_400_000))  # 2 days
        out, report = doctor(kafka_bootstrap, topic)
        assert out.returncode == 0, failures(report)  # twice 30 s plus a day's downtime

        fixed = run_cli(
            "topics", "create", "--bootstrap-server", kafka_bootstrap, "--topics", topic
        )
        assert fixed.returncode == 0 and f"{log}: exists, settings aligned" in fixed.stdout
        out, report = doctor(kafka_bootstrap, topic)
        assert out.returncode == 0, failures(report)


def records_are_counted_not_offsets(bootstrap: str, topic: str) -> None:
    """Issue 26, item 9: four dead letters written in four transactions span eight
    offsets (each commit marker takes one); ``doctor`` says four were set aside and
    ``topics describe`` counts four records, the offsets apart."""
    dlq = dead_letter_topic(topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"dlq-{topic}"})
    producer.init_transactions(30)
    for i in range(4):
        producer.begin_transaction()
        producer.produce(dlq, f"letter {i}".encode(), headers={"atomickafka-error": b"test"})
        producer.commit_transaction(30)
    _, report = doctor(bootstrap, topic)
    (letters,) = [f for f in report["findings"] if f["code"] == "dead-letters"]
    assert letters["message"].startswith("4 records set aside"), letters
    args = ("topics", "describe", "--bootstrap-server", bootstrap, "--topics", topic)
    rows = {e["topic"]: e for e in map(orjson.loads, run_cli(*args, "--json").stdout.splitlines())}
    assert (rows[dlq]["records"], rows[dlq]["offsets"]) == (4, 8)
    (row,) = [r for r in run_cli(*args).stdout.splitlines() if r.startswith(f"{dlq} ")]
    assert row.split()[-1] == "4", row
    # the fix doctor names, as an operator runs it, with no Kafka download (item 13)
    command = letters["fix"].removeprefix("read them: atomickafka ").split(" (", 1)[0]
    read = run_cli(*command.split(), "--max-messages", "4", "--timeout-ms", "30000", timeout=600)
    assert read.returncode == 0, read.stderr[-2000:]
    assert read.stdout.splitlines() == [f"atomickafka-error:test\tletter {i}" for i in range(4)]


def describe_shows_the_settings(bootstrap: str, topic: str, log: str) -> None:
    """``topics describe``, as a table and ``--json``: the input log's one-hour retention
    and the other settings, one object per Kafka topic; a missing topic said so."""
    args = ("topics", "describe", "--bootstrap-server", bootstrap, "--topics")
    text = run_cli(*args, topic)
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()
    assert header.split() == ["TOPIC", "KIND", "PARTS", "RF", "MIN-ISR", "ISR", "RETENTION-MS",
                              "TIMESTAMPS", "CLEANUP", "RECORDS"]  # fmt: skip
    (row,) = [r for r in rows if r.startswith(f"{log} ")]
    assert row.split()[-4:-1] == ["3600000", "LogAppendTime", "delete"], row
    shown = run_cli(*args, topic, "--json")
    assert shown.returncode == 0, shown.stderr
    by_topic = {e["topic"]: e for e in map(orjson.loads, shown.stdout.splitlines())}
    assert len(by_topic) == len(rows)
    assert {e["kind"] for e in by_topic.values()} >= {"input log", "deliveries", "statuses"}
    entry = by_topic[log]
    assert entry | {"records": 0, "offsets": 0} == {
        "topic": log, "kind": "input log", "serves": topic, "exists": True, "partitions": 1,
        "replicationFactor": 1, "minInsyncReplicas": "1", "inSync": 1,
        "retentionMs": "3600000", "retentionBytes": "-1", "timestampType": "LogAppendTime",
        "cleanupPolicy": "delete", "maxMessageBytes": entry["maxMessageBytes"], "records": 0,
        "offsets": 0,
    }  # fmt: skip
    missing = run_cli(*args, f"{topic}-nosuch", "--json")
    assert missing.returncode == 0, missing.stderr
    absent = [orjson.loads(line) for line in missing.stdout.splitlines()]
    nosuch = [e for e in absent if e["serves"] == f"{topic}-nosuch"]
    assert nosuch and all(not e["exists"] and e["retentionMs"] is None for e in nosuch)
    assert "(does not exist)" in run_cli(*args, f"{topic}-nosuch").stdout


@pytest.mark.timeout(300)
def test_a_log_cut_below_every_snapshot_fails_doctor_and_the_node_refuses_to_start(
    kafka_bootstrap: str, topic_factory: Callable[[], str]
) -> None:
    """DESIGN §6.5: records deleted from an input log that no snapshot covers: doctor
    fails ``truncated-log`` with the fix, and the node says why in one line and exits
    with status 2 instead of starting from a state it cannot rebuild."""
    topic = topic_factory()
    log = input_topic(topic, "split")
    created = run_cli("topics", "create", "--bootstrap-server", kafka_bootstrap, "--topics", topic)
    assert created.returncode == 0, created.stdout + created.stderr
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(log, b"{}", partition=0, key=str(i))
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(log, 0, 3)]).values():
        future.result(timeout=30)

    out, report = doctor(kafka_bootstrap, topic, "--no-transactions")
    assert out.returncode == 1
    cut = [f for f in failures(report) if f["code"] == "truncated-log"]
    assert [f["subject"] for f in cut] == [log] and "Recover" in cut[0]["fix"]

    node = run_cli(
        "node", "--bootstrap-server", kafka_bootstrap, "--topic", topic, "--max-seconds", "60"
    )
    assert node.returncode == 2, node.stderr[-2000:]
    last = orjson.loads(node.stderr.strip().splitlines()[-1])["msg"]  # a JSON log's last line
    assert last.startswith("atomickafka node: input log ") and "starts at offset 3" in last
    assert "cannot be rebuilt" in last
