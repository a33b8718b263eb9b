"""The producer wrapper without a broker (a closed loopback port): a full queue is waited
out for a bounded time, closing purges what was not acknowledged, librdkafka's own
log lines reach Python's logging, and a client names each message it did not write."""

from __future__ import annotations

import functools
import logging
import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Message as KafkaMessage

from atomickafka.client import AtomicKafkaClient, DeliveryError
from atomickafka.core.raw import raw_client_record
from atomickafka.errors import AtomicKafkaError, QueueFullError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.consumer import make_consumer
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER

NOWHERE = "127.0.0.1:9"  # nothing listens there: every connection is refused


def test_a_queue_that_stays_full_raises_after_the_wait() -> None:
    producer = RecordProducer(Connection(NOWHERE, {"queue.buffering.max.messages": "1"}))
    producer.queue_wait_s = 0.3
    with producer:
        producer.send("t", b"first")
        assert not producer.send_if_room("t", b"status")  # no room, and no wait
        started = time.monotonic()
        with pytest.raises(QueueFullError, match="stayed full") as raised:
            producer.send("t", b"second")
        assert 0.3 <= time.monotonic() - started < 5
        assert isinstance(raised.value, AtomicKafkaError)
        assert producer.close(timeout_s=0.1) == 1  # the first record, never acknowledged


def test_close_reports_what_was_not_acknowledged_and_purges_it() -> None:
    reports: list[KafkaError | None] = []

    def on_delivery(err: KafkaError | None, _msg: KafkaMessage) -> None:
        reports.append(err)

    producer = RecordProducer(NOWHERE)
    producer.send("t", b"x", on_delivery=on_delivery)
    assert producer.close(timeout_s=0.2) == 1
    assert len(reports) == 1 and reports[0] is not None  # purged, and told so
    assert producer.closed and producer.close() == 0 and len(producer) == 0
    with pytest.raises(RuntimeError, match="closed"):
        producer.send("t", b"y")


def test_librdkafka_log_lines_reach_the_python_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER.name)
    consumer = make_consumer(NOWHERE)
    producer = RecordProducer(Connection(NOWHERE, {"debug": "broker"}))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not caplog.records:
            producer.poll(0.1)
            consumer.poll(0.1)
    finally:
        producer.close(0)
        consumer.close()
    assert caplog.records, "no librdkafka log line arrived"
    assert {r.name for r in caplog.records} == {LIBRDKAFKA_LOGGER.name}


def test_a_client_message_not_written_is_named_once_whatever_refused_its_records() -> None:
    """A message sent without ``on_delivery`` has no per-message state but its id in its
    records' callback (client/client.py): each message not written is named once,
    whether the broker never took a record (purged at close) or ``produce`` refused it
    on the spot."""
    client = AtomicKafkaClient(NOWHERE)
    _, value, headers = raw_client_record("c-7", ("A", "B"), {"n": 1})
    producer = RecordProducer(Connection(NOWHERE, {"message.max.bytes": "1000"}))
    report = functools.partial(client._on_record, "c-7")
    for topic in ("A", "B"):  # two records of one message, never acknowledged
        producer.send(topic, value, headers=list(headers), on_delivery=report)
    producer.send("A", b"x" * 5000, headers=list(headers), on_delivery=report)
    _, other_value, other = raw_client_record("c-8", ("A",), 2)
    report = functools.partial(client._on_record, "c-8")
    producer.send("A", other_value, headers=list(other), on_delivery=report)
    assert producer.close(timeout_s=0.2) == 3  # the one refused by produce is not queued
    with pytest.raises(DeliveryError, match="2 messages not written; first: c-7") as raised:
        client.flush()
    assert [m for m, _ in raised.value.failures] == ["c-7", "c-8"]
