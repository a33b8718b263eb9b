"""The live audit's rules, as a pure state machine: deliveries in, violations out
(``docs/DESIGN.md`` §10).

:class:`AuditRules` reads delivery records one at a time, in each topic's order, and
keeps

- per audited topic, the key of the last delivery it accepted (rule 1);
- per message read within the bound, its first delivery's key, digest and
  destinations, and the destinations still to deliver it (rules 2 to 4).

It has no clock of its own: time is the event time the caller passes to
:meth:`AuditRules.advance` (the Kafka shell passes the newest record time read, moved
on by its own clock while it has read everything). A message's state expires once
that time passes the end of the second of its first delivery plus the bound: an
incomplete message is then reported ``missing`` at every destination still to
deliver it, and remembered ``forget_after`` longer so that a late delivery is not taken
for a new message. Nothing here does I/O.

Two more rules name the anomalies Jepsen's 2024 analysis found in Kafka's transactions,
where a reader can see them (issue 39). With ``exactly_once`` (the nodes write their
deliveries in transactions and the audit reads ``read_committed``), an exact repeat is
not a node's crash repeat but an ``aborted-read`` (rule 5). With ``offsets``, the
offset each delivery was read at is kept while its message is: a record read again at
an offset that held another is ``offset-two-values``, and a delivery that a second read
of its partition passes over is ``gone-after-read`` (rule 6; a second read happens when
the consumer's position is reset, as after the log was cut).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from atomickafka.audit.records import AuditedDelivery, Key, Kind, Violation
from atomickafka.errors import ConfigError

__all__ = [
    "BUCKET_MS",
    "DEFAULT_BOUND_S",
    "FORGET_FACTOR",
    "AuditRules",
    "Observation",
    "expiry_bucket",
]

#: Seconds a message may take to reach all its destinations after its first delivery.
DEFAULT_BOUND_S: Final = 10.0
#: A message reported missing is remembered this many bounds after its first delivery.
FORGET_FACTOR: Final = 10
#: Expiry works on whole seconds of event time: a message first delivered at ``t``
#: expires once the time passes ``expiry_bucket(t)`` end + the bound.
BUCKET_MS: Final = 1000

#: The most offsets one record of a second read may pass over that are checked for
#: deliveries gone (a gap of transaction markers and aborted records is a few offsets).
_GAP_SCAN: Final = 10_000

_OPEN: Final = 0  # still waiting for a destination
_DONE: Final = 1  # every audited destination delivered it
_MISSING: Final = 2  # reported missing; kept to recognise late deliveries

#: What a delivery is compared by (its key's id is the same by construction).
_Content = tuple[int, int, str, tuple[str, ...]]


def expiry_bucket(time_ms: int) -> int:
    """The second a delivery at ``time_ms`` falls in: the unit of expiry."""
    return time_ms // BUCKET_MS


@dataclass(frozen=True, slots=True)
class Observation:
    """What one delivery record came to: an exact repeat (dropped), a late delivery of a
    message already reported missing, and the violations it showed."""

    repeat: bool = False
    late: bool = False
    violations: tuple[Violation, ...] = ()


_CLEAN: Final = Observation()
_REPEAT: Final = Observation(repeat=True)
_LATE: Final = Observation(late=True)


class _Message:
    """One message within the bound: its first delivery's content, the audited
    destinations still to deliver it, and the deliveries that differed."""

    __slots__ = (
        "destinations",
        "digest",
        "due",
        "first_ms",
        "first_offset",
        "first_partition",
        "first_topic",
        "layer",
        "offsets",
        "phase",
        "timestamp",
        "variants",
        "waiting",
    )

    def __init__(
        self, first: AuditedDelivery, destinations: tuple[str, ...], waiting: tuple[str, ...]
    ) -> None:
        self.timestamp = first.timestamp
        self.layer = first.layer
        self.digest = first.digest
        self.destinations = destinations
        self.waiting = waiting
        self.first_topic = first.topic
        self.first_partition = first.partition
        self.first_offset = first.offset
        self.first_ms = first.time_ms
        self.due = expiry_bucket(first.time_ms)
        self.phase = _OPEN if waiting else _DONE
        #: Topics whose delivery of it differs from the first one (or that are not
        #: among its destinations), with what they delivered.
        self.variants: dict[str, _Content] | None = None
        #: Where it was read (with ``offsets``): forgotten with it.
        self.offsets: list[tuple[str, int, int]] | None = None

    def content(self) -> _Content:
        return (self.timestamp, self.layer, self.digest, self.destinations)

    def delivered_at(self, topic: str) -> _Content | None:
        """What ``topic`` delivered of it, ``None`` if it has not delivered it yet."""
        if self.variants is not None and topic in self.variants:
            return self.variants[topic]
        if topic in self.destinations and topic not in self.waiting:
            return self.content()
        return None


def _content(delivery: AuditedDelivery) -> _Content:
    return (delivery.timestamp, delivery.layer, delivery.digest, delivery.destinations)


class AuditRules:
    """The four rules over the deliveries of ``topics`` (see the module docstring).

    :meth:`observe` takes each delivery record once, in its topic's order;
    :meth:`advance` moves event time on and returns what expired. ``replay=True``
    (rebuilding the state after a restart, §10) updates the state and reports nothing.
    """

    def __init__(
        self,
        topics: Iterable[str],
        bound_s: float = DEFAULT_BOUND_S,
        *,
        forget_after_s: float | None = None,
        exactly_once: bool = False,
        offsets: bool = False,
    ) -> None:
        self.topics: tuple[str, ...] = tuple(dict.fromkeys(topics))
        self.exactly_once = exactly_once
        #: With ``offsets``: what was read where, and each partition's furthest offset
        #: read and, while it is read again below that, the last offset read again.
        self._at: dict[tuple[str, int, int], tuple[str, str]] | None = {} if offsets else None
        self._furthest: dict[tuple[str, int], int] = {}
        self._again: dict[tuple[str, int], int] = {}
        if not self.topics:
            raise ConfigError("the audit needs at least one topic")
        if bound_s <= 0:
            raise ConfigError(f"the bound must be positive, not {bound_s}")
        self.bound_ms = round(bound_s * 1000)
        forget = FORGET_FACTOR * bound_s if forget_after_s is None else forget_after_s
        self.forget_ms = max(round(forget * 1000), self.bound_ms)
        self.clock_ms = 0
        self._audited = {t: t for t in self.topics}  # also interns the names
        self._last: dict[str, Key] = {}
        self._messages: dict[str, _Message] = {}
        self._buckets: dict[int, list[str]] = {}
        self._bucket_heap: list[int] = []
        self._interned: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._waiting: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {}
        self.open_messages = 0

    # ------------------------------------------------------------------ reading

    @property
    def tracked_messages(self) -> int:
        """Messages held: open, complete within the bound, or reported missing."""
        return len(self._messages)

    def last_key(self, topic: str) -> Key | None:
        """The key of the last delivery ``topic`` had in order, if any."""
        return self._last.get(topic)

    def restore_last_key(self, topic: str, key: Key) -> None:
        """Start ``topic``'s order check after ``key`` (a restart, §10)."""
        if topic in self._audited:
            self._last[topic] = key

    # ------------------------------------------------------------------ the rules

    def observe(self, delivery: AuditedDelivery, *, replay: bool = False) -> Observation:
        """Check one delivery record of an audited topic (others are ignored)."""
        topic = self._audited.get(delivery.topic)
        if topic is None:
            return _CLEAN
        anomalies: list[Violation] = []
        if self._at is not None:  # rule 6
            reread, anomalies = self._offset_rules(delivery)
            if reread:
                return (
                    _REPEAT if not anomalies or replay else Observation(violations=tuple(anomalies))
                )
        message = self._messages.get(delivery.message_id)
        if message is None:
            found = self._first_sight(delivery, topic)
            late = False
        else:
            earlier = message.delivered_at(topic)
            if earlier is not None:  # rule 4
                if earlier == _content(delivery):
                    if self.exactly_once and not replay:  # rule 5
                        return Observation(violations=(*anomalies, self._aborted_read(delivery)))
                    return _REPEAT
                if replay:
                    return _CLEAN
                return Observation(
                    violations=(*anomalies, self._duplicate(delivery, message, earlier))
                )
            late = message.phase == _MISSING and topic in message.waiting
            found = self._next_sight(delivery, topic, message)
        self._remember_offset(delivery)
        if replay:
            return _CLEAN
        order = self._order(delivery, topic)  # rule 1
        if order is not None:
            found = [*found, order]
        found = [*anomalies, *found]
        if found:
            return Observation(late=late, violations=tuple(found))
        return _LATE if late else _CLEAN

    def advance(self, now_ms: int, *, replay: bool = False) -> list[Violation]:
        """Move event time to ``now_ms`` (never back) and expire what the bound allows:
        rule 3's ``missing`` violations, one per destination still waited for."""
        self.clock_ms = max(self.clock_ms, now_ms)
        found: list[Violation] = []
        heap = self._bucket_heap
        while heap and (heap[0] + 1) * BUCKET_MS + self.bound_ms <= self.clock_ms:
            bucket = heapq.heappop(heap)
            for message_id in self._buckets.pop(bucket):
                self._expire(message_id, bucket, found)
        return [] if replay else found

    # ------------------------------------------------------------------ internals

    def _first_sight(self, delivery: AuditedDelivery, topic: str) -> list[Violation]:
        destinations = self._interned.setdefault(delivery.destinations, delivery.destinations)
        waiting = self._waiting.get((destinations, topic))
        if waiting is None:
            waiting = tuple(t for t in destinations if t in self._audited and t != topic)
            self._waiting[(destinations, topic)] = waiting
        message = _Message(delivery, destinations, waiting)
        self._messages[delivery.message_id] = message
        self._schedule(delivery.message_id, message.due)
        if message.phase == _OPEN:
            self.open_messages += 1
        if topic in destinations:
            return []
        message.variants = {topic: message.content()}
        return [self._not_a_destination(delivery, destinations)]

    def _next_sight(
        self, delivery: AuditedDelivery, topic: str, message: _Message
    ) -> list[Violation]:
        found: list[Violation] = []
        content = _content(delivery)
        if content != message.content():  # rule 2
            if message.variants is None:
                message.variants = {}
            mismatch = self._mismatch(delivery, message)
            if mismatch is not None:
                found.append(mismatch)
            message.variants[topic] = content
        if topic in message.waiting:
            message.waiting = tuple(t for t in message.waiting if t != topic)
            if not message.waiting and message.phase == _OPEN:
                message.phase = _DONE
                self.open_messages -= 1
        elif topic not in message.destinations:
            found.append(self._not_a_destination(delivery, message.destinations))
            if message.variants is None:
                message.variants = {}
            message.variants[topic] = content
        return found

    def _order(self, delivery: AuditedDelivery, topic: str) -> Violation | None:
        key = delivery.key
        last = self._last.get(topic)
        if last is None or key > last:
            self._last[topic] = key
            return None
        return Violation(
            Kind.ORDER,
            topic,
            delivery.message_id,
            f"{topic} delivered {delivery.message_id!r} with key {_fmt_key(key)} after "
            f"{_fmt_key(last)}: a topic's deliveries must be strictly increasing in "
            "(timeStamp, layer, messageID) (out of order, or a repeat the audit no "
            "longer remembers)",
            delivery.partition,
            delivery.offset,
            delivery.time_ms,
            key,
            {"previousKey": list(last)},
        )

    def _schedule(self, message_id: str, bucket: int) -> None:
        ids = self._buckets.get(bucket)
        if ids is None:
            self._buckets[bucket] = [message_id]
            heapq.heappush(self._bucket_heap, bucket)
        else:
            ids.append(message_id)

    def _expire(self, message_id: str, bucket: int, found: list[Violation]) -> None:
        message = self._messages.get(message_id)
        if message is None or message.due != bucket:
            return  # forgotten already, or rescheduled
        if message.phase == _OPEN:
            self.open_messages -= 1
            found.extend(self._missing(message_id, message, topic) for topic in message.waiting)
            message.phase = _MISSING
            message.due = bucket + (self.forget_ms - self.bound_ms) // BUCKET_MS
            if message.due > bucket:
                self._schedule(message_id, message.due)
                return
        if self._at is not None and message.offsets:
            for where in message.offsets:
                self._at.pop(where, None)
        del self._messages[message_id]

    # ------------------------------------------------------------------ rules 5 and 6

    def _remember_offset(self, delivery: AuditedDelivery) -> None:
        if self._at is None:
            return
        message = self._messages.get(delivery.message_id)
        if message is None:
            return
        where = (delivery.topic, delivery.partition, delivery.offset)
        self._at[where] = (delivery.message_id, delivery.digest)
        if message.offsets is None:
            message.offsets = []
        message.offsets.append(where)

    def _offset_rules(self, delivery: AuditedDelivery) -> tuple[bool, list[Violation]]:
        """Rule 6 on a record: whether it is at an offset read before (a second read of
        its partition), and what the second read shows."""
        assert self._at is not None
        part = (delivery.topic, delivery.partition)
        offset = delivery.offset
        furthest = self._furthest.get(part)
        if furthest is None or offset > furthest:
            found = self._passed_over(part, self._again.pop(part, None), furthest)
            self._furthest[part] = offset
            return False, found
        # read again: what lay between the last offset read again and this one is gone
        last = self._again.get(part)
        found = self._passed_over(part, last, offset - 1)
        self._again[part] = offset
        before = self._at.get((*part, offset))
        if before is not None and before != (delivery.message_id, delivery.digest):
            found.append(self._two_values(delivery, before))
        return True, found

    def _passed_over(
        self, part: tuple[str, int], after: int | None, upto: int | None
    ) -> list[Violation]:
        """Deliveries read before at offsets in ``(after, upto]`` of ``part`` that a
        second read went past (``after`` ``None``: no second read is going on)."""
        assert self._at is not None
        if after is None or upto is None or upto <= after:
            return []
        found = []
        for offset in range(after + 1, min(upto, after + _GAP_SCAN) + 1):
            gone = self._at.pop((*part, offset), None)
            if gone is not None:
                found.append(self._gone(part, offset, gone))
        return found

    def _aborted_read(self, delivery: AuditedDelivery) -> Violation:
        return Violation(
            Kind.ABORTED_READ,
            delivery.topic,
            delivery.message_id,
            f"{delivery.topic} delivered {delivery.message_id!r} again, identical, at "
            f"offset {delivery.offset}: exactly-once nodes commit each delivery once, so "
            "a read_committed reader read a record of an aborted transaction (an aborted "
            "read), or the delivery was committed twice",
            delivery.partition,
            delivery.offset,
            delivery.time_ms,
            delivery.key,
        )

    def _two_values(self, delivery: AuditedDelivery, before: tuple[str, str]) -> Violation:
        return Violation(
            Kind.OFFSET_TWO_VALUES,
            delivery.topic,
            delivery.message_id,
            f"offset {delivery.offset} of {delivery.topic}[{delivery.partition}] held "
            f"{before[0]!r} (digest {before[1]}) when read before and holds "
            f"{delivery.message_id!r} (digest {delivery.digest}) now: the log was cut and "
            "written again, and what was read there is lost",
            delivery.partition,
            delivery.offset,
            delivery.time_ms,
            delivery.key,
            {"messageID": before[0], "digest": before[1]},
        )

    def _gone(self, part: tuple[str, int], offset: int, gone: tuple[str, str]) -> Violation:
        return Violation(
            Kind.GONE_AFTER_READ,
            part[0],
            gone[0],
            f"{part[0]}[{part[1]}] held {gone[0]!r} at offset {offset} when read before, "
            "and a second read of the partition passed that offset without it: a delivery "
            "read and then gone (a lost write)",
            part[1],
            offset,
            reference={"digest": gone[1]},
        )

    def _missing(self, message_id: str, message: _Message, topic: str) -> Violation:
        delivered = [t for t in message.destinations if t not in message.waiting]
        where = ", ".join(delivered) or message.first_topic
        seconds = self.bound_ms / 1000
        return Violation(
            Kind.MISSING,
            topic,
            message_id,
            f"{message_id!r} missing at {topic} after {seconds:g} s: delivered at {where}",
            key=(message.timestamp, message.layer, message_id),
            reference={
                "deliveredTopics": delivered or [message.first_topic],
                "boundSeconds": seconds,
            },
        )

    def _mismatch(self, delivery: AuditedDelivery, message: _Message) -> Violation | None:
        """Two deliveries of one message differ: the one later in (Kafka time, topic,
        partition, offset) is reported, whichever was read first, so that what is
        reported does not depend on the reading order; the first one read is reported
        at most once."""
        mid = delivery.message_id
        first = (
            message.first_ms,
            message.first_topic,
            message.first_partition,
            message.first_offset,
        )
        here = (delivery.time_ms, delivery.topic, delivery.partition, delivery.offset)
        if here > first:
            blamed, content, other, other_content = (
                here,
                _content(delivery),
                first,
                message.content(),
            )
        else:
            assert message.variants is not None
            if message.first_topic in message.variants:
                return None  # reported already
            message.variants[message.first_topic] = message.content()
            blamed, content, other, other_content = (
                first,
                message.content(),
                here,
                _content(delivery),
            )
        time_ms, topic, partition, offset = blamed
        key = (content[0], content[1], mid)
        return Violation(
            Kind.MISMATCH,
            topic,
            mid,
            f"{topic} delivered {mid!r} with {_differences(content, other_content, mid)} "
            f"as {other[1]} did",
            partition,
            offset,
            time_ms,
            key,
            _reference(other[1], other_content, mid),
        )

    def _duplicate(
        self, delivery: AuditedDelivery, message: _Message, earlier: _Content
    ) -> Violation:
        return Violation(
            Kind.DUPLICATE,
            delivery.topic,
            delivery.message_id,
            f"{delivery.topic} delivered {delivery.message_id!r} again, with key "
            f"{_fmt_key(delivery.key)} and digest {delivery.digest} (first delivered there "
            f"with key {_fmt_key((earlier[0], earlier[1], delivery.message_id))} and digest "
            f"{earlier[2]})",
            delivery.partition,
            delivery.offset,
            delivery.time_ms,
            delivery.key,
            _reference(delivery.topic, earlier, delivery.message_id),
        )

    def _not_a_destination(
        self, delivery: AuditedDelivery, destinations: tuple[str, ...]
    ) -> Violation:
        return Violation(
            Kind.NOT_A_DESTINATION,
            delivery.topic,
            delivery.message_id,
            f"{delivery.topic} delivered {delivery.message_id!r}, whose destinations are "
            f"{list(destinations)}",
            delivery.partition,
            delivery.offset,
            delivery.time_ms,
            delivery.key,
            {"destinations": list(destinations)},
        )


def _differences(content: _Content, other: _Content, message_id: str) -> str:
    """How ``content`` differs from ``other``, in words."""
    differs = []
    if content[:2] != other[:2]:
        differs.append(
            f"key {_fmt_key((content[0], content[1], message_id))} "
            f"(not {_fmt_key((other[0], other[1], message_id))})"
        )
    if content[2] != other[2]:
        differs.append(f"digest {content[2]} (not {other[2]})")
    if content[3] != other[3]:
        differs.append(f"destinations {list(content[3])} (not {list(other[3])})")
    return ", ".join(differs)


def _reference(topic: str, content: _Content, message_id: str) -> dict[str, object]:
    timestamp, layer, digest, destinations = content
    return {
        "topic": topic,
        "key": [timestamp, layer, message_id],
        "digest": digest,
        "destinations": list(destinations),
    }


def _fmt_key(key: Key) -> str:
    return f"({key[0]}, {key[1]}, {key[2]!r})"
