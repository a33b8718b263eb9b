"""``atomickafka audit``: the live audit's Kafka shell around :mod:`~atomickafka.audit.rules`.

:class:`LiveAudit` reads every partition of the audited delivery topics (assigned, not
subscribed: one process sees every topic, as the rules need), ``read_committed``, with
end-of-partition events so that it knows when it has read everything
(:class:`~atomickafka.audit.clock.EventClock`). Each batch goes through the rules; each
violation goes to the :class:`~atomickafka.audit.sink.ViolationSink`; counts go to the
Prometheus metrics once per batch. Every ``commit_interval_s`` it commits its position
in its own consumer group (:mod:`~atomickafka.audit.position`), after the violations
found so far are written; a restart resumes there and first reads again, silently,
what it needs to rebuild the message state.

:func:`audit_once` is the same audit over topics that are not written any more: it
reads them to their end and then lets the bound pass. The evaluation runs a
:class:`LiveAudit` beside each run (:mod:`atomickafka.evaluation.suite.run_audit`) and, once the
run has stopped, reads on to the topics' ends (:meth:`LiveAudit.read_to`) and lets the
bound pass (:meth:`LiveAudit.finish`).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from atomickafka.audit.clock import EventClock
from atomickafka.audit.config import AuditConfig
from atomickafka.audit.metrics import AuditMetrics, AuditTotals
from atomickafka.audit.position import decode_metadata, encode_metadata, replay_from_ms
from atomickafka.audit.records import Violation, audit_verdict
from atomickafka.audit.rules import BUCKET_MS, AuditRules
from atomickafka.audit.sink import ViolationSink
from atomickafka.core.reader import Unaccepted
from atomickafka.kafka.connection import Where, connection_of
from atomickafka.kafka.consumer import (
    assign_from,
    consume_batch,
    make_consumer,
    retry_transient,
    watermarks,
)
from atomickafka.kafka.secrets import load_signer

__all__ = ["AuditReport", "LiveAudit", "audit_once", "run_audit"]

log = logging.getLogger("atomickafka.audit")

#: Settings of the audit's consumer, over the defaults of :mod:`atomickafka.kafka.settings`.
#: A 16 MiB prefetch queue (librdkafka's default is 64 MiB): the audit's memory is its
#: state, and 16 MiB still holds tens of thousands of deliveries ahead.
_CONSUMER_SETTINGS: Final[dict[str, str | int | bool]] = {
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    "queued.max.messages.kbytes": 16384,
}
_Partition = tuple[str, int]


@dataclass(slots=True)
class AuditReport:
    """What an audit found: its counts and every violation (in the order found)."""

    totals: AuditTotals = field(default_factory=AuditTotals)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No violation."""
        return not self.violations

    def summary(self) -> str:
        """One line: checked deliveries, then the violations by kind."""
        checked = sum(self.totals.checked.values())
        repeats = sum(self.totals.repeats.values())
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.totals.by_kind().items()))
        tail = f", {repeats} exact repeats dropped" if repeats else ""
        if self.ok:
            return f"audit passed: {checked} deliveries checked{tail}"
        return f"audit FAILED: {kinds} ({checked} deliveries checked{tail})"


class LiveAudit:
    """The live audit of ``config.topics`` (see the module docstring)."""

    def __init__(
        self,
        config: AuditConfig,
        *,
        on_violation: Callable[[Violation], None] | None = None,
        metrics: AuditMetrics | None = None,
        commits: bool = True,
        wait_for_topics: bool = True,
        keep_violations: int | None = None,
    ) -> None:
        self.config = config
        self._signer = load_signer(config.secret_file)
        self._writers = None if config.writers is None else frozenset(config.writers)
        self.rules = AuditRules(
            config.topics, config.bound_s, exactly_once=config.exactly_once, offsets=True
        )
        self.clock = EventClock()  # its partitions are known once started
        self.metrics = metrics if metrics is not None else AuditMetrics()
        self.report = AuditReport()
        self._on_violation = on_violation
        #: How many violations :attr:`report` keeps (``None``: all); counts are complete.
        self._keep = keep_violations
        self._commits = commits
        self._wait_for_topics = wait_for_topics
        self._stopping = False
        self._consumer: Consumer | None = None
        self._sink: ViolationSink | None = None
        self._next: dict[_Partition, int] = {}
        self._replay_end: dict[_Partition, int] = {}
        self._at_end: dict[_Partition, bool] = {}
        self._newest: dict[str, int] = {}
        self._clock_cap: int | None = None
        self._last_commit = 0.0

    # ------------------------------------------------------------------ control

    def stop(self) -> None:
        """Ask the loop to stop after its current batch."""
        self._stopping = True

    def install_signal_handlers(self) -> None:
        """Stop on SIGINT and SIGTERM."""

        def _handler(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: stopping the audit", signum)
            self._stopping = True

        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)

    @property
    def caught_up(self) -> bool:
        """True when every partition has been read to its end (none is replaying)."""
        return all(self._at_end.values()) and not self._replaying()

    def run(self, *, max_seconds: float | None = None, until_caught_up: bool = False) -> int:
        """Audit until stopped (or ``max_seconds`` passed, or, with ``until_caught_up``,
        everything written so far was read); return an exit status."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.start()
        try:
            while not self._stopping:
                self.step()
                if until_caught_up and self.caught_up:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
        finally:
            self.close()
            log.info(
                "audit stopped: %s", self.report.summary(),
                extra={"fields": {"totals": self.report.totals.to_json()}},
            )  # fmt: skip
        return 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect, find where to start (§10.5) and serve the metrics."""
        config = self.config
        self._sink = ViolationSink(config.connection, config.audit_topic, self._record_violation)
        consumer = make_consumer(config.connection, config.group, **_CONSUMER_SETTINGS)
        self._consumer = consumer
        partitions = self._partitions(consumer)
        starts = self._resume(consumer, partitions)
        self._at_end = dict.fromkeys(partitions, False)
        self.clock = EventClock(partitions)
        assign_from(consumer, starts)
        self.metrics.prepare(config.topics)
        if config.metrics_port is not None:
            self.metrics.serve(config.metrics_port, config.metrics_host)
        self._last_commit = time.monotonic()
        log.info(
            "audit started",
            extra={
                "fields": {
                    "topics": list(config.topics),
                    "boundSeconds": config.bound_s,
                    "group": config.group,
                    "replaying": {f"{t}/{p}": n for (t, p), n in self._replay_end.items()},
                }
            },
        )

    def close(self) -> None:
        """Commit (when committing), write what is queued and release the clients."""
        try:
            if self._consumer is not None and self._commits:
                self._commit()
        finally:
            if self._sink is not None:
                self._sink.close()
                self._sink = None
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _partitions(self, consumer: Consumer) -> list[_Partition]:
        """Every partition of the audited topics, waiting for topics not created yet
        (or, when not waiting for them, leaving them out)."""
        found: list[_Partition] = []
        waiting_logged: set[str] = set()
        for topic in self.config.topics:
            while not self._stopping:
                meta = _topic_metadata(consumer, topic)
                if meta is not None and meta.error is None and meta.partitions:
                    found.extend((topic, p) for p in sorted(meta.partitions))
                    break
                if not self._wait_for_topics:
                    log.warning("topic %s does not exist: not audited", topic)
                    break
                if topic not in waiting_logged:
                    log.info("waiting for topic %s to exist", topic)
                    waiting_logged.add(topic)
                time.sleep(1.0)
        return found

    def _resume(self, consumer: Consumer, partitions: Sequence[_Partition]) -> list[TopicPartition]:
        """Where each partition starts: its committed offset, less what must be read
        again to rebuild the message state; the beginning when nothing is committed."""
        committed = retry_transient(
            lambda: consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=10),
            "committed offsets",
        )
        positions = {}
        clock = 0
        for tp in committed:
            if tp.offset < 0:
                continue
            state = decode_metadata(tp.offset, getattr(tp, "metadata", None))
            positions[(tp.topic, tp.partition)] = state.offset
            if state.last_key is not None:
                self.rules.restore_last_key(tp.topic, state.last_key)
            clock = max(clock, state.clock_ms)
        if not positions:
            return [TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions]
        self._clock_cap = clock
        since = replay_from_ms(clock, self.rules.bound_ms)
        lookups = [TopicPartition(t, p, since) for (t, p) in positions]
        found = retry_transient(
            lambda: consumer.offsets_for_times(lookups, timeout=10), "offsets for times"
        )
        starts: list[TopicPartition] = []
        for tp in found:
            position = positions[(tp.topic, tp.partition)]
            start = position if tp.offset < 0 else min(tp.offset, position)
            if start < position:
                self._replay_end[(tp.topic, tp.partition)] = position
            starts.append(TopicPartition(tp.topic, tp.partition, start))
        starts += [
            TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions if (t, p) not in positions
        ]
        return starts

    # ------------------------------------------------------------------ the loop

    def step(self) -> None:
        """Read one batch, check it, expire what the bound allows, count, commit when due."""
        consumer, sink = self._consumer, self._sink
        assert consumer is not None and sink is not None, "start() first"
        batch = AuditTotals()
        for record in consume_batch(consumer, self.config.batch_size, self.config.poll_timeout_s):
            self._read(record, batch)
        now_mono = time.monotonic()
        replaying = self._replaying()
        now = self.clock.now(now_mono)
        if replaying:
            assert self._clock_cap is not None
            self.rules.advance(min(now, self._clock_cap), replay=True)
        else:
            if self._clock_cap is not None:  # the replay just ended
                self.rules.advance(self._clock_cap, replay=True)
                self._clock_cap = None
            for violation in self.rules.advance(now):
                self._report(violation, batch)
        self.report.totals.add(batch)
        self.metrics.add(batch)
        self._update_gauges()
        sink.poll()
        if self._commits and now_mono - self._last_commit >= self.config.commit_interval_s:
            if not replaying:
                self._commit()
            self._last_commit = now_mono

    def end_offsets(self) -> dict[_Partition, int]:
        """Each audited partition's end now: its last stable offset (the audit reads
        ``read_committed``, so an open transaction's records are not yet its to read);
        0 for a partition that holds nothing."""
        consumer = self._consumer
        assert consumer is not None, "start() first"
        ends = {}
        for where in self._at_end:
            low, high = watermarks(consumer, TopicPartition(*where))
            ends[where] = high if high > low else 0
        return ends

    def has_read(self, ends: dict[_Partition, int]) -> bool:
        """Whether every partition of ``ends`` has been read up to its offset there (by
        position: a transactional partition ends with a marker, never a record)."""
        consumer = self._consumer
        assert consumer is not None, "start() first"
        waiting = [TopicPartition(t, p) for (t, p), end in ends.items() if end > 0]
        if not waiting:
            return True
        positions = consumer.position(waiting)
        return all(tp.offset >= ends[(tp.topic, tp.partition)] for tp in positions)

    def read_to(self, ends: dict[_Partition, int], timeout_s: float) -> bool:
        """Step until every partition is read up to ``ends`` (at most ``timeout_s``);
        whether it was."""
        deadline = time.monotonic() + timeout_s
        while not self.has_read(ends):
            if time.monotonic() >= deadline:
                return False
            self.step()
        return True

    def finish(self) -> list[Violation]:
        """The input has ended: let every bound pass, and report what is missing."""
        batch = AuditTotals()
        found = self.rules.advance(self.rules.clock_ms + self.rules.bound_ms + BUCKET_MS)
        for violation in found:
            self._report(violation, batch)
        self.report.totals.add(batch)
        self.metrics.add(batch)
        return found

    def _read(self, record: KafkaMessage, batch: AuditTotals) -> None:
        err = record.error()
        topic, partition = record.topic() or "", record.partition() or 0
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self._at_end[(topic, partition)] = True
                self.clock.at_end((topic, partition), True, time.monotonic())
            elif err.fatal():
                raise KafkaException(err)
            else:
                log.warning("consumer: %s (librdkafka retries)", err)
            return
        where = (topic, partition)
        offset = record.offset() or 0
        if self._at_end.get(where):
            self._at_end[where] = False
            self.clock.at_end(where, False, time.monotonic())
        self._next[where] = offset + 1
        replaying = offset < self._replay_end.get(where, -1)
        time_ms = record.timestamp()[1]
        self.clock.record(where, time_ms)
        delivery = audit_verdict(record, self._signer, self._writers)
        if isinstance(delivery, Unaccepted):
            if not replaying:
                tally = {
                    Unaccepted.SKIPPED: batch.skipped,
                    Unaccepted.FOREIGN: batch.foreign,
                    Unaccepted.FORGED: batch.forged,
                }[delivery]
                tally[topic] += 1
            return
        seen = self.rules.observe(delivery, replay=replaying)
        if replaying:
            return
        if time_ms > self._newest.get(topic, 0):
            self._newest[topic] = time_ms
        if seen.repeat:
            batch.repeats[topic] += 1
            return
        batch.checked[topic] += 1
        if seen.late:
            batch.late[topic] += 1
        for violation in seen.violations:
            self._report(violation, batch)

    def _replaying(self) -> bool:
        return any(
            self._next.get(where, -1) < end and not self._at_end.get(where, False)
            for where, end in self._replay_end.items()
        )

    def _report(self, violation: Violation, batch: AuditTotals) -> None:
        batch.count(violation)
        assert self._sink is not None
        self._sink.emit(violation)

    def _record_violation(self, violation: Violation) -> None:
        if self._keep is None or len(self.report.violations) < self._keep:
            self.report.violations.append(violation)
        if self._on_violation is not None:
            self._on_violation(violation)

    def _update_gauges(self) -> None:
        now_ms = time.time() * 1000
        for topic in self.config.topics:
            behind = [at_end for (t, _), at_end in self._at_end.items() if t == topic]
            if behind and not all(behind) and topic in self._newest:
                self.metrics.lag.labels(topic).set(max(0.0, (now_ms - self._newest[topic]) / 1000))
            else:
                self.metrics.lag.labels(topic).set(0)
        self.metrics.tracked.set(self.rules.tracked_messages)
        self.metrics.open.set(self.rules.open_messages)

    def _commit(self) -> None:
        """Commit every partition's position, once the violations found are written."""
        consumer, sink = self._consumer, self._sink
        if consumer is None or not self._next or self._replaying():
            return
        if sink is not None and not sink.flush():
            log.error("violations not yet written to the audit topic; position not committed")
            return
        clock = self.rules.clock_ms
        offsets = [
            TopicPartition(t, p, offset, metadata=encode_metadata(self.rules.last_key(t), clock))
            for (t, p), offset in self._next.items()
        ]
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("could not commit the audit's position (retried later): %s", exc)


def _topic_metadata(consumer: Consumer, topic: str) -> Any:
    """The metadata of ``topic`` (``None`` when the broker does not know it)."""
    listing = retry_transient(
        lambda: consumer.list_topics(topic, timeout=10), f"metadata of {topic}"
    )
    return listing.topics.get(topic)


def run_audit(config: AuditConfig) -> int:
    """Run the live audit in this process until a signal stops it (``cluster --audit``'s
    child and ``atomickafka audit``)."""
    audit = LiveAudit(config)
    audit.install_signal_handlers()
    return audit.run()


def audit_once(
    where: Where,
    topics: Sequence[str],
    *,
    bound_s: float = 10.0,
    overrides: dict[str, str] | None = None,
    max_seconds: float = 300.0,
) -> AuditReport:
    """Audit ``topics`` as they are now: read them to their end (at most
    ``max_seconds``), let the bound pass, and return what was found. Nothing is written
    to Kafka (no audit topic, no commits). ``where``: a connection, or a bootstrap
    string with ``overrides``."""
    connection = connection_of(where, overrides)
    config = AuditConfig.private(connection, topics, bound_s=bound_s, name="once")
    audit = LiveAudit(config, commits=False, wait_for_topics=False)
    audit.start()
    try:
        deadline = time.monotonic() + max_seconds
        while not audit.caught_up and time.monotonic() < deadline:
            audit.step()
        if not audit.caught_up:
            log.warning("audit_once: not every topic was read to its end in %.0f s", max_seconds)
        audit.finish()
    finally:
        audit.close()
    return audit.report
