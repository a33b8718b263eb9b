"""Settings that would break the guarantees are refused with the reason, on the node,
``cluster``, ``send``, ``tail`` and the client library, before anything starts."""

from __future__ import annotations

import pytest

from atomickafka.cli import main
from atomickafka.client import AtomicKafkaClient, ConfigError, DeliveryReader
from atomickafka.kafka.guarantees import refuse_unsafe, unsafe_settings
from atomickafka.kafka.properties import is_secret, redact, role_of, settings_for
from atomickafka.node.config import NodeConfig

UNSAFE_FOR_EVERY_CLIENT = [
    {"enable.idempotence": "false"},
    {"enable.idempotence": False},
    {"producer.enable.idempotence": "0"},
    {"acks": "1"},
    {"acks": "0"},
    {"request.required.acks": "1"},
    {"isolation.level": "read_uncommitted"},
    {"consumer.isolation.level": "read_uncommitted"},
    {"transactional.id": "mine"},
    {"queuing.strategy": "lifo"},
]
UNSAFE_FOR_NODES_ONLY = [
    {"enable.auto.commit": "true"},
    {"consumer.enable.auto.commit": "1"},
    {"auto.offset.reset": "latest"},
    {"group.id": "shared"},
    {"enable.gapless.guarantee": "false"},
]
SAFE = [
    {},
    {"acks": "all", "enable.idempotence": "true", "isolation.level": "read_committed"},
    {"acks": "-1", "linger.ms": "20", "auto.offset.reset": "earliest"},
    {"consumer.acks": "1"},  # not a consumer setting: the consumer never takes it
    {"admin.isolation.level": "read_uncommitted"},  # an admin client reads no records
]


@pytest.mark.parametrize("overrides", UNSAFE_FOR_EVERY_CLIENT)
def test_unsafe_for_every_client(overrides: dict[str, object]) -> None:
    for node in (True, False):
        found = unsafe_settings(overrides, node=node)
        assert len(found) == 1, found
        name = next(iter(overrides)).removeprefix("producer.").removeprefix("consumer.")
        assert found[0].startswith(f"{name}=")


@pytest.mark.parametrize("overrides", UNSAFE_FOR_NODES_ONLY)
def test_unsafe_for_nodes_only(overrides: dict[str, object]) -> None:
    assert len(unsafe_settings(overrides, node=True)) == 1
    assert unsafe_settings(overrides, node=False) == []


@pytest.mark.parametrize("overrides", SAFE)
def test_safe_settings_pass(overrides: dict[str, object]) -> None:
    assert unsafe_settings(overrides, node=True) == []
    refuse_unsafe(overrides, node=True)


def test_the_refusal_is_one_line_with_every_reason() -> None:
    with pytest.raises(ConfigError) as info:
        refuse_unsafe({"acks": "1", "enable.idempotence": "false"}, node=False)
    text = str(info.value)
    assert "\n" not in text and "acks=1" in text and "enable.idempotence=false" in text
    assert "duplicated or reordered" in text and "acks=all" in text


def test_nodes_clients_and_readers_refuse_before_creating_anything() -> None:
    with pytest.raises(ConfigError, match=r"enable\.auto\.commit"):
        NodeConfig("127.0.0.1:9", "A", overrides={"enable.auto.commit": "true"})
    with pytest.raises(ConfigError, match="acks"):
        AtomicKafkaClient("127.0.0.1:9", config={"acks": "1"})
    with pytest.raises(ConfigError, match=r"read_uncommitted"):
        DeliveryReader("127.0.0.1:9", "A", config={"isolation.level": "read_uncommitted"})


@pytest.mark.parametrize(
    ("argv", "setting"),
    [
        (["node", "--topic", "A", "-X", "enable.idempotence=false"], "enable.idempotence"),
        (["cluster", "--topics", "A", "--consumer-property", "enable.auto.commit=true"],
         "enable.auto.commit"),
        (["send", "--to", "A", "-X", "acks=1", "x"], "acks=1"),
        (["tail", "--topic", "A", "-X", "isolation.level=read_uncommitted"], "isolation.level"),
    ],
)  # fmt: skip
def test_commands_refuse_unsafe_settings_in_one_line(
    argv: list[str], setting: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # an unreachable bootstrap: the refusal comes before any attempt to connect
    assert main([*argv, "--bootstrap-server", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and setting in err and "guarantees" in err, err


def test_roles_and_secrets_by_name() -> None:
    assert role_of("producer.linger.ms") == ("producer", "linger.ms")
    assert role_of("linger.ms")[0] == "producer" and role_of("group.id")[0] == "consumer"
    assert role_of("client.id") == (None, "client.id")
    assert settings_for({"producer.": "x"}, "producer") == {"producer.": "x"}  # no name: common
    for key in ("sasl.password", "producer.ssl.key.password", "sasl.oauthbearer.client.secret",
                "ssl.key.pem", "sasl.jaas.config"):  # fmt: skip
        assert is_secret(key), key
    assert not is_secret("sasl.username") and not is_secret("ssl.key.location")
    assert redact("a pw1 and pw12", ["pw1", "pw12"]) == "a ******** and ********"
