"""What the user is told: errors they can act on, and one-line progress messages."""

from __future__ import annotations

import sys
from collections.abc import Callable

from atomickafka.errors import AtomicKafkaError

__all__ = ["BrokerError", "Log", "log_stderr"]

#: A progress sink: called with one line of text per step (download, start, stop).
Log = Callable[[str], None]


class BrokerError(AtomicKafkaError):
    """A problem the user can act on; the message says what went wrong and what to do."""


def log_stderr(message: str) -> None:
    """Default progress sink: one line on stderr, prefixed with the command name."""
    print(f"atomickafka broker: {message}", file=sys.stderr, flush=True)
