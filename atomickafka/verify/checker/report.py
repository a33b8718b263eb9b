"""What the checker reports: the kinds of violation, one violation, the whole report."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

__all__ = ["ORDER_KINDS", "CheckReport", "Violation", "ViolationKind"]


class ViolationKind(StrEnum):
    """What a violation is; the value is the short name shown in reports."""

    ID_REUSE = "id-reuse"
    DUPLICATE = "duplicate"
    INVENTED = "invented"
    NOT_A_DESTINATION = "not-a-destination"
    VALUE_MISMATCH = "value-mismatch"
    DESTINATIONS_MISMATCH = "destinations-mismatch"
    ORDER = "order"
    GAP = "gap"
    CYCLE = "cycle"
    LOST = "lost"
    TIMESTAMP_MISMATCH = "timestamp-mismatch"
    TIMESTAMP_ORDER = "timestamp-order"

    @property
    def property(self) -> str:
        """The property the kind belongs to: integrity, order, validity or timestamps."""
        return _PROPERTY[self]


_PROPERTY: Final = {
    ViolationKind.ID_REUSE: "integrity",
    ViolationKind.DUPLICATE: "integrity",
    ViolationKind.INVENTED: "integrity",
    ViolationKind.NOT_A_DESTINATION: "integrity",
    ViolationKind.VALUE_MISMATCH: "integrity",
    ViolationKind.DESTINATIONS_MISMATCH: "integrity",
    ViolationKind.ORDER: "total order",
    ViolationKind.GAP: "total order",
    ViolationKind.CYCLE: "total order",
    ViolationKind.LOST: "validity",
    ViolationKind.TIMESTAMP_MISMATCH: "timestamps",
    ViolationKind.TIMESTAMP_ORDER: "timestamps",
}

#: Kinds that mean two topics disagree on the order.
ORDER_KINDS: Final = frozenset({ViolationKind.ORDER, ViolationKind.GAP, ViolationKind.CYCLE})


@dataclass(frozen=True, slots=True)
class Violation:
    """One violation: its kind, a sentence saying what is wrong, and who is involved."""

    kind: ViolationKind
    text: str
    message_ids: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"[{self.kind.value}] {self.text}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "kind": self.kind.value,
            "property": self.kind.property,
            "text": self.text,
            "messageIDs": list(self.message_ids),
            "topics": list(self.topics),
        }


@dataclass(slots=True, repr=False)
class CheckReport:
    """The outcome of :func:`~atomickafka.verify.checker.check`.

    ``violations`` holds at most ``max_violations`` entries, in reporting order;
    ``counts`` counts every violation found, by kind. ``first`` is the first violation.
    """

    complete: bool
    topics: tuple[str, ...]
    sent: int
    multicast: int
    delivered: dict[str, int]
    violations: list[Violation] = field(default_factory=list)
    counts: dict[ViolationKind, int] = field(default_factory=dict)
    missing_topics: tuple[str, ...] = ()  # destinations with no delivery log at all

    @property
    def ok(self) -> bool:
        """True when no violation was found."""
        return not self.counts

    @property
    def total_violations(self) -> int:
        """How many violations were found (``violations`` may hold fewer)."""
        return sum(self.counts.values())

    @property
    def first(self) -> Violation | None:
        """The first violation, or ``None`` when the logs are correct."""
        return self.violations[0] if self.violations else None

    @property
    def deliveries(self) -> int:
        """Delivery records checked, over all topics."""
        return sum(self.delivered.values())

    def kinds(self) -> set[ViolationKind]:
        """The kinds of violation found."""
        return set(self.counts)

    def of_kind(self, *kinds: ViolationKind) -> list[Violation]:
        """The recorded violations of the given kinds."""
        return [v for v in self.violations if v.kind in kinds]

    def summary(self, limit: int = 10) -> str:
        """A human-readable report: counts, the first violation, then up to ``limit``."""
        mode = "complete run" if self.complete else "prefix (validity not checked)"
        lines = [
            f"checked {self.sent} sent messages ({self.multicast} multicast) and "
            f"{self.deliveries} deliveries at {len(self.topics)} topics; {mode}",
        ]
        for topic in self.topics:
            lines.append(f"  {topic}: {self.delivered.get(topic, 0)} delivered")
        if self.missing_topics:
            lines.append(f"  no delivery log for: {', '.join(self.missing_topics)}")
        if self.ok:
            lines.append("OK: integrity, validity and total order hold")
            return "\n".join(lines)
        by_kind = ", ".join(f"{k.value}: {n}" for k, n in self.counts.items())
        lines.append(f"VIOLATIONS: {self.total_violations} ({by_kind})")
        first = self.first
        assert first is not None
        lines.append(f"FIRST VIOLATION ({first.kind.property}): {first}")
        shown = self.violations[1:limit]
        for violation in shown:
            lines.append(f"  {violation}")
        rest = self.total_violations - 1 - len(shown)
        if rest > 0:
            lines.append(f"  ... and {rest} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        first = f", first={str(self.first)!r}" if self.first else ""
        return (
            f"CheckReport(ok={self.ok}, sent={self.sent}, deliveries={self.deliveries}, "
            f"violations={self.total_violations}{first})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "ok": self.ok,
            "complete": self.complete,
            "topics": list(self.topics),
            "sent": self.sent,
            "multicast": self.multicast,
            "delivered": dict(self.delivered),
            "missingTopics": list(self.missing_topics),
            "counts": {k.value: n for k, n in self.counts.items()},
            "first": self.first.to_dict() if self.first else None,
            "violations": [v.to_dict() for v in self.violations],
        }
