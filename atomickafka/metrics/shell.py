"""The Prometheus metrics of one node or merger (``atomickafka_node_*``,
``atomickafka_merger_*``; their meaning is in docs/operators.md, "Metrics", and
docs/DESIGN.md §11).

The shell calls :meth:`ShellMetrics.read` with each batch it consumed,
:meth:`ShellMetrics.wrote` with each batch it wrote, and :meth:`ShellMetrics.measure`
once per status interval; the counters move by whole batches, so the hot path takes a
metric's lock a few times per batch, not per record.

Every instance owns a registry of its own (several shells may live in one process, as
in tests). Under ``cluster`` the values go to prometheus-client's multiprocess files
instead and the supervisor serves them (:mod:`atomickafka.metrics.cluster`): the gauges
say how they combine across the processes of one role (an active instance and its
standby).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Sequence
from typing import Final, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from atomickafka.core.reader import KafkaRecord
from atomickafka.core.reasons import Reason
from atomickafka.metrics.histogram import BatchObserver
from atomickafka.metrics.records import (
    REASON_LABELS,
    dead_letter_reason,
    record_type,
    sent_at_ms,
)

__all__ = ["DEAD_LETTER", "DELIVERY", "LATENCY_BUCKETS", "ShellMetrics", "WrittenRecord"]

#: The kinds of written record the metrics look into (``OutKind`` values).
DELIVERY: Final = "delivery"
DEAD_LETTER: Final = "dead-letter"

#: Delivery latency buckets (seconds): from a paced run's milliseconds to a backlog's
#: minutes.
LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)

Role = Literal["node", "merger"]
#: How a gauge of several processes (``cluster``'s multiprocess mode) is combined.
GaugeMode = Literal["livemax", "liveall"]


class WrittenRecord(Protocol):
    """What the metrics read of a record a shell wrote (a batch layer's ``OutRecord``)."""

    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...
    @property
    def sent_at(self) -> int | None: ...
    @property
    def reason(self) -> Reason | None: ...


class ShellMetrics:
    """The metrics of one node (``role="node"``: labels ``topic``, ``layer``) or one
    merger (``role="merger"``: label ``topic``)."""

    def __init__(
        self,
        role: Role,
        topic: str,
        layer: int | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.role = role
        names = ("topic", "layer") if role == "node" else ("topic",)
        self._labels = (topic, "" if layer is None else str(layer))[: len(names)]
        prefix = f"atomickafka_{role}"
        r = self.registry
        what = "node" if role == "node" else "merger"

        def counter(name: str, doc: str, *by: str) -> Counter:
            return Counter(f"{prefix}_{name}", doc, [*names, *by], registry=r)

        def gauge(name: str, doc: str, mode: GaugeMode = "livemax") -> Gauge:
            return Gauge(f"{prefix}_{name}", doc, names, registry=r, multiprocess_mode=mode)

        self.records_in = counter(
            "records_in",
            f"Records the {what} read and processed, by messageType (replays excluded)",
            "type",
        )
        self.records_out = counter("records_out", f"Records the {what} wrote, by kind", "kind")
        self.deliveries = counter("deliveries", f"Delivery records the {what} wrote")
        self.dead_letters = counter(
            "dead_letters",
            f"Records the {what} set aside in the dead-letter topic, by reason",
            "reason",
        )
        self.latency = Histogram(
            f"{prefix}_delivery_latency_seconds",
            "Wall time from the client's sentAt to the write of the Delivery record",
            names,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._set_up_queue_gauges(gauge, what)
        self._set_up_role_metrics(counter, gauge)
        self.replayed: Counter | None = None
        self.input_buffered: Gauge | None = None
        self.input_behind: Gauge | None = None
        self.protocol_mismatches: Counter | None = None
        self.bad_signatures: Counter | None = None
        self._bad_seen: dict[str, int] = {}
        if role == "node":
            self._set_up_node_metrics(counter, gauge)
        self._latency = BatchObserver(self.latency.labels(*self._labels))
        self._mismatches_seen: int | None = None
        #: The children of the counters a node updates every round, by their last label
        #: (``labels()`` takes a lock and builds a key: 4 of the 11 µs a one-record
        #: round's ``read`` cost, issue 38).
        self._in_by_type: dict[str, Counter] = {}
        self._out_by_kind: dict[str, Counter] = {}
        self._delivered = self.deliveries.labels(*self._labels)
        self._prepare()

    def _set_up_queue_gauges(self, gauge: Callable[..., Gauge], what: str) -> None:
        """How much the instance (the ``what``) holds, how far behind it is, and how long
        its last start took."""
        # A gauge of a role is the largest of its live processes' (a standby sets none
        # but ``active``, which is kept per process).
        self.pending = gauge(
            "pending_messages", f"Messages the {what} holds and has not delivered yet"
        )
        self.head_age = gauge(
            "oldest_pending_age_seconds",
            "How long the queue head has been the head (0: nothing pending)",
        )
        self.input_lag = gauge(
            "input_lag_records",
            f"Records in the {what}'s input not yet processed (high watermark - position)",
        )
        self.recovery = gauge(
            "recovery_seconds",
            "How long the last start took, from taking the lease to the end of the replay",
        )

    def _set_up_role_metrics(
        self, counter: Callable[..., Counter], gauge: Callable[..., Gauge]
    ) -> None:
        """Which instance holds the role: active or standby, takeovers, fencings."""
        self.active = gauge(
            "active", "1 for the active instance of the role, 0 for a standby", "liveall"
        )
        self.takeovers = counter(
            "takeovers",
            "Times an instance took the role's lease and became active (its first start, "
            "and every takeover from an instance that died, paused or was cut off)",
        )
        self.fenced = counter(
            "fenced",
            "Times an instance stopped because another took the role over (exit status 4): "
            "it was fenced by the broker, or learnt from its lease group that it lost the lease",
        )

    def _set_up_node_metrics(
        self, counter: Callable[..., Counter], gauge: Callable[..., Gauge]
    ) -> None:
        """A node's own: bad signatures, its input log's backlog (with a control log),
        replays, protocol mismatches."""
        self.bad_signatures = counter(
            "bad_signatures",
            "Records set aside for their signature, by whom they claim to come from "
            "(a member's topic: it signs with a secret this node does not hold)",
            "sender",
        )
        self.input_buffered = gauge(
            "input_buffered_records",
            "With a control log (--control-log): input-log records read and not yet "
            "applied (they apply where the node's markers come back)",
        )
        self.input_behind = gauge(
            "input_behind_seconds",
            "How far behind its input the node is: the longer of how long its oldest "
            "unread record has waited and how long its unread records would take; "
            "clients hold back past their max_lag_s (1 s)",
        )
        self.replayed = counter(
            "records_replayed",
            "Input records re-read on recovery (their outputs were written before)",
        )
        self.protocol_mismatches = counter(
            "protocol_mismatches",
            "Control messages from a node running another protocol (since the replay)",
        )

    def _prepare(self) -> None:
        """Show the series from the start (at 0): those without a variable label, and
        the dead letters of every reason (a fixed set)."""
        labels = self._labels
        self.deliveries.labels(*labels)
        self.active.labels(*labels).set(0)
        for reason in REASON_LABELS:  # an alert on increase() needs a series before
            self.dead_letters.labels(*labels, reason)
        for optional in (self.replayed, self.protocol_mismatches):
            if optional is not None:
                optional.labels(*labels)

    # ------------------------------------------------------------------ updates

    def read(self, records: Sequence[KafkaRecord], replayed: int = 0) -> None:
        """A batch of input records was processed; its first ``replayed`` were replays."""
        if replayed and self.replayed is not None:
            self.replayed.labels(*self._labels).inc(replayed)
        if len(records) - replayed == 1:  # the usual round at a moderate rate
            record = records[-1]
            self._in_child(record_type(record.value(), record.headers())).inc()
            return
        types = Tally(record_type(r.value(), r.headers()) for r in records[replayed:])
        for kind, n in types.items():
            self._in_child(kind).inc(n)

    def _in_child(self, kind: str) -> Counter:
        child = self._in_by_type.get(kind)
        if child is None:
            child = self._in_by_type[kind] = self.records_in.labels(*self._labels, kind)
        return child

    def _out_child(self, kind: str) -> Counter:
        child = self._out_by_kind.get(kind)
        if child is None:
            label = str(kind)  # (an OutKind: its value)
            child = self._out_by_kind[kind] = self.records_out.labels(*self._labels, label)
        return child

    def wrote(self, records: Sequence[WrittenRecord], wall_s: float) -> None:
        """``records`` were written at wall time ``wall_s`` (seconds since the epoch)."""
        if not records:
            return
        labels = self._labels
        kinds: dict[str, int] = {}
        reasons: Tally[str] = Tally()
        latencies: list[float] = []
        for record in records:
            kind = record.kind
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == DELIVERY:
                sent = record.sent_at  # as the batch layer knew it, else from the bytes
                if sent is None:
                    sent = sent_at_ms(record.value, record.headers)
                if sent is not None:
                    latencies.append(max(0.0, wall_s - sent / 1000))
            elif record.kind == DEAD_LETTER:
                reasons[dead_letter_reason(record.reason)] += 1
        for kind, n in kinds.items():
            self._out_child(kind).inc(n)
        delivered = kinds.get(DELIVERY, 0)
        if delivered:
            self._delivered.inc(delivered)
            self._latency.observe_all(latencies)
        for reason, n in reasons.items():
            self.dead_letters.labels(*labels, reason).inc(n)

    def measure(
        self,
        *,
        pending: int,
        head_age_s: float | None,
        input_lag: int | None,
        input_buffered: int = 0,
        input_behind_s: float = 0.0,
    ) -> None:
        """The state as measured once per status interval (``None``: not known)."""
        labels = self._labels
        if self.input_buffered is not None:
            self.input_buffered.labels(*labels).set(input_buffered)
        if self.input_behind is not None:
            self.input_behind.labels(*labels).set(input_behind_s)
        self.pending.labels(*labels).set(pending)
        self.head_age.labels(*labels).set(head_age_s or 0.0)
        if input_lag is not None:
            self.input_lag.labels(*labels).set(max(0, input_lag))

    def became_active(self) -> None:
        """This instance took the role's lease."""
        self.active.labels(*self._labels).set(1)
        self.takeovers.labels(*self._labels).inc()

    def stopped_fenced(self) -> None:
        """This instance stops: another took the role over."""
        self.fenced.labels(*self._labels).inc()

    def recovered(self, seconds: float, protocol_mismatches: int = 0) -> None:
        """The replay ended ``seconds`` after taking the lease, with the engine's
        protocol-mismatch count at ``protocol_mismatches`` (what the replay rebuilt:
        only later ones are counted here)."""
        self.recovery.labels(*self._labels).set(seconds)
        self._mismatches_seen = protocol_mismatches

    def count_bad_signatures(self, totals: dict[str, int]) -> None:
        """The batch layer's counts of records set aside for their signature, by
        claimed sender, are ``totals`` now."""
        counter = self.bad_signatures
        if counter is None:
            return
        for sender, total in totals.items():
            seen = self._bad_seen.get(sender, 0)
            if total > seen:
                counter.labels(*self._labels, sender).inc(total - seen)
                self._bad_seen[sender] = total

    def count_protocol_mismatches(self, total: int) -> None:
        """The engine's protocol-mismatch count is ``total`` now."""
        seen, counter = self._mismatches_seen, self.protocol_mismatches
        if seen is None or counter is None:
            return  # still replaying
        if total > seen:
            counter.labels(*self._labels).inc(total - seen)
        self._mismatches_seen = total
