"""Where the live audit reports a violation: one JSON record in the audit topic, one
JSON log line, and the caller's own callback (tests, the evaluation)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import orjson
from confluent_kafka import KafkaError
from confluent_kafka import Message as KafkaMessage

from atomickafka.audit.records import Violation
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.producer import RecordProducer

__all__ = ["ViolationSink"]

log = logging.getLogger("atomickafka.audit")

#: How long closing waits for violation records still queued (seconds).
_CLOSE_TIMEOUT_S: Final = 10.0


class ViolationSink:
    """Reports violations: to ``audit_topic`` (keyed by the topic they concern; ``None``:
    no topic), to the log at WARNING with the violation's fields, and to ``callback``."""

    def __init__(
        self,
        connection: Connection,
        audit_topic: str | None,
        callback: Callable[[Violation], None] | None = None,
    ) -> None:
        self.audit_topic = audit_topic
        self._callback = callback
        self._producer: RecordProducer | None = None
        self.failed = 0
        if audit_topic is not None:
            ensure_topics(admin_client(connection), [audit_topic])
            self._producer = RecordProducer(connection)

    def emit(self, violation: Violation) -> None:
        """Report one violation everywhere this sink reports."""
        data = violation.to_json()
        log.warning(violation.text, extra={"fields": {"violation": data}})
        if self._producer is not None and self.audit_topic is not None:
            self._producer.send(
                self.audit_topic,
                orjson.dumps(data),
                key=violation.topic.encode(),
                on_delivery=self._delivered,
            )
        if self._callback is not None:
            self._callback(violation)

    def _delivered(self, err: KafkaError | None, record: KafkaMessage) -> None:
        if err is not None:
            self.failed += 1
            log.error("a violation record was not written to %s: %s", self.audit_topic, err)

    def poll(self) -> None:
        """Serve delivery reports."""
        if self._producer is not None:
            self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every violation reported is written; True when nothing is left."""
        if self._producer is None:
            return True
        return self._producer.flush(timeout_s) == 0

    def close(self) -> None:
        """Write what is queued (bounded wait) and release the producer."""
        if self._producer is not None:
            self._producer.close(_CLOSE_TIMEOUT_S)
            self._producer = None
