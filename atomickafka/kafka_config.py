"""librdkafka configuration: defaults for each role, and ``-X key=value`` pass-through."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "add_kafka_arguments",
    "consumer_config",
    "parse_overrides",
    "producer_config",
]

#: Producer defaults: durable (idempotent, acks=all) and batched, with a short linger.
PRODUCER_DEFAULTS: Final[Mapping[str, str | int | bool]] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 2,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 500000,
    "retry.backoff.ms": 20,
}

#: Consumer defaults: manual commits, start from the beginning, low fetch latency.
CONSUMER_DEFAULTS: Final[Mapping[str, str | int | bool]] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 10,
    "fetch.min.bytes": 1,
}


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """Turn ``["key=value", ...]`` (from ``-X``) into a dict; raise ValueError if malformed."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-X expects key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def producer_config(
    bootstrap: str, overrides: Mapping[str, str] | None = None, **extra: str | int | bool
) -> dict[str, str | int | bool]:
    """A producer configuration: defaults, then ``extra``, then the user's ``-X`` overrides."""
    return {"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS, **extra, **(overrides or {})}


def consumer_config(
    bootstrap: str,
    group_id: str,
    overrides: Mapping[str, str] | None = None,
    **extra: str | int | bool,
) -> dict[str, str | int | bool]:
    """A consumer configuration: defaults, then ``extra``, then the user's ``-X`` overrides."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        **CONSUMER_DEFAULTS,
        **extra,
        **(overrides or {}),
    }


def add_kafka_arguments(parser: argparse.ArgumentParser, *, topic: bool = False) -> None:
    """Add ``--bootstrap-server`` and ``-X`` (and ``--topic``) as the Kafka tools spell them."""
    parser.add_argument(
        "--bootstrap-server",
        "--bootstrap-servers",
        dest="bootstrap_server",
        required=True,
        metavar="HOST:PORT[,...]",
        help="Kafka brokers to connect to",
    )
    if topic:
        parser.add_argument("--topic", required=True, help="AtomicKafka topic")
    parser.add_argument(
        "-X",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka setting passed through to every client (repeatable)",
    )
