"""The errors the client raises, and the ones it shares with the rest of AtomicKafka.

Every one derives from :class:`~atomickafka.errors.AtomicKafkaError`; a mistake in what
was asked (a bad destination, a value too large, a bad setting) is also a
``ValueError``.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from atomickafka.core.wire import MessageError
from atomickafka.errors import (
    AtomicKafkaError,
    ClosedError,
    ConfigError,
    QueueFullError,
    TimedOutError,
)

__all__ = [
    "AtomicKafkaError",
    "ClosedError",
    "ConfigError",
    "DeliveryError",
    "DestinationError",
    "MessageError",
    "OfflineDestinationError",
    "QueueFullError",
    "SigningError",
    "TimedOutError",
]


class DeliveryError(AtomicKafkaError):
    """The broker did not take some sent messages.

    ``failures`` holds ``(messageID, KafkaError)`` for each message with a record that
    could not be written (the first error of that message); ``unacknowledged`` counts
    the records still not acknowledged when the wait ended.
    """

    def __init__(
        self,
        failures: list[tuple[str, KafkaError]],
        unacknowledged: int = 0,
        waited_s: float | None = None,
    ) -> None:
        self.failures = failures
        self.unacknowledged = unacknowledged
        parts = []
        if unacknowledged:
            after = "" if waited_s is None else f" after {waited_s:g} s"
            parts.append(f"{unacknowledged} records not acknowledged{after}")
        if failures:
            message_id, error = failures[0]
            parts.append(f"{len(failures)} messages not written; first: {message_id}: {error}")
        super().__init__("; ".join(parts) or "every message was written")


class DestinationError(AtomicKafkaError, ValueError):
    """The destinations cannot take the message as they are served now."""


class OfflineDestinationError(DestinationError):
    """A destination has no live AtomicKafka node: its other destinations would stall."""


class SigningError(DestinationError):
    """A destination's nodes check signatures (docs/DESIGN.md §4.14) that this client
    cannot make: it has no secret, or signs with one they do not accept. What it sent
    would be set aside at every destination, so nothing is sent."""
