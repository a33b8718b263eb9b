"""The plain sequencer (``seq-alo``): what a Kafka user does without AtomicKafka, at
its simplest -- at-least-once, no recovery.

Every message goes through one partition of one topic (the *sequencer* topic), which
puts all of them in one order; one consumer reads it and writes each message to each of
its destinations. Every destination then holds its messages in the sequencer's order.
The records keep AtomicKafka's wire format (a ``ClientMessage`` in, one
``DeliveryMessage`` per destination out, ``timeStamp`` = the sequencer offset,
``senderID`` = ``sequencer``), so the same reader, checker, recording and metrics
apply. Its limit is the point of the comparison: one partition and one fan-out process
carry everything, whatever the destinations.

It promises less than AtomicKafka's default: it reads its partition from offset 0 every
time it starts and commits nothing (after a crash it writes everything again), uses no
transaction and no fencing (a zombie writes beside its successor). The exactly-once
sequencers are :mod:`~atomickafka.evaluation.load.seq_eos` (Python, transactional) and
the Kafka Streams application (:mod:`~atomickafka.evaluation.load.streams`); every
sequencer's clients write through :class:`SequencerSender`, and each fans a message
out with :func:`fan_out`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Final

from atomickafka.core.wire import (
    MessageError,
    MessageType,
    client_message,
    decode_record,
    encode_client,
)
from atomickafka.evaluation.load.senders import ProducingSender, write_deliveries
from atomickafka.kafka.connection import Where
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable
from atomickafka.kafka.producer import RecordProducer, type_headers

__all__ = ["SEQUENCER_ID", "SequencerSender", "fan_out", "fan_out_process"]

log = logging.getLogger("atomickafka.eval.sequencer")

#: ``senderID`` of the fan-out process's records (and its node name in the metrics).
SEQUENCER_ID: Final = "sequencer"


class SequencerSender(ProducingSender):
    """Writes ClientMessages to the sequencer topic (the sending side of the baseline)."""

    def __init__(self, where: Where, topic: str, client_id: str) -> None:
        super().__init__(where, client_id)
        self.topic = topic

    def send(self, value: Any, destinations: Iterable[str], *, via: str | None = None) -> str:
        """Write one message for ``destinations`` to the sequencer; return its id."""
        del via  # there is one way in
        _, message_id = self._next_id()
        record = client_message(message_id, destinations, value, self.client_id)
        self._producer.send(
            self.topic,
            encode_client(record),
            headers=type_headers(MessageType.CLIENT),
            on_delivery=self._report_for(message_id),
        )
        self._producer.poll(0)
        return message_id

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch the sequencer topic's metadata now."""
        del topics
        self._producer.warm_up([self.topic], timeout_s)


def fan_out(producer: RecordProducer, record: Any, sender_id: str) -> int:
    """Write the sequenced message ``record`` holds to each of its destinations as
    ``sender_id``, its offset as the timestamp; return how many records (0: a record
    that is no ClientMessage, skipped with a warning)."""
    offset = record.offset() or 0
    raw = record.value()
    if raw is None:
        return 0
    try:
        (message,) = decode_record(raw)
    except (MessageError, ValueError) as exc:
        log.warning("skipping a malformed sequencer record at offset %d: %s", offset, exc)
        return 0
    if message.messageType != MessageType.CLIENT:
        log.warning("skipping a sequencer record at offset %d: not a ClientMessage", offset)
        return 0
    return write_deliveries(producer, message, sender_id, offset)


def fan_out_process(
    where: Where,
    topic: str,
    ready: Any,
    stop: Any,
    max_seconds: float,
) -> None:
    """Child process: read the sequencer topic from the start, in order, and write
    every message to each of its destinations until ``stop`` is set (or ``max_seconds``)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: PLC0415

    consumer = make_consumer(where)
    producer = RecordProducer(where, **{"client.id": SEQUENCER_ID})
    assign_from(consumer, [TopicPartition(topic, 0, OFFSET_BEGINNING)])
    ready.set()
    deadline = time.monotonic() + max_seconds
    written = 0
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            for record in usable(consume_batch(consumer, 5000, 0.05)):
                written += fan_out(producer, record, SEQUENCER_ID)
    finally:
        producer.flush(60)
        consumer.close()
        log.info("sequencer stopped", extra={"fields": {"written": written}})
