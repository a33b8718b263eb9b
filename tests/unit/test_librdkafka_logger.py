"""librdkafka's own log lines reach the project's logger (issue 14): every Kafka client
the project builds passes ``logger=`` (the project's constructors
:func:`~atomickafka.kafka.admin.admin_client`, :func:`~atomickafka.kafka.consumer.
make_consumer` and :class:`~atomickafka.kafka.producer.RecordProducer` pass
:data:`~atomickafka.kafka.settings.LIBRDKAFKA_LOGGER`)."""

from __future__ import annotations

import ast
from pathlib import Path

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
    import logging  # noqa: PLC0415

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
