"""A reader starts where it is asked to, at once: one made at the end reads every record
written after it was made, and one made at the beginning does not wait half a second
for librdkafka's retried offset lookup (:func:`~atomickafka.kafka.consumer.assign_from`).

A fresh consumer assigned at ``OFFSET_END`` took its end 500 ms late (librdkafka looks a
logical offset up once it knows the leader, and retries 500 ms later when it does not):
a delivery written within that half second was never read by a reader made before it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition

from atomickafka.client import AtomicKafkaClient, Delivery
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable
from tests.integration.harness import Sent, assert_order_checked, running_cluster

pytestmark = pytest.mark.integration


def _read(consumer: Consumer, seconds: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out += [r.value() or b"" for r in usable(consume_batch(consumer, 100, 0.1))]
    return out


def test_a_consumer_assigned_at_the_end_reads_what_is_written_right_after(
    kafka_bootstrap: str, topic_factory: Callable[[], str], create_topic: Callable[..., str]
) -> None:
    """Each of three fresh consumers is assigned at the end, then one record is written
    at once: every consumer reads it (before, each missed it), and nothing before it."""
    topic = create_topic(topic_factory())
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b"before")
    assert producer.flush(30) == 0
    for i in range(3):
        consumer = make_consumer(kafka_bootstrap)
        try:
            assign_from(consumer, [TopicPartition(topic, 0, OFFSET_END)])
            producer.produce(topic, b"after-%d" % i)
            assert producer.flush(30) == 0
            assert _read(consumer, 3.0) == [b"after-%d" % i]
        finally:
            consumer.close()


def test_the_beginning_and_a_topic_not_created_yet(
    kafka_bootstrap: str, topic_factory: Callable[[], str], create_topic: Callable[..., str]
) -> None:
    """At the beginning every record is read; a topic that does not exist yet ends at
    offset 0 (whatever it will hold is written after the call)."""
    topic = create_topic(topic_factory())
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    consumer = make_consumer(kafka_bootstrap)
    missing = topic_factory()
    try:
        assign_from(consumer, [TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert _read(consumer, 2.0) == [b"%d" % i for i in range(5)]
        assign_from(consumer, [TopicPartition(missing, 0, OFFSET_END)])
        assert [(p.topic, p.offset) for p in consumer.assignment()] == [(missing, 0)]
    finally:
        consumer.close()


def test_a_reader_made_before_a_send_reads_its_delivery(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """The filtering client's reader at the end (``from_beginning=False``, as ``tail``
    without ``--from-beginning``) reads the delivery of a message sent right after it
    was made: three times, each with a new reader, checked by the order checker."""
    topics = [topic_factory(), topic_factory()]
    sent: list[Sent] = []
    got: dict[str, list[Delivery]] = {t: [] for t in topics}
    with (
        running_cluster(kafka_bootstrap, topics, log_dir=tmp_path),
        AtomicKafkaClient(kafka_bootstrap) as client,
    ):
        client.send({"warm": True}, topics)
        client.flush()
        for t in topics:  # the warm-up delivered everywhere: the readers below start after it
            with client.reader(t) as warm:
                assert len(list(warm.deliveries(timeout_s=30, max_messages=1))) == 1
        for i in range(3):
            readers = {t: client.reader(t, from_beginning=False) for t in topics}
            try:
                value = {"n": i}
                mid = client.send(value, topics)
                client.flush()
                sent.append(Sent(mid, tuple(topics), value, ""))
                for t, reader in readers.items():
                    got[t] += list(reader.deliveries(timeout_s=30, max_messages=1))
            finally:
                for reader in readers.values():
                    reader.close()
    assert [[d.messageID for d in got[t]] for t in topics] == [[s.messageID for s in sent]] * 2
    assert_order_checked(sent, got)
