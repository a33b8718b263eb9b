"""Structured logging: one JSON object per line on stderr.

Pass machine-readable fields with ``log.info("what", extra={"fields": {...}})``; they
become keys of the JSON object. A long-running shell names what it runs once, with
:func:`log_context` (``node``, ``topic``, ``layer``): every line logged while the
context is open -- by the shell or by anything it calls, in the same thread -- carries
those keys too, and a line's own fields win over them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

import orjson

__all__ = ["configure_logging", "log_context"]

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


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_CONTEXT.get())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure_logging(level: str = "info", *, json: bool = True) -> None:
    """Send log records to stderr, as JSON lines (default) or plain text."""
    handler = logging.StreamHandler(sys.stderr)
    if json:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
