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
import re
from collections.abc import Mapping
from typing import Final

from atomickafka.kafka.properties import ClientRole, settings_for
from atomickafka.logs import Throttle

__all__ = [
    "CONSUMER_DEFAULTS",
    "LIBRDKAFKA_LOGGER",
    "PRODUCER_DEFAULTS",
    "REPEATED_LINES",
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

#: How often one kind of librdkafka warning or error is logged (s): a broker that is
#: down makes every client log every reconnect failure (seen: 280 lines/s from five
#: nodes, 12.8 MB in 2.5 minutes).
REPEATED_LINE_EVERY_S: Final = 30.0
#: What varies between two lines of one kind: the client instance, the time spent in a
#: state, a count of suppressed errors librdkafka itself adds.
_VARYING: Final = re.compile(
    r"rdkafka#\w+-\d+|\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)"
    r"|\d+ms"
)


class RepeatedLines(logging.Filter):
    """Rate-limits librdkafka's warnings and errors: the first line of a kind passes,
    those of the same kind within :data:`REPEATED_LINE_EVERY_S` are held back and
    counted, and the next one that passes says how many (:meth:`flush` says it for a
    kind that stopped). A kind is the line without what varies between clients and
    tries (:data:`_VARYING`); lines below warning all pass."""

    def __init__(self, every_s: float = REPEATED_LINE_EVERY_S) -> None:
        super().__init__()
        self.throttle = Throttle(every_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or getattr(record, "throttled", False):
            return True
        text = record.getMessage()
        held = self.throttle.admit(f"{record.levelno}:{_VARYING.sub('', text)}")
        if held is None:
            return False
        if held:
            record.msg, record.args = f"{text} ({held} more like it, not logged)", None
        return True

    def flush(self) -> None:
        """Say the count of each kind whose lines stopped with some held back."""
        for key, held in self.throttle.overdue():
            level, _, text = key.partition(":")
            LIBRDKAFKA_LOGGER.log(
                int(level),
                "%s (%d more like it, not logged)",
                text,
                held,
                extra={"throttled": True},
            )


#: The one filter of :data:`LIBRDKAFKA_LOGGER`'s repeated lines (a long-running shell
#: calls its ``flush`` now and then).
REPEATED_LINES: Final = RepeatedLines()
LIBRDKAFKA_LOGGER.addFilter(REPEATED_LINES)

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
