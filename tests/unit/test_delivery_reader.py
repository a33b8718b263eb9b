"""The client's DeliveryReader hides repeats: by order key for AtomicKafka's ordered
delivery topics, by id for writers that promise no order (the evaluation's bare pipe)."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from atomickafka.client import ConfigError, DeliveryReader
from atomickafka.client.reader import WARN_EVERY_S
from atomickafka.core.engine import Engine
from atomickafka.core.reader import DELIVERY_LEAD_US, PlainRecord
from atomickafka.core.wire import client_message, decode_record, encode_delivery
from atomickafka.logs import Throttle

#: Nothing listens here: building a reader starts no connection until it reads.
NOWHERE = "127.0.0.1:9"
NOW_MS = 1_795_000_000_000


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
    """The same delivery again is an exact repeat; one below the last that was never
    handed out is out of order (issue 26, item 2: it was counted as a repeat)."""
    first, second = _two_deliveries()
    with DeliveryReader(NOWHERE, "A") as reader:
        assert _taken(reader, [second, first, second]) == ["c-2"]
        assert (reader.repeats, reader.out_of_order) == (1, 1)


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


def _delivery_at(mid: str, stamp: int, *, at_ms: int = NOW_MS, offset: int = 0) -> PlainRecord:
    """A delivery of A under A's node's id, written at ``at_ms`` (its Kafka time)."""
    message = decode_record(_two_deliveries()[0].value() or b"")[0]
    value = encode_delivery(message._replace(messageID=mid, timeStamp=stamp))
    return PlainRecord(value, topic="A", offset=offset, timestamp_ms=at_ms)


def _client_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "atomickafka.client"]


def test_a_delivery_no_node_can_have_written_yet_hides_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 26, item 2: one record under the node's id with a timestamp ahead of any
    node's clock (the engine's clock stays within a minute of the log's time) made the
    reader drop every later genuine delivery as a repeat, silently. It is foreign now:
    skipped, counted, logged; the genuine deliveries after it are handed out."""
    forged = _delivery_at("forged", (NOW_MS + DELIVERY_LEAD_US // 1000) * 1000 + 1, offset=0)
    genuine = [_delivery_at(f"g{i}", 10 + i, offset=1 + i) for i in range(3)]
    with caplog.at_level(logging.WARNING, "atomickafka.client"), DeliveryReader(NOWHERE, "A") as r:
        assert _taken(r, [forged, *genuine]) == ["g0", "g1", "g2"]
        assert (r.foreign, r.repeats, r.out_of_order) == (1, 0, 0)
        assert r._last == (12, 0, "g2")
    (line,) = _client_lines(caplog)
    assert "offset 0" in line and "not written by its node or merger" in line


def test_a_delivery_to_other_destinations_is_foreign() -> None:
    message = decode_record(_two_deliveries()[0].value() or b"")[0]
    elsewhere = PlainRecord(encode_delivery(message._replace(topic=("B",))), topic="A")
    with DeliveryReader(NOWHERE, "A") as reader:
        assert _taken(reader, [elsewhere]) == [] and reader.foreign == 1


def test_out_of_order_records_are_reported_and_never_move_the_position(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plausible forgery (the node's id, a timestamp a clock could have) cannot be
    told from a delivery without signing: it is handed out, and the genuine deliveries
    below it are then out of order -- never handed out as the forgery's successors,
    never moving the position, but counted and reported, one warning a period with
    the count of those held back."""
    high = _delivery_at("high", 1_000_000, offset=0)
    below = [_delivery_at(f"g{i}", 10 + i, offset=1 + i) for i in range(5)]
    with caplog.at_level(logging.WARNING, "atomickafka.client"), DeliveryReader(NOWHERE, "A") as r:
        clock = [0.0]
        r._warnings = Throttle(WARN_EVERY_S, clock=lambda: clock[0])
        assert _taken(r, [high, *below, high]) == ["high"]
        assert (r.out_of_order, r.repeats) == (5, 1)
        assert r._last == (1_000_000, 0, "high")
        clock[0] += WARN_EVERY_S  # the next period
        assert _taken(r, [_delivery_at("g9", 20, offset=9)]) == []
    first, later = _client_lines(caplog)
    assert "offset 1" in first and "out of order" not in first  # the record's own offset
    assert "[1000000, 0, 'high'], offset 0" in first and "[10, 0, 'g0']" in first
    assert "offset 9" in later and "(4 more such records since the last warning)" in later


def test_an_exact_repeat_is_one_of_the_recent_deliveries_again() -> None:
    """At-least-once: after a crash a node writes its last deliveries again, the same
    keys and digests; those are repeats, not out of order."""
    records = [_delivery_at(f"g{i}", 10 + i, offset=i) for i in range(4)]
    again = [_delivery_at(f"g{i}", 10 + i, offset=4 + i) for i in range(2, 4)]
    altered = decode_record(records[3].value() or b"")[0]._replace(value=b'"another value"')
    changed = PlainRecord(encode_delivery(altered), topic="A", offset=8, timestamp_ms=NOW_MS)
    with DeliveryReader(NOWHERE, "A") as reader:
        assert _taken(reader, [*records, *again, changed]) == ["g0", "g1", "g2", "g3"]
        assert (reader.repeats, reader.out_of_order) == (2, 1)


def test_a_range_reader_starts_at_an_offset_and_never_in_a_group() -> None:
    """``start_offset`` (the Spark source's ranges) is an offset, for a reader without a
    group; anything else is refused with a ConfigError, before a consumer is made."""
    for bad in ({"start_offset": -1}, {"start_offset": 3, "group": "g"}):
        with pytest.raises(ConfigError, match="start_offset is an offset"):
            DeliveryReader(NOWHERE, "A", **bad)
