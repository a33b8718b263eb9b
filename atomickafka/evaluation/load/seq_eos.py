"""The transactional sequencer (``seq-eos``): the exactly-once fan-out a Kafka team
writes in Python, with the promise of AtomicKafka's default.

Like the plain sequencer (:mod:`~atomickafka.evaluation.load.sequencer`) every message
goes through one partition and one process writes it to each of its destinations, in
the partition's order; unlike it:

- it reads the sequencer topic ``read_committed`` and writes in **transactions**: the
  deliveries of what it read since the last commit and the next offset to read
  (``send_offsets_to_transaction``, to its consumer group) commit together, so a
  ``read_committed`` reader of a destination sees each message once;
- it commits on an interval, as Kafka Streams does (``commit.interval.ms``, 100 ms by
  default under exactly-once): a transaction stays open until it is that old;
- its ``transactional.id`` is fixed per sequencer topic: a new instance's
  ``init_transactions`` **fences** an older one (a zombie can write no more) and aborts
  its open transaction;
- after a crash it **resumes from its committed offset**: what it wrote after that was
  in an aborted transaction, and is written again.

librdkafka's transactional requests retry with the backoff capped as AtomicKafka's
nodes cap it (``retry.backoff.max.ms``), so neither side has the other's tuning.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from atomickafka.evaluation.load.sequencer import fan_out
from atomickafka.kafka.connection import Where
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable
from atomickafka.kafka.producer import RecordProducer
from atomickafka.node.writers import TXN_RETRY_BACKOFF_MAX_MS

__all__ = [
    "COMMIT_INTERVAL_S",
    "SEQ_EOS_ID",
    "EosFanOut",
    "eos_fan_out_process",
    "seq_eos_group",
    "seq_eos_transactional_id",
]

log = logging.getLogger("atomickafka.eval.seq_eos")

#: ``senderID`` of its deliveries (and its name in the metrics).
SEQ_EOS_ID: Final = "seq-eos"
#: How long a transaction stays open (s): Kafka Streams' ``commit.interval.ms`` under
#: exactly-once.
COMMIT_INTERVAL_S: Final = 0.1
#: librdkafka's bound on each transactional call (s), and how long a retriable failure
#: of a commit is tried again.
_CALL_TIMEOUT_S: Final = 30.0
_RETRY_FOR_S: Final = 60.0


def seq_eos_transactional_id(topic: str) -> str:
    """The ``transactional.id`` of the fan-out of sequencer topic ``topic``: one per
    topic, so that a second instance fences the first."""
    return f"atomickafka-seq-eos-{topic}"


def seq_eos_group(topic: str) -> str:
    """The consumer group its offsets are committed to."""
    return f"atomickafka-seq-eos-{topic}"


class EosFanOut:
    """One instance of the transactional fan-out of ``topic`` (partition 0): made, it
    has fenced any older instance and knows where to resume; :meth:`run` fans out."""

    def __init__(self, where: Where, topic: str, commit_interval_s: float = COMMIT_INTERVAL_S):
        self.topic, self.commit_interval_s = topic, commit_interval_s
        self._consumer: Consumer = make_consumer(
            where, seq_eos_group(topic), **{"isolation.level": "read_committed"}
        )
        settings: dict[str, str | int | bool] = {
            "client.id": SEQ_EOS_ID,
            "transactional.id": seq_eos_transactional_id(topic),
            "retry.backoff.ms": 5,
            "retry.backoff.max.ms": TXN_RETRY_BACKOFF_MAX_MS,
        }
        self._producer = RecordProducer(where, **settings)
        # first fence (and abort) an older instance's transaction, then read the offset
        # its last committed transaction left
        self._producer.init_transactions(_CALL_TIMEOUT_S)
        self._group = self._consumer.consumer_group_metadata()
        (committed,) = self._consumer.committed([TopicPartition(topic, 0)], _CALL_TIMEOUT_S)
        #: The next offset to read, as last committed (``None``: nothing committed yet).
        self.committed: int | None = committed.offset if committed.offset >= 0 else None
        start = OFFSET_BEGINNING if self.committed is None else self.committed
        assign_from(self._consumer, [TopicPartition(topic, 0, start)])
        self._next: int | None = None  # the next offset to read, as fanned out so far
        self._open_since: float | None = None
        #: Deliveries written in committed transactions.
        self.written = 0
        self._pending = 0

    def run(self, stop: Any, deadline: float) -> None:
        """Fan out until ``stop`` is set or ``deadline`` (monotonic) passes, then commit
        what is open."""
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                self.step()
        finally:
            if self._open_since is not None:
                self._commit()

    def step(self) -> None:
        """Read what has come (waiting at most until the open transaction is due) and
        fan it out; commit the transaction once it is :attr:`commit_interval_s` old."""
        opened = self._open_since
        wait = (
            0.05 if opened is None else max(0.0, opened + self.commit_interval_s - time.monotonic())
        )
        records = usable(consume_batch(self._consumer, 5000, wait))
        if records and self._open_since is None:
            self._producer.begin_transaction()
            self._open_since = time.monotonic()
        for record in records:
            self._pending += fan_out(self._producer, record, SEQ_EOS_ID)
            self._next = (record.offset() or 0) + 1
        opened = self._open_since
        if opened is not None and time.monotonic() - opened >= self.commit_interval_s:
            self._commit()

    def _commit(self) -> None:
        """Add the next offset to the open transaction and commit it; a transaction that
        must be aborted is, and what it held is read again from the last commit."""
        assert self._next is not None
        offsets = [TopicPartition(self.topic, 0, self._next)]
        try:
            self._retrying(
                lambda: self._producer.send_offsets_to_transaction(
                    offsets, self._group, _CALL_TIMEOUT_S
                )
            )
            self._retrying(lambda: self._producer.commit_transaction(_CALL_TIMEOUT_S))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.txn_requires_abort()):
                raise  # fenced by a newer instance, or fatal: this instance ends
            log.warning("transaction aborted (%s); reading again from the last commit", exc)
            self._producer.abort_transaction(_CALL_TIMEOUT_S)
            self._rewind()
        else:
            self.committed, self.written = self._next, self.written + self._pending
        self._open_since, self._pending = None, 0

    def _retrying(self, call: Any) -> None:
        """``call``, again while it fails with a retriable error, for a bounded time."""
        deadline = time.monotonic() + _RETRY_FOR_S
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not (isinstance(error, KafkaError) and error.retriable()):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _rewind(self) -> None:
        start = OFFSET_BEGINNING if self.committed is None else self.committed
        self._consumer.seek(TopicPartition(self.topic, 0, start))
        self._next = self.committed

    def close(self) -> None:
        """Release the producer and the consumer."""
        self._producer.close()
        self._consumer.close()


def eos_fan_out_process(
    where: Where,
    topic: str,
    ready: Any,
    stop: Any,
    max_seconds: float,
) -> None:
    """Child process: the transactional fan-out of ``topic`` until ``stop`` is set (or
    ``max_seconds``), ready once it has fenced older instances and knows where to
    resume."""
    fan = EosFanOut(where, topic)
    ready.set()
    try:
        fan.run(stop, time.monotonic() + max_seconds)
    finally:
        fan.close()
        log.info("seq-eos stopped", extra={"fields": {"written": fan.written}})
