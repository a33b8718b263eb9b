"""librdkafka's own log lines reach the project's logger (issue 14): every Kafka client
the project builds passes ``logger=`` (the project's constructors
:func:`~atomickafka.kafka.admin.admin_client`, :func:`~atomickafka.kafka.consumer.
make_consumer` and :class:`~atomickafka.kafka.producer.RecordProducer` pass
:data:`~atomickafka.kafka.settings.LIBRDKAFKA_LOGGER`)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT.glob(f"{d}/**/*.py") for d in ("atomickafka", "client", "eval")]
CLIENTS = {"Consumer", "Producer", "AdminClient"}
#: Builds its config dict with a ``"logger"`` entry (a quieter logger while it waits for
#: a starting broker).
LOGGER_IN_CONFIG = {"atomickafka/localkafka/broker.py"}


def test_every_kafka_client_is_built_with_a_logger() -> None:
    bare = []
    for path in (p for group in SOURCES for p in group):
        name = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in CLIENTS or name in LOGGER_IN_CONFIG:
                continue
            if not any(k.arg == "logger" for k in node.keywords):
                bare.append(f"{name}:{node.lineno}: {node.func.id}(...) without logger=")
    assert not bare, "\n".join(bare)


def test_the_gapless_notice_is_not_logged_and_other_warnings_are() -> None:
    from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER  # noqa: PLC0415

    def passes(message: str) -> bool:
        record = logging.LogRecord(LIBRDKAFKA_LOGGER.name, 30, __file__, 1, message, None, None)
        return bool(LIBRDKAFKA_LOGGER.filter(record))

    notice = (
        "CONFWARN [rdkafka#producer-9] [thrd:app]: Configuration property "
        "enable.gapless.guarantee is experimental: When set to `true`, ..."
    )
    assert not passes(notice)
    assert passes("CONFWARN [rdkafka#producer-1] [thrd:app]: linger.ms is a producer property")
    assert passes("FAIL [rdkafka#consumer-3] [thrd:127.0.0.1:9092/1]: Connection refused")


def test_repeated_lines_are_logged_once_a_period_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 26, item 3: while a broker was down every client of every node logged each
    reconnect failure at error (280 lines/s). A kind of line -- what varies between
    clients and tries aside -- passes once a period; the next that passes says how many
    were held back, and a kind that stopped has its count said by ``flush``."""
    from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER, RepeatedLines  # noqa: PLC0415
    from atomickafka.logs import Throttle  # noqa: PLC0415

    now = [0.0]
    lines = RepeatedLines(30.0)
    lines.throttle = Throttle(30.0, clock=lambda: now[0])

    def line(client: int, after_ms: int, broker: int = 2) -> logging.LogRecord:
        text = (
            f"FAIL [rdkafka#consumer-{client}] [thrd:127.0.0.1:1909{broker}/{broker}]: "
            f"127.0.0.1:1909{broker}/{broker}: Connect to ipv4#127.0.0.1:1909{broker} failed: "
            f"Connection refused (after {after_ms}ms in state CONNECT)"
        )
        return logging.LogRecord(LIBRDKAFKA_LOGGER.name, logging.ERROR, "x", 1, text, None, None)

    passed = [r for i in range(100) if lines.filter(r := line(i % 7, i))]
    assert len(passed) == 1 and "more like it" not in passed[0].getMessage()
    assert lines.filter(line(1, 0, broker=4))  # another broker: another kind
    debug = logging.LogRecord(LIBRDKAFKA_LOGGER.name, logging.DEBUG, "x", 1, "x", None, None)
    assert all(lines.filter(debug) for _ in range(3))  # what is hidden anyway is not counted
    now[0] = 30.0
    again = line(3, 5)
    assert lines.filter(again) and "(99 more like it, not logged)" in again.getMessage()
    assert not lines.filter(line(4, 1)) and not lines.filter(line(5, 1))
    now[0] = 60.0
    with caplog.at_level(logging.WARNING, LIBRDKAFKA_LOGGER.name):
        lines.flush()
        lines.flush()  # said once
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.endswith("Connection refused  (2 more like it, not logged)"), said
