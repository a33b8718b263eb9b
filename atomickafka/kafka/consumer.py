"""Consumer helpers shared by the node, the merger, the client and the tools."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import Message as KafkaMessage

from atomickafka.errors import TimedOutError
from atomickafka.kafka.connection import Where, connection_of
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER
from atomickafka.logs import Throttle

__all__ = [
    "METADATA_HINT_S",
    "SCAN_WINDOW",
    "assign_from",
    "consume_batch",
    "last_matching",
    "last_record",
    "make_consumer",
    "read_partitions",
    "read_range",
    "read_to_end",
    "retry_transient",
    "until_partition_ends",
    "usable",
    "watermarks",
]

T = TypeVar("T")
log = logging.getLogger(__name__)
#: A consumer's transient errors (a broker down) are logged once a kind every 30 s.
_consumer_errors = Throttle(30.0)


def consume_batch(consumer: Consumer, max_records: int, timeout_s: float) -> list[KafkaMessage]:
    """Wait up to ``timeout_s`` for one record, then take whatever else is already fetched.

    ``Consumer.consume(n, timeout)`` waits until it has ``n`` records or the timeout
    passes, which adds the whole timeout to every hop under light load; this returns as
    soon as anything is there and still batches under heavy load.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if max_records <= 1:
        return [first]
    return [first, *consumer.consume(num_messages=max_records - 1, timeout=0)]


#: Errors a freshly created topic or a starting broker answers with for a while.
_TRANSIENT_CODES: Final = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        # the handle of a broker that died (e.g. killed in a failover) was just destroyed:
        # another broker answers on the retry
        KafkaError._DESTROY_BROKER,
        # a partition's new leader (after a failover) answers this until its high
        # watermark has caught up with the followers
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)


def retry_transient(call: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """Run ``call``, retrying while Kafka answers with a transient error (a new topic's
    leader not elected yet, a coordinator still loading) until ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            transient = err is not None and (err.retriable() or err.code() in _TRANSIENT_CODES)
            if not transient or time.monotonic() + delay > deadline:
                raise
            log.debug("%s: %s; retrying", what, err)
            time.sleep(delay)
            delay = min(1.0, delay * 2)


def watermarks(
    consumer: Consumer, part: TopicPartition, timeout_s: float = 60.0
) -> tuple[int, int]:
    """``(low, high)`` offsets of ``part``, waiting out a new topic's leader election
    (and a failover's: each try waits at most 5 s, so that a timed-out one is retried)."""
    return retry_transient(
        lambda: consumer.get_watermark_offsets(part, timeout=min(5.0, timeout_s)),
        f"watermarks of {part.topic}",
        timeout_s,
    )


#: How long :func:`assign_from` waits for a topic's metadata when it only makes a
#: lookup go out sooner (``OFFSET_BEGINNING``): without it the lookup is merely half a
#: second late, so a reader never waits long for it when no broker answers.
METADATA_HINT_S: Final = 1.0


def assign_from(
    consumer: Consumer, parts: Iterable[TopicPartition], timeout_s: float = 10.0
) -> None:
    """Assign ``parts`` to ``consumer`` so that it starts reading at once, where asked
    (an offset, ``OFFSET_BEGINNING`` or ``OFFSET_END``).

    librdkafka looks up a logical offset only once it knows the partition's leader,
    and a consumer that does not know it yet retries the lookup 500 ms later: a reader
    assigned at ``OFFSET_BEGINNING`` first fetched 515 ms after it was made (10-20 ms
    at offset 0, on the embedded broker, 2026-11-27), and one assigned at
    ``OFFSET_END`` took its end half a second late, so a record written meanwhile was
    never read. Here the topics' metadata is read first (for at most
    :data:`METADATA_HINT_S` where it only saves time), and ``OFFSET_END`` is resolved
    now, to the partition's high watermark (for ``read_committed``, its last stable
    offset): every record written after this call is read. A topic that does not
    exist yet ends at offset 0. Should no broker answer within ``timeout_s``, the end
    is left to librdkafka (``OFFSET_END``).
    """
    wanted = list(parts)
    at_end = {p.topic for p in wanted if p.offset == OFFSET_END}
    for topic in sorted({p.topic for p in wanted if p.offset == OFFSET_BEGINNING} - at_end):
        try:
            consumer.list_topics(topic, timeout=min(timeout_s, METADATA_HINT_S))
        except KafkaException as exc:
            log.debug("no metadata for %s yet (%s): its first fetch may wait", topic, exc)
    exists: dict[str, bool | None] = {t: _topic_exists(consumer, t, timeout_s) for t in at_end}
    consumer.assign(
        [
            TopicPartition(p.topic, p.partition, _end(consumer, p, exists[p.topic], timeout_s))
            if p.offset == OFFSET_END
            else p
            for p in wanted
        ]
    )


def _topic_exists(consumer: Consumer, topic: str, timeout_s: float) -> bool | None:
    """Whether ``topic`` exists; ``None`` when no broker said within ``timeout_s``."""
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        log.debug("no metadata for %s (%s): its end is left to librdkafka", topic, exc)
        return None
    if meta is None or meta.error is None:
        return meta is not None
    if meta.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
        return False
    return None


def _end(consumer: Consumer, part: TopicPartition, exists: bool | None, timeout_s: float) -> int:
    """Where ``part`` ends now: 0 for a topic not created yet, ``OFFSET_END`` when
    it cannot be known."""
    if exists is None:
        return OFFSET_END
    if not exists:
        return 0
    try:
        return watermarks(consumer, part, timeout_s)[1]
    except KafkaException as exc:
        log.debug("no watermarks for %s (%s): its end is left to librdkafka", part.topic, exc)
        return OFFSET_END


def fetched(consumer: Consumer, parts: Iterable[TopicPartition]) -> bool:
    """Whether ``consumer`` has fetched each of ``parts`` at least once (its cached
    watermarks are known)."""
    for part in parts:
        marks = consumer.get_watermark_offsets(part, cached=True)
        if marks is None or marks[1] < 0:
            return False
    return True


def make_consumer(
    where: Where,
    group: str | None = None,
    /,
    **extra: str | int | bool,
) -> Consumer:
    """A consumer of the connection ``where`` (or of a bare bootstrap string) with the
    defaults of :mod:`atomickafka.kafka.settings` (a throwaway group when
    ``group`` is ``None``: nothing it commits is ever read again), logging through
    :data:`~atomickafka.kafka.settings.LIBRDKAFKA_LOGGER`."""
    name = group or f"atomickafka-reader-{uuid.uuid4().hex[:12]}"
    config = connection_of(where).consumer_config(name, **extra)
    return Consumer(config, logger=LIBRDKAFKA_LOGGER)


def usable(records: Iterable[KafkaMessage]) -> list[KafkaMessage]:
    """The records of a batch that carry data; a fatal error is raised, end-of-partition
    events are dropped and transient errors are logged (librdkafka retries them)."""
    out = []
    for record in records:
        err = record.error()
        if err is None:
            out.append(record)
        elif err.fatal():
            raise KafkaException(err)
        elif err.code() not in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
            held = _consumer_errors.admit(str(err.code()))
            if held is not None:
                more = f" ({held} more since, not logged)" if held else ""
                log.warning("consumer: %s (librdkafka retries)%s", err, more)
    return out


def last_record(consumer: Consumer, topic: str, partition: int = 0) -> KafkaMessage | None:
    """The last record of ``topic``'s ``partition``, or ``None`` when it is empty."""
    part = TopicPartition(topic, partition)
    low, high = watermarks(consumer, part)
    if high <= low:
        return None
    consumer.assign([TopicPartition(topic, partition, high - 1)])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            for record in usable(consume_batch(consumer, 10, 0.5)):
                if record.offset() == high - 1:
                    return record
        raise TimedOutError(f"could not read the last record of {topic}[{partition}]")
    finally:
        consumer.unassign()


def read_partitions(
    consumer: Consumer, topic: str, partitions: Iterable[int], timeout_s: float = 30.0
) -> list[KafkaMessage]:
    """Every record of ``topic``'s ``partitions`` up to their current end, in order per
    partition (for tools and tests; a long log is read into memory). The end is where
    the consumer's position reaches the partition's end as it was when the read began:
    a transactional topic's last offset may be a commit marker, never returned as a
    record."""
    parts = list(partitions)
    ends = {p: watermarks(consumer, TopicPartition(topic, p))[1] for p in parts}
    todo = {p for p, end in ends.items() if end > 0}
    assign_from(consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: list[KafkaMessage] = []
    deadline = time.monotonic() + timeout_s
    try:
        while todo and time.monotonic() < deadline:
            for record in usable(consume_batch(consumer, 5000, 0.2)):
                out.append(record)
                part, offset = record.partition(), record.offset()
                if part in todo and offset is not None and offset + 1 >= ends[part]:
                    todo.discard(part)
            if todo:
                positions = consumer.position([TopicPartition(topic, p) for p in todo])
                todo -= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
    finally:
        consumer.unassign()
    if todo:
        raise TimedOutError(f"could not read {topic} partitions {sorted(todo)} to their end")
    return out


def read_to_end(
    where: Where,
    topic: str,
    partitions: Iterable[int],
    *,
    timeout_s: float = 60.0,
) -> list[KafkaMessage]:
    """Every committed record of ``topic``'s ``partitions``, from the start to the end
    as it is now, read ``read_committed`` (transaction markers and aborted records are
    skipped).

    A partition is read once the consumer reports its end (an end-of-partition event)
    at or past the end its watermarks gave before the read (a ``read_committed``
    consumer's high watermark is the last stable offset): neither the event nor the
    watermarks decide it alone. In the CI run of b1c525e, one of the two was wrong:
    a delivery topic of 1,776 committed records on the three-broker cluster read as
    empty, 24 s after a broker was killed.
    """
    settings: dict[str, str | int | bool] = {
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    }
    consumer = make_consumer(where, None, **settings)
    parts = list(partitions)
    out: list[KafkaMessage] = []
    deadline = time.monotonic() + timeout_s
    try:
        ends = {p: watermarks(consumer, TopicPartition(topic, p))[1] for p in parts}
        assign_from(consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        what = f"{topic} to its end in {timeout_s:.0f} s"
        out.extend(until_partition_ends(consumer, set(parts), deadline, what, ends))
    finally:
        consumer.close()
    return out


def until_partition_ends(
    consumer: Consumer,
    todo: set[int],
    deadline: float,
    what: str,
    ends: Mapping[int, int] | None = None,
) -> Iterator[KafkaMessage]:
    """The records ``consumer`` (with ``enable.partition.eof``) reads until every
    partition of ``todo`` has reported its end (``todo`` is emptied as they do); a
    :class:`~atomickafka.errors.TimedOutError` naming ``what`` once the monotonic
    ``deadline`` passes first. With ``ends``, an end counts only at or past the
    partition's offset there (one reported before it is logged, and reading goes on)."""
    while todo:
        if time.monotonic() > deadline:
            raise TimedOutError(f"could not read {what}")
        for record in consume_batch(consumer, 1000, 0.5):
            err = record.error()
            if err is None:
                yield record
            elif err.code() == KafkaError._PARTITION_EOF:
                part, at = record.partition() or 0, record.offset() or 0
                end = ends.get(part, 0) if ends else 0
                if at >= end:
                    todo.discard(part)
                elif part in todo:
                    log.warning(
                        "%s[%d] reported its end at offset %d, before %d where it ended "
                        "when the read began; reading on",
                        record.topic(),
                        part,
                        at,
                        end,
                    )
            elif err.fatal():
                raise KafkaException(err)


#: Records read per step when a partition is searched backwards (:func:`last_matching`).
SCAN_WINDOW: Final = 200


def last_matching(
    consumer: Consumer,
    part: TopicPartition,
    accept: Callable[[KafkaMessage], T | None],
    *,
    on_passed: Callable[[KafkaMessage], None] | None = None,
) -> T | None:
    """What ``accept`` makes of the last record of ``part`` it accepts (not ``None``),
    reading the partition backwards, :data:`SCAN_WINDOW` records at a time; ``None``
    when it accepts none. ``on_passed`` sees each record passed over on the way. The
    consumer is assigned for the scan and unassigned after it."""
    low, high = retry_transient(
        lambda: consumer.get_watermark_offsets(part, timeout=10), "watermarks"
    )
    end = high
    while end > low:
        start = max(low, end - SCAN_WINDOW)
        for record in reversed(read_range(consumer, part, start, end)):
            found = accept(record)
            if found is not None:
                return found
            if on_passed is not None:
                on_passed(record)
        end = start
    return None


def read_range(
    consumer: Consumer, part: TopicPartition, start: int, end: int
) -> list[KafkaMessage]:
    """The committed records of ``part`` with offsets in ``[start, end)`` (what a
    ``read_committed`` consumer gets: aborted records and markers leave gaps)."""
    topic, partition = part.topic, part.partition
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[KafkaMessage] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            batch = consume_batch(consumer, SCAN_WINDOW, 0.5)
            if not batch:
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end or position < 0:
                    break
                continue
            for record in usable(batch):
                if (record.offset() or 0) < end:
                    out.append(record)
            if (batch[-1].offset() or 0) >= end - 1:
                break
    finally:
        consumer.unassign()
    return out
