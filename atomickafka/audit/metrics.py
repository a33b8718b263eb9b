"""The live audit's Prometheus metrics (``prometheus-client``), in a registry of its own.

The audit counts per batch in plain dictionaries (:class:`AuditTotals`) and adds the
batch to the Prometheus counters once, so the hot path never takes a metric's lock.
"""

from __future__ import annotations

from collections import Counter as Tally
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from atomickafka.audit.records import Violation

__all__ = ["AuditMetrics", "AuditTotals"]


@dataclass(slots=True)
class AuditTotals:
    """What an audit has read and found, per topic (since it started)."""

    checked: Tally[str] = field(default_factory=Tally)
    repeats: Tally[str] = field(default_factory=Tally)
    late: Tally[str] = field(default_factory=Tally)
    skipped: Tally[str] = field(default_factory=Tally)
    #: Deliveries not written by the topic's node or merger, and (signing on) deliveries
    #: not validly signed: not audited (core/reader's rule).
    foreign: Tally[str] = field(default_factory=Tally)
    forged: Tally[str] = field(default_factory=Tally)
    violations: Tally[tuple[str, str]] = field(default_factory=Tally)  # (kind, topic)

    def add(self, other: AuditTotals) -> None:
        """Add ``other``'s counts to these."""
        self.checked.update(other.checked)
        self.repeats.update(other.repeats)
        self.late.update(other.late)
        self.skipped.update(other.skipped)
        self.foreign.update(other.foreign)
        self.forged.update(other.forged)
        self.violations.update(other.violations)

    def count(self, violation: Violation) -> None:
        """Count one violation."""
        self.violations[(violation.kind.value, violation.topic)] += 1

    @property
    def violation_count(self) -> int:
        """Violations of every kind."""
        return sum(self.violations.values())

    def by_kind(self) -> dict[str, int]:
        """Violations per kind."""
        out: Tally[str] = Tally()
        for (kind, _topic), n in self.violations.items():
            out[kind] += n
        return dict(out)

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {
            "checked": dict(self.checked),
            "repeats": dict(self.repeats),
            "late": dict(self.late),
            "skipped": dict(self.skipped),
            "foreign": dict(self.foreign),
            "forged": dict(self.forged),
            "violations": self.by_kind(),
        }


class AuditMetrics:
    """The audit's metrics (names in ``docs/audit.md``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.violations = Counter(
            "atomickafka_audit_violations",
            "Violations found, by kind and topic",
            ["kind", "topic"],
            registry=r,
        )
        self.missing = Counter(
            "atomickafka_audit_missing",
            "Messages not delivered at a destination within the bound, by destination",
            ["topic"],
            registry=r,
        )
        self._set_up_record_counters(r)
        self._set_up_gauges(r)

    def _set_up_record_counters(self, r: CollectorRegistry) -> None:
        """What the delivery records read were: checked, repeats, late, or not audited
        (not deliveries, foreign, forged)."""
        self.checked = Counter(
            "atomickafka_audit_checked", "Delivery records checked, by topic", ["topic"], registry=r
        )
        self.repeats = Counter(
            "atomickafka_audit_repeats",
            "Exact repeats of a delivery (written again after a crash), dropped",
            ["topic"],
            registry=r,
        )
        self.late = Counter(
            "atomickafka_audit_late",
            "Deliveries of a message after it was reported missing there",
            ["topic"],
            registry=r,
        )
        self.skipped = Counter(
            "atomickafka_audit_skipped",
            "Records of an audited topic that are not its deliveries",
            ["topic"],
            registry=r,
        )
        self.foreign = Counter(
            "atomickafka_audit_foreign",
            "Deliveries of an audited topic its node or merger cannot have written, not audited",
            ["topic"],
            registry=r,
        )
        self.forged = Counter(
            "atomickafka_audit_forged",
            "Deliveries not validly signed (with --secret-file), not audited",
            ["topic"],
            registry=r,
        )

    def _set_up_gauges(self, r: CollectorRegistry) -> None:
        """The gauges: how far behind the audit reads, and the messages it holds."""
        self.lag = Gauge(
            "atomickafka_audit_lag_seconds",
            "Age of the last record read, while the topic has more to read (else 0)",
            ["topic"],
            registry=r,
        )
        self.tracked = Gauge(
            "atomickafka_audit_tracked_messages",
            "Messages held in memory (within the bound, or reported missing)",
            registry=r,
        )
        self.open = Gauge(
            "atomickafka_audit_open_messages",
            "Messages still waiting for a destination, within the bound",
            registry=r,
        )

    def add(self, batch: AuditTotals) -> None:
        """Add one batch's counts."""
        for topic, n in batch.checked.items():
            self.checked.labels(topic).inc(n)
        for topic, n in batch.repeats.items():
            self.repeats.labels(topic).inc(n)
        for topic, n in batch.late.items():
            self.late.labels(topic).inc(n)
        for tally, metric in (
            (batch.skipped, self.skipped),
            (batch.foreign, self.foreign),
            (batch.forged, self.forged),
        ):
            for topic, n in tally.items():
                metric.labels(topic).inc(n)
        for (kind, topic), n in batch.violations.items():
            self.violations.labels(kind, topic).inc(n)
            if kind == "missing":
                self.missing.labels(topic).inc(n)

    def prepare(self, topics: tuple[str, ...]) -> None:
        """Show every topic's series from the start (at 0)."""
        for topic in topics:
            for metric in (
                self.checked, self.repeats, self.late, self.skipped, self.foreign, self.forged,
                self.missing,
            ):  # fmt: skip
                metric.labels(topic)
            self.lag.labels(topic).set(0)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``port`` (a daemon thread)."""
        start_http_server(port, addr=addr, registry=self.registry)
