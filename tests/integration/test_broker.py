"""The local broker: a real round trip through it, and the ``atomickafka broker`` command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.localkafka import broker_status, free_port_block

from ..conftest import KafkaService

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``atomickafka <args>`` in a child process, capturing both streams."""
    return subprocess.run(
        [sys.executable, "-m", "atomickafka", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )


def local_data_dir(service: KafkaService) -> Path:
    """The data dir of a broker started by atomickafka, or skip for an external Kafka."""
    if service.data_dir is None:
        pytest.skip(f"the session Kafka comes from {service.source}, not atomickafka")
    return service.data_dir


def test_produce_and_consume_round_trip(
    create_topic: Callable[..., str],
    unique_topic: str,
    produce_values: Callable[..., None],
    consume_values: Callable[..., list[bytes]],
) -> None:
    topic = create_topic(unique_topic, partitions=3)
    values = [f"record-{i}".encode() for i in range(500)]
    produce_values(topic, values, acks="all", **{"enable.idempotence": True})
    assert sorted(consume_values(topic, len(values))) == sorted(values)


def test_status_reports_the_running_broker(kafka_service: KafkaService) -> None:
    data_dir = local_data_dir(kafka_service)
    done = run_cli("broker", "status", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    (node,) = broker_status(data_dir)
    assert f"pid {node.pid}" in done.stdout
    assert f"port {node.port}" in done.stdout
    assert "alive" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == kafka_service.bootstrap


def test_start_again_reuses_the_running_broker(kafka_service: KafkaService) -> None:
    data_dir = local_data_dir(kafka_service)
    before = [s.pid for s in broker_status(data_dir)]
    done = run_cli("broker", "start", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == kafka_service.bootstrap
    assert [s.pid for s in broker_status(data_dir)] == before


def test_status_without_broker_exits_nonzero(tmp_path: Path) -> None:
    done = run_cli("broker", "status", "--data-dir", str(tmp_path))
    assert done.returncode != 0
    assert "no broker" in done.stdout


def test_taken_port_is_reported_without_traceback(tmp_path: Path) -> None:
    base = free_port_block(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base))
        squatter.listen()
        done = run_cli("broker", "start", "--data-dir", str(tmp_path), "--port", str(base))
    assert done.returncode == 2
    assert f"port(s) {base} on 127.0.0.1 already in use" in done.stderr
    assert "Traceback" not in done.stderr
    assert broker_status(tmp_path) == []


def test_missing_java_is_reported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv: python, no java
    port = str(free_port_block(2))
    done = run_cli("broker", "start", "--data-dir", str(tmp_path), "--port", port, env=env)
    assert done.returncode == 2
    assert "Java not found" in done.stderr
    assert "Traceback" not in done.stderr
