"""The consumer helpers' end-of-partition logic, on scripted consumers (no broker: the
helpers run against one in every integration test)."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import KafkaError

from atomickafka.errors import TimedOutError
from atomickafka.kafka.consumer import until_partition_ends


class Event:
    """A record or an end-of-partition event, as ``Consumer.poll`` returns them."""

    def __init__(self, partition: int, offset: int, *, eof: bool = False) -> None:
        self._partition, self._offset = partition, offset
        self._error = KafkaError(KafkaError._PARTITION_EOF) if eof else None

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class ScriptedConsumer:
    """Hands out its events one per ``poll``, then nothing."""

    def __init__(self, events: list[Event]) -> None:
        self.events = list(events)

    def poll(self, timeout: float) -> Event | None:
        return self.events.pop(0) if self.events else None

    def consume(self, num_messages: int, timeout: float) -> list[Event]:
        return []


def _offsets(
    events: list[Event], ends: dict[int, int] | None
) -> list[tuple[int | None, int | None]]:
    consumer = ScriptedConsumer(events)
    deadline = time.monotonic() + 5
    read = until_partition_ends(consumer, {0, 1}, deadline, "t", ends)  # type: ignore[arg-type]
    return [(r.partition(), r.offset()) for r in read]


def test_an_end_reported_before_the_known_end_is_read_past(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The CI run of b1c525e read nothing of a topic of 1,776 committed records: an end
    reported too early must not end the read when the watermarks said more is there."""
    events = [
        Event(0, 0, eof=True),  # too early: partition 0 ended at 2 when the read began
        Event(1, 0, eof=True),  # partition 1 was empty
        Event(0, 0),
        Event(0, 1),
        Event(0, 2, eof=True),
    ]
    with caplog.at_level(logging.WARNING, logger="atomickafka.kafka.consumer"):
        assert _offsets(events, {0: 2, 1: 0}) == [(0, 0), (0, 1)]
    assert "t[0] reported its end at offset 0, before 2" in caplog.text
    # without the known ends, the first end reported ends a partition's read
    assert _offsets(events, None) == []


def test_a_partition_that_never_reaches_its_known_end_times_out() -> None:
    consumer = ScriptedConsumer([Event(0, 0, eof=True), Event(1, 0, eof=True)])
    read = until_partition_ends(consumer, {0, 1}, time.monotonic() + 1, "t", {0: 5})  # type: ignore[arg-type]
    with pytest.raises(TimedOutError, match="could not read t"):
        list(read)
