"""The packaging and service files of ``deploy/`` (no Docker engine here): the compose
file, Prometheus' and Grafana's configuration, the Dockerfile, the systemd units, the
example configuration and the ACL script are well-formed, agree with each other, and
every ``atomickafka`` command they run parses with the options that exist."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from atomickafka.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRICS_PORT = 9464
TOPICS = ["orders", "payments", "audit", "shipping", "billing"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if (
            name.startswith(("ATOMICKAFKA_", "KAFKA_BOOTSTRAP_SERVERS"))
            and name != "ATOMICKAFKA_HOME"
        ):
            monkeypatch.delenv(name)


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def atomickafka_services() -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose()["services"].items()
        if service.get("image") == "atomickafka:latest"
    }


def runs_with(
    argv: list[str],
    environment: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """``atomickafka ARGV --print-config`` with ``environment``: its options exist and
    every value (flags, ATOMICKAFKA_* variables) is valid; return the dump."""
    for key, value in environment.items():
        monkeypatch.setenv(key, str(value))
    status = main([*argv, "--print-config"])
    captured = capsys.readouterr()
    assert status == 0, (argv, captured.err)
    for key in environment:
        monkeypatch.delenv(key)
    return captured.out


def test_compose_has_three_brokers_five_nodes_metrics_prometheus_and_grafana() -> None:
    services = compose()["services"]
    assert {"kafka-1", "kafka-2", "kafka-3", "topics", "prometheus", "grafana", "doctor"} <= set(
        services
    )
    nodes = {n for n in services if n.startswith("node-")}
    assert nodes == {f"node-{t}" for t in TOPICS}
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), host_ports
    for name in nodes:
        assert str(METRICS_PORT) in services[name]["expose"]
        assert services[name]["environment"]["ATOMICKAFKA_METRICS_PORT"] == str(METRICS_PORT)
        assert services[name]["depends_on"]["topics"]["condition"] == (
            "service_completed_successfully"
        )


def test_the_brokers_keep_what_ordering_needs() -> None:
    services = compose()["services"]
    brokers = {n: s for n, s in services.items() if n.startswith("kafka-")}
    voters = set()
    for name, broker in brokers.items():
        env = broker["environment"]
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert f"PLAINTEXT://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        voters.add(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
        assert broker["hostname"] == name
    (quorum,) = voters
    ids = {b["environment"]["KAFKA_NODE_ID"] for b in brokers.values()}
    assert quorum == ",".join(f"{i}@kafka-{i}:9093" for i in sorted(ids))


def test_every_atomickafka_command_of_compose_parses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    services = atomickafka_services()
    assert len(services) == 7  # topics, five nodes, doctor
    assert compose()["secrets"]["signing-secret"]["file"] == "./signing-secret"
    mounted = tmp_path / "signing-secret"  # where Docker mounts the secret
    mounted.write_text("a-secret\n")
    for name, service in services.items():
        env = {k: str(v) for k, v in service.get("environment", {}).items()}
        if name not in ("topics", "doctor"):  # every node signs (DESIGN §4.14)
            assert env["ATOMICKAFKA_SECRET_FILE"] == "/run/secrets/signing-secret", name
            assert service["secrets"] == ["signing-secret"], name
            env["ATOMICKAFKA_SECRET_FILE"] = str(mounted)
        dump = runs_with(service["command"], env, monkeypatch, capsys)
        assert 'bootstrap_server = "kafka-1:9092,kafka-2:9092,kafka-3:9092"' in dump, name
        check = service.get("healthcheck", {}).get("test")
        if check:
            assert check[:2] == ["CMD", "atomickafka"]
            runs_with(check[2:], env, monkeypatch, capsys)
    created = services["topics"]["command"]
    assert created[:2] == ["topics", "create"] and created[3] == ",".join(TOPICS)


#: The commands that write or read AtomicKafka's records: every deployment example of
#: one signs (DESIGN §4.14: on in every deployment example).
SIGNING: Final = ("node", "cluster", "send", "tail", "eval")
_EXAMPLE: Final = re.compile(rf"\batomickafka ({'|'.join(SIGNING)})\b")
#: Scripts that set up or try things on this machine, not deployment examples.
_NOT_DEPLOYMENT: Final = ("demo.sh", "test.sh", "bootstrap.sh")


def deployment_examples() -> list[tuple[str, str]]:
    """``(where, command line)`` of every example running one of :data:`SIGNING`: in the
    comments of deploy/'s files (continued lines joined) and in the code blocks of
    docs/operators.md."""
    found: list[tuple[str, str]] = []
    for path in sorted(p for p in DEPLOY.iterdir() if p.is_file()):
        if path.name in _NOT_DEPLOYMENT:
            continue
        text = "\n".join(
            line.lstrip("#").strip()
            for line in path.read_text().splitlines()
            if line.lstrip().startswith("#")
        )
        for line in text.replace("\\\n", " ").splitlines():
            if _EXAMPLE.search(line):
                found.append((path.name, line))
    guide = (ROOT / "docs" / "operators.md").read_text()
    for block in re.findall(r"^ *```(?:bash|sh|console)[^\n]*\n(.*?)^ *```", guide, re.M | re.S):
        found.extend(("operators.md", line.strip()) for line in block.splitlines()
                     if _EXAMPLE.search(line))  # fmt: skip
    return found


def test_every_deployment_example_signs_and_parses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """compose.yaml's `send`, the Dockerfile's `node`, ...: each passes the signing
    secret (``--secret-file`` or ``ATOMICKAFKA_SECRET_FILE``) and parses with it."""
    examples = deployment_examples()
    assert {where for where, _ in examples} >= {"compose.yaml", "Dockerfile"}, examples
    secret = tmp_path / "signing-secret"
    secret.write_text("a-secret\n")
    for where, line in examples:
        words = shlex.split(line)
        start = len(words) - 1 - words[::-1].index("atomickafka")  # the image, or the command
        env = dict(w.split("=", 1) for w in words[:start] if re.match(r"^[A-Z_]+=", w))
        argv = words[start + 1 :]
        signed = "--secret-file" in argv or "ATOMICKAFKA_SECRET_FILE" in env
        assert signed, f"{where}: {line!r} does not sign"
        if "--secret-file" in argv:
            argv[argv.index("--secret-file") + 1] = str(secret)
        else:
            env["ATOMICKAFKA_SECRET_FILE"] = str(secret)
        dump = runs_with(argv, env, monkeypatch, capsys)
        assert f'secret_file = "{secret}"' in dump, (where, dump)


def test_prometheus_scrapes_every_node_and_grafana_is_provisioned() -> None:
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    (targets,) = job["static_configs"]
    assert sorted(targets["targets"]) == sorted(f"node-{t}:{METRICS_PORT}" for t in TOPICS)
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"] if "./" in v)
    datasources = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text()
    )
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/atomickafka.yaml").read_text()
    )
    assert providers["providers"][0]["options"]["path"] == mounts["./grafana/dashboards"]
    for dashboard in (DEPLOY / "grafana/dashboards").glob("*.json"):
        assert "panels" in json.loads(dashboard.read_text()), dashboard


def test_the_dockerfile_copies_what_exists_and_runs_atomickafka() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    sources = [
        part
        for line in text.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for part in line.split()[1:-1]
    ]
    assert sources and all((ROOT / s).exists() for s in sources), sources
    assert 'ENTRYPOINT ["atomickafka"]' in text
    assert f"EXPOSE {METRICS_PORT}" in text
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert all(f"!{s.rstrip('/')}" in [i.rstrip("/") for i in ignored] for s in sources)
    for service in atomickafka_services().values():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((DEPLOY / "systemd" / name).read_text())
    return parser


@pytest.mark.parametrize("name", ["atomickafka-node@.service", "atomickafka-cluster.service"])
def test_the_systemd_units_run_commands_that_parse(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = unit(name)
    assert parser.get("Service", "Restart") == "on-failure"
    assert parser.get("Service", "KillSignal") == "SIGTERM"
    exec_start = shlex.split(parser.get("Service", "ExecStart").replace("%i", "orders"))
    assert exec_start[0] == "/opt/atomickafka/bin/atomickafka"
    lines = (DEPLOY / "systemd" / name).read_text()
    credentials = re.findall(r"^LoadCredential=(\S+)$", lines, re.MULTILINE)
    assert sorted(c.split(":")[0] for c in credentials) == ["kafka-password", "signing-secret"]
    password = tmp_path / "kafka-password"  # where systemd puts the credentials (%d)
    password.write_text("from-systemd\n")
    secret = tmp_path / "signing-secret"
    secret.write_text("a-secret\n")
    env = {
        "ATOMICKAFKA_CONFIG": str(DEPLOY / "atomickafka.example.toml"),
        "ATOMICKAFKA_X_SASL_PASSWORD_FILE": str(password),
        "ATOMICKAFKA_SECRET_FILE": str(secret),
    }
    assert "Environment=ATOMICKAFKA_SECRET_FILE=%d/signing-secret" in lines
    assert "Environment=ATOMICKAFKA_X_SASL_PASSWORD_FILE=%d/kafka-password" in lines
    assert "Environment=ATOMICKAFKA_CONFIG=/etc/atomickafka/atomickafka.toml" in lines
    dump = runs_with(exec_start[1:], env, monkeypatch, capsys)
    assert '"sasl.password" = "********"' in dump and "from-systemd" not in dump
    assert "ATOMICKAFKA_X_SASL_PASSWORD_FILE" in dump


def test_the_acl_script_is_valid_bash_and_names_every_principal() -> None:
    script = DEPLOY / "acls.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for principal in ("$NODE", "$CLIENT", "$OPERATOR"):
        assert f'--allow-principal "{principal}"' in text
    client_rules = [
        " ".join(block.split())
        for block in re.split(r"\n(?=acl |  acl )", text)
        if '"$CLIENT"' in block
    ]
    writes = [r for r in client_rules if "--operation Write" in r]
    assert writes and all("--topic atomickafka-in. " in r for r in writes), (
        "clients may write only into the input logs"
    )
