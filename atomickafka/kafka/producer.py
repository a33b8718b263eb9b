"""One producer wrapper for every role (node, merger, their writers, client, tools).

:class:`RecordProducer` owns a librdkafka producer configured from a
:class:`~atomickafka.kafka.connection.Connection` (defaults of
:mod:`atomickafka.kafka.settings`), with librdkafka's log lines sent to the
``atomickafka.librdkafka`` logger. ``send`` waits while librdkafka's local queue is full
(the queue drains as the broker acknowledges), up to ``queue_wait_s``, then raises
:class:`~atomickafka.errors.QueueFullError`; ``send_if_room`` never waits, for records
that the next one replaces (statuses). The node's and merger's writers
(:mod:`atomickafka.node.writers`) write through it too, its transactional calls
included, so this is the one place that waits for room in librdkafka's queue.
Encoding stays with the caller
(:mod:`atomickafka.core.wire`); the wrapper only attaches the ``atomickafka-type`` header
when asked, from shared constants, never a list per record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.core.reader import TYPE_HEADER, Header
from atomickafka.core.wire import MessageType
from atomickafka.errors import ClosedError, QueueFullError
from atomickafka.kafka.connection import Where, connection_of
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER

__all__ = [
    "CLOSE_ON_ERROR_TIMEOUT_S",
    "CLOSE_TIMEOUT_S",
    "DEFAULT_QUEUE_WAIT_S",
    "DeliveryCallback",
    "RecordHeaders",
    "RecordProducer",
    "type_headers",
]

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, KafkaMessage], None]
#: Headers as a record is produced with them.
RecordHeaders = list[Header]

#: How long ``send`` waits for room in a full local queue before it gives up (seconds).
DEFAULT_QUEUE_WAIT_S: Final = 60.0
#: How long closing waits for queued records; shorter while an exception is on its way.
CLOSE_TIMEOUT_S: Final = 30.0
CLOSE_ON_ERROR_TIMEOUT_S: Final = 5.0

_TYPE_HEADERS: Final[dict[MessageType, RecordHeaders]] = {
    t: [(TYPE_HEADER, t.value.encode())] for t in MessageType
}


def type_headers(kind: MessageType) -> RecordHeaders:
    """The shared header list naming a record's type (do not modify it)."""
    return _TYPE_HEADERS[kind]


class _Unsent:
    """Stands in for the record of a delivery report when ``produce`` itself refused it."""

    def __init__(self, topic: str, value: bytes | None) -> None:
        self._topic, self._value = topic, value

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes | None:
        return self._value


class RecordProducer(AbstractContextManager["RecordProducer"]):
    """A librdkafka producer that waits out a full local queue, for a bounded time.

    Use it as a context manager, or call :meth:`close`: both wait (bounded) for what is
    queued and release the producer; leaving the block by an exception waits only
    :data:`CLOSE_ON_ERROR_TIMEOUT_S`. ``where`` is the connection (or a bare bootstrap
    string); ``extra`` are librdkafka settings of this role. librdkafka's log lines go
    to ``logger`` (a check that reads them itself, as ``doctor`` does, passes its own).
    """

    #: How long :meth:`send` waits for room in a full queue (seconds).
    queue_wait_s: float = DEFAULT_QUEUE_WAIT_S

    def __init__(
        self,
        where: Where,
        logger: logging.Logger = LIBRDKAFKA_LOGGER,
        /,
        **extra: str | int | bool,
    ) -> None:
        config = connection_of(where).producer_config(**extra)
        self._producer: Producer | None = Producer(config, logger=logger)

    @property
    def _open(self) -> Producer:
        if self._producer is None:
            raise ClosedError("the producer is closed")
        return self._producer

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        partition: int | None = None,
        key: bytes | None = None,
        headers: RecordHeaders | None = None,
        on_delivery: DeliveryCallback | None = None,
        report_refused: bool = True,
        timestamp_ms: int = 0,
    ) -> None:
        """Queue one record; while the queue is full, serve delivery reports and retry,
        for up to ``queue_wait_s`` (then :class:`~atomickafka.errors.QueueFullError`).
        ``timestamp_ms`` sets the record's Kafka timestamp (0: now, librdkafka's default).

        A record librdkafka refuses on the spot (too large for ``message.max.bytes``)
        is reported to ``on_delivery`` like a failed delivery, when one is given and
        ``report_refused``; otherwise its ``KafkaException`` is raised (the node's
        writers classify it: a fence, a fatal error, a batch to write again).
        """
        producer = self._open
        where = -1 if partition is None else partition  # -1: the partitioner picks
        deadline: float | None = None
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key=key,
                    partition=where,
                    headers=headers,
                    on_delivery=on_delivery,
                    timestamp=timestamp_ms,
                )
                return
            except BufferError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.queue_wait_s
                elif now >= deadline:
                    raise QueueFullError(
                        f"librdkafka's send queue ({len(producer)} records) stayed full for "
                        f"{self.queue_wait_s:.0f} s: the broker is not taking records; is it "
                        "reachable?"
                    ) from None
                producer.poll(0.05)  # delivery reports free room in the queue
            except KafkaException as exc:  # refused locally (e.g. over message.max.bytes)
                if on_delivery is None or not report_refused:
                    raise
                on_delivery(exc.args[0], _Unsent(topic, value))  # type: ignore[arg-type]
                return

    def send_if_room(self, topic: str, value: bytes, *, key: bytes | None = None) -> bool:
        """Queue one record unless the local queue is full; never waits. For records the
        next one replaces (a status), whose loss costs nothing."""
        try:
            self._open.produce(topic, value, key=key)
        except BufferError:
            return False
        return True

    def poll(self, timeout_s: float = 0.0) -> int:
        """Serve delivery reports (and librdkafka's log lines); return how many reports
        were served."""
        return int(self._open.poll(timeout_s))

    def flush(self, timeout_s: float) -> int:
        """Wait for every queued record; return how many are still not acknowledged."""
        return int(self._open.flush(timeout_s))

    # ------------------------------------------ transactions (the node's and merger's writers)

    def init_transactions(self, timeout_s: float) -> None:
        """librdkafka's ``init_transactions`` (fences older producers of the
        ``transactional.id``); the caller bounds the wait."""
        self._open.init_transactions(timeout_s)

    def begin_transaction(self) -> None:
        """librdkafka's ``begin_transaction``."""
        self._open.begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: list[TopicPartition], group: object, timeout_s: float
    ) -> None:
        """librdkafka's ``send_offsets_to_transaction`` (``group``: the consumer's group
        metadata)."""
        self._open.send_offsets_to_transaction(offsets, group, timeout_s)

    def commit_transaction(self, timeout_s: float) -> None:
        """librdkafka's ``commit_transaction``."""
        self._open.commit_transaction(timeout_s)

    def abort_transaction(self, timeout_s: float) -> None:
        """librdkafka's ``abort_transaction``."""
        self._open.abort_transaction(timeout_s)

    def warm_up(self, topics: list[str], timeout_s: float = 10.0) -> None:
        """Fetch metadata for ``topics`` now rather than on the first send."""
        producer = self._open
        for topic in topics:
            producer.list_topics(topic, timeout=timeout_s)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> int:
        """Wait up to ``timeout_s`` for what is queued, then release the producer; return
        how many records were not acknowledged. Those are purged: their delivery
        callbacks report the failure. Closing twice does nothing."""
        producer, self._producer = self._producer, None
        if producer is None:
            return 0
        remaining = int(producer.flush(timeout_s))
        if remaining:
            log.warning("closing a producer with %d records not acknowledged", remaining)
            producer.purge()
            producer.flush(1.0)  # serves the purged records' delivery callbacks
        return remaining

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._producer is None

    def __len__(self) -> int:
        return 0 if self._producer is None else len(self._producer)

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        self.close(CLOSE_TIMEOUT_S if exc is None else CLOSE_ON_ERROR_TIMEOUT_S)
