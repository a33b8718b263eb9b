"""Structured logging: one JSON object per line on stderr.

Pass machine-readable fields with ``log.info("what", extra={"fields": {...}})``; they
become keys of the JSON object. A long-running shell names what it runs once, with
:func:`log_context` (``node``, ``topic``, ``layer``): every line logged while the
context is open -- by the shell or by anything it calls, in the same thread -- carries
those keys too, and a line's own fields win over them. librdkafka's own lines arrive
through the ``atomickafka.librdkafka`` logger (every client AtomicKafka creates is
given it), so they are JSON lines too. Secrets registered with :func:`hide_in_logs`
(the SASL password of the configuration...) are replaced by ``********`` in every
line, whatever logged them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Final

import orjson

__all__ = [
    "LIBRDKAFKA_LOGGER_NAME",
    "Throttle",
    "configure_logging",
    "hide_in_logs",
    "log_context",
    "logs_json",
    "redacted",
]

#: The logger librdkafka's lines go to (``atomickafka.kafka.settings.LIBRDKAFKA_LOGGER``).
LIBRDKAFKA_LOGGER_NAME: Final = "atomickafka.librdkafka"
_MASK: Final = "********"
_SECRETS: set[str] = set()
#: Whether this process logs JSON lines (:func:`configure_logging`).
_json_lines = False
_CONTEXT: ContextVar[Mapping[str, object]] = ContextVar(
    "atomickafka_log_context", default=MappingProxyType({})
)


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Add ``fields`` to every JSON log line of this thread while the block runs (on top
    of an enclosing context's)."""
    token = _CONTEXT.set({**_CONTEXT.get(), **fields})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class Throttle:
    """At most one log line per key every ``every_s`` seconds: the first passes, the
    lines within the next ``every_s`` are held back and counted, and the next line
    that passes says how many were (so repeated errors cost one line a period, and
    none is hidden without a count). Keys are the caller's (a bounded set)."""

    def __init__(
        self, every_s: float, clock: Callable[[], float] = time.monotonic, max_keys: int = 1000
    ) -> None:
        self.every_s = every_s
        self._clock = clock
        self._max_keys = max_keys
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def admit(self, key: str) -> int | None:
        """``None`` to hold this line back (it is counted); else how many lines of
        ``key`` were held back since the last one that passed."""
        now = self._clock()
        if now < self._next.get(key, float("-inf")):
            self._held[key] = self._held.get(key, 0) + 1
            return None
        if key not in self._next and len(self._next) >= self._max_keys:
            oldest = next(iter(self._next))  # the key admitted longest ago goes
            del self._next[oldest]
            self._held.pop(oldest, None)
        self._next.pop(key, None)
        self._next[key] = now + self.every_s
        return self._held.pop(key, 0)

    def overdue(self) -> list[tuple[str, int]]:
        """The keys whose period has ended with lines held back, and how many (each
        reported once: its count starts again). For saying the count of lines that
        stopped coming, once their period is over."""
        now = self._clock()
        due = [(k, n) for k, n in self._held.items() if now >= self._next.get(k, now)]
        for key, _ in due:
            del self._held[key]
        return due


def logs_json() -> bool:
    """True once :func:`configure_logging` made this process log JSON lines (a node's,
    ``cluster``'s): its last line, an error, is one too."""
    return _json_lines


def hide_in_logs(secrets: Iterable[str]) -> None:
    """Never show any of ``secrets`` in a log line from now on (in this process)."""
    _SECRETS.update(s for s in secrets if s)


def redacted(text: str) -> str:
    """``text`` with every secret given to :func:`hide_in_logs` replaced by ``********``."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        entry.update(_CONTEXT.get())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redacted(orjson.dumps(entry).decode())


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redacted(super().format(record))


def configure_logging(
    level: str = "info", *, json: bool = True, librdkafka_level: str | None = None
) -> None:
    """Send log records to stderr, as JSON lines (default) or plain text.

    ``librdkafka_level`` sets librdkafka's lines apart (the short-lived commands show
    them only when debugging: the error they lead to is reported once, in one line).
    """
    handler = logging.StreamHandler(sys.stderr)
    if json:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    global _json_lines  # noqa: PLW0603 (how this process logs)
    _json_lines = json
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    librdkafka = logging.getLogger(LIBRDKAFKA_LOGGER_NAME)
    librdkafka.setLevel(logging.NOTSET if librdkafka_level is None else librdkafka_level.upper())
