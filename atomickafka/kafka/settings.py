"""librdkafka settings: the defaults of each role, merged with the user's ``-X`` overrides.

Every Kafka client AtomicKafka creates takes its configuration from here, so a default
lives in one place. The overrides (``-X key=value`` on the command line, the
configuration file, the environment: :mod:`atomickafka.config`) always win; each client
takes only those addressed to its role (:func:`~atomickafka.kafka.properties.
settings_for`: ``producer.linger.ms`` goes to producers only, ``linger.ms`` too, since
librdkafka documents it as a producer property).
Every client is also given :data:`LIBRDKAFKA_LOGGER` (confluent-kafka's ``logger``
option), so librdkafka's own log lines (a broker that refuses connections, a
rebalance) become ordinary log records: JSON lines in the node, the user's logging
setup in the client library.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from atomickafka.kafka.properties import ClientRole, settings_for

__all__ = [
    "CONSUMER_DEFAULTS",
    "LIBRDKAFKA_LOGGER",
    "PRODUCER_DEFAULTS",
    "admin_config",
    "consumer_config",
    "producer_config",
]

#: Where librdkafka's log lines go (served while a client polls).
LIBRDKAFKA_LOGGER: Final = logging.getLogger("atomickafka.librdkafka")


def _not_the_gapless_notice(record: logging.LogRecord) -> bool:
    """Drop librdkafka's warning that ``enable.gapless.guarantee`` is experimental: the
    at-least-once writers set it on purpose (docs/DESIGN.md §6.3), and every node start
    would otherwise log it once per producer."""
    message = record.getMessage()
    return not (message.startswith("CONFWARN") and "enable.gapless.guarantee" in message)


LIBRDKAFKA_LOGGER.addFilter(_not_the_gapless_notice)

#: Producer defaults: durable (idempotent, acks=all) and batched *adaptively*: a record
#: waits at most ``linger.ms`` (1 ms) while the producer is idle, so a lightly loaded
#: client or relay sends at once; under load librdkafka holds new produce requests back
#: while one is still untransmitted (``queue.buffering.backpressure.threshold``: 1) and
#: keeps at most five in flight per partition (idempotence), so records pile up and a
#: saturated producer still sends full batches. A node in exactly-once mode does not
#: linger at all: its commit flushes the transaction's records at once. Measured with
#: ``atomickafka bench`` against the 5 ms of earlier versions (docs/performance.md).
PRODUCER_DEFAULTS: Final[Mapping[str, str | int | bool]] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 1,
    "queue.buffering.backpressure.threshold": 1,
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


def producer_config(
    bootstrap: str, overrides: Mapping[str, str] | None = None, **extra: str | int | bool
) -> dict[str, str | int | bool]:
    """A producer configuration: defaults, then ``extra``, then the user's ``-X`` overrides."""
    return {
        "bootstrap.servers": bootstrap,
        **PRODUCER_DEFAULTS,
        **extra,
        **settings_for(overrides or {}, ClientRole.PRODUCER),
    }


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
        **settings_for(overrides or {}, ClientRole.CONSUMER),
    }


def admin_config(
    bootstrap: str, overrides: Mapping[str, str] | None = None
) -> dict[str, str | int | float | bool]:
    """An AdminClient configuration: the bootstrap and the user's ``-X`` overrides that
    concern it."""
    return {"bootstrap.servers": bootstrap, **settings_for(overrides or {}, ClientRole.ADMIN)}
