"""The transactional writer's guard against a librdkafka call that never returns
(librdkafka issues #5456 and #5511: ``send_offsets_to_transaction`` can block for ever
once the group coordinator's broker dies); no Kafka: the producer is a stand-in."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from atomickafka.node import writers
from atomickafka.node.batch import OutKind, OutRecord
from atomickafka.node.writers import (
    BatchWriteError,
    ClientWedgedError,
    FencedError,
    TransactionalWriter,
    bounded_call,
)


def test_a_call_that_returns_in_time_is_just_run() -> None:
    ran: list[int] = []
    bounded_call(lambda: ran.append(1), 5, "appending")
    assert ran == [1]


def test_what_the_call_raises_reaches_the_caller() -> None:
    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        bounded_call(fail, 5, "failing")


def test_a_call_that_hangs_is_given_up_after_its_bound() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(ClientWedgedError, match=r"did not return from waiting within 0\.2 s"):
        bounded_call(lambda: release.wait(30), 0.2, "waiting")
    assert 0.2 <= time.monotonic() - started < 5
    release.set()  # let the daemon thread end


class HangingProducer:
    """A transactional producer whose ``send_offsets_to_transaction`` blocks."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, topic: str, value: bytes | None, **_: Any) -> None:
        self.calls.append(f"produce {topic}")

    def send_offsets_to_transaction(self, *_: Any) -> None:
        self.calls.append("send_offsets")
        self.release.wait(30)

    def commit_transaction(self, *_: Any) -> None:
        self.calls.append("commit")

    def abort_transaction(self, *_: Any) -> None:
        self.calls.append("abort")

    def flush(self, *_: Any) -> int:
        self.calls.append("flush")
        return 0


class GroupConsumer:
    def consumer_group_metadata(self) -> object:
        return object()


def _writer(producer: object) -> TransactionalWriter:
    writer = object.__new__(TransactionalWriter)  # without the broker its init needs
    writer._producer = producer  # type: ignore[assignment]
    writer._consumer = GroupConsumer()  # type: ignore[assignment]
    writer._input = "in"
    writer._last_commit = 0.0
    writer.wedged = False
    return writer


class FencedProducer(HangingProducer):
    """A producer a newer instance fenced while it was paused: ``produce`` fails with a
    plain fatal error, and the transactional calls name the fence (as librdkafka does)."""

    def produce(self, topic: str, value: bytes | None, **_: Any) -> None:
        self.calls.append(f"produce {topic}")
        raise KafkaException(KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True))

    def abort_transaction(self, *_: Any) -> None:
        self.calls.append("abort")
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance"))


def test_a_fence_that_surfaces_as_a_fatal_produce_error_is_a_fence() -> None:
    """The zombie of the fault test: its first write after waking fails in ``produce``
    with "Local: Fatal error"; the abort says it was fenced, so the instance stops as
    fenced (exit status 4), not as a failed write (1)."""
    producer = FencedProducer()
    with pytest.raises(FencedError, match="another instance of this role took over"):
        _writer(producer).write([OutRecord(OutKind.DELIVERY, "out", b"v", None)], {0: 7})
    assert producer.calls == ["begin", "produce out", "abort"]


def test_a_hanging_offsets_call_wedges_the_writer_which_then_touches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writers, "SEND_OFFSETS_TIMEOUT_S", 0.1)
    monkeypatch.setattr(writers, "WEDGE_MARGIN_S", 0.1)
    producer = HangingProducer()
    writer = _writer(producer)
    record = OutRecord(OutKind.DELIVERY, "out", b"v", None)
    with pytest.raises(ClientWedgedError) as raised:
        writer.write([record], {0: 7})
    assert isinstance(raised.value, BatchWriteError)  # the shell's restart path
    assert writer.wedged
    writer.close()
    # no abort, no commit, no flush: calls on a hung client could hang with it
    assert producer.calls == ["begin", "produce out", "send_offsets"]
    producer.release.set()
