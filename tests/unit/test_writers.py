"""The transactional writer's guard against a librdkafka call that never returns
(librdkafka issues #5456 and #5511: ``send_offsets_to_transaction`` can block for ever
once the group coordinator's broker dies), and its rule that a producer is never used
again after a failed transaction (issue 39: Kafka's transaction anomalies); no Kafka:
the producer is a stand-in (tests/integration/test_netfaults.py delays a real commit)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

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

    def send(self, topic: str, value: bytes | None, **_: Any) -> None:
        """The wrapper's call (RecordProducer.send): librdkafka's produce underneath."""
        self.produce(topic, value)

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

    def close(self, *_: Any) -> int:
        self.calls.append("close")
        return 0


class GroupConsumer:
    """The node's consumer: its group metadata, and the group's committed offset."""

    def __init__(self, committed: int = -1001) -> None:
        self.offset = committed

    def consumer_group_metadata(self) -> object:
        return object()

    def committed(self, partitions: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.offset) for tp in partitions]


def _writer(producer: object) -> TransactionalWriter:
    writer = object.__new__(TransactionalWriter)  # without the broker its init needs
    writer._producer = producer  # type: ignore[assignment]
    writer._consumer = GroupConsumer()  # type: ignore[assignment]
    writer._group = writer._consumer.consumer_group_metadata()
    writer._input = "in"
    writer._last_commit = 0.0
    writer.wedged = False
    writer._hung = []
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
    replacements = [HangingProducer() for _ in range(writers.MAX_HUNG_PRODUCERS)]
    writer._new_producer = lambda: replacements[len(writer._hung) - 1]  # type: ignore[method-assign,assignment,return-value]
    record = OutRecord(OutKind.DELIVERY, "out", b"v", None)
    with pytest.raises(ClientWedgedError) as raised:
        writer.write([record], {0: 7})
    assert isinstance(raised.value, BatchWriteError)  # the shell's restart path
    assert writer.wedged and len(writer._hung) == writers.MAX_HUNG_PRODUCERS
    writer.close()
    # no abort, no commit, no flush: calls on a hung client could hang with it
    for hung in (producer, *replacements):
        assert hung.calls == ["begin", "produce out", "send_offsets"]
        hung.release.set()


def test_a_producer_hung_on_a_stale_coordinator_is_replaced_and_the_batch_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 26, item 3 (librdkafka #5511): a producer hung on the offsets of a group
    coordinator that left is left alone, a new producer of the role (which fences it)
    writes the batch again from its first record: no exit."""
    monkeypatch.setattr(writers, "SEND_OFFSETS_TIMEOUT_S", 0.1)
    monkeypatch.setattr(writers, "WEDGE_MARGIN_S", 0.1)
    hung, fresh = HangingProducer(), FlakyProducer()
    writer = _writer(hung)
    writer._new_producer = lambda: fresh  # type: ignore[method-assign,assignment,return-value]
    writer.write([RECORD], {0: 7})
    assert not writer.wedged and writer._hung == [hung]  # type: ignore[comparison-overlap]
    assert hung.calls == ["begin", "produce out", "send_offsets"]  # untouched since
    assert fresh.calls == ["begin", "produce out", "send_offsets", "commit"]
    hung.release.set()


class FlakyProducer(HangingProducer):
    """A transactional producer whose calls fail as a moving group coordinator makes
    them fail: each call named in ``failures`` raises its next error, then succeeds."""

    def __init__(self, **failures: list[KafkaError]) -> None:
        super().__init__()
        self.failures = failures

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        pending = self.failures.get(name)
        if pending:
            raise KafkaException(pending.pop(0))

    def send_offsets_to_transaction(self, *_: Any) -> None:
        self._maybe_fail("send_offsets")

    def commit_transaction(self, *_: Any) -> None:
        self._maybe_fail("commit")

    def abort_transaction(self, *_: Any) -> None:
        self._maybe_fail("abort")


LOADING = KafkaError(
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "Coordinator load in progress", retriable=True
)
NOT_COORDINATOR = KafkaError(KafkaError.NOT_COORDINATOR, "Not coordinator", retriable=True)
ABORTABLE = KafkaError(KafkaError._STATE, "transaction must be aborted", txn_requires_abort=True)
FATAL = KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True)
RECORD = OutRecord(OutKind.DELIVERY, "out", b"v", None)


def _quick(
    producer: object, monkeypatch: pytest.MonkeyPatch
) -> tuple[TransactionalWriter, list[int]]:
    monkeypatch.setattr(writers, "_RETRY_BACKOFF_S", (0.01, 0.02))
    monkeypatch.setattr(writers, "HEARTBEAT_S", 0.005)
    writer = _writer(producer)
    beats: list[int] = []
    writer.on_wait = lambda: beats.append(1)
    return writer, beats


def test_a_moving_coordinator_is_waited_out_not_an_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26, item 3: COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR (a coordinator
    refusing the request outright) from adding the offsets are retried in place: the
    batch is written once, by the one producer, and the shell was called back meanwhile."""
    producer = FlakyProducer(send_offsets=[LOADING, NOT_COORDINATOR])
    writer, beats = _quick(producer, monkeypatch)
    writer.write([RECORD], {0: 7})
    assert producer.calls == [
        "begin", "produce out", "send_offsets", "send_offsets", "send_offsets", "commit",
    ]  # fmt: skip
    assert beats and not writer.wedged and writer.replaced == 0


TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
ONCE = ["begin", "produce out", "send_offsets", "commit"]


def _replaced_by(writer: TransactionalWriter, fresh: HangingProducer) -> None:
    writer._new_producer = lambda: fresh  # type: ignore[method-assign,assignment,return-value]


def test_a_commit_that_timed_out_is_never_retried_on_that_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39, item 3: a commit that timed out may still reach the coordinator; called
    again on the same producer (as before), its delayed request could commit a later
    transaction of the same epoch. The producer is left, a new one of the role (which
    fences it) finds the offsets not committed and writes the batch again."""
    old, fresh = FlakyProducer(commit=[TIMED_OUT]), FlakyProducer()
    writer, _ = _quick(old, monkeypatch)
    writer._consumer = GroupConsumer(committed=3)  # type: ignore[assignment]
    _replaced_by(writer, fresh)
    writer.write([RECORD], {0: 7})
    assert old.calls[:4] == ONCE and old.calls.count("commit") == 1
    assert fresh.calls == ONCE
    assert (writer.replaced, writer.unknown_outcomes) == (1, 1)


def test_a_commit_that_timed_out_but_landed_is_not_written_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, fresh = FlakyProducer(commit=[TIMED_OUT]), FlakyProducer()
    writer, _ = _quick(old, monkeypatch)
    writer._consumer = GroupConsumer(committed=7)  # type: ignore[assignment]
    _replaced_by(writer, fresh)
    writer.write([RECORD], {0: 7})
    assert fresh.calls == [] and writer.unknown_outcomes == 1


def test_offsets_that_another_instance_committed_stop_the_instance_as_fenced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the new producer's init the group's offsets are neither the failed
    transaction's nor the last one's: another instance took the role and wrote (this
    one was cut off, its lease lost and given back meanwhile). Writing the batch again
    would write its deliveries twice and move the offsets back."""
    old = FlakyProducer(commit=[TIMED_OUT])
    writer, _ = _quick(old, monkeypatch)
    writer.committed_before = {0: 3}
    writer._consumer = GroupConsumer(committed=12)  # type: ignore[assignment]
    _replaced_by(writer, FlakyProducer())
    with pytest.raises(FencedError, match="another instance wrote as this role"):
        writer.write([RECORD], {0: 7})


def test_an_unknown_outcome_without_offsets_to_tell_ends_the_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A merger's transactions hold no input offsets: its restart, which resumes after
    the last delivery it finds in ``T``, tells instead."""
    old = FlakyProducer(commit=[TIMED_OUT])
    writer, _ = _quick(old, monkeypatch)
    _replaced_by(writer, FlakyProducer())
    with pytest.raises(BatchWriteError, match="whether that transaction committed is unknown"):
        writer.write([RECORD], None)


def test_a_lost_lease_stops_the_instance_instead_of_taking_the_producer_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node cut off from the brokers lost its lease long before its commit timed out;
    a new producer's init would fence the instance that took over. It stops as fenced."""
    monkeypatch.setattr(writers, "LEASE_WAIT_S", 0.05)
    old = FlakyProducer(commit=[TIMED_OUT])
    writer, _ = _quick(old, monkeypatch)
    writer.holds_role = lambda: False
    _replaced_by(writer, FlakyProducer())
    with pytest.raises(FencedError, match="lease was lost meanwhile and did not come back"):
        writer.write([RECORD], {0: 7})
    assert writer.replaced == 0


def test_a_lease_that_comes_back_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker cut off with the lease group's coordinator: every member loses its
    lease for a while, and gets it back. The writer waits for the shell to find it
    ours again, then goes on with a new producer (no exit, no takeover)."""
    answers = iter([False, False, True])
    old, fresh = FlakyProducer(commit=[TIMED_OUT]), FlakyProducer()
    writer, _ = _quick(old, monkeypatch)
    writer._consumer = GroupConsumer(committed=3)  # type: ignore[assignment]
    writer.holds_role = lambda: next(answers)
    _replaced_by(writer, fresh)
    writer.write([RECORD], {0: 7})
    assert fresh.calls == ONCE and writer.replaced == 1


def test_an_abortable_error_writes_the_batch_again_with_a_new_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The aborted transaction's producer is not reused: a produce of it still on its
    way would land in the next transaction of the same epoch (Jepsen's aborted read)."""
    old, fresh = FlakyProducer(commit=[ABORTABLE]), FlakyProducer()
    writer, _ = _quick(old, monkeypatch)
    _replaced_by(writer, fresh)
    writer.write([RECORD], {0: 7})
    assert old.calls[:4] == ONCE and fresh.calls == ONCE
    assert (writer.replaced, writer.unknown_outcomes) == (1, 0)


def test_retries_are_bounded_and_a_fatal_error_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    forever = FlakyProducer(send_offsets=[LOADING] * 10_000)
    writer, _ = _quick(forever, monkeypatch)
    writer.retry_s = 0.2
    with pytest.raises(BatchWriteError, match="adding the input offsets"):
        writer.write([RECORD], {0: 7})
    assert "commit" not in forever.calls and writer.replaced == 0
    fatal = FlakyProducer(commit=[FATAL])
    writer, _ = _quick(fatal, monkeypatch)
    with pytest.raises(BatchWriteError, match="Fatal error"):
        writer.write([RECORD], {0: 7})
    assert fatal.calls == ["begin", "produce out", "send_offsets", "commit", "abort"]


def test_every_writer_is_one_interface_that_the_shells_never_question() -> None:
    """Issue 27 item 6: the node's and the merger's shells hold a :class:`Writer` and
    call it; none asks which writer it has (no ``isinstance`` on a writer class)."""
    import ast  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    from atomickafka.node import merger_runtime, runtime  # noqa: PLC0415

    for cls in (writers.TransactionalWriter, writers.SplitWriter, writers.AckedWriter,
                writers.GaplessWriter):  # fmt: skip
        assert writers.Writer in cls.__mro__, cls  # declared, so mypy checks each method
    for module in (runtime, merger_runtime):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                asked = ast.unparse(node)
                assert "Writer" not in ast.unparse(node.args[1]), (module.__name__, asked)


def test_the_writers_write_through_the_one_producer_wrapper() -> None:
    """No writer builds a librdkafka producer of its own or waits out a full queue
    itself: :class:`~atomickafka.kafka.producer.RecordProducer` does both."""
    import inspect  # noqa: PLC0415

    source = inspect.getsource(writers)
    assert "BufferError" not in source
    assert " Producer(" not in source and "import Producer" not in source


class FullQueue:
    """A wrapper whose queue stays full: ``send`` gives up as RecordProducer does."""

    def send(self, topic: str, value: bytes | None, **_: Any) -> None:
        from atomickafka.errors import QueueFullError  # noqa: PLC0415

        raise QueueFullError("librdkafka's send queue (9 records) stayed full for 60 s")


def test_a_queue_that_stays_full_gives_the_batch_up() -> None:
    """The node exits (BatchWriteError) and its restart replays the batch."""
    with pytest.raises(BatchWriteError, match="writing to out: librdkafka's send queue"):
        writers._send(FullQueue(), RECORD, None)  # type: ignore[arg-type]
