"""The errors AtomicKafka raises to its users, under one base.

Catch :class:`AtomicKafkaError` to handle anything AtomicKafka itself reports (a bad
message or setting, a destination without a node, a message the broker did not take,
a local broker that cannot start...). Errors from librdkafka itself arrive as
confluent-kafka's ``KafkaException``.

Every error keeps a standard second base where callers rely on it: what a caller got
wrong is also a ``ValueError``, a wait that ran out is also a ``TimeoutError``. The
errors of one area live with it and derive from these (:class:`~atomickafka.core.wire.
MessageError`, the client's in :mod:`atomickafka.client.errors`, the local broker's
``BrokerError``, the node's ``NodeStartError``, a snapshot's ``SnapshotError``, the
evaluation's ``RunError`` and ``SparkSetupError``). This module imports nothing of
AtomicKafka, so that every layer may use it.

What stays outside: ``TypeError`` for a programming mistake in a call (an object of the
wrong type handed to the checker), ``KeyError`` for a lookup of something never
created (a topic a simulation does not have), ``NotImplementedError`` in abstract
methods, and ``AssertionError``/``ValueError`` for internal invariants no input can
break (a negative committed offset, a rate window fed the wrong number of counters).
The two Spark jobs (the evaluation's metrics job, the audit's) raise builtins too: they
run under ``spark-submit`` as plain files, without the package.
"""

from __future__ import annotations

__all__ = [
    "AtomicKafkaError",
    "ClosedError",
    "ConfigError",
    "KafkaUnreachableError",
    "QueueFullError",
    "TimedOutError",
    "UnknownTopicError",
]


class AtomicKafkaError(Exception):
    """Base of every error AtomicKafka raises to its users."""


class ConfigError(AtomicKafkaError, ValueError):
    """A setting, option or argument AtomicKafka cannot work with; the message says which
    and why."""


class TimedOutError(AtomicKafkaError, TimeoutError):
    """Something AtomicKafka waited for did not happen in time (nodes that do not come
    up, a topic that cannot be read to its end)."""


class ClosedError(AtomicKafkaError, RuntimeError):
    """A producer, reader or client used after it was closed."""


class QueueFullError(AtomicKafkaError):
    """librdkafka's local send queue stayed full for longer than the producer waits: the
    broker is not taking records (unreachable, or far slower than the sender)."""


class KafkaUnreachableError(AtomicKafkaError, ConnectionError):
    """No broker of the bootstrap answered in time (a wrong address, a broker down, a
    failed TLS handshake or SASL login); the message gives librdkafka's reason."""


class UnknownTopicError(ConfigError):
    """A topic that was named does not exist on the cluster (a typo, or no node has
    served it yet)."""
