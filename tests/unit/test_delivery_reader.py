"""The client's DeliveryReader hides repeats: by order key for AtomicKafka's ordered
delivery topics, by id for writers that promise no order (the evaluation's bare pipe)."""

from __future__ import annotations

from typing import Any, cast

from atomickafka.client import DeliveryReader
from atomickafka.core.engine import Engine
from atomickafka.core.reader import PlainRecord
from atomickafka.core.wire import client_message, decode_record, encode_delivery

#: Nothing listens here: building a reader starts no connection until it reads.
NOWHERE = "127.0.0.1:9"


def _two_deliveries() -> list[PlainRecord]:
    node = Engine("A")
    outputs = node.step(
        [client_message("c-1", ["A"], 1, "c"), client_message("c-2", ["A"], 2, "c")]
    ).outputs
    return [PlainRecord(encode_delivery(out.message)) for out in outputs]


def _taken(reader: DeliveryReader, records: list[PlainRecord]) -> list[str]:
    taken = [reader._take(cast(Any, record)) for record in records]
    return [m.messageID for m in taken if m is not None]


def test_an_ordered_reader_drops_anything_at_or_below_the_last_delivery() -> None:
    first, second = _two_deliveries()
    with DeliveryReader(NOWHERE, "A") as reader:
        assert _taken(reader, [second, first, second]) == ["c-2"]
        assert reader.repeats == 2


def test_an_unordered_reader_drops_only_ids_it_read_before() -> None:
    first, second = _two_deliveries()
    with DeliveryReader(NOWHERE, "A", ordered=False) as reader:
        assert _taken(reader, [second, first, second, first]) == ["c-2", "c-1"]
        assert reader.repeats == 2


def test_records_that_are_no_delivery_of_the_topic_are_skipped_and_counted() -> None:
    """What someone else wrote into a delivery topic is never handed out, and each kind
    is counted: not a delivery at all (``skipped``), a delivery from a writer that is
    not the topic's node or merger (``foreign``), one forged under its node's id without
    the secret (``forged``, with signing on)."""
    first, _ = _two_deliveries()
    message = decode_record(first.value() or b"")[0]
    someone = PlainRecord(encode_delivery(message._replace(messageID="x", senderID="someone")))
    others = [PlainRecord(b"not json"), PlainRecord(b'{"messageType": "TickMessage"}')]
    with DeliveryReader(NOWHERE, "A", secret="reader-tests-secret-0123456789ab") as reader:
        assert _taken(reader, [*others, someone, first]) == []
        assert (reader.skipped, reader.foreign, reader.forged) == (2, 1, 1)
