"""Reading one topic's ordered deliveries, with a consumer that is closed when done.

>>> from atomickafka.client import DeliveryReader  # doctest: +SKIP
>>> with DeliveryReader("127.0.0.1:19092", "audit") as reader:
...     for d in reader.deliveries(timeout_s=5):
...         print(d.timeStamp, d.messageID, d.value)
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Final

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.client.delivery import Delivery
from atomickafka.client.errors import ClosedError, ConfigError, MessageError
from atomickafka.core.reader import Unaccepted, delivery_of, delivery_order_key, delivery_writers
from atomickafka.core.wire import Message, is_valid_topic_name
from atomickafka.kafka.connection import Connection, connection_of
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable
from atomickafka.kafka.guarantees import refuse_unsafe
from atomickafka.kafka.secrets import signer_from
from atomickafka.kafka.topics import delivery_topic
from atomickafka.logs import Throttle

__all__ = ["RECENT_KEYS", "WARN_EVERY_S", "DeliveryReader"]

log = logging.getLogger("atomickafka.client")

#: How many of the last deliveries handed out a reader remembers (key and digest), to
#: tell an exact repeat from a record out of order.
RECENT_KEYS: Final = 10_000
#: At most one warning per kind (foreign, forged, out of order) this often (seconds).
WARN_EVERY_S: Final = 10.0
_KINDS: Final = {
    Unaccepted.FOREIGN: "not written by its node or merger",
    Unaccepted.FORGED: "not validly signed",
}


class DeliveryReader(AbstractContextManager["DeliveryReader"]):
    """Reads ``topic``'s deliveries in order, hiding control records and repeated
    deliveries (a node that crashed in at-least-once mode may write some again), and
    never dropping a delivery without saying so.

    Deliveries are strictly increasing in ``(timeStamp, layer, messageID)`` at a topic
    (docs/DESIGN.md §4.4, §8). A record at or below the last key handed out is an
    *exact repeat* when it is one of the last :data:`RECENT_KEYS` deliveries handed out
    again (same key, same digest): dropped and counted in :attr:`repeats`. Anything
    else at or below the last key is *out of order*: never handed out, never moving the
    reader's position (its last key), counted in :attr:`out_of_order` and logged as a
    warning (logger ``atomickafka.client``, at most one line per kind every
    :data:`WARN_EVERY_S` seconds, with the count held back). It reads
    ``read_uncommitted``: a delivery shows as soon as its node wrote it, not when the
    node's transaction commits (up to 100 ms later); a delivery of a transaction that
    was aborted is written again, identical, from the same key on, and is then a repeat
    (docs/DESIGN.md §6.3). ``committed_only=True`` reads ``read_committed``.

    Only deliveries that ``topic``'s node or merger can have written are handed out
    (:func:`~atomickafka.core.reader.delivery_of`): with a signing secret (``secret``
    or ``secret_file``, §4.14) those validly signed (the others counted in
    :attr:`forged`); always, those under its node's or merger's id (``writers`` names
    other writers, e.g. an evaluation baseline's), naming the topic among their
    destinations, with a timestamp no node's clock can have passed yet at the record's
    time (the others counted in :attr:`foreign`). Both are logged as warnings too. A
    record written under the node's id without the secret, with a plausible timestamp,
    passes for a delivery: only signing rules it out. Records that hold no delivery of
    ``topic`` at all (control records of the shared layout, records that are not
    AtomicKafka's) are skipped and counted in :attr:`skipped`. ``ordered=False`` is for
    writers that order nothing (the evaluation's bare pipe): it drops only ids read
    before, and hands the rest out in the topic's order.

    A group's reader commits, with its position, the key of the last delivery it
    handed out, and resumes after it: its committed key is always one it accepted.
    ``start_offset`` (a reader without a group) starts at that offset of the delivery
    topic instead; with :meth:`deliveries`' ``until_offset`` it reads one range (the
    Spark source, :mod:`atomickafka.spark`).

    ``bootstrap_servers`` is where the brokers are, or a
    :class:`~atomickafka.kafka.connection.Connection`; ``config`` holds librdkafka
    settings (``-X``, added to the connection's); one that would show uncommitted
    records is refused (:class:`~atomickafka.client.ConfigError`). Use it as a context
    manager, or call :meth:`close`: either closes its Kafka consumer, whether or not
    every delivery was read. Successive :meth:`deliveries` calls go on where the last one stopped.
    """

    def __init__(
        self,
        bootstrap_servers: str | Connection,
        topic: str,
        *,
        from_beginning: bool = True,
        config: Mapping[str, str] | None = None,
        secret: str | bytes | None = None,
        secret_file: str | None = None,
        group: str | None = None,
        writers: Iterable[str] | None = None,
        ordered: bool = True,
        committed_only: bool = False,
        start_offset: int | None = None,
    ) -> None:
        if not is_valid_topic_name(topic):
            raise MessageError("topic", "not a valid topic name", topic)
        if start_offset is not None and (start_offset < 0 or group is not None):
            raise ConfigError("start_offset is an offset (>= 0), for a reader without a group")
        connection = connection_of(bootstrap_servers, config)
        refuse_unsafe(connection.settings, node=False)  # e.g. isolation.level=read_uncommitted
        self.topic = topic
        self.forged = 0
        self.foreign = 0
        self.skipped = 0
        self._writers = delivery_writers(topic) if writers is None else frozenset(writers)
        self.repeats = 0
        #: Records at or below the last key handed out that repeat none of the recent ones.
        self.out_of_order = 0
        self._signer = signer_from(secret, secret_file)
        self._last: tuple[int, int, str] | None = None
        self._last_offset: int | None = None  # of the record that set ``_last``
        #: The last deliveries handed out: key -> digest, oldest first.
        self._recent: OrderedDict[tuple[int, int, str], str | None] = OrderedDict()
        self._warnings = Throttle(WARN_EVERY_S)
        #: ``ordered=False`` (writers that promise no order, e.g. the evaluation's bare
        #: pipe): a repeat is an id read before; the ids are kept (memory grows with them).
        self._seen: set[str] | None = None if ordered else set()
        self._backlog: deque[KafkaMessage] = deque()  # fetched, not yet looked at
        # A delivery as soon as its node wrote it, not a commit interval later: what an
        # aborted transaction held is written again, identical and in the same order,
        # and the repeat filter drops the second copy (docs/DESIGN.md §6.3).
        # ``committed_only``: once its transaction committed.
        settings: dict[str, str | int | bool] = {
            "enable.partition.eof": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
        self.group = group
        self._consumer: Consumer | None = make_consumer(connection, group, **settings)
        self._part = TopicPartition(delivery_topic(topic), 0)
        self._position: int | None = None  # after the last delivery handed out (a group's)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        if group is not None:
            start = self._resume_point(start)
        elif start_offset is not None:
            start = start_offset
        assign_from(self._consumer, [TopicPartition(self._part.topic, 0, start)])

    def deliveries(
        self,
        *,
        timeout_s: float | None = None,
        max_messages: int | None = None,
        until_offset: int | None = None,
    ) -> Iterator[Delivery]:
        """Yield the next deliveries in order. Stops after ``max_messages`` of them, or
        once none arrived for ``timeout_s`` seconds (``None``: wait until closed), or --
        ``until_offset`` -- once the reader has passed every record below that offset
        (a range's end: transaction markers and aborted records included); with it,
        ``timeout_s`` counts from the last record read, delivery or not."""
        if self._consumer is None:
            raise ClosedError(f"the reader of {self.topic} is closed")
        consumer, topic = self._consumer, self.topic
        count = 0
        if max_messages is not None and max_messages <= 0:
            return
        backlog = self._backlog
        idle_deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while idle_deadline is None or time.monotonic() < idle_deadline:
            if not backlog:
                if self._consumer is None:
                    return  # closed while the caller held this iterator
                if until_offset is not None and self.passed(until_offset):
                    return
                self.commit()
                backlog.extend(usable(consume_batch(consumer, 1000, 0.1)))
                if backlog and until_offset is not None and timeout_s is not None:
                    idle_deadline = time.monotonic() + timeout_s
            while backlog:
                record = backlog[0]
                if until_offset is not None and (record.offset() or 0) >= until_offset:
                    return  # left in the backlog: the range ends before it
                backlog.popleft()
                self._position = (record.offset() or 0) + 1
                message = self._take(record)
                if message is None:
                    continue
                yield Delivery.of(message, record, topic)
                count += 1
                if max_messages is not None and count >= max_messages:
                    return
                if timeout_s is not None:
                    idle_deadline = time.monotonic() + timeout_s

    def passed(self, offset: int) -> bool:
        """True when this reader has read every record below ``offset`` of the delivery
        topic (its consumer's position is there: librdkafka moves it past transaction
        markers and aborted records too)."""
        if self._consumer is None:
            raise ClosedError(f"the reader of {self.topic} is closed")
        if self._position is not None and self._position >= offset:
            return True
        (part,) = self._consumer.position([self._part])
        return part.offset >= offset

    def _resume_point(self, default: int) -> int:
        """Where a group's reader goes on: after the last delivery it handed out before,
        whose key the commit's metadata keeps (so nothing at or below it is repeated)."""
        assert self._consumer is not None
        (committed,) = self._consumer.committed([self._part], timeout=10)
        if committed.offset < 0:
            return default
        if committed.metadata:
            try:
                ts, layer, mid = orjson.loads(committed.metadata)
                self._last = (int(ts), int(layer), str(mid))
            except (orjson.JSONDecodeError, ValueError, TypeError):
                pass  # not ours: resume by offset alone
        return int(committed.offset)

    def commit(self, *, wait: bool = False) -> None:
        """A group's reader: commit where it stands (the deliveries handed out so far),
        with the last one's key; done after every fetched batch and on close."""
        consumer, position = self._consumer, self._position
        if self.group is None or consumer is None or position is None:
            return
        metadata = None if self._last is None else orjson.dumps(list(self._last)).decode()
        offsets = [TopicPartition(self._part.topic, 0, position, metadata=metadata)]
        try:
            if wait:
                consumer.commit(offsets=offsets, asynchronous=False)
            else:
                consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException:  # the next commit covers it
            return

    def _take(self, record: KafkaMessage) -> Message | None:
        """The delivery ``record`` holds, unless it is none, foreign, forged, a repeat
        or out of order (each counted; all but none and repeats logged)."""
        found = delivery_of(record, self.topic, writers=self._writers, signer=self._signer)
        if found is Unaccepted.SKIPPED:
            self.skipped += 1
            return None
        if isinstance(found, Unaccepted):
            if found is Unaccepted.FORGED:
                self.forged += 1
            else:
                self.foreign += 1
            self._warn(found.value, record, _KINDS[found])
            return None
        message = found
        seen = self._seen
        if seen is not None:
            if message.messageID in seen:
                self.repeats += 1
                return None
            seen.add(message.messageID)
            return message
        key = delivery_order_key(message)
        last = self._last
        if last is not None and key <= last:
            if key in self._recent and self._recent[key] == message.digest:
                self.repeats += 1  # written again (at-least-once, after a crash)
                return None
            self.out_of_order += 1
            self._warn(
                "out of order",
                record,
                f"at or below the last delivery handed out ({list(last)}, offset "
                f"{self._last_offset}) and no repeat of one of the last {len(self._recent)}: "
                f"{list(key)} not handed out; a record another writer put into the topic, "
                "it or the one before (sign records to tell), or a repeat older than that",
            )
            return None
        self._last, self._last_offset = key, record.offset()
        recent = self._recent
        recent[key] = message.digest
        if len(recent) > RECENT_KEYS:
            recent.popitem(last=False)
        return message

    def _warn(self, kind: str, record: KafkaMessage, what: str) -> None:
        """Log that ``record`` was not handed out (throttled per kind)."""
        held = self._warnings.admit(kind)
        if held is None:
            return
        also = f" ({held} more such records since the last warning)" if held else ""
        log.warning(
            "%s offset %s: a delivery %s, skipped%s",
            delivery_topic(self.topic),
            record.offset(),
            what,
            also,
            extra={"fields": {"topic": self.topic, "offset": record.offset(), "kind": kind}},
        )

    def __iter__(self) -> Iterator[Delivery]:
        return self.deliveries()

    def close(self) -> None:
        """Close the Kafka consumer (a group's reader first commits where it stands;
        closing twice does nothing)."""
        self.commit(wait=True)
        consumer, self._consumer = self._consumer, None
        self._backlog.clear()
        if consumer is not None:
            consumer.close()

    def __exit__(self, *_exc_info: object) -> None:
        self.close()
