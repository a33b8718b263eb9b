"""Is Kafka there? One bounded metadata request, with librdkafka's reason when not.

librdkafka retries an unreachable broker forever and says why only in its log lines (a
refused connection, a name that does not resolve, a failed SASL login). :func:`probe`
asks for the cluster's metadata once, within a time limit, keeps those lines to itself
and turns a failure into one :class:`~atomickafka.errors.KafkaUnreachableError` whose
message is the last reason librdkafka gave; named topics that do not exist raise
:class:`~atomickafka.errors.UnknownTopicError`. Commands call it before they start
anything, so that a wrong ``--bootstrap-server`` or ``--topic`` is one line at once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from atomickafka.errors import KafkaUnreachableError, UnknownTopicError
from atomickafka.kafka.connection import Where, connection_of

__all__ = ["DEFAULT_PROBE_TIMEOUT_S", "UNREACHABLE_CODES", "is_unreachable", "probe", "reason_of"]

#: How long a command waits for the cluster's first answer (seconds).
DEFAULT_PROBE_TIMEOUT_S: Final = 10.0

#: librdkafka errors that mean "Kafka cannot be reached", not "you asked wrongly".
UNREACHABLE_CODES: Final = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._AUTHENTICATION,
        KafkaError._RESOLVE,
        KafkaError.SASL_AUTHENTICATION_FAILED,
    }
)


def is_unreachable(exc: BaseException) -> bool:
    """True for an error that says Kafka could not be reached (or logged into)."""
    if isinstance(exc, KafkaUnreachableError):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].code() in UNREACHABLE_CODES
    return False


# "FAIL [rdkafka#producer-1] [thrd:h:9092/bootstrap]: h:9092/bootstrap: Connect to ..."
_LINE: Final = re.compile(
    r"^(?:[A-Z_]+ )?(?:\[[^\]]*\] )?(?:\[thrd:[^\]]*\]: )?(?:\S+?/\S+?: )?(?P<reason>.*)$"
)


class _Lines(logging.Handler):
    """Keeps the messages of the error lines librdkafka logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.errors.append(record.getMessage())


def reason_of(lines: list[str]) -> str | None:
    """The last librdkafka error line, without its thread and broker prefix and with
    the ``(after Nms in state X)`` tail dropped."""
    for line in reversed(lines):
        match = _LINE.match(line)
        text = match.group("reason") if match else line
        text = re.sub(r"\s*\(after \d+ms in state \w+\)\s*$", "", text).strip()
        if text and "brokers are down" not in text:
            return text
    return None


def _unreachable(bootstrap: str, timeout_s: float, lines: _Lines, error: str) -> str:
    reason = reason_of(lines.errors) or error
    if "authentication" in reason.lower():
        return f"Kafka at {bootstrap} refused the login: {reason}"
    if "closed by peer" in reason or "Disconnected" in reason:
        reason += " (does the listener want TLS or SASL? set security.protocol)"
    return f"no answer from Kafka at {bootstrap} within {timeout_s:g} s: {reason}"


def probe(
    where: Where,
    *,
    topics: Iterable[str] = (),
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
) -> Any:
    """The cluster's metadata (confluent-kafka's ``ClusterMetadata``), asked for within
    ``timeout_s`` seconds. Raises :class:`~atomickafka.errors.KafkaUnreachableError`
    when no broker answers, :class:`~atomickafka.errors.UnknownTopicError` when one of
    ``topics`` does not exist."""
    connection = connection_of(where)
    bootstrap = connection.bootstrap
    lines = _Lines()
    quiet = logging.Logger("atomickafka.librdkafka.probe")  # not registered: no parents
    quiet.addHandler(lines)
    admin = AdminClient(connection.admin_config(), logger=quiet)
    deadline = time.monotonic() + timeout_s
    while True:  # short tries, so that a refused login ends the wait at once
        try:
            metadata = admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            break
        except KafkaException as exc:
            admin.poll(0)  # serves the log lines librdkafka queued meanwhile
            login_refused = any("authentication" in line.lower() for line in lines.errors)
            if not login_refused and time.monotonic() < deadline:
                continue
            err = exc.args[0] if exc.args else None
            text = err.str() if isinstance(err, KafkaError) else str(exc)
            raise KafkaUnreachableError(_unreachable(bootstrap, timeout_s, lines, text)) from None
    missing = [t for t in dict.fromkeys(topics) if t not in metadata.topics]
    if missing:
        names = ", ".join(missing)
        raise UnknownTopicError(
            f"topic{'s' if len(missing) > 1 else ''} {names} not found at {bootstrap}"
        )
    return metadata
