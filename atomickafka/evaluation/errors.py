"""The error that ends an evaluation run (the suite's, the bench's, the soak's)."""

from __future__ import annotations

from atomickafka.errors import AtomicKafkaError

__all__ = ["RunError"]


class RunError(AtomicKafkaError):
    """A run could not go on (a client or sender failed, the warm-up was not delivered,
    ...); the message says what failed."""
