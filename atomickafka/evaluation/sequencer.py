"""The single-sequencer baseline: what a Kafka user does without AtomicKafka.

Every message goes through one partition of one topic (the *sequencer* topic), which
puts all of them in one order; one consumer reads it and writes each message to each of
its destinations. Every destination then holds its messages in the sequencer's order.
The records keep AtomicKafka's wire format (a ``ClientMessage`` in, one
``DeliveryMessage`` per destination out, ``timeStamp`` = the sequencer offset,
``senderID`` = ``sequencer``), so the same reader, checker, recording and metrics
apply. Its limit is the point of the comparison: one partition and one fan-out process
carry everything, whatever the destinations.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from confluent_kafka import KafkaError

from atomickafka.client import DeliveryError
from atomickafka.core.wire import (
    MessageError,
    MessageType,
    client_message,
    decode_record,
    encode_client,
    encode_delivery,
)
from atomickafka.kafka.consumer import consume_batch, make_consumer, usable
from atomickafka.kafka.producer import RecordProducer, type_headers

__all__ = ["SEQUENCER_ID", "SequencerSender", "fan_out_process", "running_sequencer"]

log = logging.getLogger("atomickafka.eval.sequencer")

#: ``senderID`` of the fan-out process's records (and its node name in the metrics).
SEQUENCER_ID: Final = "sequencer"


class SequencerSender:
    """Writes ClientMessages to the sequencer topic (the sending side of the baseline)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        client_id: str,
        *,
        config: Mapping[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.client_id = client_id
        self.id_prefix = f"{client_id}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._failures: list[tuple[str, KafkaError]] = []
        self._producer = RecordProducer(bootstrap, config, **{"client.id": client_id})

    def send(self, value: Any, destinations: Iterable[str], *, via: str | None = None) -> str:
        """Write one message for ``destinations`` to the sequencer; return its id."""
        del via  # there is one way in
        message_id = f"{self.id_prefix}-{next(self._seq)}"
        record = client_message(message_id, destinations, value, self.client_id)

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self._failures.append((message_id, err))

        self._producer.send(
            self.topic,
            encode_client(record),
            headers=type_headers(MessageType.CLIENT),
            on_delivery=on_delivery,
        )
        self._producer.poll(0)
        return message_id

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch the sequencer topic's metadata now."""
        del topics
        self._producer.warm_up([self.topic], timeout_s)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for every write; raise :class:`DeliveryError` (as the client does) if any
        failed."""
        remaining = self._producer.flush(timeout_s)
        if remaining or self._failures:
            raise DeliveryError(list(self._failures), remaining, timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Release the producer, waiting up to ``timeout_s`` for what was sent."""
        self._producer.close(timeout_s)


def _fan_out(producer: RecordProducer, record: Any, offset: int) -> int:
    """Write one sequenced message to each destination; return how many records."""
    raw = record.value()
    if raw is None:
        return 0
    try:
        (message,) = decode_record(raw)
    except (MessageError, ValueError) as exc:
        log.warning("skipping a malformed sequencer record at offset %d: %s", offset, exc)
        return 0
    headers = type_headers(MessageType.DELIVERY)
    for destination in message.topic:
        delivery = message._replace(
            messageType=MessageType.DELIVERY,
            senderID=SEQUENCER_ID,
            sentFromTopic=destination,
            timeStamp=offset,
        )
        producer.send(destination, encode_delivery(delivery), headers=headers)
    producer.poll(0)
    return len(message.topic)


def fan_out_process(
    bootstrap: str,
    topic: str,
    ready: Any,
    stop: Any,
    overrides: Mapping[str, str],
    max_seconds: float,
) -> None:
    """Child process: read the sequencer topic from the start, in order, and write
    every message to each of its destinations until ``stop`` is set (or ``max_seconds``)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: PLC0415

    consumer = make_consumer(bootstrap, None, overrides)
    producer = RecordProducer(bootstrap, overrides, **{"client.id": SEQUENCER_ID})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    ready.set()
    deadline = time.monotonic() + max_seconds
    written = 0
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            for record in usable(consume_batch(consumer, 5000, 0.05)):
                offset = record.offset()
                written += _fan_out(producer, record, offset if offset is not None else 0)
    finally:
        producer.flush(60)
        consumer.close()
        log.info("sequencer stopped", extra={"fields": {"written": written}})


@contextmanager
def running_sequencer(
    bootstrap: str,
    topic: str,
    *,
    overrides: Mapping[str, str] | None = None,
    max_seconds: float = 3600.0,
    start_timeout_s: float = 60.0,
) -> Iterator[mp.process.BaseProcess]:
    """The fan-out process for the block (the topics must exist)."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(
        target=fan_out_process,
        args=(bootstrap, topic, ready, stop, dict(overrides or {}), max_seconds),
        name="atomickafka-sequencer",
    )
    proc.start()
    try:
        if not ready.wait(start_timeout_s):
            raise TimeoutError(f"the sequencer did not start within {start_timeout_s:.0f}s")
        yield proc
    finally:
        stop.set()
        proc.join(90)
        if proc.is_alive():
            proc.terminate()
            proc.join(10)
