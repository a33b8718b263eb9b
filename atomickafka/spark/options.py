"""The data source's options, in Kafka's words (as Spark's own Kafka source takes them).

Spark hands a data source its options as text, names folded to lower case. The ones
every direction takes:

- ``kafka.bootstrap.servers`` (required), and any other ``kafka.<setting>``: a
  librdkafka setting for every Kafka client the source or sink makes (``kafka.
  security.protocol``, ``kafka.sasl.mechanism``...). A setting ending in ``.file``
  reads its value from that file (``kafka.sasl.password.file``), where the code runs:
  secrets are never part of a query's plan. A Java client's ``kafka.sasl.jaas.config``
  with a username and password is understood, as in a properties file.
- ``secretFile``: the deployment's signing secret (docs/DESIGN.md §4.14), a file.
- ``layout``: ``split`` (default) or ``shared``, as the nodes' ``--layout``.

A bad option raises :class:`~atomickafka.errors.ConfigError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import orjson

from atomickafka.config.files import parse_properties, read_secret_file
from atomickafka.config.kafka_layers import KafkaSetting, Level, merge_kafka_settings
from atomickafka.core.wire import MessageError, is_valid_topic_name, parse_destinations
from atomickafka.errors import ConfigError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.topics import Layout

__all__ = [
    "BOOTSTRAP",
    "EARLIEST",
    "KAFKA_PREFIX",
    "LATEST",
    "Options",
    "connection",
    "layout",
    "offsets",
    "positive_int",
    "secret_file",
    "topic_list",
]

KAFKA_PREFIX: Final = "kafka."
BOOTSTRAP: Final = "kafka.bootstrap.servers"
#: Offsets as Spark's Kafka source writes them in ``startingOffsets``' JSON form.
EARLIEST: Final = -2
LATEST: Final = -1

#: Options as Spark gives them: names in any case (folded here), values as text.
Options = Mapping[str, str]


def _folded(options: Options) -> dict[str, str]:
    return {name.lower(): value for name, value in options.items()}


def connection(options: Options) -> Connection:
    """How to reach Kafka: ``kafka.bootstrap.servers`` and every other ``kafka.*``
    option as a librdkafka setting (``.file`` ones read here)."""
    given = _folded(options)
    bootstrap = given.get(BOOTSTRAP, "").strip()
    if not bootstrap:
        raise ConfigError(f"option {BOOTSTRAP} is required (host:port[,host:port...])")
    settings: list[KafkaSetting] = []
    for name, value in sorted(given.items()):
        if not name.startswith(KAFKA_PREFIX) or name == BOOTSTRAP:
            continue
        key = name[len(KAFKA_PREFIX) :]
        if key == "sasl.jaas.config":
            settings += parse_properties(f"{key}={value}", f"option {name}", Level.COMMAND_LINE)
        else:
            settings.append(KafkaSetting(key, value, Level.COMMAND_LINE, f"option {name}"))
    values, _ = merge_kafka_settings(settings, read_secret_file)
    return Connection(bootstrap, values)


def secret_file(options: Options) -> str | None:
    """The signing secret's file (option ``secretFile``), if signing is on."""
    return _folded(options).get("secretfile") or None


def layout(options: Options) -> Layout:
    """The nodes' layout (option ``layout``, default ``split``)."""
    text = _folded(options).get("layout", Layout.SPLIT.value)
    try:
        return Layout(text.strip().lower())
    except ValueError:
        raise ConfigError(f"option layout must be split or shared, not {text!r}") from None


def topic_list(options: Options, name: str, *, required: bool = True) -> tuple[str, ...]:
    """The topics option ``name`` lists (comma-separated), sorted; ``()`` when it is
    absent and not ``required``."""
    text = _folded(options).get(name.lower(), "")
    if not text.strip():
        if required:
            raise ConfigError(f"option {name} is required: a comma-separated list of topics")
        return ()
    try:
        return parse_destinations([t.strip() for t in text.split(",")])
    except MessageError as exc:
        raise ConfigError(f"option {name}: {exc.reason}: {text!r}") from None


def positive_int(options: Options, name: str, default: int, *, minimum: int = 1) -> int:
    """Integer option ``name`` (at least ``minimum``), ``default`` when absent."""
    text = _folded(options).get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"option {name} must be an integer of at least {minimum}: {text!r}")
    return value


def offsets(options: Options, name: str, topics: tuple[str, ...], default: int) -> dict[str, int]:
    """Where to start (or end) in each topic's deliveries: option ``name`` is
    ``earliest``, ``latest`` or Spark's JSON form ``{"orders": {"0": 42}}`` (``-2``
    earliest, ``-1`` latest; a topic it leaves out takes ``default``). Offsets are
    those of the delivery topic's one partition."""
    text = _folded(options).get(name.lower(), "").strip()
    if not text:
        return dict.fromkeys(topics, default)
    word = {"earliest": EARLIEST, "latest": LATEST}.get(text.lower())
    if word is not None:
        return dict.fromkeys(topics, word)
    try:
        given = orjson.loads(text)
    except orjson.JSONDecodeError:
        given = None
    if not isinstance(given, dict):
        raise ConfigError(
            f'option {name} must be earliest, latest or JSON such as {{"orders": {{"0": 42}}}}: '
            f"{text!r}"
        )
    out = dict.fromkeys(topics, default)
    for topic, partitions in given.items():
        out[topic] = _offset_of(name, topic, partitions, topics)
    return out


def _offset_of(name: str, topic: str, partitions: object, topics: tuple[str, ...]) -> int:
    if topic not in topics or not is_valid_topic_name(topic):
        raise ConfigError(f"option {name} names {topic!r}, which is not read (subscribe)")
    offset = partitions.get("0") if isinstance(partitions, dict) else None
    if not isinstance(partitions, dict) or set(partitions) != {"0"}:
        raise ConfigError(
            f'option {name}: {topic!r} must map partition "0" (a delivery topic has one) '
            f"to an offset: {partitions!r}"
        )
    if type(offset) is not int or offset < EARLIEST:
        raise ConfigError(f"option {name}: {topic!r}: not an offset: {offset!r}")
    return offset
