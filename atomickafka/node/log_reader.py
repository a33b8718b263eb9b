"""The consumer side of a node (docs/DESIGN.md §7.1): one consumer reads the node's
committed log -- its control log ``atomickafka-ctl.T``, or with one log its input log --
and, with a control log, its input log ``atomickafka-in.T`` beside it (the same
partition: the node's layer); this module decides what of a polled batch goes where and
when each log is read at all (:class:`LogReader`).

*Priority.* With a control log, peers' proposals are in it, and the records a proposal
waits for never stand in front of it there. The input log is paused once the records read from
it and not yet applied reach :data:`INPUT_BUFFER_MAX` (they apply only where the node's
markers come back through the control log), and resumed once they are below half of it,
or at once when a marker waits for input records not read yet. The consumer's local
fetch queue is kept small (:data:`LOCAL_QUEUE_KBYTES` per partition), so that control
records fetched after a burst of client records wait behind at most that much of them.

*Order.* Within a polled batch the input log's records are handed over first (they are
only buffered, and they let waiting markers apply), then the committed log's. Neither
choice changes what the node decides: its one input order is the committed log's, with
each marker's range applied in its place (:class:`~atomickafka.node.batch.NodeBatch`).
With one log every record read is the committed log's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.kafka.consumer import watermarks
from atomickafka.node.batch import NodeBatch, NodeStartError, Ordering

__all__ = [
    "CONTROL_QUEUE_MAX",
    "FETCH_QUEUE_BACKOFF_MS",
    "INPUT_BUFFER_MAX",
    "LOCAL_QUEUE_KBYTES",
    "LogReader",
    "unapplied",
]

#: Input-log records read and not yet applied, at most (a soft bound: what the local
#: queue already holds is still taken); past it the input log is paused.
INPUT_BUFFER_MAX: Final = 20_000
#: Control-log records read and not yet applied, at most (applied a step's budget at a
#: time, :attr:`NodeBatch.step_budget`); past it the control log is paused.
CONTROL_QUEUE_MAX: Final = 20_000
#: The consumer's local fetch queue per partition (``queued.max.messages.kbytes``).
LOCAL_QUEUE_KBYTES: Final = 2048
#: How long librdkafka postpones a partition's next fetch while the local queue is past
#: that bound (``fetch.queue.backoff.ms``, 1,000 by default). A burst of client records
#: fills the small queue; at the default, the control log's next fetch then waited up
#: to a second, and with it the node's own markers: measured in a capacity burst, nodes
#: sat idle with thousands of client records buffered and their markers acknowledged
#: but not fetched, while back-pressure held the clients.
FETCH_QUEUE_BACKOFF_MS: Final = 10


class LogReader:
    """Splits what one consumer reads into the committed log's and a separate input
    log's records, and pauses each log while the node has enough of it to apply."""

    def __init__(
        self, consumer: Consumer, ordering: Ordering, partition: int, *, shared: bool = False
    ) -> None:
        self._consumer = consumer
        #: The consumer reads other nodes' logs too (a host process): this reader adds
        #: its partitions to the consumer's assignment rather than replacing it.
        self._shared = shared
        self.ordering = ordering
        self.control = ordering.committed_topic
        self.input = ordering.input_topic
        self._partition = partition
        self.paused = False
        self.control_paused = False
        #: How many times the input log was paused (a metric of overload).
        self.pauses = 0

    def assign(self, batch: NodeBatch) -> None:
        """Read the logs from where ``batch`` goes on: the committed log past what it
        applied or queued, a separate input log past what it read."""
        parts = [TopicPartition(topic, self._partition, at) for topic, at in batch.fetches()]
        if self._shared:
            self._consumer.incremental_assign(parts)
        else:
            self._consumer.assign(parts)
        self.paused = self.control_paused = False

    def split(
        self, records: Sequence[KafkaMessage]
    ) -> tuple[list[KafkaMessage], list[KafkaMessage]]:
        """(the committed log's records, a separate input log's), each in offset order."""
        control: list[KafkaMessage] = []
        inputs: list[KafkaMessage] = []
        name = self.control
        for record in records:
            (control if record.topic() == name else inputs).append(record)
        return control, inputs

    def pace(self, batch: NodeBatch) -> None:
        """Pause the input log once enough of it waits for markers; resume it below half
        of that, or when a marker waits for input records not read yet. Likewise the
        control log, by the control records queued (the batch applies them a budget per
        step)."""
        buffered = batch.buffered  # (0 with one log: it is never paused)
        part = [TopicPartition(self.input, self._partition)]
        if not self.paused and buffered >= INPUT_BUFFER_MAX and not batch.waiting:
            self._consumer.pause(part)
            self.paused = True
            self.pauses += 1
        elif self.paused and (buffered < INPUT_BUFFER_MAX // 2 or batch.waiting):
            # librdkafka fetches again from the position: the next unread offset
            self._consumer.resume(part)
            self.paused = False
        queued = batch.queued
        control = [TopicPartition(self.control, self._partition)]
        if not self.control_paused and queued >= CONTROL_QUEUE_MAX:
            self._consumer.pause(control)
            self.control_paused = True
        elif self.control_paused and queued < CONTROL_QUEUE_MAX // 2:
            self._consumer.resume(control)
            self.control_paused = False

    def check_start(self, batch: NodeBatch) -> None:
        """Refuse to go on when a separate input log no longer holds the first record the
        node has not applied (retention deleted client records the node never applied:
        its state cannot be rebuilt)."""
        if not self.ordering.marked:
            return  # with one log, the snapshot's choice covers it
        low, _ = watermarks(self._consumer, TopicPartition(self.input, self._partition))
        if low > batch.applied:
            raise NodeStartError(
                f"input log {self.input}[{self._partition}] starts at offset {low}, "
                f"but the node has applied its records only up to {batch.applied}: records "
                "were deleted before the node applied them (retention shorter than the "
                "longest downtime?), so the node's state cannot be rebuilt. Keep input logs "
                "longer than two snapshot intervals plus the longest downtime "
                "(docs/DESIGN.md §6.5)"
            )

    def lag(self, batch: NodeBatch) -> int | None:
        """Records the node has not applied yet: the committed log's past its position
        and a separate input log's past what it applied, less the offsets the consumer
        stepped over (from the watermarks the consumer last fetched and its position; no
        request to the broker)."""
        total = 0
        logs = [(self.control, batch.position)]
        if self.ordering.marked:
            logs.append((self.input, batch.applied))
        for topic, done in logs:
            part = TopicPartition(topic, self._partition)
            try:
                marks = self._consumer.get_watermark_offsets(part, cached=True)
                position = self._consumer.position([part])[0].offset
            except (KafkaException, RuntimeError):  # RuntimeError: closed (the last status)
                return None
            if marks is None or marks[1] < 0:
                return None
            read_until = batch.control_fetch_from if topic == self.control else batch.read_until
            total += unapplied(marks[1], done, read_until, position)
        return total


def unapplied(high_watermark: int, applied: int, read_until: int, position: int) -> int:
    """Offsets of a log below ``high_watermark`` still to apply: those from ``applied``,
    the next unapplied one, less the ones the consumer stepped over -- past the last
    record read (``read_until``) up to its ``position`` (a negative one: none read yet).

    What the consumer steps over is no record at all: a transaction's commit or abort
    marker, or an aborted transaction's records under ``read_committed``. The shared
    layout's input log is the topic ``T`` itself, where the node's own transactions
    write their deliveries: counted, the commit marker ending the last one left the
    idle node one offset "behind", which the status turned into seconds of waiting that
    grew as long as it idled, and clients were held back until ``QueueFullError``."""
    stepped_over = max(0, position - read_until)
    return max(0, high_watermark - applied - stepped_over)
