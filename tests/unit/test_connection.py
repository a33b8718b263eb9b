"""The connection value (issue 27 item 6): one ``Connection`` holds the bootstrap
servers and the user's librdkafka settings and builds every client's configuration
from them, exactly as the ``bootstrap``/``overrides`` pair did."""

from __future__ import annotations

import pytest

from atomickafka.kafka.connection import Connection, connection_of
from atomickafka.kafka.properties import MASK
from atomickafka.kafka.settings import admin_config, consumer_config, producer_config

SETTINGS = {
    "security.protocol": "SASL_SSL",
    "sasl.password": "hunter2",
    "producer.linger.ms": "7",
    "fetch.wait.max.ms": "50",
}


def test_a_connection_builds_the_configs_the_pair_built() -> None:
    connection = Connection("h1:9092,h2:9092", SETTINGS)
    assert connection.producer_config(acks="all") == producer_config(
        "h1:9092,h2:9092", SETTINGS, acks="all"
    )
    assert connection.consumer_config("g", **{"isolation.level": "read_committed"}) == (
        consumer_config("h1:9092,h2:9092", "g", SETTINGS, **{"isolation.level": "read_committed"})
    )
    assert connection.admin_config() == admin_config("h1:9092,h2:9092", SETTINGS)


def test_a_connection_is_a_value_that_hides_its_secrets() -> None:
    given = dict(SETTINGS)
    connection = Connection("h:9092", given)
    given["sasl.password"] = "changed"  # a copy: the caller's dict does not reach it
    assert connection.settings["sasl.password"] == "hunter2"
    assert connection == Connection("h:9092", SETTINGS)
    assert hash(connection) == hash(Connection("h:9092", dict(reversed(SETTINGS.items()))))
    assert "hunter2" not in repr(connection) and MASK in repr(connection)


def test_a_bootstrap_string_and_a_connection_are_both_accepted() -> None:
    connection = Connection("h:9092", {"a": "1"})
    assert connection_of(connection) is connection
    assert connection_of("h:9092", {"a": "1"}) == connection
    assert connection_of(connection, {"b": "2"}) == Connection("h:9092", {"a": "1", "b": "2"})
    assert connection.with_settings({"a": "3"}).settings == {"a": "3"}


def test_the_client_takes_a_bootstrap_string_with_config_or_a_connection() -> None:
    """The public API is unchanged (``AtomicKafkaClient(bootstrap_servers, config=...)``)
    and also takes a Connection; both reach Kafka the same way."""
    from atomickafka.client import AtomicKafkaClient, ConfigError  # noqa: PLC0415

    settings = {"sasl.password": "hunter2", "producer.linger.ms": "7"}
    old = AtomicKafkaClient("127.0.0.1:9", config=settings)
    new = AtomicKafkaClient(Connection("127.0.0.1:9", settings))
    assert old.connection == new.connection == Connection("127.0.0.1:9", settings)
    assert old.bootstrap_servers == new.bootstrap_servers == "127.0.0.1:9"
    old.close()
    new.close()
    unsafe = Connection("127.0.0.1:9", {"enable.idempotence": "false"})
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        AtomicKafkaClient(unsafe)
