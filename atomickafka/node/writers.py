"""How a node's or merger's outputs reach the broker: in one transaction per batch
(exactly-once), or acknowledged and then committed (at-least-once) (docs/DESIGN.md §6).

Both take what the batch layer decided -- records to write, in order, and the input
offsets that become committed with them -- and both keep every ordered stream gapless:
nothing later is written when something earlier was not.

:class:`TransactionalWriter`
    One Kafka transaction per batch: the records, the snapshot and the input offsets
    (``send_offsets_to_transaction``) commit together or not at all, so a
    ``read_committed`` reader sees every record exactly once, in order, across any
    crash. The producer's ``transactional.id`` is the role's, so a second instance that
    takes over fences this one: its next transaction fails with
    :class:`FencedError` and it stops at once, having written nothing more.
:class:`AckedWriter`
    An idempotent producer with ``enable.gapless.guarantee``: a failed write is fatal
    (the node exits and replays from its last commit). The input offset is committed
    once every record of the batch and of every batch before it is acknowledged
    (:class:`~atomickafka.node.offsets.OffsetsTracker`); a snapshot is written only once
    the commit has passed the offset it covers. Readers drop repeats after a crash.

Every writer -- these two, the :class:`SplitWriter` a node runs in exactly-once mode,
the merger's :class:`GaplessWriter` -- implements one interface, :class:`Writer`: the
shells call it and never ask which writer they hold. Every producer here is the shared
wrapper, :class:`~atomickafka.kafka.producer.RecordProducer` (which waits out a full
local queue), built from the node's :class:`~atomickafka.kafka.connection.Connection`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from atomickafka.errors import AtomicKafkaError, QueueFullError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.producer import DeliveryCallback, RecordProducer
from atomickafka.logs import Throttle
from atomickafka.node.batch import OutKind, OutRecord
from atomickafka.node.offsets import OffsetsTracker, Ticket

__all__ = [
    "AckedWriter",
    "BatchWriteError",
    "ClientWedgedError",
    "FencedError",
    "GaplessWriter",
    "InputSlot",
    "OffsetCommit",
    "SplitWriter",
    "TransactionalWriter",
    "Writer",
    "transactional_id",
]

log = logging.getLogger("atomickafka.node")
#: Retries are logged at most once a kind every 10 s (with the count held back).
_retries = Throttle(10.0)

#: librdkafka error codes that mean another instance has taken over this role.
_FENCED_CODES: Final = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
#: A commit right after the previous one is refused by the broker while it still writes
#: the previous transaction's markers, and librdkafka then waits 20 ms; a pause of a
#: few ms before the next transaction avoids most of those waits (measured).
_TXN_GAP_S: Final = 0.002

#: The longest wait before a transactional request is retried (ms), see
#: :class:`TransactionalWriter`.
TXN_RETRY_BACKOFF_MAX_MS: Final = 10

#: Input offsets to commit: slot -> next offset. A node's slot is its input partition;
#: in a host process (:mod:`atomickafka.node.host`) each hosted node has a slot of its own
#: (:class:`InputSlot`).
OffsetCommit = dict[int, int]


@dataclass(frozen=True)
class InputSlot:
    """Where a slot's offsets commit: one node's committed input partition and its
    consumer group (a host process commits several nodes' offsets in one transaction,
    each to its own node's group, as the node alone would)."""

    topic: str
    partition: int
    #: The group's name, and its metadata as ``send_offsets_to_transaction`` takes it.
    group_name: str
    group: object
    #: A consumer of the node's group: reads the group's committed offset.
    consumer: Consumer


class FencedError(AtomicKafkaError):
    """Another instance of this role took over: this one must stop writing at once."""


class BatchWriteError(AtomicKafkaError):
    """A batch could not be written; the node exits so that a restart replays it."""


class ClientWedgedError(BatchWriteError):
    """A librdkafka call did not return within its bound: that client can be neither
    used nor closed safely, so the process exits at once and its restart recovers."""


#: librdkafka's own bound on adding the input offsets to a transaction (s). It answers
#: in milliseconds when the group coordinator is up; a broker failover takes seconds.
#: Short, because a node that waits here holds back what it relays: a relayed copy that
#: reaches its destination more than half the memory window (30 s) after it was sent is
#: set aside as late (docs/DESIGN.md §4.13).
SEND_OFFSETS_TIMEOUT_S: Final = 8.0
#: How much longer than its own timeout a librdkafka call may take before the client is
#: taken for wedged (s). ``send_offsets_to_transaction`` can block for ever when the
#: group coordinator's broker dies (librdkafka issues #5456 and #5511): seen here when
#: a broker of three was SIGKILLed, the node then neither wrote nor stopped.
WEDGE_MARGIN_S: Final = 2.0
#: How often a shell waiting on a librdkafka call (or between retries) is called back.
HEARTBEAT_S: Final = 0.5
#: librdkafka's bound on committing a transaction (s); a retriable failure (its timeout
#: included) is retried, for up to :data:`TXN_RETRY_S` per batch.
COMMIT_TIMEOUT_S: Final = 60.0
#: How long one batch's transaction is retried through Kafka's routine events -- a
#: group coordinator that moves (``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``),
#: a leader election, a broker failover -- before the node gives the batch up and exits
#: (its restart replays it). A failover on three loopback brokers stalled transactions
#: ~20 s (docs/DESIGN.md §6.3); twice the transaction timeout covers several.
TXN_RETRY_S: Final = 120.0
#: How long, at least, the group's committed offsets are read again (through a group
#: coordinator that moves) to tell whether a transaction with an unknown outcome
#: committed (s).
COMMITTED_READ_S: Final = 60.0
#: How many producers an instance may leave hung (each replaced by a new one of the
#: role; they are never closed, so they are kept) before it exits (exit status 5,
#: :class:`ClientWedgedError`): its restart starts clean.
MAX_HUNG_PRODUCERS: Final = 3
#: How long a writer waits for its instance to hold the lease again before it takes a
#: new producer (s): longer than the shell waits for a lost lease (three sessions, at
#: least 20 s), which stops the instance first when the lease went elsewhere.
LEASE_WAIT_S: Final = 60.0
#: Back-off between retries (s): doubling from the first to the last.
_RETRY_BACKOFF_S: Final = (0.1, 2.0)
#: Why an abandoned writer's wait ended (:meth:`TransactionalWriter.abandon`).
_ABANDONED: Final = "the instance stops: its open transaction is abandoned"


class _CallThread:
    """A daemon thread that runs blocking librdkafka calls handed to it, one at a time
    (a thread per call cost a thread start per transaction). ``wedged`` while a call
    runs: a call that never returns leaves it so, and the next call gets a new thread."""

    def __init__(self) -> None:
        self.wedged = False
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], object], threading.Event, list[BaseException]]
        ] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="bounded-librdkafka-call", daemon=True).start()

    def _serve(self) -> None:
        while True:
            call, done, failure = self._jobs.get()
            try:
                call()
            except BaseException as exc:  # handed to the waiting thread
                failure.append(exc)
            finally:
                done.set()

    def run(
        self,
        call: Callable[[], object],
        limit_s: float,
        on_wait: Callable[[], None] | None = None,
    ) -> list[BaseException] | None:
        """Run ``call``; what it raised, or ``None`` if it did not return in time.
        ``on_wait`` is called about every :data:`HEARTBEAT_S` while it runs."""
        done = threading.Event()
        failure: list[BaseException] = []
        self.wedged = True
        self._jobs.put((call, done, failure))
        deadline = time.monotonic() + limit_s
        while not done.wait(max(0.0, min(HEARTBEAT_S, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return None
            if on_wait is not None:
                on_wait()
        self.wedged = False
        return failure


_call_thread: _CallThread | None = None


def bounded_call(
    call: Callable[[], object],
    limit_s: float,
    doing: str,
    on_wait: Callable[[], None] | None = None,
) -> None:
    """Run ``call`` (a blocking librdkafka call, which releases the GIL) on a daemon
    thread and wait at most ``limit_s``, calling ``on_wait`` about every
    :data:`HEARTBEAT_S` meanwhile (the shell publishes its status: a node that waits
    out a broker failover is alive); raise :class:`ClientWedgedError` if it has not
    returned by then, or what it raised."""
    global _call_thread  # noqa: PLW0603 (one such thread per process, made on first use)
    thread = _call_thread
    if thread is None or thread.wedged:
        thread = _call_thread = _CallThread()
    failure = thread.run(call, limit_s, on_wait)
    if failure is None:
        raise ClientWedgedError(
            f"librdkafka did not return from {doing} within {limit_s:g} s (a known "
            "librdkafka hang when a coordinator's broker dies)"
        )
    if failure:
        raise failure[0]


def transactional_id(role: str) -> str:
    """The ``transactional.id`` of a role (``T``, ``T/2``, ``T/merger``)."""
    return f"atomickafka.{role}"


class Writer(Protocol):
    """What a node's or merger's shell writes through, whatever the delivery mode: it
    hands over what the batch layer decided and never asks which writer it holds.

    A writer keeps every ordered stream gapless (nothing later is written when something
    earlier was not) and raises :class:`BatchWriteError` (or :class:`FencedError`) once
    it cannot: the shell then exits and its restart replays from the last commit.
    """

    #: The writer reports what it wrote itself (its ``on_written``: a transaction's
    #: records once it committed); otherwise the shell counts a batch as written when
    #: it hands it over.
    reports_written: bool = False

    def start_at(self, committed: int) -> None:
        """The committed input offset the batch layer recovered to (read after this
        writer fenced older instances): commits go on above it."""
        ...

    def write(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot_offset: int | None = None,
    ) -> None:
        """Write ``records`` in order and, with them, commit ``commit`` (the next input
        offset by partition). ``snapshot_offset``: the offset the snapshot among
        ``records`` covers (:attr:`~atomickafka.node.batch.Ready.snapshot_offset`); a
        writer that cannot write the snapshot with the commit holds it until the
        commit has passed that offset."""
        ...

    def send_dead_letter(self, ticket: Ticket, record: OutRecord) -> None:
        """Write a dead letter for an output the broker refused for good, as part of
        ``ticket``'s batch (``ticket`` no longer waits for the refused record)."""
        ...

    def settle(self, *, idle: bool = False) -> None:
        """Serve delivery reports and commit what has become safe to commit (``idle``:
        the last read found nothing; a writer that commits on an interval may commit
        sooner)."""
        ...

    def raise_failure(self) -> None:
        """Raise what a write running in the background failed with, if it did
        (:class:`FencedError`, :class:`BatchWriteError`), writing nothing: what the shell
        asks while it waits, writing nothing, for a lost lease (by default: nothing runs
        in the background)."""
        return

    def close(self, *, abandon: bool = False) -> None:
        """Finish (bounded) and release the producer. ``abandon``: the instance stops
        without a clean stop (fenced, a failed write, an unexpected error): nothing more
        is committed or waited for -- what was not committed is written again by the
        restart or by the instance that took over -- and a transactional producer is
        never taken again (no ``init_transactions``, which would fence the instance that
        took over)."""
        ...


def _send(
    producer: RecordProducer, record: OutRecord, on_delivery: DeliveryCallback | None
) -> None:
    """Queue ``record`` through the shared producer wrapper, which waits out a full local
    queue (:data:`~atomickafka.kafka.producer.DEFAULT_QUEUE_WAIT_S`); a queue that stays
    full gives the batch up (the node exits and its restart replays it). A record
    librdkafka refuses on the spot raises its ``KafkaException``, for the writer to
    classify."""
    try:
        producer.send(
            record.topic,
            record.value,
            partition=record.partition,
            key=record.key,
            headers=list(record.headers) or None,
            on_delivery=on_delivery,
            report_refused=False,
        )
    except QueueFullError as exc:
        raise BatchWriteError(f"writing to {record.topic}: {exc}") from None


def _log_retry(kind: str, text: str, exc: BaseException) -> None:
    """A warning that a transaction is retried: at most one a kind every 10 s, with the
    count of those held back since."""
    held = _retries.admit(kind)
    if held is not None:
        log.warning(text + (f" ({held} more retries since)" if held else ""), exc)


class _TxnFailedError(Exception):
    """A transaction failed short of a fence or a fatal error: its producer is not used
    again (:meth:`TransactionalWriter._recover`). ``unknown``: the commit may have
    reached the coordinator (a timeout, a broken connection, no answer); otherwise
    nothing of it became visible. ``hung``: a call on the producer never returned."""

    def __init__(
        self, reason: str, *, unknown: bool, hung: ClientWedgedError | None = None
    ) -> None:
        super().__init__(reason)
        self.unknown = unknown
        self.hung = hung


#: Errors by which a coordinator refuses a request outright (it moves or loads): the
#: request did nothing, and the call is made again on the same producer. Every other
#: failure -- a timeout, a broken connection, an abort -- may leave a request of the
#: transaction on its way, and the producer is replaced.
_REFUSED_CODES: Final = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.CONCURRENT_TRANSACTIONS,
    }
)


def _retire(producer: RecordProducer) -> None:
    """Destroy a transactional producer that failed, on a daemon thread (librdkafka's
    destroy waits for its broker threads; a partitioned link must not hold the node).
    The new producer's ``init_transactions`` has fenced it already or is about to."""

    def destroy() -> None:
        with contextlib.suppress(Exception):  # whatever it says: it is gone either way
            producer.close(0)

    threading.Thread(target=destroy, name="retired-producer", daemon=True).start()


class TransactionalWriter(Writer):
    """One transaction per batch; fenced by a newer instance of the same role.

    A batch's transaction survives Kafka's routine events (docs/DESIGN.md §6.3). A call
    that a coordinator refuses outright (it moves or loads: :data:`_REFUSED_CODES`) is
    made again. Any other failure -- a timeout, a broken connection, an error that
    requires an abort, a call that never returns -- ends that producer's use: a new
    producer of the role takes over (its ``init_transactions`` fences the old one and
    ends its transaction) and writes the batch again from its first record, unless the
    failed commit is found to have committed (the group's committed offsets tell,
    :meth:`_recover`). A producer is never used for another transaction after such a
    failure: librdkafka lacks KIP-890's client side, so a request of the failed
    transaction still on its way (a delayed commit, a produce of an aborted
    transaction) would land in the producer's next one (Jepsen's 2024 analysis of
    Kafka's transactions); after the new producer's init the broker refuses it. All
    for at most :data:`TXN_RETRY_S` per batch, with a back-off; a fatal error, a fence,
    a lease lost meanwhile (``holds_role``), or a batch still unwritten then ends the
    instance (exit status 1 or 4; the restart or the standby recovers). While it
    waits, ``on_wait`` is called about every :data:`HEARTBEAT_S` (the shell publishes
    its status, so that clients do not take a node waiting out a failover for a dead
    one).
    """

    #: The callback while waiting (class defaults: a writer is built without one too).
    on_wait: Callable[[], None] | None = None
    retry_s: float = TXN_RETRY_S
    #: librdkafka's bound on a commit (s; ``None``: :data:`COMMIT_TIMEOUT_S`).
    commit_timeout_s: float | None = None
    #: A write into the open transaction failed (not fatally): :meth:`finish` writes it
    #: again.
    broken: bool = False
    #: The instance stops without a clean stop (:meth:`abandon`): every wait ends with
    #: :class:`BatchWriteError`, and no new producer of the role is taken.
    abandoned: bool = False
    #: Whether this instance still holds its role's lease (``None``: not asked); a
    #: producer is replaced only while it does (:meth:`_recover`).
    holds_role: Callable[[], bool] | None = None
    #: Producers replaced after a failed transaction, and commits of unknown outcome.
    replaced: int = 0
    unknown_outcomes: int = 0
    #: The input offsets the last transaction committed (``None``: not known yet): after
    #: a failure the group's must be these or the failed transaction's, else another
    #: instance wrote as this role (:meth:`_recover`).
    committed_before: OffsetCommit | None = None
    #: Each slot's partition and group (``None``: a slot is a partition of the input
    #: topic, committed to the consumer's group).
    _slots: Mapping[int, InputSlot] | None = None

    def __init__(
        self,
        connection: Connection,
        role: str,
        consumer: Consumer,
        input_topic: str,
        *,
        init_timeout_s: float = 60.0,
        on_wait: Callable[[], None] | None = None,
        holds_role: Callable[[], bool] | None = None,
        slots: Mapping[int, InputSlot] | None = None,
    ) -> None:
        self.on_wait = on_wait
        self.holds_role = holds_role
        self._consumer = consumer
        self._slots = slots
        # The consumer's group metadata, read once: its consumers are assigned their
        # partitions (never subscribed), so it never changes. Asked at every commit, the
        # call (librdkafka answers it from its group thread) took 23 % of a node's
        # samples in py-spy over the bench (docs/performance.md).
        self._group = consumer.consumer_group_metadata()
        self._input = input_topic
        settings: dict[str, str | int | bool] = {
            "transactional.id": transactional_id(role),
            "transaction.timeout.ms": 60000,
            "retry.backoff.ms": 5,
            # The coordinator answers CONCURRENT_TRANSACTIONS to the next transaction's
            # first requests while it still writes the last one's markers; librdkafka
            # retries them with a backoff that doubles up to retry.backoff.max.ms (1 s by
            # default), which made send_offsets_to_transaction the longest wait of a
            # node's loop. Capped at 10 ms, a transaction took half as long (measured).
            "retry.backoff.max.ms": TXN_RETRY_BACKOFF_MAX_MS,
        }
        self._connection, self._settings = connection, settings
        self._init_timeout_s = init_timeout_s
        self._last_commit = 0.0
        self.wedged = False  # a call never returned: the producer must not be touched
        #: Producers replaced after a call on them hung: never touched again (closing
        #: one could hang too), kept so that they are not destroyed under their thread.
        self._hung: list[RecordProducer] = []
        self._producer = self._new_producer()

    def _new_producer(self) -> RecordProducer:
        """A transactional producer of the role, initialised: this fences any older one
        of the role (another instance's, or this instance's hung one), aborting its open
        transaction."""
        if self.abandoned:
            raise BatchWriteError(_ABANDONED)
        producer = RecordProducer(self._connection, **self._settings)
        timeout_s = self._init_timeout_s
        try:
            bounded_call(
                lambda: producer.init_transactions(timeout_s),
                timeout_s + WEDGE_MARGIN_S,
                "initialising transactions",
                self.on_wait,
            )
        except KafkaException as exc:
            raise _classified(exc, "initialising transactions") from exc
        return producer

    def start_at(self, committed: int) -> None:
        """Nothing to do: each transaction commits its own offsets."""
        del committed

    def write(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot_offset: int | None = None,
    ) -> None:
        """Write ``records`` and commit ``commit`` in one transaction (written again
        through failures, each with a new producer, see the class); a snapshot among
        ``records`` commits with them (``snapshot_offset`` is not needed)."""
        del snapshot_offset
        if not records and commit is None:
            return
        gap = _TXN_GAP_S - (time.monotonic() - self._last_commit)
        if gap > 0:
            time.sleep(gap)
        deadline = time.monotonic() + self.retry_s
        backoff = _RETRY_BACKOFF_S[0]
        attempts = 1
        while True:
            try:
                self._transaction(records, commit, deadline)
                if commit:
                    self.committed_before = dict(commit)
                break
            except _TxnFailedError as failed:
                # no time for another try: judged with the longest back-off, the one a
                # refused call in the transaction may have given up with (`_call`)
                out_of_time = time.monotonic() + _RETRY_BACKOFF_S[1] >= deadline
                if failed.hung is None and out_of_time:
                    raise BatchWriteError(
                        f"a batch's transaction failed {attempts} times over "
                        f"{self.retry_s:.0f} s; the last: {failed}"
                    ) from None
                if failed.hung is None:
                    _log_retry(
                        "aborted", "transaction failed (%s); writing the batch again", failed
                    )
                    self._wait(backoff)
                    backoff = min(_RETRY_BACKOFF_S[1], 2 * backoff)
                if self._recover(failed, commit, deadline):
                    break
                attempts += 1
        self._last_commit = time.monotonic()

    def _transaction(
        self, records: Sequence[OutRecord], commit: OffsetCommit | None, deadline: float
    ) -> None:
        """One try at the batch's transaction; :class:`_TxnFailedError` when it failed."""
        producer = self._producer
        try:
            producer.begin_transaction()
            for record in records:
                _send(producer, record, None)
        except BatchWriteError as exc:  # the local queue stayed full
            self._abort(deadline)
            raise exc from None
        except KafkaException as exc:
            self._failed(exc, "writing a batch", deadline, committing=False)
        self._commit(producer, commit, deadline)

    def _commit(
        self, producer: RecordProducer, commit: OffsetCommit | None, deadline: float
    ) -> None:
        """Add ``commit`` (the input offsets) to the open transaction, then commit it."""
        for group, offsets in self._offsets_by_group(commit or {}):
            self._call(
                functools.partial(
                    producer.send_offsets_to_transaction, offsets, group, SEND_OFFSETS_TIMEOUT_S
                ),
                SEND_OFFSETS_TIMEOUT_S,
                "adding the input offsets to the transaction",
                deadline,
                committing=False,
            )
        timeout_s = self.commit_timeout_s or COMMIT_TIMEOUT_S
        self._call(
            lambda: producer.commit_transaction(timeout_s),
            timeout_s,
            "committing the transaction",
            deadline,
            committing=True,
        )

    def _slot(self, key: int) -> InputSlot:
        if self._slots is not None:
            return self._slots[key]
        return InputSlot(self._input, key, "", self._group, self._consumer)

    def _offsets_by_group(self, commit: OffsetCommit) -> list[tuple[object, list[TopicPartition]]]:
        """``commit``'s offsets as ``send_offsets_to_transaction`` takes them: one call
        per consumer group (a host process's transaction holds several nodes' groups;
        Kafka adds each group's offsets to the transaction, ``AddOffsetsToTxn``)."""
        groups: dict[str, tuple[object, list[TopicPartition]]] = {}
        for key, offset in commit.items():
            slot = self._slot(key)
            entry = groups.setdefault(slot.group_name, (slot.group, []))
            entry[1].append(TopicPartition(slot.topic, slot.partition, offset))
        return list(groups.values())

    def _call(
        self,
        call: Callable[[], object],
        timeout_s: float,
        doing: str,
        deadline: float,
        *,
        committing: bool,
    ) -> None:
        """A transactional call, bounded (:func:`bounded_call`). Called again in place
        only while it is refused outright (:data:`_REFUSED_CODES`: a coordinator that
        moves or loads) before the commit; any other failure is
        :class:`_TxnFailedError` (an unknown outcome when ``committing``)."""
        backoff = _RETRY_BACKOFF_S[0]
        while True:
            try:
                bounded_call(call, timeout_s + WEDGE_MARGIN_S, doing, self.on_wait)
                return
            except ClientWedgedError as exc:
                raise _TxnFailedError(str(exc), unknown=committing, hung=exc) from exc
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                refused = isinstance(error, KafkaError) and error.code() in _REFUSED_CODES
                if committing or not refused or time.monotonic() + backoff >= deadline:
                    self._failed(exc, doing, deadline, committing=committing)
                _log_retry(doing, f"{doing} refused, retrying (a Kafka failover?): %s", exc)
                self._wait(backoff)
                backoff = min(_RETRY_BACKOFF_S[1], 2 * backoff)

    def _recover(
        self, failed: _TxnFailedError, commit: OffsetCommit | None, deadline: float
    ) -> bool:
        """After a failed transaction: leave its producer (a hung one untouched, kept;
        another destroyed), go on with a new producer of the role -- whose
        ``init_transactions`` fences the old one, bumping the epoch, and ends its
        transaction (aborted, or committed if the commit had reached the coordinator)
        -- and, when the commit's outcome is unknown, tell whether it committed. True
        when it did (nothing to write again).

        Never calling a producer again after such a failure is the client's defence
        against Kafka's transaction anomalies (Jepsen's 2024 analysis; KIP-890, whose
        client side librdkafka lacks): a request of the failed transaction that is
        still on its way -- a commit delayed by a partition, a produce of an aborted
        transaction -- would otherwise land in the producer's next transaction, which
        has the same epoch; after the new producer's init it is refused as fenced."""
        if failed.hung is not None:
            if len(self._hung) >= MAX_HUNG_PRODUCERS or time.monotonic() >= deadline:
                self.wedged = True
                raise failed.hung
            self._hung.append(self._producer)  # never touched again: a call could hang too
        else:
            _retire(self._producer)
        if not self._still_holds_role():
            raise FencedError(
                f"{failed}; the role's lease was lost meanwhile and did not come back: this "
                "instance stops rather than take the role's producer from the one that took over"
            )
        log.warning(
            "%s; going on with a new producer of the role (a producer is never used "
            "again after a failed transaction)",
            failed,
        )
        self._producer = self._new_producer()
        self.replaced += 1
        if failed.unknown:
            self.unknown_outcomes += 1
        return self._landed(failed, commit, deadline)

    def _landed(
        self, failed: _TxnFailedError, commit: OffsetCommit | None, deadline: float
    ) -> bool:
        """Whether the failed transaction committed, told by the group's offsets (read
        after the new producer's init): the failed transaction's (it did), the last
        one's (it did not), or others (another instance wrote: :class:`FencedError`)."""
        if not commit:
            if not failed.unknown:
                return False
            raise BatchWriteError(
                f"{failed}: whether that transaction committed is unknown, and it holds "
                "no input offsets to tell; exiting so that the restart recovers"
            )
        found = self._committed_offsets(commit, deadline)
        before = self.committed_before
        landed = found == commit
        if before is None:
            unchanged = all(found.get(p, 0) < o for p, o in commit.items())
        else:
            unchanged = found == {p: before.get(p, 0) for p in commit}
        if landed and unchanged and failed.unknown:
            raise BatchWriteError(
                f"{failed}: whether that transaction committed is unknown, and its input "
                "offsets are the last transaction's; exiting so that the restart recovers"
            )
        if not (unchanged or (landed and failed.unknown)):
            raise FencedError(
                f"{failed}; the role's committed offsets are {found}, neither this "
                f"transaction's {commit} nor the last one's {before}: another instance "
                "wrote as this role meanwhile"
            )
        landed = landed and not unchanged
        if failed.unknown:
            log.warning(
                "the transaction whose commit failed %s",
                "had committed" if landed else "had not committed: writing it again",
            )
        if landed:
            self.committed_before = dict(commit)
        return landed

    def _still_holds_role(self) -> bool:
        """Whether the instance holds its lease; while it does not, wait (up to
        :data:`LEASE_WAIT_S`) for the shell to find it back -- a group coordinator on a
        broker cut off loses every member's lease for a while."""
        holds = self.holds_role
        if holds is None:
            return True
        until = time.monotonic() + LEASE_WAIT_S
        while not holds():
            if time.monotonic() >= until:
                return False
            self._wait(HEARTBEAT_S)
        return True

    def _committed_offsets(self, commit: OffsetCommit, deadline: float) -> OffsetCommit:
        """The group's committed offsets of ``commit``'s partitions (0: none), read
        after the new producer's init ended any open transaction of the role. The read
        writes nothing, and without it the instance exits: it is retried for at least
        :data:`COMMITTED_READ_S` even when the batch's retries used its time up (CI,
        2026-11-29: a group coordinator moving back to a restarted broker answered
        ``NOT_COORDINATOR`` just after a batch's 120 s had gone to the failover)."""
        deadline = max(deadline, time.monotonic() + COMMITTED_READ_S)
        while True:
            try:
                found: OffsetCommit = {}
                for key in commit:
                    slot = self._slot(key)
                    asked = [TopicPartition(slot.topic, slot.partition)]
                    (read,) = slot.consumer.committed(asked, timeout=SEND_OFFSETS_TIMEOUT_S)
                    found[key] = max(0, read.offset)
                return found
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise BatchWriteError(
                        f"reading the committed offsets to tell whether a transaction "
                        f"committed failed: {exc}"
                    ) from exc
                self._wait(_RETRY_BACKOFF_S[1])

    def _failed(
        self, exc: KafkaException, doing: str, deadline: float, *, committing: bool
    ) -> NoReturn:
        """The transaction failed with ``exc``: raise :class:`FencedError` when another
        instance took over; :class:`BatchWriteError` when the producer cannot go on (a
        fatal error); otherwise :class:`_TxnFailedError`, the producer to be replaced
        (an unknown outcome when ``committing`` and the error does not say the
        transaction must be aborted). A producer fenced meanwhile fails its next call
        with a plain fatal error (``produce``: "Local: Fatal error"), and the abort
        names the cause: then the instance stops as fenced."""
        error = _classified(exc, doing)
        if isinstance(error, FencedError):
            raise error from exc
        kafka_error = exc.args[0] if exc.args else None
        if isinstance(kafka_error, KafkaError) and kafka_error.fatal():
            self._abort(deadline)
            raise error from exc
        abortable = isinstance(kafka_error, KafkaError) and kafka_error.txn_requires_abort()
        raise _TxnFailedError(f"{doing}: {exc}", unknown=committing and not abortable) from exc

    def _abort(self, deadline: float) -> None:
        """Abort the open transaction, again while it fails with a retriable error (and
        the batch's time lasts); raise :class:`FencedError` when the abort names a fence."""
        backoff = _RETRY_BACKOFF_S[0]
        while True:
            try:
                self._producer.abort_transaction(30)
                return
            except KafkaException as exc:
                error = _classified(exc, "writing a batch")
                if isinstance(error, FencedError):
                    raise error from exc
                kafka_error = exc.args[0] if exc.args else None
                retriable = isinstance(kafka_error, KafkaError) and kafka_error.retriable()
                if not retriable or time.monotonic() + backoff >= deadline:
                    log.warning("aborting the transaction failed too: %s", exc)
                    return
                self._wait(backoff)
                backoff = min(_RETRY_BACKOFF_S[1], 2 * backoff)

    def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, calling ``on_wait`` about every :data:`HEARTBEAT_S`; raise
        :class:`BatchWriteError` once the writer is abandoned (every retry and every wait
        for the lease goes through here, so an abandoned writer's commit thread ends
        within a heartbeat of its last call on the broker)."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.abandoned:
                raise BatchWriteError(_ABANDONED)
            time.sleep(min(HEARTBEAT_S, left))
            if self.on_wait is not None:
                self.on_wait()
        if self.abandoned:
            raise BatchWriteError(_ABANDONED)

    def abandon(self) -> None:
        """The instance stops without a clean stop: end every wait and retry (from
        another thread too) and never take a new producer of the role."""
        self.abandoned = True

    # -------------------------------------------------- a transaction over several batches

    def begin(self) -> None:
        """Begin a transaction that :meth:`produce` fills and :meth:`finish` commits."""
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            self._broke(exc, "beginning a transaction")

    def produce(self, record: OutRecord) -> None:
        """Put ``record`` into the transaction :meth:`begin` opened."""
        if self.broken:
            return
        try:
            _send(self._producer, record, None)
        except KafkaException as exc:
            self._broke(exc, "writing to a transaction")

    def _broke(self, exc: KafkaException, doing: str) -> None:
        """A write into the open transaction failed (on the shell's thread: no commit
        runs meanwhile). A fence or a fatal error stops the instance now, as in
        :meth:`write` (:meth:`_failed`): as fenced when the error or the abort names a
        fence -- a producer fenced while its instance was paused fails its next call
        with a plain fatal error -- else as a failed write; not after the commit thread
        has waited for a lease that went to the instance that fenced it. Any other error
        marks the transaction broken: :meth:`finish` writes it again."""
        kafka_error = exc.args[0] if exc.args else None
        fatal = isinstance(kafka_error, KafkaError) and kafka_error.fatal()
        if fatal or isinstance(_classified(exc, doing), FencedError):
            self._failed(exc, doing, time.monotonic() + self.retry_s, committing=False)
        self.broken = True

    def finish(self, records: Sequence[OutRecord], commit: OffsetCommit | None) -> None:
        """Commit the transaction holding ``records`` (put there with :meth:`produce`)
        and ``commit``; a transaction that failed is written again from ``records`` by
        a new producer, as :meth:`write` does, unless it is found committed."""
        deadline = time.monotonic() + self.retry_s
        try:
            if self.broken:
                self.broken = False
                raise _TxnFailedError("a write into the transaction failed", unknown=False)
            self._commit(self._producer, commit, deadline)
            if commit:
                self.committed_before = dict(commit)
        except _TxnFailedError as failed:
            _log_retry("aborted", "transaction failed (%s); writing the batches again", failed)
            if not self._recover(failed, commit, deadline):
                self.write(records, commit)
        self._last_commit = time.monotonic()

    def send_dead_letter(self, ticket: Ticket, record: OutRecord) -> None:
        """Write a dead letter in a transaction of its own (no ticket waits here: a
        transaction's records are written or not together)."""
        del ticket
        self.write([record], None)

    def settle(self, *, idle: bool = False) -> None:
        """Serve librdkafka's callbacks (logs, errors)."""
        del idle
        self._producer.poll(0)

    def close(self, *, abandon: bool = False) -> None:
        """Release the producer (an open transaction, if any, is aborted by the broker);
        a wedged one is left alone (the process is about to exit), and an abandoned one
        is not waited for."""
        if abandon:
            self.abandon()
        elif not self.wedged:
            self._producer.flush(5)


#: The records a node exchanges with nodes, and writes into its own log: never in a
#: transaction, so that no input log has a transactional writer (§6.3).
_CONTROL_KINDS: Final = frozenset({OutKind.CONTROL, OutKind.TICK})
#: How often a split writer commits its transaction at most while records keep
#: arriving (s): a few transactions a second, whatever the rate (§6.3).
COMMIT_INTERVAL_S: Final = 0.1
#: How soon after the last commit an idle node commits what it has (s): as the
#: interval (a writer's own ``commit_interval_s``). Readers with the repeat filter see
#: deliveries before the commit, so only ``read_committed`` ones wait; committing each
#: idle moment cost the broker (at 1,000 msg/s a node is idle between most messages:
#: ~100 transactions a second per node).
IDLE_COMMIT_GAP_S: Final = COMMIT_INTERVAL_S


class _Job:
    """A librdkafka call running on the writer's commit thread while the node's loop
    goes on (:class:`_CommitThread`: one thread for the writer's life, not one started
    per commit, which cost the node about 1 % of its CPU at 10 commits a second)."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.call = call
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.started = time.monotonic()

    def run(self) -> None:
        try:
            self.call()
        except BaseException as exc:  # handed to the loop by _finish_commit
            self.error = exc
        finally:
            self.done.set()


class _CommitThread:
    """A daemon thread that runs the :class:`_Job` handed to it, one at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self, call: Callable[[], object]) -> _Job:
        """Run ``call`` on the thread; the job says when it is done."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="transaction-commit", daemon=True
            )
            self._thread.start()
        job = _Job(call)
        self._jobs.put(job)
        return job

    def _serve(self) -> None:
        while True:
            self._jobs.get().run()


class SplitWriter(Writer):
    """Exactly-once with transactions only where a reader needs them (§6.3).

    Control records (bundles to the peers' input logs, this node's own ticks and members
    records; a merger's ticks) go through a gapless idempotent producer at once, outside
    any transaction, as at-least-once writes them: a restart or a zombie writes them
    again with the same ``seq`` and receivers drop the repeats (§4.12). Everything a
    reader reads once -- deliveries, watermarks, dead letters, snapshots -- goes into a
    transaction that stays open over several batches and commits, with the input offset,
    on an interval (:data:`COMMIT_INTERVAL_S`, idle or not). An offset
    commits only once every control record of the batches below it is acknowledged, so
    no restart from it can lose one. The commit runs on a thread (a
    :class:`TransactionalWriter`'s, with its retries through Kafka's routine events and
    its rewrite of an aborted transaction): control records keep flowing meanwhile, and
    the transactional records of the batches read meanwhile wait in memory for the next
    transaction. The transactional producer's id is the role's, so a newer instance
    fences this one (:class:`FencedError` on its next commit).

    ``on_written`` hears of records once they are written: control records when
    produced, the others when their transaction committed (a record of a transaction
    that aborted, to be written again after a restart, is never reported: metrics count
    each delivery once).
    """

    reports_written = True

    def __init__(
        self,
        connection: Connection,
        role: str,
        consumer: Consumer,
        input_topic: str,
        partition: int,
        *,
        commit_interval_s: float = COMMIT_INTERVAL_S,
        on_unwritable: Callable[[Ticket, str, bytes | None, str], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        on_written: Callable[[Sequence[OutRecord]], None] | None = None,
        init_timeout_s: float = 60.0,
        holds_role: Callable[[], bool] | None = None,
        slots: Mapping[int, InputSlot] | None = None,
    ) -> None:
        self._partition = partition
        self._on_written = on_written
        #: Per slot (a node's input partition; in a host process, each hosted node's
        #: slot): the tickets of its batches, the offset every control record below is
        #: acknowledged to, and what is done with a control record refused for good.
        self._trackers: dict[int, OffsetsTracker] = {}
        self._acked: dict[int, int] = {}
        self._unwritable_by_slot: dict[
            int, Callable[[Ticket, str, bytes | None, str], None] | None
        ] = {}
        if slots is None:  # one node: its slot is its partition, from offset 0 until
            self._trackers[partition] = OffsetsTracker(0)  # start_at says otherwise
            self._acked[partition] = 0
            self._unwritable_by_slot[partition] = on_unwritable
        self._interval_s = commit_interval_s
        self._idle_gap_s = commit_interval_s  # as IDLE_COMMIT_GAP_S to the default
        self._on_unwritable = on_unwritable
        self._control = RecordProducer(connection, **{"enable.gapless.guarantee": True})
        # its producer is initialised here, fencing any older instance of the role
        self._txn = TransactionalWriter(
            connection,
            role,
            consumer,
            input_topic,
            init_timeout_s=init_timeout_s,
            on_wait=on_wait,
            holds_role=holds_role,
            slots=slots,
        )
        self._txn.on_wait = None  # its commits run on a thread: the loop goes on anyway
        self.failed: str | None = None
        self.commits = 0
        self._open = False  # a transaction is begun
        self._began = 0.0
        self._last_commit = 0.0
        self._targets: OffsetCommit = {}  # the input offsets the open transaction commits
        self._records: list[OutRecord] = []  # in the open transaction, kept to rewrite it
        self._waiting: list[OutRecord] = []  # for the next transaction, while one commits
        self._waiting_targets: OffsetCommit = {}
        self._job: _Job | None = None
        self._commits = _CommitThread()
        self._committing: list[OutRecord] = []  # in the transaction the job commits

    @property
    def wedged(self) -> bool:
        """A librdkafka call on the transactional producer never returned."""
        return self._txn.wedged

    def start_at(self, committed: int) -> None:
        """The committed input offset, read after this writer fenced older instances:
        the node replays up to it, and commits above it."""
        self.start_slot(self._partition, committed, self._on_unwritable)

    def start_slot(
        self,
        slot: int,
        committed: int,
        on_unwritable: Callable[[Ticket, str, bytes | None, str], None] | None = None,
    ) -> None:
        """:meth:`start_at` for one slot of a writer that several nodes share (a host
        process); ``on_unwritable`` hears of that node's control records refused for
        good."""
        self._trackers[slot] = OffsetsTracker(committed)
        self._acked[slot] = committed
        self._unwritable_by_slot[slot] = on_unwritable
        self._txn.committed_before = {**(self._txn.committed_before or {}), slot: committed}

    # ------------------------------------------------------------------ writing

    def write(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot_offset: int | None = None,
        reporter: Callable[[Sequence[OutRecord]], None] | None = None,
    ) -> None:
        """Write the control ``records`` at once and queue the others for the
        transaction that commits ``commit`` (the offset after the batch); a snapshot
        commits in that transaction (``snapshot_offset`` is not needed). ``reporter``
        hears of the control records written (default: ``on_written``; in a host
        process, the node whose batch this is)."""
        del snapshot_offset
        ticket = None
        for slot, target in (commit or {}).items():  # (one: a node's batch is one slot's)
            ticket = self._trackers[slot].processed(target - 1)
        rest: list[OutRecord] = []
        control: list[OutRecord] = []
        for record in records:
            if record.kind in _CONTROL_KINDS:
                control.append(record)
                if ticket is not None:
                    ticket.sent()
                    _send(self._control, record, ticket.on_delivery)
                else:
                    _send(self._control, record, self._on_control)
            else:
                rest.append(record)
        self._control.poll(0)
        reporter = reporter or self._on_written
        if control and reporter is not None:
            reporter(control)
        if self._job is not None:
            self._waiting.extend(rest)
            self._waiting_targets.update(commit or {})
        else:
            self._add(rest, commit or {})

    def _on_control(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None and self.failed is None:
            self.failed = f"a control record could not be written: {err}"

    def _add(self, records: Sequence[OutRecord], targets: OffsetCommit) -> None:
        """Put ``records`` (and the offsets ``targets``) into the open transaction."""
        if not records and not targets:
            return
        if not self._open:
            self._txn.begin()
            self._open, self._began = True, time.monotonic()
        for record in records:
            self._txn.produce(record)
        self._records.extend(records)
        self._targets.update(targets)

    # ------------------------------------------------------------------ committing

    def settle(self, *, idle: bool = False) -> None:
        """Serve delivery reports; finish a commit that ended; start one when it is due
        (the interval passed, or the node is idle) and every control record below its
        offset is acknowledged. Raises :class:`BatchWriteError` (or
        :class:`FencedError`) once a write or a commit failed for good."""
        self._control.poll(0)
        for slot, tracker in self._trackers.items():
            on_unwritable = self._unwritable_by_slot[slot]
            for ticket, msg, reason in tracker.unwritable():
                if on_unwritable is not None:
                    on_unwritable(ticket, msg.topic() or "?", msg.value(), reason)
            acked = tracker.target()
            if acked is not None:
                tracker.committed_at(acked)
                self._acked[slot] = acked
            if tracker.failed is not None:
                raise BatchWriteError(tracker.failed)
        if self.failed is not None:
            raise BatchWriteError(self.failed)
        if self._job is not None:
            self._finish_commit()
        if self._job is None and self._open and self._due(idle):
            self._start_commit()

    def send_dead_letter(self, ticket: Ticket, record: OutRecord) -> None:
        """Set aside a control output the broker refused for good: the dead letter goes
        into the transaction; ``ticket`` no longer waits for the refused record."""
        del ticket
        if self._job is not None:
            self._waiting.append(record)
        else:
            self._add([record], {})

    def _due(self, idle: bool) -> bool:
        acked = self._acked
        if any(acked[slot] < target for slot, target in self._targets.items()):
            return False  # a control record below an offset is not acknowledged yet
        now = time.monotonic()
        if now - self._began >= self._interval_s:
            return True
        return idle and now - self._last_commit >= self._idle_gap_s

    def _start_commit(self) -> None:
        records, txn = self._records, self._txn
        commit = dict(self._targets) or None
        self._job = self._commits.start(lambda: txn.finish(records, commit))
        self._committing = records
        self._open, self._targets, self._records = False, {}, []

    def _finish_commit(self, wait_s: float = 0.0) -> None:
        job = self._job
        assert job is not None
        if not job.done.wait(wait_s):
            return  # (the transactional writer bounds its own calls)
        self._job = None
        if job.error is not None:
            raise job.error
        self.commits += 1
        self._last_commit = time.monotonic()
        committed, self._committing = self._committing, []
        if committed and self._on_written is not None:
            self._on_written(committed)
        waiting, targets = self._waiting, self._waiting_targets
        self._waiting, self._waiting_targets = [], {}
        self._add(waiting, targets)

    def raise_failure(self) -> None:
        """Raise what the commit running on the thread failed with, once it ended."""
        job = self._job
        if job is not None and job.done.is_set() and job.error is not None:
            self._job = None
            raise job.error

    def close(self, *, abandon: bool = False) -> None:
        """Commit what is open (bounded), flush the control records, release. Abandoned:
        nothing is committed or waited for -- not the commit running on the thread (an
        abandoned transactional writer ends its retries and waits, and takes no new
        producer), nor the control records, which the restart or the instance that took
        over writes again (their offsets were not committed) -- so that the instance
        stops at once."""
        if abandon:
            self._txn.abandon()
            self._control.close(0)
            return
        if self.wedged:
            return
        try:
            if self._job is not None:
                self._finish_commit(COMMIT_TIMEOUT_S + TXN_RETRY_S)
            self._control.flush(30)
            self._interval_s = 0.0
            self.settle()
            if self._job is not None:
                self._finish_commit(COMMIT_TIMEOUT_S + TXN_RETRY_S)
        except AtomicKafkaError as exc:
            log.error("the last transaction did not commit: %s", exc)
        if self._control.flush(30):
            log.error("control records not acknowledged at shutdown")
        self._txn.close()


def _classified(exc: KafkaException, doing: str) -> AtomicKafkaError:
    error = exc.args[0] if exc.args else None
    code = error.code() if isinstance(error, KafkaError) else None
    if code in _FENCED_CODES:
        return FencedError(f"fenced while {doing}: another instance of this role took over")
    return BatchWriteError(f"{doing} failed: {exc}")


class AckedWriter(Writer):
    """Gapless idempotent writes; commits once acknowledged (at-least-once)."""

    def __init__(
        self,
        connection: Connection,
        consumer: Consumer,
        input_topic: str,
        partition: int,
        tracker: OffsetsTracker | None = None,
        *,
        commit_interval_s: float = 0.1,
        on_unwritable: Callable[[Ticket, str, bytes | None, str], None] | None = None,
    ) -> None:
        self._consumer = consumer
        self._input = input_topic
        self._partition = partition
        self._tracker = OffsetsTracker(0) if tracker is None else tracker
        self._commit_interval_s = commit_interval_s
        self._last_commit = 0.0
        self._pending_snapshot: tuple[int, list[OutRecord]] | None = None
        self._on_unwritable = on_unwritable
        self.failed: str | None = None
        self._producer = RecordProducer(connection, **{"enable.gapless.guarantee": True})

    def start_at(self, committed: int) -> None:
        """Track the batches above ``committed``, the offset recovery starts from."""
        self._tracker = OffsetsTracker(committed)

    def write(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot_offset: int | None = None,
    ) -> None:
        """Queue ``records``; their batch's offset commits once all are acknowledged.
        With a ``snapshot_offset``, the snapshot among ``records`` is held until the
        commit has passed it (:meth:`write_batch`)."""
        if snapshot_offset is None:
            self.write_batch(records, commit, snapshot=(), snapshot_offset=None)
            return
        outputs = [r for r in records if r.kind is not OutKind.SNAPSHOT]
        snapshot = [r for r in records if r.kind is OutKind.SNAPSHOT]
        self.write_batch(outputs, commit, snapshot=snapshot, snapshot_offset=snapshot_offset)

    def write_batch(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot: Sequence[OutRecord],
        snapshot_offset: int | None,
    ) -> None:
        """Queue ``records``; hold ``snapshot`` until the commit passes its offset."""
        if snapshot and snapshot_offset is not None:
            self._pending_snapshot = (snapshot_offset, list(snapshot))
        if commit is None:
            for record in records:
                _send(self._producer, record, None)
            return
        (next_offset,) = commit.values()
        ticket = self._tracker.processed(next_offset - 1)
        assert ticket is not None  # the batch layer drops replayed outputs itself
        for record in records:
            ticket.sent()
            _send(self._producer, record, ticket.on_delivery)
        self._producer.poll(0)

    def settle(self, *, idle: bool = False, force: bool = False) -> None:
        """Serve delivery reports; commit past every fully acknowledged batch (at most
        every ``commit_interval_s``, idle or not, or now with ``force``); raise
        :class:`BatchWriteError` once a write has failed."""
        del idle
        self._producer.poll(0)
        tracker = self._tracker
        for ticket, msg, reason in tracker.unwritable():
            if self._on_unwritable is not None:
                self._on_unwritable(ticket, msg.topic() or "?", msg.value(), reason)
        target = tracker.target()
        if tracker.failed is not None:
            raise BatchWriteError(tracker.failed)
        now = time.monotonic()
        if target is None or not (force or now - self._last_commit >= self._commit_interval_s):
            return
        offsets = [TopicPartition(self._input, self._partition, target)]
        try:
            if force:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:  # retried with the next batch
            _log_retry("offset commit", f"commit of offset {target} failed: %s", exc)
            return
        tracker.committed_at(target)
        self._last_commit = now
        self._write_due_snapshot(target)

    def _write_due_snapshot(self, committed: int) -> None:
        pending = self._pending_snapshot
        if pending is not None and committed >= pending[0]:
            self._pending_snapshot = None
            for record in pending[1]:
                _send(self._producer, record, None)

    def send_dead_letter(self, ticket: Ticket, record: OutRecord) -> None:
        """Write a dead letter as part of ``ticket``'s batch."""
        ticket.sent()
        _send(self._producer, record, ticket.on_delivery)

    def close(self, *, abandon: bool = False) -> None:
        """Wait (bounded) for what is queued, commit what became safe, release.
        Abandoned: nothing is waited for nor committed -- a fenced instance's commit
        would move the offset of the group another instance now commits (the restart or
        the new instance writes again what was not committed; receivers drop repeats)."""
        if abandon:
            self._producer.close(0)
            return
        remaining = self._producer.flush(30)
        if remaining:
            log.error("%d outputs not acknowledged at shutdown", remaining)
            return
        try:
            self.settle(force=True)
        except BatchWriteError as exc:
            log.error("%s", exc)


class GaplessWriter(Writer):
    """At-least-once writes for the merger: a gapless idempotent producer (a failed
    write is fatal: the merger exits and resumes after the end of ``T``); a snapshot is
    written only once everything before it is acknowledged."""

    def __init__(self, connection: Connection) -> None:
        self.failed: str | None = None
        self._producer = RecordProducer(connection, **{"enable.gapless.guarantee": True})

    def start_at(self, committed: int) -> None:
        """Nothing to do: the merger's progress is its snapshot and the end of ``T``."""
        del committed

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None and self.failed is None:
            self.failed = f"a write failed: {err}"

    def write(
        self,
        records: Sequence[OutRecord],
        commit: OffsetCommit | None,
        *,
        snapshot_offset: int | None = None,
    ) -> None:
        """Queue ``records`` in order (``commit`` is not used: the merger's progress is
        its snapshot and the end of ``T``); a snapshot among them is written once
        everything before it is acknowledged."""
        del commit, snapshot_offset
        snapshot = [r for r in records if r.kind is OutKind.SNAPSHOT]
        for record in records:
            if record.kind is not OutKind.SNAPSHOT:
                _send(self._producer, record, self._on_delivery)
        if snapshot:
            if self._producer.flush(60):
                raise BatchWriteError("outputs not acknowledged before a snapshot")
            self.settle()
            for record in snapshot:
                _send(self._producer, record, self._on_delivery)
        self._producer.poll(0)

    def send_dead_letter(self, ticket: Ticket, record: OutRecord) -> None:
        """Queue a dead letter after what is queued (a failed write is fatal here)."""
        del ticket
        _send(self._producer, record, self._on_delivery)

    def settle(self, *, idle: bool = False) -> None:
        """Serve delivery reports; raise :class:`BatchWriteError` once one failed."""
        del idle
        self._producer.poll(0)
        if self.failed is not None:
            raise BatchWriteError(self.failed)

    def close(self, *, abandon: bool = False) -> None:
        """Wait (bounded) for what is queued; abandoned, for nothing (the restart resumes
        after the last delivery it finds in ``T``)."""
        if abandon:
            self._producer.close(0)
            return
        if self._producer.flush(30):
            log.error("outputs not acknowledged at shutdown")
