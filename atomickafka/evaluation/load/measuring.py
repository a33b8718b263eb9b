"""What the evaluation suite and the bench measure while a load runs.

Both send *probes*: values that carry their send time (``t``, µs since the epoch) and
whether they are multicast (``m``); an unmeasured warm-up value carries no ``t``. Both
then read the destinations' topics from their start with one :class:`DeliveryCounter`:

- each Delivery is read with :func:`~atomickafka.core.reader.read_delivery` (only the
  topic's own node or merger delivers into it) and counts once per message and
  destination, as the client reads it;
- a message is *complete* when every one of its destinations (the Delivery names
  them) has delivered it; its latency is from its send to that last delivery, as this
  reader sees it;
- warm-up deliveries are counted apart.

(:class:`DeliveryTally` is the counting, without Kafka, for tests.)

:func:`warm_up` passes one unmeasured multicast through every topic before a measured
load (every node has then fetched its peers' metadata), and :func:`percentile` is the
one percentile the bench and the merge-delay figures use; :func:`latency_stats` sums a
set of latencies up as p50, p99 and p99.9. :func:`delivery_flow` says how steadily the
deliveries came while the clients sent (issue 38, item 5): the share of
:data:`FLOW_BUCKET_S` buckets below half the mean delivery rate, and the longest run of
them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from atomickafka.core.reader import KafkaRecord, read_delivery
from atomickafka.core.signing import Signer
from atomickafka.errors import TimedOutError
from atomickafka.kafka.connection import Where
from atomickafka.kafka.consumer import assign_from, consume_batch, fetched, make_consumer, usable
from atomickafka.kafka.secrets import load_signer

__all__ = [
    "FLOW_BUCKET_S",
    "MULTICAST_FIELD",
    "SEND_TIME_FIELD",
    "WARMUP_VALUE",
    "Arrival",
    "CompletedMessage",
    "DeliveryCounter",
    "DeliveryTally",
    "Flow",
    "LatencyStats",
    "Probe",
    "Sender",
    "WarmUpSend",
    "delivery_arrival",
    "delivery_flow",
    "latency_stats",
    "percentile",
    "read_probe",
    "verified",
    "warm_up",
]

#: A probe's send time, in microseconds since the epoch.
SEND_TIME_FIELD: Final = "t"
#: A probe's multicast flag.
MULTICAST_FIELD: Final = "m"
#: The value of an unmeasured warm-up message (no send time: never measured).
WARMUP_VALUE: Final = {"warmup": True}


@dataclass(frozen=True, slots=True)
class Probe:
    """What a measured message's value says about it."""

    send_us: int
    multicast: bool


def read_probe(value: bytes | None) -> Probe | None:
    """The probe in a message's value (its JSON text), or ``None`` for a warm-up value
    or anything else without a send time."""
    if not value:
        return None
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    sent = data.get(SEND_TIME_FIELD)
    if type(sent) is not int:
        return None
    return Probe(sent, bool(data.get(MULTICAST_FIELD)))


@dataclass(frozen=True, slots=True)
class Arrival:
    """One delivery as the counter reads it: which message, at which destination, how
    many destinations it has, and its value's JSON text."""

    message_id: str
    destination: str
    destinations: int
    value: bytes | None


#: Reads one record of a destination's topic (``owner`` is that destination).
ArrivalReader = Callable[[KafkaRecord, str], Arrival | None]


def delivery_arrival(record: KafkaRecord, owner: str) -> Arrival | None:
    """The Delivery ``record`` holds, if ``owner``'s own node or merger wrote it."""
    message = read_delivery(record, at=owner)
    if message is None:
        return None
    return Arrival(message.messageID, owner, len(message.topic), message.value)


@dataclass(frozen=True, slots=True)
class CompletedMessage:
    """A measured message delivered at every destination."""

    message_id: str
    latency_ms: float  # send to the last destination's delivery, as read
    multicast: bool


class DeliveryTally:
    """Counts deliveries read from a run's destination topics (no Kafka here: see
    :class:`DeliveryCounter`).

    ``topics`` maps each Kafka topic read to the destination whose deliveries it holds;
    ``read`` turns a record into an :class:`Arrival` (default: AtomicKafka's Delivery
    records). A delivery written again counts once.
    """

    def __init__(self, topics: Mapping[str, str], read: ArrivalReader = delivery_arrival) -> None:
        self._topics = dict(topics)
        self._read = read
        self._seen: set[tuple[str, str]] = set()
        self._remaining: dict[str, int] = {}  # messageID -> destinations still to deliver
        #: Distinct measured deliveries, and warm-up ones.
        self.measured = 0
        self.warmup = 0
        #: Measured messages delivered at every destination, in the order they completed.
        self.completed: list[CompletedMessage] = []
        #: Earliest send time of a measured message read, and the latest completion
        #: (seconds since the epoch, the reader's clock).
        self.first_send_s: float | None = None
        self.last_completion_s = 0.0
        #: When each measured delivery was written (its record's Kafka timestamp, s since
        #: the epoch; the time it was read where the record has none): the flow's input.
        self.delivered_s: list[float] = []

    @property
    def topics(self) -> list[str]:
        """The Kafka topics counted."""
        return list(self._topics)

    def add(self, records: Iterable[KafkaRecord], now: float) -> int:
        """Count ``records``, read at ``now`` (seconds since the epoch); return how many
        new measured deliveries they held."""
        before = self.measured
        for record in records:
            owner = self._topics.get(record.topic() or "")
            arrival = None if owner is None else self._read(record, owner)
            if arrival is None:
                continue
            key = (arrival.message_id, arrival.destination)
            if key in self._seen:
                continue
            self._seen.add(key)
            probe = read_probe(arrival.value)
            if probe is None:
                self.warmup += 1
                continue
            self.measured += 1
            kind, stamp_ms = record.timestamp()
            self.delivered_s.append(stamp_ms / 1000 if kind and stamp_ms > 0 else now)
            self._arrived(arrival, probe, now)
        return self.measured - before

    def _arrived(self, arrival: Arrival, probe: Probe, now: float) -> None:
        sent = probe.send_us / 1e6
        if self.first_send_s is None or sent < self.first_send_s:
            self.first_send_s = sent
        left = self._remaining.pop(arrival.message_id, arrival.destinations) - 1
        if left > 0:
            self._remaining[arrival.message_id] = left
            return
        self.completed.append(
            CompletedMessage(arrival.message_id, (now - sent) * 1000, probe.multicast)
        )
        self.last_completion_s = max(self.last_completion_s, now)


def verified(read: ArrivalReader, signer: Signer) -> ArrivalReader:
    """``read``, taking only records validly signed (§4.14): a forged one is no arrival."""

    def arrival(record: KafkaRecord, owner: str) -> Arrival | None:
        if signer.problem(record.topic() or "", record.key(), record.value(), record.headers()):
            return None
        return read(record, owner)

    return arrival


class DeliveryCounter(DeliveryTally):
    """A :class:`DeliveryTally` fed by its own consumer, which reads partition 0 of
    every topic from its start (``isolation_level``: ``read_uncommitted`` as the
    filtering client reads, or ``read_committed``); with ``secret_file`` (§4.14) it
    counts only validly signed deliveries."""

    def __init__(
        self,
        where: Where,
        topics: Mapping[str, str],
        *,
        read: ArrivalReader = delivery_arrival,
        fetch_wait_ms: int = 20,
        secret_file: str | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        signer = load_signer(secret_file)
        super().__init__(topics, read if signer is None else verified(read, signer))
        # read_uncommitted by default, as the filtering client reads (docs/DESIGN.md
        # §6.3): a delivery counts when it first arrives, and one written again counts
        # once; an exactly-once baseline's readers read read_committed
        settings: dict[str, str | int | bool] = {
            "fetch.wait.max.ms": fetch_wait_ms,
            "isolation.level": isolation_level,
        }
        self._consumer = make_consumer(where, None, **settings)
        self._parts = [TopicPartition(t, 0, OFFSET_BEGINNING) for t in self.topics]
        assign_from(self._consumer, self._parts)

    def wait_until_fetching(self, timeout_s: float = 10.0) -> bool:
        """Read (and count) until the consumer has fetched every topic once, for at
        most ``timeout_s``; True when it has. Call it before the measured sends: what
        is written before the first fetch waits for it."""
        deadline = time.monotonic() + timeout_s
        while not fetched(self._consumer, self._parts):
            if time.monotonic() >= deadline:
                return False
            self.poll(0.01)
        return True

    def poll(self, timeout_s: float) -> int:
        """Read what has arrived (waiting up to ``timeout_s``); return how many new
        measured deliveries it held."""
        records = usable(consume_batch(self._consumer, 10_000, timeout_s))
        return self.add(records, time.time())

    def close(self) -> None:
        """Release the consumer (``contextlib.closing`` calls it at a block's end)."""
        self._consumer.close()


class Sender(Protocol):
    """What a load is sent through (``AtomicKafkaClient``, or the sequencer's sender)."""

    def send(self, value: Any, destinations: Iterable[str], *, via: str | None = None) -> str:
        """Send ``value`` to ``destinations``; return its messageID."""
        ...

    def warm_up(self, topics: Iterable[str], timeout_s: float = 10.0) -> None:
        """Fetch metadata before the measured sends."""
        ...

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every message is acknowledged."""
        ...


@dataclass(frozen=True, slots=True)
class WarmUpSend:
    """One warm-up multicast: its id, the topic it was written through, its send time."""

    message_id: str
    via: str
    send_us: int


def warm_up(
    sender: Sender, topics: Sequence[str], counter: DeliveryCounter, timeout_s: float = 90.0
) -> list[WarmUpSend]:
    """One unmeasured multicast to every topic through each topic, then wait until the
    counter has read all of their deliveries: every node has fetched its peers'
    metadata before the measured load starts. Raises
    :class:`~atomickafka.errors.TimedOutError` if they do not all arrive within
    ``timeout_s``."""
    want = counter.warmup + len(topics) * len(topics)
    sent = []
    for via in topics:
        send_us = time.time_ns() // 1000
        sent.append(WarmUpSend(sender.send(WARMUP_VALUE, topics, via=via), via, send_us))
    sender.flush(timeout_s)
    deadline = time.monotonic() + timeout_s
    while counter.warmup < want:
        if time.monotonic() > deadline:
            got = counter.warmup - want + len(topics) ** 2
            raise TimedOutError(
                f"warm-up: {got} of {len(topics) ** 2} deliveries in {timeout_s:.0f}s"
            )
        counter.poll(0.2)
    # Kafka timestamps are in ms: a few ms on, no measured send shares a millisecond
    # with a warm-up delivery.
    time.sleep(0.005)
    return sent


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``sorted_values`` by nearest rank; NaN if empty."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """A set of latencies summed up (ms): how many, and p50, p99, p99.9, max by
    nearest rank (:func:`percentile`)."""

    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    def to_dict(self) -> dict[str, float | int]:
        """Plain data for JSON."""
        return {
            "count": self.count,
            "p50Ms": self.p50_ms,
            "p99Ms": self.p99_ms,
            "p999Ms": self.p999_ms,
            "maxMs": self.max_ms,
        }


def latency_stats(values: Iterable[float], digits: int = 2) -> LatencyStats | None:
    """``values`` (ms, any order) as :class:`LatencyStats`, rounded to ``digits``;
    ``None`` when there are none. p99.9 needs 1,000 values to differ from the maximum
    of the last thousandth; with fewer it is the largest but one or the maximum."""
    ordered = sorted(values)
    if not ordered:
        return None
    return LatencyStats(
        len(ordered),
        round(percentile(ordered, 0.50), digits),
        round(percentile(ordered, 0.99), digits),
        round(percentile(ordered, 0.999), digits),
        round(ordered[-1], digits),
    )


#: The width (s) of the buckets :func:`delivery_flow` counts deliveries in.
FLOW_BUCKET_S: Final = 0.4


@dataclass(frozen=True, slots=True)
class Flow:
    """How steadily deliveries came from the first one until the clients stopped
    sending, in buckets of ``bucket_s``: how many buckets, the mean rate over them
    (deliveries/s), how many were below half of it (``low``), and the longest run of
    such buckets (s)."""

    bucket_s: float
    buckets: int
    mean_per_s: float
    low: int
    longest_low_s: float

    @property
    def low_share(self) -> float:
        """The share of buckets below half the mean rate (0 to 1)."""
        return self.low / self.buckets if self.buckets else 0.0

    def describe(self) -> str:
        """``3 of 40 0.4 s buckets (7.5 %) below half the mean 12,000 deliveries/s;
        longest gap 0.8 s``."""
        return (
            f"{self.low} of {self.buckets} {self.bucket_s:g} s buckets "
            f"({self.low_share:.1%}) below half the mean {self.mean_per_s:,.0f} "
            f"deliveries/s; longest gap {self.longest_low_s:.1f} s"
        )

    def to_dict(self) -> dict[str, float | int]:
        """Plain data for JSON."""
        return {
            "bucketS": self.bucket_s,
            "buckets": self.buckets,
            "meanPerS": round(self.mean_per_s, 1),
            "low": self.low,
            "lowShare": round(self.low_share, 4),
            "longestLowS": round(self.longest_low_s, 3),
        }


def delivery_flow(
    delivered_s: Iterable[float], until_s: float, bucket_s: float = FLOW_BUCKET_S
) -> Flow | None:
    """The :class:`Flow` of deliveries written at ``delivered_s`` (s, any order), in the
    whole buckets of ``bucket_s`` from the first delivery to ``until_s`` (when the
    clients stopped sending); ``None`` when not one whole bucket fits. The mean rate is
    of those buckets: a wave of deliveries after a pause counts at its own time, so a
    run that delivers in waves has buckets far below the mean, and a steady one none."""
    times = sorted(delivered_s)
    if not times or bucket_s <= 0:
        return None
    start = times[0]
    buckets = math.floor((until_s - start) / bucket_s + 1e-9)  # 4.0 // 0.4 is 9.0
    if buckets <= 0:
        return None
    counts = [0] * buckets
    for at in times:
        index = math.floor((at - start) / bucket_s + 1e-9)
        if index >= buckets:
            break
        counts[index] += 1
    mean = sum(counts) / (buckets * bucket_s)
    low = longest = run = 0
    for count in counts:
        if count / bucket_s < mean / 2:
            low += 1
            run += 1
            longest = max(longest, run)
        else:
            run = 0
    return Flow(bucket_s, buckets, mean, low, longest * bucket_s)
