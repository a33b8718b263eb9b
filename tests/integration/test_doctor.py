"""``doctor`` and ``topics`` against real brokers: a correct deployment passes (exit 0),
a deliberately unsafe setting is reported with its fix (exit 1)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from atomickafka.kafka.topics import input_topic
from atomickafka.localkafka import ensure_broker, free_port_block, stop_broker
from tests.integration.harness import run_cli, running_cluster

pytestmark = pytest.mark.integration


def set_topic_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def doctor(bootstrap: str, topic: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = run_cli("doctor", "--bootstrap-server", bootstrap, "--topics", topic, "--json")
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

        fixed = run_cli(
            "topics", "create", "--bootstrap-server", kafka_bootstrap, "--topics", topic
        )
        assert fixed.returncode == 0 and f"{log}: exists, settings aligned" in fixed.stdout
        out, report = doctor(kafka_bootstrap, topic)
        assert out.returncode == 0, failures(report)


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
    assert entry | {"records": 0} == {
        "topic": log, "kind": "input log", "serves": topic, "exists": True, "partitions": 1,
        "replicationFactor": 1, "minInsyncReplicas": "1", "inSync": 1,
        "retentionMs": "3600000", "retentionBytes": "-1", "timestampType": "LogAppendTime",
        "cleanupPolicy": "delete", "maxMessageBytes": entry["maxMessageBytes"], "records": 0,
    }  # fmt: skip
    missing = run_cli(*args, f"{topic}-nosuch", "--json")
    assert missing.returncode == 0, missing.stderr
    absent = [orjson.loads(line) for line in missing.stdout.splitlines()]
    nosuch = [e for e in absent if e["serves"] == f"{topic}-nosuch"]
    assert nosuch and all(not e["exists"] and e["retentionMs"] is None for e in nosuch)
    assert "(does not exist)" in run_cli(*args, f"{topic}-nosuch").stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_doctor_on_three_brokers_fails_min_insync_replicas_of_one(
    tmp_path: Path, topic_factory: Callable[[], str]
) -> None:
    data_dir = tmp_path / "cluster"
    topic = topic_factory()
    try:
        bootstrap = ensure_broker(3, data_dir, port=free_port_block(6), timeout=180)
        created = run_cli("topics", "create", "--bootstrap-server", bootstrap, "--topics", topic)
        assert created.returncode == 0, created.stdout + created.stderr
        with running_cluster(bootstrap, [topic], log_dir=tmp_path):
            out, report = doctor(bootstrap, topic)
            assert out.returncode == 0, failures(report)
            assert {"code": "brokers", "severity": "ok", "subject": "brokers",
                    "message": "3 brokers", "fix": ""} in report["findings"]  # fmt: skip

            set_topic_config(bootstrap, topic, "min.insync.replicas", "1")
            out, report = doctor(bootstrap, topic)
            assert out.returncode == 1
            (finding,) = failures(report)
            assert finding["code"] == "min-insync-replicas" and finding["subject"] == topic
            assert "acknowledged by one broker" in finding["message"]
            assert finding["fix"].endswith(
                f"--entity-name {topic} --add-config min.insync.replicas=2"
            )
    finally:
        stop_broker(data_dir)
