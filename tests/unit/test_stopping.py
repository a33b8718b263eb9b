"""An instance that lost its role stops promptly, within a bound, with its documented
exit status (docs/DESIGN.md §6.3-6.4): a fence its commit thread met ends the wait for
a lost lease; a stop that is not a clean one abandons the writer -- nothing committed,
nothing waited for, no new producer of the role taken (its ``init_transactions``
would fence the instance that took over) -- and should closing a Kafka client hang
anyway, the process ends with the stop's status after ``STOP_BOUND_S``; one waiting for
a lost lease stops once another instance wrote as its role. No Kafka: the
clients are stand-ins. Nothing here asserts a duration: each would hang (until the
test's own bound) or fail without the behaviour it pins."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from atomickafka.node import role_shell, writers
from atomickafka.node.batch import OutKind, OutRecord
from atomickafka.node.config import NodeConfig
from atomickafka.node.role_shell import EXIT_FENCED
from atomickafka.node.runtime import NodeRuntime
from atomickafka.node.writers import (
    AckedWriter,
    BatchWriteError,
    FencedError,
    SplitWriter,
    TransactionalWriter,
)
from tests.unit.test_writers import FencedProducer, FlakyProducer, GroupConsumer

RECORD = OutRecord(OutKind.DELIVERY, "out", b"v", None)
#: Longer than any test here may take: a wait this long means the bound is missing.
FOREVER_S = 3600.0


def _txn_writer(producer: object) -> TransactionalWriter:
    writer = object.__new__(TransactionalWriter)  # without the broker its init needs
    writer._producer = producer  # type: ignore[assignment]
    writer._consumer = GroupConsumer(committed=3)  # type: ignore[assignment]
    writer._group = object()
    writer._input = "in"
    writer._last_commit = 0.0
    writer.wedged = False
    writer._hung = []
    return writer


def _lease_gone(writer: TransactionalWriter) -> tuple[threading.Event, list[int]]:
    """The writer's lease is gone for good: an event set once it waits for the lease,
    and the producers of the role it took (none, if all is well)."""
    waiting = threading.Event()

    def holds() -> bool:
        waiting.set()
        return False

    writer.holds_role = holds
    taken: list[int] = []
    writer._new_producer = lambda: taken.append(1)  # type: ignore[method-assign,assignment,return-value]
    return waiting, taken


class Released:
    """A producer wrapper's stand-in that counts what it was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def close(self, timeout_s: float = 0.0) -> int:
        self.calls.append(f"close {timeout_s:g}")
        return 0

    def flush(self, timeout_s: float) -> int:
        self.calls.append(f"flush {timeout_s:g}")
        return 0

    def poll(self, _timeout_s: float = 0.0) -> int:
        return 0


def test_a_fatal_write_into_a_split_transaction_stops_as_fenced_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The zombie of the fault test, on the split writer's path (begin and produce on
    the shell's thread, finish on the commit thread): its first write after waking
    fails with a plain fatal error, and the abort names the fence, so it stops as fenced
    there and then. Before, the transaction was only marked broken, and the commit
    thread retired the producer and waited up to a minute for a lease that had gone to
    the instance that fenced it, holding the stop up."""
    monkeypatch.setattr(writers, "LEASE_WAIT_S", FOREVER_S)
    producer = FencedProducer()
    writer = _txn_writer(producer)
    waiting, taken = _lease_gone(writer)
    writer.begin()
    with pytest.raises(FencedError, match="another instance of this role took over"):
        writer.produce(RECORD)
    assert producer.calls == ["begin", "produce out", "abort"]
    assert not waiting.is_set() and taken == []  # no wait for the lease, nor a producer


def test_an_abandoned_writer_ends_its_wait_for_the_lease_and_takes_no_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit that failed while the lease was lost waits (on the commit thread) for
    the lease to come back before it takes a new producer. The instance stops meanwhile
    (the shell found the lease gone for good): abandoning the writer ends that wait with
    a failed write, and no producer of the role is taken."""
    monkeypatch.setattr(writers, "LEASE_WAIT_S", FOREVER_S)
    monkeypatch.setattr(writers, "_RETRY_BACKOFF_S", (0.01, 0.02))
    monkeypatch.setattr(writers, "HEARTBEAT_S", 0.01)
    timed_out = KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)
    writer = _txn_writer(FlakyProducer(commit=[timed_out]))
    waiting, taken = _lease_gone(writer)
    failure: list[BaseException] = []

    def commit() -> None:
        try:
            writer.write([RECORD], {0: 7})
        except BaseException as exc:  # what the test looks at
            failure.append(exc)

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    assert waiting.wait(FOREVER_S)
    writer.close(abandon=True)
    thread.join(FOREVER_S)
    assert not thread.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], BatchWriteError), failure
    assert "abandoned" in str(failure[0]) and taken == []


def _split_writer(txn: TransactionalWriter, control: Released) -> SplitWriter:
    split = object.__new__(SplitWriter)  # without the broker its init needs
    split._txn = txn
    split._control = control  # type: ignore[assignment]
    split._job = None
    split._commits = writers._CommitThread()
    return split


def test_an_abandoned_split_writer_waits_neither_for_its_commit_nor_its_control_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closing after a fence or a failed write: the commit running on the thread is not
    waited for (a clean stop waits up to three minutes for it), the control records are
    released at once (the restart or the instance that took over writes them again),
    and the commit thread ends without taking a new producer."""
    monkeypatch.setattr(writers, "LEASE_WAIT_S", FOREVER_S)
    monkeypatch.setattr(writers, "HEARTBEAT_S", 0.01)
    txn = _txn_writer(FlakyProducer())
    waiting, taken = _lease_gone(txn)
    txn.broken = True  # a write into the transaction failed: finish() recovers
    control = Released()
    split = _split_writer(txn, control)
    split._job = split._commits.start(lambda: txn.finish([RECORD], {0: 7}))
    assert waiting.wait(FOREVER_S)  # the commit thread waits for the lease
    split.close(abandon=True)  # returns with the job still running (else: a hang)
    assert control.calls == ["close 0"]
    job = split._job
    assert job is not None and job.done.wait(FOREVER_S)
    assert isinstance(job.error, BatchWriteError) and taken == []
    with pytest.raises(BatchWriteError, match="abandoned"):
        split.raise_failure()  # what the shell asks while it waits for a lost lease


def test_an_abandoned_acked_writer_commits_nothing() -> None:
    """At-least-once has no fencing: a commit from an instance that lost its role would
    move the offset of the group that another instance now commits."""

    class Offsets:
        def __init__(self) -> None:
            self.commits = 0

        def commit(self, **_: Any) -> None:
            self.commits += 1

    producer, consumer = Released(), Offsets()
    writer = object.__new__(AckedWriter)
    writer._producer = producer  # type: ignore[assignment]
    writer._consumer = consumer  # type: ignore[assignment]
    writer.close(abandon=True)
    assert producer.calls == ["close 0"] and consumer.commits == 0


class Failing:
    """A writer whose commit thread met a fence; records how it was closed."""

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.closed: list[bool] = []
        self.release = threading.Event()
        self.hang = False

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def close(self, *, abandon: bool = False) -> None:
        self.closed.append(abandon)
        if self.hang:
            self.release.wait(FOREVER_S)


class LostLease:
    """A lease that is gone and does not come back."""

    held = False

    def poll(self, _timeout_s: float = 0.0) -> bool:
        return False

    def close(self) -> None:
        pass


def _node() -> NodeRuntime:
    return NodeRuntime(NodeConfig(bootstrap="127.0.0.1:9", topic="A"))


def test_a_fence_met_by_the_commit_thread_ends_the_wait_for_a_lost_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Paused past its session, the instance wakes to a lost lease and a fenced
    producer: it stops as fenced at once instead of waiting out the lease (20 s)."""
    monkeypatch.setattr(role_shell, "LEASE_BACK_MIN_S", FOREVER_S)
    node = _node()
    node._writer = Failing(FencedError("fenced while writing to a transaction"))  # type: ignore[assignment]
    with pytest.raises(FencedError):
        node._lease_back(LostLease())  # type: ignore[arg-type]


def test_a_stop_that_is_not_clean_abandons_the_writer_and_a_clean_one_does_not() -> None:
    node, writer = _node(), Failing()
    node._writer = writer  # type: ignore[assignment]
    node._shutdown(EXIT_FENCED)
    node._shutdown(None)
    assert writer.closed == [True, False]


def test_a_fenced_instance_whose_clients_hang_in_close_exits_with_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever a Kafka client does in close, a fenced instance ends with exit status 4
    (the supervisor restarts it as a standby only once it exited), not killed by the
    supervisor's grace nor left alive."""
    monkeypatch.setattr(role_shell, "STOP_BOUND_S", 0.05)
    node, writer = _node(), Failing()
    writer.hang = True
    node._writer = writer  # type: ignore[assignment]
    exits: list[int] = []

    def exit_now(status: int) -> None:
        exits.append(status)
        writer.release.set()  # (a real exit ends the hung close with the process)

    monkeypatch.setattr(role_shell, "_exit_now", exit_now)
    node._shutdown(EXIT_FENCED)
    assert exits == [EXIT_FENCED]


def test_a_stop_whose_clients_close_in_time_is_not_cut_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []
    monkeypatch.setattr(role_shell, "_exit_now", exits.append)
    monkeypatch.setattr(role_shell, "STOP_BOUND_S", 0.05)
    node = _node()
    node._writer = Failing()  # type: ignore[assignment]
    node._shutdown(EXIT_FENCED)
    threading.Event().wait(0.2)  # past the bound: the cancelled timer never fires
    assert exits == []


class Probe:
    """The group's committed offset as an instance waiting for its lease reads it:
    unreadable (a cut) ``unreadable`` times, then ``committed``."""

    def __init__(self, committed: int, unreadable: int = 0) -> None:
        self.committed_offset, self.unreadable, self.reads = committed, unreadable, 0

    def committed(self, partitions: list[Any], **_: Any) -> list[Any]:
        self.reads += 1
        if self.reads <= self.unreadable:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(tp.topic, tp.partition, self.committed_offset) for tp in partitions]

    def close(self) -> None:
        pass


class BackAfter(LostLease):
    """A lease that comes back at its ``polls``-th poll."""

    def __init__(self, polls: int) -> None:
        self.left = polls

    def poll(self, _timeout_s: float = 0.0) -> bool:
        self.left -= 1
        return self.left <= 0


def _waiting_node(probe: Probe, monkeypatch: pytest.MonkeyPatch) -> NodeRuntime:
    monkeypatch.setattr(role_shell, "LEASE_BACK_MIN_S", FOREVER_S)
    monkeypatch.setattr(role_shell, "OVERTAKEN_CHECK_S", 0.0)
    node = _node()
    node._consumer = object()  # type: ignore[assignment]  # an instance that was active
    node._offsets_probe = probe  # type: ignore[assignment]
    return node


@pytest.mark.parametrize("unreadable", [0, 3], ids=["readable", "after-a-cut"])
def test_an_instance_waiting_for_its_lease_stops_once_another_instance_wrote(
    monkeypatch: pytest.MonkeyPatch, unreadable: int
) -> None:
    """Issue 39 (the 20-minute nemesis run): an instance that lost its lease waited up
    to 20 s for it in the lease group although another instance had taken the role and
    written; the group then gave the lease back to it when the new active instance's
    host was cut, and it stopped only then, leaving the role without an active
    instance until its restart joined (takeovers 0.3-0.9 s over the lease + 2 s). It
    now stops as soon as the group's committed offset shows another writer; a read
    that fails (the brokers out of reach) keeps it waiting."""
    probe = Probe(committed=5, unreadable=unreadable)
    node = _waiting_node(probe, monkeypatch)
    assert node.batch.position < 5
    assert node._lease_back(LostLease()) is False  # type: ignore[arg-type]
    assert probe.reads == unreadable + 1


def test_an_instance_no_other_overtook_gets_its_lease_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group committed nothing past this instance: it keeps waiting, and goes on
    when the lease comes back (a coordinator that moved)."""
    probe = Probe(committed=0)
    node = _waiting_node(probe, monkeypatch)
    node._still_ours = lambda: True  # type: ignore[method-assign]
    assert node._lease_back(BackAfter(polls=4)) is True  # type: ignore[arg-type]
    assert probe.reads >= 2


class ClosingLease(LostLease):
    """A lease that notes that it was closed (its member left the group)."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_stop_that_is_not_clean_leaves_the_lease_group_whatever_closing_the_writer_raises() -> (
    None
):
    """The 20-minute nemesis run: a fenced instance's writer, abandoned, purged a gap-less
    producer's records in flight, and librdkafka's fatal error surfaced as a SystemError
    from a delivery callback. It escaped the stop: the process exited 1 instead of 4,
    and its lease group waited out the member's session before the restart could take
    the role. It is logged now; the stop keeps its status and leaves the group."""
    node, writer, lease = _node(), Failing(), ClosingLease()

    def purged(*, abandon: bool = False) -> None:
        raise SystemError("<function Ticket.on_delivery> returned a result with an exception set")

    writer.close = purged  # type: ignore[method-assign]
    node._writer, node._lease = writer, lease  # type: ignore[assignment]
    node._shutdown(EXIT_FENCED)
    assert lease.closed
    clean = _node()
    clean._writer = writer  # type: ignore[assignment]
    with pytest.raises(SystemError):  # a clean stop that fails to close says so
        clean._shutdown(None)
