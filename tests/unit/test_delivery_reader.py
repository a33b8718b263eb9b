"""The client's DeliveryReader hides repeats: by order key for AtomicKafka's ordered
delivery topics, by id for writers that promise no order (the evaluation's bare pipe)."""

from __future__ import annotations

from typing import Any, cast

from atomickafka.client import DeliveryReader
from atomickafka.core.engine import Engine
from atomickafka.core.reader import PlainRecord
from atomickafka.core.wire import client_message, encode_delivery

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
