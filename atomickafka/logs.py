"""Structured logging: one JSON object per line on stderr.

Pass machine-readable fields with ``log.info("what", extra={"fields": {...}})``; they
become keys of the JSON object.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

__all__ = ["configure_logging"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
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
