"""librdkafka configuration: defaults for each role, and ``-X key=value`` pass-through."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "add_kafka_arguments",
    "add_local_bootstrap_argument",
    "consumer_config",
    "parse_overrides",
    "producer_config",
    "resolve_bootstrap",
]

#: Producer defaults: durable (idempotent, acks=all) and batched. On a small machine the
#: broker's CPU per request is what limits latency under load, so a 5 ms linger (fewer,
#: fuller produce requests) beat 0-2 ms there; measured with ``atomickafka bench``.
PRODUCER_DEFAULTS: Final[Mapping[str, str | int | bool]] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 500000,
    "retry.backoff.ms": 20,
    "socket.nagle.disable": True,
}

#: Consumer defaults: manual commits, start from the beginning. ``fetch.min.bytes=1``
#: answers a fetch as soon as anything is there; the wait only bounds idle polling.
CONSUMER_DEFAULTS: Final[Mapping[str, str | int | bool]] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 100,
    "fetch.min.bytes": 1,
    "socket.nagle.disable": True,
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


def add_local_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server``, optional: without it the embedded local broker is used."""
    parser.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        default=None,
        help="Kafka to use (default: start or reuse the local broker)",
    )


def resolve_bootstrap(bootstrap: str | None) -> str:
    """``bootstrap``, or that of the local broker, started if it is not running."""
    if bootstrap is not None:
        return bootstrap
    from atomickafka.localkafka import ensure_broker  # noqa: PLC0415  (starts Java only here)

    return ensure_broker()
