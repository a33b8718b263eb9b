"""Reading deliveries into Spark: ``spark.read`` and ``spark.readStream`` of
``format("atomickafka")``.

Options (besides those of :mod:`atomickafka.spark.options`):

- ``subscribe``: the topics whose deliveries are read, comma-separated (required).
- ``startingOffsets``: ``earliest`` (the default of a batch read), ``latest`` (of a
  stream) or JSON ``{"orders": {"0": 42}}``; a stream that resumes from its
  checkpoint goes on where it stopped, whatever this says.
- ``endingOffsets`` (batch reads): ``latest`` (default) or JSON.
- ``minPartitions``: split the topics' ranges into at least this many Spark partitions
  (each read in order; default one per topic).
- ``lookbackRecords``: how many records before a partition's first offset are read to
  know the last delivery before it (default 1,000; below).

Offsets are those of the delivery topic's one partition, the stream's offset per topic
``{"orders": {"0": 42}}`` as Spark's Kafka source writes it, so a query resumes from its
checkpoint where it stopped. Records are read ``read_committed`` (what the nodes'
transactions committed) and filtered as the client's reader filters them
(:class:`~atomickafka.client.DeliveryReader`): control records, records that are not
deliveries of the topic's node or merger (forged ones with ``secretFile``), repeats and
records out of order are never rows. A partition's reader that starts at offset ``s``
first reads from ``s - lookbackRecords``, rows not made, so that its repeat filter
knows the last delivery before ``s``: only a run of more repeats than that (a node in
``--at-least-once`` mode rewriting that many) would pass one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from atomickafka.client import DeliveryReader
from atomickafka.errors import AtomicKafkaError, TimedOutError
from atomickafka.kafka.consumer import make_consumer, watermarks
from atomickafka.kafka.topics import delivery_topic
from atomickafka.spark import options as opt
from atomickafka.spark.columns import arrow_batch

__all__ = ["BatchReader", "OffsetRange", "StreamReader", "plan_ranges", "read_range"]

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS: Final = 10_000
#: A range's read fails when no record came for this long (seconds) before its end.
READ_IDLE_S: Final = 120.0
DEFAULT_LOOKBACK: Final = 1_000


class OffsetRange(InputPartition):
    """One Spark partition: the deliveries of ``topic`` at offsets ``[start, end)``,
    its filter primed from ``primed_from``."""

    def __init__(self, topic: str, start: int, end: int, primed_from: int) -> None:
        super().__init__((topic, start, end))
        self.topic, self.start, self.end, self.primed_from = topic, start, end, primed_from


@dataclass(frozen=True, slots=True)
class _Bounds:
    low: int
    high: int


def plan_ranges(
    ranges: Mapping[str, tuple[int, int]],
    min_partitions: int,
    lookback: int,
    low: Mapping[str, int],
) -> list[OffsetRange]:
    """The Spark partitions that read ``ranges`` (topic -> ``[start, end)``): at least
    ``min_partitions`` when there are that many records, each topic's split evenly, in
    topic and offset order (a topic's rows come in delivery order)."""
    total = sum(max(0, end - start) for start, end in ranges.values())
    out: list[OffsetRange] = []
    for topic in sorted(ranges):
        start, end = ranges[topic]
        count = end - start
        if count <= 0:
            continue
        pieces = min(count, max(1, math.ceil(min_partitions * count / max(1, total))))
        for i in range(pieces):
            lo, hi = start + count * i // pieces, start + count * (i + 1) // pieces
            out.append(OffsetRange(topic, lo, hi, max(low.get(topic, 0), lo - lookback)))
    return out


def read_range(options: opt.Options, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The rows of ``part``, in delivery order, in Arrow batches of at most
    :data:`BATCH_ROWS`; :class:`~atomickafka.errors.TimedOutError` when its records do
    not come."""
    with DeliveryReader(
        opt.connection(options),
        part.topic,
        secret_file=opt.secret_file(options),
        committed_only=True,
        start_offset=part.primed_from,
    ) as reader:
        rows = []
        for delivery in reader.deliveries(timeout_s=READ_IDLE_S, until_offset=part.end):
            if delivery.offset < part.start:
                continue  # before the range: read only to prime the repeat filter
            rows.append(delivery)
            if len(rows) >= BATCH_ROWS:
                yield arrow_batch(rows)
                rows = []
        if not reader.passed(part.end):
            raise TimedOutError(
                f"{delivery_topic(part.topic)}: offsets up to {part.end} did not come within "
                f"{READ_IDLE_S:.0f} s (is Kafka reachable?)"
            )
        if rows:
            yield arrow_batch(rows)


class _Planner:
    """What the batch and the stream reader share: the options, the topics, and (on the
    driver) a consumer that reads the delivery topics' watermarks."""

    def __init__(self, options: opt.Options) -> None:
        self.options = dict(options)
        self.topics = opt.topic_list(options, "subscribe")
        opt.connection(options)  # a bad option fails the query now, not in a task
        self.min_partitions = opt.positive_int(options, "minPartitions", 1)
        self.lookback = opt.positive_int(options, "lookbackRecords", DEFAULT_LOOKBACK, minimum=0)
        self._consumer: Consumer | None = None
        self._low: dict[str, int] = {}

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_consumer"] = None  # the driver's own; a task makes its readers
        return state

    def bounds(self) -> dict[str, _Bounds]:
        """Each topic's delivery offsets now; a topic that does not exist yet is empty."""
        if self._consumer is None:
            self._consumer = make_consumer(opt.connection(self.options))
        found = {}
        for topic in self.topics:
            part = TopicPartition(delivery_topic(topic), 0)
            try:
                low, high = watermarks(self._consumer, part, timeout_s=30.0)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if (
                    not isinstance(err, KafkaError)
                    or err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART
                ):
                    raise AtomicKafkaError(
                        f"cannot read the offsets of {part.topic}: {exc}"
                    ) from None
                low = high = 0
            found[topic] = _Bounds(low, high)
            self._low[topic] = low
        return found

    def resolve(self, wanted: Mapping[str, int], bounds: Mapping[str, _Bounds]) -> dict[str, int]:
        """``wanted`` offsets with earliest and latest replaced, kept within the log."""
        out = {}
        for topic, offset in wanted.items():
            b = bounds[topic]
            at = b.low if offset == opt.EARLIEST else b.high if offset == opt.LATEST else offset
            out[topic] = min(max(at, b.low), b.high)
        return out

    def ranges(self, start: Mapping[str, int], end: Mapping[str, int]) -> list[OffsetRange]:
        """The partitions reading each topic from ``start`` to ``end``."""
        if not self._low:  # a restarted stream plans its replay before it asks for offsets
            self.bounds()
        spans = {t: (start.get(t, end[t]), end[t]) for t in end}
        return plan_ranges(spans, self.min_partitions, self.lookback, self._low)

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


class BatchReader(DataSourceReader):
    """``spark.read.format("atomickafka")``: the deliveries between ``startingOffsets``
    (default earliest) and ``endingOffsets`` (default latest), as they are when the
    query is planned."""

    def __init__(self, options: opt.Options) -> None:
        self.planner = _Planner(options)

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per topic (or more: ``minPartitions``)."""
        planner = self.planner
        try:
            bounds = planner.bounds()
            topics = planner.topics
            start = planner.resolve(
                opt.offsets(planner.options, "startingOffsets", topics, opt.EARLIEST), bounds
            )
            end = planner.resolve(
                opt.offsets(planner.options, "endingOffsets", topics, opt.LATEST), bounds
            )
        finally:
            planner.close()
        return planner.ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one partition, in delivery order."""
        assert isinstance(partition, OffsetRange)
        return read_range(self.planner.options, partition)


class StreamReader(DataSourceStreamReader):
    """``spark.readStream.format("atomickafka")``: each micro-batch reads the deliveries
    written since the last one; its offsets are the delivery topics' Kafka offsets."""

    def __init__(self, options: opt.Options) -> None:
        self.planner = _Planner(options)

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 (Spark's name)
        """Where a new query starts: ``startingOffsets`` (default latest)."""
        planner = self.planner
        wanted = opt.offsets(planner.options, "startingOffsets", planner.topics, opt.LATEST)
        return _as_offset(planner.resolve(wanted, planner.bounds()))

    def latestOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 (Spark's name)
        """The end of every topic's deliveries now."""
        return _as_offset({t: b.high for t, b in self.planner.bounds().items()})

    def partitions(
        self, start: dict[str, object], end: dict[str, object]
    ) -> Sequence[InputPartition]:
        """The ranges between two offsets of this stream."""
        return self.planner.ranges(_from_offset(start), _from_offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one range, in delivery order."""
        assert isinstance(partition, OffsetRange)
        return read_range(self.planner.options, partition)

    def commit(self, end: dict[str, object]) -> None:
        """Nothing to do: the source keeps no position of its own (the checkpoint does)."""

    def stop(self) -> None:
        """Close the consumer that reads the watermarks."""
        self.planner.close()


def _as_offset(offsets: Mapping[str, int]) -> dict[str, dict[str, int]]:
    return {topic: {"0": offset} for topic, offset in sorted(offsets.items())}


def _from_offset(offset: Mapping[str, object]) -> dict[str, int]:
    """A stream offset as this source writes it, read back (from a checkpoint)."""
    out = {}
    for topic, partitions in offset.items():
        value = partitions.get("0") if isinstance(partitions, dict) else None
        if type(value) is not int:
            raise AtomicKafkaError(f"not an offset of this source: {dict(offset)!r}")
        out[topic] = value
    return out
