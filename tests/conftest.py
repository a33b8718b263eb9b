"""Fixtures shared by every test directory: a real Kafka for integration tests, topic names.

Where the Kafka comes from (first match wins):

1. ``KAFKA_BOOTSTRAP_SERVERS`` is set: that cluster is used and left alone, e.g.
   ``export KAFKA_BOOTSTRAP_SERVERS=$(atomickafka broker start | tail -n1)`` to reuse one
   broker across test runs.
2. A Docker daemon answers: testcontainers' Kafka module (``ATOMICKAFKA_TEST_KAFKA_IMAGE``
   overrides the image).
3. Otherwise a local broker from :mod:`atomickafka.localkafka`, started on free ports in this
   session's temp dir and stopped at the end of the session.

``ATOMICKAFKA_TEST_BROKER=local|docker`` forces 2 or 3. When no Kafka can be had the fixture
*fails* (every test using it errors); it never skips.
"""

from __future__ import annotations

import importlib
import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from atomickafka.localkafka import (
    SASL_USERS,
    BrokerError,
    broker_status,
    ensure_broker,
    free_port_block,
    stop_broker,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--rewrite``: write what ran into the golden transcripts (tests/unit/testdata)."""
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of tests/unit/testdata/*.txt in place",
    )


DEFAULT_TEST_IMAGE = "confluentinc/cp-kafka:8.1.0"
# A single-broker container must not wait for replicas it will never have; with the
# transaction log at RF 3 / min ISR 2, init_transactions() hangs.
_CONTAINER_ENV = {
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
}


@dataclass(frozen=True)
class KafkaService:
    """The Kafka the tests talk to; ``data_dir`` is set when atomickafka started it."""

    bootstrap: str
    source: str  # "env", "docker" or "local"
    data_dir: Path | None = None


def _docker_answers() -> bool:
    """True when the docker SDK is installed and a daemon answers a ping within 5 s."""
    try:
        docker: Any = importlib.import_module("docker")
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no socket, no permission, daemon down: all mean "no Docker"
        return False


def _container_kafka() -> Iterator[KafkaService]:
    try:
        module: Any = importlib.import_module("testcontainers.community.kafka")
    except ImportError:
        module = importlib.import_module("testcontainers.kafka")
    image = os.environ.get("ATOMICKAFKA_TEST_KAFKA_IMAGE", DEFAULT_TEST_IMAGE)
    container = module.KafkaContainer(image).with_kraft()
    for key, value in _CONTAINER_ENV.items():
        container.with_env(key, value)
    try:
        container.start(timeout=180)
    except Exception as exc:
        pytest.fail(f"could not start Kafka container {image}: {exc}", pytrace=False)
    try:
        yield KafkaService(container.get_bootstrap_server(), "docker")
    finally:
        container.stop()


def _local_kafka(data_dir: Path) -> Iterator[KafkaService]:
    try:
        bootstrap = ensure_broker(1, data_dir, port=free_port_block(2), timeout=180)
    except BrokerError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:  # fail outside the except block: no chained traceback, just the reason
        pytest.fail(f"could not start the local Kafka broker: {problem}", pytrace=False)
    try:
        yield KafkaService(bootstrap, "local", data_dir)
    finally:
        stop_broker(data_dir)
        left = [s.pid for s in broker_status(data_dir) if s.alive]
        assert not left, f"broker processes left behind: {left}"


@pytest.fixture(scope="session")
def kafka_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaService]:
    """A running Kafka for the whole session (see the module docstring for the source)."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if bootstrap:
        yield KafkaService(bootstrap, "env")
        return
    choice = os.environ.get("ATOMICKAFKA_TEST_BROKER", "auto").strip().lower()
    if choice not in ("auto", "local", "docker"):
        pytest.fail(f"ATOMICKAFKA_TEST_BROKER must be auto, local or docker, not {choice!r}")
    if choice == "docker" or (choice == "auto" and _docker_answers()):
        yield from _container_kafka()
    else:
        yield from _local_kafka(tmp_path_factory.mktemp("kafka"))


@dataclass(frozen=True)
class SaslKafka:
    """A local broker whose clients must log in (SASL PLAIN over SASL_PLAINTEXT)."""

    bootstrap: str
    data_dir: Path

    @property
    def properties(self) -> Path:
        """alice's settings as the Kafka tools take them (``sasl.jaas.config``)."""
        return self.data_dir / "client.properties"

    @property
    def settings(self) -> dict[str, str]:
        """alice's settings as librdkafka takes them."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": SASL_USERS["alice"],
        }


@pytest.fixture(scope="session")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslKafka]:
    """A local broker of its own, started with ``--sasl`` (users admin and alice), for
    the session; always local (Java), whatever Kafka the other tests use."""
    data_dir = tmp_path_factory.mktemp("kafka-sasl")
    try:
        bootstrap = ensure_broker(1, data_dir, port=free_port_block(2), timeout=180, sasl=True)
    except BrokerError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:
        pytest.fail(f"could not start the SASL broker: {problem}", pytrace=False)
    try:
        yield SaslKafka(bootstrap, data_dir)
    finally:
        stop_broker(data_dir)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_service: KafkaService) -> str:
    """Bootstrap servers (``host:port[,...]``) of the session's Kafka."""
    return kafka_service.bootstrap


@pytest.fixture
def topic_factory() -> Callable[..., str]:
    """Return ``make(prefix="t")`` giving fresh topic names ``<prefix>-<uuid8>-<n>``."""
    run = uuid.uuid4().hex[:8]
    counter = itertools.count(1)

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{run}-{next(counter)}"

    return make


@pytest.fixture
def unique_topic(topic_factory: Callable[..., str]) -> str:
    """One fresh topic name (not created)."""
    return topic_factory()


@pytest.fixture
def admin(kafka_bootstrap: str) -> Any:
    """A confluent_kafka ``AdminClient`` for the session's Kafka (one per test)."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415 (after any fork)

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


def _bootstrap_of(request: pytest.FixtureRequest, bootstrap: str | None) -> str:
    """``bootstrap`` if given, else the session Kafka (started only when first needed)."""
    if bootstrap:
        return bootstrap
    session_bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    return session_bootstrap


@pytest.fixture
def create_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """Return ``create(name, partitions=1, replication_factor=1, config=None, bootstrap=None)``.

    Creates the topic (on the session Kafka unless ``bootstrap`` is given), waits up to 30 s
    until every partition has a leader and a full ISR, and returns the name.
    """
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415 (after any fork)

    def create(
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        bootstrap: str | None = None,
    ) -> str:
        client = AdminClient({"bootstrap.servers": _bootstrap_of(request, bootstrap)})
        new = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
        for future in client.create_topics([new], operation_timeout=30).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = client.list_topics(topic=name, timeout=5).topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(
                    p.leader >= 0 and len(p.isrs) == replication_factor
                    for p in topic.partitions.values()
                )
            ):
                return name
            time.sleep(0.1)
        raise AssertionError(f"topic {name} has no leader or full ISR after 30 s")

    return create


@pytest.fixture
def produce_values(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Return ``produce(topic, values, bootstrap=None, **config)``: send, check every report."""
    from confluent_kafka import Producer  # noqa: PLC0415

    def produce(
        topic: str, values: Sequence[bytes], bootstrap: str | None = None, **config: Any
    ) -> None:
        producer = Producer({"bootstrap.servers": _bootstrap_of(request, bootstrap), **config})
        errors: list[str] = []
        delivered: list[bytes] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append(msg.value())

        for value in values:
            producer.produce(topic, value, on_delivery=report)
            producer.poll(0)
        remaining = producer.flush(30)
        assert remaining == 0, f"{remaining} records not delivered within 30 s"
        assert not errors, f"delivery failed: {errors[:5]}"
        assert sorted(delivered) == sorted(values)

    return produce


def plain_records(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Any]:
    """Up to ``count`` records of ``topic`` as any Kafka application reads them: a plain
    confluent-kafka consumer in a group of its own, from the earliest offset."""
    from confluent_kafka import Consumer  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    records: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, f"consume error: {msg.error()}"
            records.append(msg)
    finally:
        consumer.close()
    return records


@pytest.fixture
def consume_values(request: pytest.FixtureRequest) -> Callable[..., list[bytes]]:
    """Return ``consume(topic, count, bootstrap=None, timeout=30)``: read from the beginning."""

    def consume(
        topic: str, count: int, bootstrap: str | None = None, timeout: float = 30.0
    ) -> list[bytes]:
        values: list[bytes] = []
        for msg in plain_records(_bootstrap_of(request, bootstrap), topic, count, timeout):
            value = msg.value()
            assert value is not None, "unexpected tombstone"
            values.append(value)
        return values

    return consume
