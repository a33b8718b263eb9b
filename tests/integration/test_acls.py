"""The ACL examples (``deploy/acls.sh``) against a broker that checks ACLs: under them
the operator creates and checks the topics, nodes run, a client sends and reads its
deliveries, and the client can neither write a delivery topic nor read an input log;
without Write on the control logs (ACLs that predate them) a client loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from atomickafka.client import AtomicKafkaClient
from atomickafka.localkafka import (
    SASL_USERS,
    BrokerError,
    ensure_broker,
    free_port_block,
    stop_broker,
)
from tests.integration.harness import Sent, assert_order_checked

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SASL broker with an authorizer (``broker start --sasl --acls``)."""
    data_dir = tmp_path_factory.mktemp("kafka-acls")
    try:
        bootstrap = ensure_broker(
            1, data_dir, port=free_port_block(2), timeout=180, sasl=True, acls=True
        )
    except BrokerError as exc:
        pytest.fail(f"could not start the broker: {exc}", pytrace=False)
    try:
        yield bootstrap
    finally:
        stop_broker(data_dir)


def login(user: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": SASL_USERS[user],
    }


def config_of(tmp_path: Path, bootstrap: str, user: str) -> Path:
    path = tmp_path / f"{user}.toml"
    settings = "".join(f'"{k}" = "{v}"\n' for k, v in login(user).items())
    path.write_text(f'bootstrap_server = "{bootstrap}"\n[kafka]\n{settings}')
    return path


def environment() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k != "KAFKA_BOOTSTRAP_SERVERS" and not k.startswith("ATOMICKAFKA_X_")
    }


def ak(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atomickafka", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=120, check=False, env=environment(),
    )  # fmt: skip


def apply_examples(tmp_path: Path, bootstrap: str, topics: list[str]) -> None:
    """Run deploy/acls.sh as documented, with a stand-in for kafka-acls.sh."""
    admin = tmp_path / "admin.properties"
    admin.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{SASL_USERS["admin"]}";\n'
    )
    tool = tmp_path / "kafka-acls.sh"
    tool.write_text(f'#!/bin/sh\nexec {sys.executable} -m tests.integration.acl_tool "$@"\n')
    tool.chmod(0o755)
    env = environment() | {
        "BOOTSTRAP": bootstrap,
        "ADMIN_CONFIG": str(admin),
        "TOPICS": " ".join(topics),
        "NODE": "User:node",
        "CLIENT": "User:alice",
        "OPERATOR": "User:ops",
        "KAFKA_ACLS": str(tool),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "acls.sh")],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_under_the_example_acls_each_principal_does_its_part_only(
    acl_kafka: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b = topic_factory(), topic_factory()
    alice, node, ops = (config_of(tmp_path, acl_kafka, u) for u in ("alice", "node", "ops"))
    denied = ak(ops, "topics", "create", "--topics", f"{a},{b}")
    assert denied.returncode != 0  # nothing is allowed before the ACLs
    apply_examples(tmp_path, acl_kafka, [a, b])

    created = ak(ops, "topics", "create", "--topics", f"{a},{b}")
    assert created.returncode == 0, created.stdout + created.stderr
    log = (tmp_path / "cluster.log").open("wb")
    cluster = subprocess.Popen(
        [sys.executable, "-m", "atomickafka", "cluster", "--topics", f"{a},{b}",
         "--config", str(node)],
        stdout=log, stderr=log, env=environment(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        status = ak(alice, "status", "--topics", f"{a},{b}")
        while status.returncode != 0 and time.monotonic() < deadline:
            time.sleep(1)
            status = ak(alice, "status", "--topics", f"{a},{b}")
        assert status.returncode == 0, (
            status.stdout + status.stderr + ((tmp_path / "cluster.log").read_text()[-3000:])
        )
        sent = ak(alice, "send", "--to", f"{a},{b}", "allowed")
        assert sent.returncode == 0, sent.stderr
        tail = ak(alice, "tail", "--topic", b, "--from-beginning", "--max-messages", "1",
                  "--timeout-ms", "10000", "--json")  # fmt: skip
        assert tail.returncode == 0, tail.stderr
        assert orjson.loads(tail.stdout)["value"] == "allowed"

        doctor = ak(ops, "doctor", "--topics", f"{a},{b}", "--json")
        report = orjson.loads(doctor.stdout)
        assert doctor.returncode == 0, [f for f in report["findings"] if f["severity"] == "fail"]

        assert_client_cannot_forge_or_peek(acl_kafka, a)
        assert_a_client_without_the_lane_loses_nothing(acl_kafka, alice, a, b)
    finally:
        cluster.send_signal(signal.SIGTERM)
        cluster.wait(timeout=60)
        log.close()


def assert_a_client_without_the_lane_loses_nothing(
    bootstrap: str, alice: Path, a: str, b: str
) -> None:
    """ACLs set up before control logs give clients no Write on ``atomickafka-ctl.*``:
    a client with the default direct lane has its first lane copies refused, writes
    them again to the input logs, closes its lane, and every message is delivered."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **login("admin")})
    lane = AclBindingFilter(
        ResourceType.TOPIC, "atomickafka-ctl.", ResourcePatternType.PREFIXED, "User:alice",
        "*", AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in admin.delete_acls([lane]).values():
        assert future.result(), "no such rule: deploy/acls.sh grants clients the lane"
    deadline = time.monotonic() + 30  # until the broker applies it
    while not _refused(bootstrap, f"atomickafka-ctl.{a}") and time.monotonic() < deadline:
        time.sleep(0.5)
    sent: list[Sent] = []
    with AtomicKafkaClient(bootstrap, config=login("alice")) as client:
        for i in range(20):
            value = f"no-lane-{i}"
            sent.append(Sent(client.send(value, [a, b]), (a, b), value, ""))
        client.flush()
        assert client.lane_refused is not None and "atomickafka-ctl." in client.lane_refused
        ids = {s.messageID for s in sent}
        got = {}
        for topic in (a, b):
            with client.reader(topic) as reader:
                got[topic] = [d for d in reader.deliveries(timeout_s=10.0, max_messages=21)
                              if d.messageID in ids]  # fmt: skip
    assert_order_checked(sent, got)  # all 20 at both, once each, in one order


def _refused(bootstrap: str, topic: str) -> bool:
    """Whether alice's plain write to ``topic`` is refused for want of ACLs (while it is
    not, the probe is a record the node sets aside)."""
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, **login("alice")})
    producer.produce(topic, b"probe", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(10)
    return (
        bool(errors)
        and errors[0] is not None
        and (errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    )


def assert_client_cannot_forge_or_peek(bootstrap: str, topic: str) -> None:
    """alice may not write a delivery topic, nor read an input log."""
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, **login("alice")})
    producer.produce(topic, b'{"forged": true}', on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    (error,) = errors
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "atomickafka-reader-peek", **login("alice")}
    )
    try:
        consumer.assign([TopicPartition(f"atomickafka-in.{topic}", 0, 0)])
        deadline = time.monotonic() + 20
        refusal = None
        while refusal is None and time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is not None:
                assert record.error() is not None, "alice read an input log"
                refusal = record.error()
        assert refusal is not None, "no answer"
        assert refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refusal
    finally:
        consumer.close()
