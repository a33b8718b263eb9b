"""A SASL-authenticated broker, end to end through a configuration file: topics,
cluster, send, tail, status, doctor, eval and the Spark job, with the password never
shown; a wrong password or none is one line."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from atomickafka.cli import main
from atomickafka.evaluation.suite.results import RunInfo
from atomickafka.evaluation.suite.spark import load_job, session
from atomickafka.verify.checker import deliveries_from_json
from tests.conftest import SaslKafka
from tests.integration.harness import Sent, assert_records_checked

pytestmark = pytest.mark.integration

PASSWORD = "alice-secret"


def write_config(tmp_path: Path, sasl: SaslKafka, topics: list[str]) -> Path:
    """An operator's configuration file: the password in a file of its own."""
    secret = tmp_path / "kafka-password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    config = tmp_path / "atomickafka.toml"
    config.write_text(
        f'bootstrap_server = "{sasl.bootstrap}"\n'
        "\n[kafka]\n"
        'security.protocol = "SASL_PLAINTEXT"\n'
        'sasl.mechanism = "PLAIN"\n'
        'sasl.username = "alice"\n'
        f'sasl.password.file = "{secret}"\n'
        "\n[cluster]\n"
        f"topics = {json.dumps(topics)}\n"
        'log_level = "info"\n'
    )
    return config


def environment() -> dict[str, str]:
    """This process's environment without the settings of the session's own Kafka
    (``KAFKA_BOOTSTRAP_SERVERS`` would win over the configuration file)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k != "KAFKA_BOOTSTRAP_SERVERS" and not k.startswith("ATOMICKAFKA_X_")
    }


def ak(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``atomickafka ARGS`` with :func:`environment`; the password must not show."""
    out = subprocess.run(
        [sys.executable, "-m", "atomickafka", *args],
        input=stdin, capture_output=True, text=True, timeout=300, check=False, env=environment(),
    )  # fmt: skip
    assert PASSWORD not in out.stdout + out.stderr, "the password was shown"
    return out


def test_cluster_send_tail_status_doctor_through_a_config_file(
    sasl_kafka: SaslKafka, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b = topic_factory(), topic_factory()
    config = write_config(tmp_path, sasl_kafka, [a, b])
    c = ("--config", str(config))
    created = ak("topics", "create", *c, "--topics", f"{a},{b}")
    assert created.returncode == 0, created.stdout + created.stderr

    log_path = tmp_path / "cluster.log"
    with log_path.open("wb") as log:
        cluster = subprocess.Popen(
            [sys.executable, "-m", "atomickafka", "cluster", *c],
            stdout=log,
            stderr=log,
            env=environment(),
        )
    try:
        deadline = time.monotonic() + 90
        status = ak("status", *c, "--topics", f"{a},{b}")
        while status.returncode != 0 and time.monotonic() < deadline:
            time.sleep(1)
            status = ak("status", *c, "--topics", f"{a},{b}")
        assert status.returncode == 0, status.stdout + status.stderr

        one = ak("send", *c, "--to", f"{a},{b}", "to both")
        lines = ak("send", *c, "--to", a, stdin="x\ny\nz\n")
        relayed = ak("send", *c, "--to", b, "--via", a, "relayed")
        for out in (one, lines, relayed):
            assert out.returncode == 0, out.stderr
        ids = [*one.stdout.split(), *lines.stdout.split(), *relayed.stdout.split()]
        tails = {}
        for topic, want in ((a, 4), (b, 2)):
            out = ak("tail", *c, "--topic", topic, "--from-beginning", "--timeout-ms", "5000",
                     "--max-messages", str(want), "--json")  # fmt: skip
            assert out.returncode == 0, out.stderr
            tails[topic] = [orjson.loads(line) for line in out.stdout.splitlines()]
        sent = [
            Sent(ids[0], tuple(sorted((a, b))), "to both", ""),
            *(Sent(mid, (a,), v, "") for mid, v in zip(ids[1:4], "xyz", strict=True)),
            Sent(ids[4], (b,), "relayed", a),
        ]
        assert_records_checked(sent, deliveries_from_json(tails))

        piped = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m atomickafka tail --config {config} --topic {a} "
             "--from-beginning --timeout-ms 3000 | head -n 1"],
            capture_output=True, text=True, timeout=60, check=False, env=environment(),
        )  # fmt: skip
        assert piped.stdout.count("\n") == 1 and piped.stderr == "", piped.stderr

        doctor = ak("doctor", *c, "--topics", f"{a},{b}", "--json")
        report = orjson.loads(doctor.stdout)
        assert doctor.returncode == 0, [f for f in report["findings"] if f["severity"] == "fail"]

        shown = ak("send", *c, "--to", a, "--print-config")
        assert '"sasl.password" = "********"' in shown.stdout

        wrong = ak("status", *c, "-X", "sasl.password=not-it")
        assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1
        assert "refused the login" in wrong.stderr and "not-it" not in wrong.stderr
        anonymous = ak("status", "--bootstrap-server", sasl_kafka.bootstrap)
        assert anonymous.returncode == 1 and anonymous.stderr.count("\n") == 1
        assert "security.protocol" in anonymous.stderr
    finally:
        cluster.send_signal(signal.SIGTERM)
        code = cluster.wait(timeout=60)
    assert code == 0
    log_text = log_path.read_text()
    assert PASSWORD not in log_text
    assert all(line.startswith("{") for line in log_text.splitlines()), log_text[:500]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_eval_and_the_spark_job_through_sasl(
    sasl_kafka: SaslKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small evaluation over the SASL broker (its own nodes, clients and recorder log
    in), then the Spark job reading one of its runs straight from Kafka, logged in with
    the Kafka tools' client.properties: the same figures as from the recorded files. In
    this process, so that both share one SparkSession."""
    for name in environment().keys() ^ os.environ.keys():
        monkeypatch.delenv(name)
    config = write_config(tmp_path, sasl_kafka, ["unused"])
    out = tmp_path / "report"
    spark = session(kafka_source=True)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        status = main(
            ["eval", "--config", str(config), "--scenarios", "baseline",
             "--messages-per-client", "40", "--clients", "1", "--topics", "2",
             "--no-warmup", "--out", str(out)]
        )  # fmt: skip
        assert status == 0, (out / "suite.json").read_text()
        assert PASSWORD not in (out / "report.md").read_text()
        (run_dir,) = (out / "runs").iterdir()
        info = RunInfo.load(run_dir / "run.json")
        job = load_job()
        options = job.read_properties(sasl_kafka.properties)
        records, messages = job.load_kafka(
            spark, sasl_kafka.bootstrap, info.topics, run=run_dir.name, options=options
        )
        (from_kafka,) = job.compute(records, messages)
    finally:
        root.handlers[:], root.level = saved
        spark.stop()
    recorded = json.loads((out / "metrics" / f"{run_dir.name}.json").read_text())
    assert json.loads(json.dumps(from_kafka)) == recorded
