"""An independent checker of atomic-multicast delivery logs.

The checker knows nothing about how the order was made: it does not import the engine,
only looks at what was sent and what every topic delivered, and checks the three
properties of atomic multicast:

Integrity
    No message is delivered twice at a topic (``duplicate``); nothing is invented (every
    delivered id was sent: ``invented``); only destinations deliver
    (``not-a-destination``); the delivered value and destination list equal the sent
    ones when both are known (``value-mismatch``, ``destinations-mismatch``); and one
    ``messageID`` names one message (``id-reuse``: two different messages sent under
    the same id).
Validity
    Everything sent is delivered at every destination (``lost``). Turned off with
    ``complete=False`` to check a prefix of a still-running system.
Total order
    Every pair of topics agrees on the relative order of the messages addressed to both
    (``order``: both delivered ``x`` and ``y``, in opposite orders; ``gap``: one topic
    delivered ``y`` while ``x``, which the other delivered before ``y`` and which is
    addressed to it, is still missing -- it can never be put right, so it is reported
    even for prefixes). Pairwise agreement is not enough: three topics can each agree
    pairwise and still form a cycle (A: x<y, B: y<z, C: z<x), so the union of all
    per-topic delivery orders must also be acyclic (``cycle``). That is checked on the
    graph whose edges join consecutive deliveries at each topic, with an iterative
    topological sort (Kahn), in time linear in the number of deliveries.

When deliveries carry final timestamps, two protocol diagnostics are added: a message
has the same final timestamp at every topic (``timestamp-mismatch``) and each topic
delivers in increasing ``(timeStamp, layer, messageID)`` (``timestamp-order``; the
layer, for partitioned topics, is the delivery's ``layer`` or ``partitionID``, else 0).

:func:`check` returns a :class:`CheckReport`; ``report.first`` is the first violation,
in the order integrity, total order, validity, timestamps, and within a kind by
position in the delivery logs. :func:`check_files` does the same from files:
``SENT.jsonl`` (one object per line with ``messageID``, ``topic`` -- the destination
list -- and optionally ``value``) and delivery files of JSON lines as
``atomickafka tail --json`` prints them (``messageID``, ``value``, ``timeStamp``,
``topic``, and the delivering topic in ``deliveredAt`` or else the file name
``<topic>.jsonl``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

import orjson

from atomickafka.core.wire import is_valid_topic_name

__all__ = [
    "UNSET",
    "CheckInputError",
    "CheckReport",
    "DeliveryRecord",
    "SentMessage",
    "Violation",
    "ViolationKind",
    "check",
    "check_files",
    "load_deliveries",
    "load_sent",
]


class _Unset(Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: Marks a value that is not known (``None`` is a legitimate JSON ``null`` value).
UNSET: Final = _Unset.UNSET


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


@dataclass(frozen=True, slots=True)
class SentMessage:
    """A message as its client sent it: id, destination topics and (if known) value."""

    messageID: str
    destinations: frozenset[str]
    value: Any = UNSET


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One delivery as the checker sees it.

    ``destinations`` is the destination list the record carries (the wire field
    ``topic``), ``deliveredAt`` the topic that delivered it; any of the fields but
    ``messageID`` may be unknown (``None`` / :data:`UNSET`).
    """

    messageID: str
    destinations: tuple[str, ...] | None = None
    timeStamp: int | None = None
    value: Any = UNSET
    deliveredAt: str | None = None


@dataclass(slots=True, repr=False)
class CheckReport:
    """The outcome of :func:`check`.

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


class CheckInputError(ValueError):
    """The checker's input is malformed (a bad file or record)."""


# ---------------------------------------------------------------------------- inputs

SentInput = Mapping[str, Any] | Iterable[Any]
DeliveriesInput = Mapping[str, Iterable[Any]]


def _read_fields(item: Any) -> tuple[Any, Any, Any, Any]:
    """``(messageID, destinations, timeStamp, value)`` as a mapping or an object holds
    them, by wire name (``topic``) or by ``destinations``; absent ones are ``None``
    (``UNSET`` for the value). Types are checked by the callers."""
    if isinstance(item, Mapping):
        raw = item.get("destinations", item.get("topic"))
        value = item.get("value", UNSET)
        return item.get("messageID"), raw, item.get("timeStamp"), _json_value(value)
    raw = getattr(item, "destinations", None)
    if raw is None:
        raw = getattr(item, "topic", None)
    return (
        item.messageID,
        raw,
        getattr(item, "timeStamp", None),
        _json_value(getattr(item, "value", UNSET)),
    )


def _json_value(value: Any) -> Any:
    """A value as the wire's core carries it (``bytes``: JSON text) becomes the JSON
    value it spells; a core message that does not carry its value (``None`` bytes) has
    an unknown value."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise CheckInputError(f"a value is not JSON text: {exc}") from None
    return value


def _as_sent(item: Any, key: str | None = None) -> SentMessage:
    """Normalise one sent entry (``SentMessage``, mapping, ``Message``-like or set)."""
    if isinstance(item, SentMessage):
        return item
    if key is not None and type(item) in (frozenset, set, tuple, list):
        if (
            type(item) is tuple
            and len(item) == 2
            and not isinstance(item[0], str)
            and isinstance(item[0], Iterable)
        ):  # (destinations, value)
            return SentMessage(key, frozenset(item[0]), item[1])
        return SentMessage(key, frozenset(item))
    if isinstance(item, Mapping) or hasattr(item, "messageID"):
        mid, raw, _, value = _read_fields(item)
        if isinstance(item, Mapping) and "messageID" not in item:
            mid = key
    else:  # a bare destination set, keyed by id
        mid, raw, value = key, item, UNSET
    if not isinstance(mid, str):
        raise CheckInputError(f"sent message id must be a string, got {mid!r}")
    if isinstance(raw, str):
        raw = (raw,)
    if raw is None or not isinstance(raw, Iterable):
        raise CheckInputError(f"sent message {mid!r} has no destination list")
    return SentMessage(mid, frozenset(raw), value)


def _normalise_sent(sent: SentInput) -> tuple[dict[str, SentMessage], list[Violation]]:
    out: dict[str, SentMessage] = {}
    reuse: list[Violation] = []
    reported: set[str] = set()
    items: Iterable[SentMessage]
    if isinstance(sent, Mapping):
        items = (_as_sent(v, k) for k, v in sent.items())
    else:
        items = (_as_sent(v) for v in sent)
    for msg in items:
        old = out.get(msg.messageID)
        if old is None:
            out[msg.messageID] = msg
            continue
        if old.destinations == msg.destinations and (
            old.value is UNSET or msg.value is UNSET or old.value == msg.value
        ):
            if old.value is UNSET and msg.value is not UNSET:
                out[msg.messageID] = msg
            continue  # the same message sent again (a client retry)
        if msg.messageID in reported:
            continue
        reported.add(msg.messageID)
        reuse.append(
            Violation(
                ViolationKind.ID_REUSE,
                f"message id {msg.messageID!r} was sent for two different messages "
                f"(to {_fmt_set(old.destinations)} with value {_fmt_value(old.value)}, "
                f"and to {_fmt_set(msg.destinations)} with value {_fmt_value(msg.value)})",
                (msg.messageID,),
                tuple(sorted(old.destinations | msg.destinations)),
            )
        )
    return out, reuse


_Fields = tuple[str, tuple[str, ...] | None, int | None, Any]


def _layer_of(item: Any) -> int:
    """The partition layer a delivery names (``layer``, or the wire's ``partitionID``),
    0 when it names none: merged streams are ordered by (timeStamp, layer, messageID)."""
    if isinstance(item, Mapping):
        layer = item.get("layer", item.get("partitionID"))
    else:
        layer = getattr(item, "layer", None)
        if layer is None:
            layer = getattr(item, "partitionID", None)
    return layer if isinstance(layer, int) else 0


def _delivery_fields(item: Any, topic: str) -> _Fields:
    """``(messageID, destinations, timeStamp, value)`` of one delivery entry."""
    if isinstance(item, str):
        return item, None, None, UNSET
    if isinstance(item, DeliveryRecord):
        return item.messageID, item.destinations, item.timeStamp, item.value
    if not (isinstance(item, Mapping) or hasattr(item, "messageID")):
        raise CheckInputError(f"delivery at {topic!r} is not a record: {item!r}")
    mid, raw, ts, value = _read_fields(item)
    if not isinstance(mid, str):
        raise CheckInputError(f"delivery at {topic!r} has no string messageID: {item!r}")
    if isinstance(raw, str):
        raw = (raw,)
    destinations = tuple(raw) if isinstance(raw, Iterable) else None
    if ts is not None and (type(ts) is not int):
        raise CheckInputError(f"delivery {mid!r} at {topic!r}: timeStamp must be an integer")
    return mid, destinations, ts, value


# ---------------------------------------------------------------------------- check


class _Collector:
    """Collects violations in groups, keeps counts, and caps what it stores."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stored = 0
        self.groups: dict[str, list[Violation]] = {
            "integrity": [],
            "total order": [],
            "validity": [],
            "timestamps": [],
        }
        self.counts: dict[ViolationKind, int] = {}

    def add(self, violation: Violation) -> None:
        kind = violation.kind
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.stored < self.limit:
            self.groups[kind.property].append(violation)
            self.stored += 1

    def ordered(self) -> list[Violation]:
        out: list[Violation] = []
        for group in self.groups.values():
            out.extend(group)
        return out


def check(
    sent: SentInput,
    deliveries: DeliveriesInput,
    *,
    complete: bool = True,
    check_timestamps: bool = True,
    max_violations: int = 1000,
) -> CheckReport:
    """Check delivery logs against what was sent; return a :class:`CheckReport`.

    ``sent`` is a mapping ``messageID -> destinations`` (an iterable of topic names, a
    ``(destinations, value)`` pair, or a mapping/object with ``destinations``/``topic``
    and optionally ``value``), or an
    iterable of :class:`SentMessage` (or mappings/objects with ``messageID``), which may
    hold the same id twice: a repeat of the same message is a client retry, a different
    message under the same id is ``id-reuse``.

    ``deliveries`` maps each topic to its delivery sequence, in delivery order: message
    ids, :class:`DeliveryRecord`, ``Message``/``client.Delivery`` objects or mappings
    with the wire names (``messageID``, ``topic`` or ``destinations``, ``timeStamp``,
    ``value``).

    ``complete=False`` checks a prefix of a running system: everything but validity.
    At most ``max_violations`` violations are kept (all are counted).
    """
    # Collect per-kind lists first: reports list properties in the order integrity,
    # total order, validity, timestamps; within one, kinds in ViolationKind order,
    # then topics in name order and positions in delivery order.
    sent_map, reuse = _normalise_sent(sent)
    topics = tuple(sorted(deliveries))
    per_kind: dict[ViolationKind, list[Violation]] = {k: [] for k in ViolationKind}
    per_kind[ViolationKind.ID_REUSE].extend(reuse)

    sequences: dict[str, list[str]] = {}  # first occurrences, in delivery order
    delivered_counts: dict[str, int] = {}
    final_ts: dict[str, tuple[str, int]] = {}  # id -> (first topic, final timestamp)
    delivered_at: dict[str, list[str]] = {}  # invented ids only: where delivered

    for topic in topics:
        seen: dict[str, int] = {}
        sequence: list[str] = []
        last_key: tuple[int, int, str] | None = None
        ts_order_reported = False
        count = 0
        for position, item in enumerate(deliveries[topic]):
            count += 1
            if type(item) is str:  # the common case: a bare id
                mid, record_destinations, ts, record_value = item, None, None, UNSET
            else:
                mid, record_destinations, ts, record_value = _delivery_fields(item, topic)
            first_pos = seen.get(mid)
            if first_pos is not None:
                per_kind[ViolationKind.DUPLICATE].append(
                    Violation(
                        ViolationKind.DUPLICATE,
                        f"{topic} delivered {mid!r} twice (positions {first_pos} and {position})",
                        (mid,),
                        (topic,),
                    )
                )
                continue
            seen[mid] = position
            sequence.append(mid)
            msg = sent_map.get(mid)
            if msg is None:
                delivered_at.setdefault(mid, []).append(topic)
                per_kind[ViolationKind.INVENTED].append(
                    Violation(
                        ViolationKind.INVENTED,
                        f"{topic} delivered {mid!r} (position {position}), which was never sent",
                        (mid,),
                        (topic,),
                    )
                )
            else:
                if topic not in msg.destinations:
                    per_kind[ViolationKind.NOT_A_DESTINATION].append(
                        Violation(
                            ViolationKind.NOT_A_DESTINATION,
                            f"{topic} delivered {mid!r} (position {position}) but is not "
                            f"among its destinations {_fmt_set(msg.destinations)}",
                            (mid,),
                            (topic,),
                        )
                    )
                if (
                    msg.value is not UNSET
                    and record_value is not UNSET
                    and msg.value != record_value
                ):
                    per_kind[ViolationKind.VALUE_MISMATCH].append(
                        Violation(
                            ViolationKind.VALUE_MISMATCH,
                            f"{topic} delivered {mid!r} with value {_fmt_value(record_value)}"
                            f" but {_fmt_value(msg.value)} was sent",
                            (mid,),
                            (topic,),
                        )
                    )
                if record_destinations is not None and (
                    frozenset(record_destinations) != msg.destinations
                ):
                    per_kind[ViolationKind.DESTINATIONS_MISMATCH].append(
                        Violation(
                            ViolationKind.DESTINATIONS_MISMATCH,
                            f"{topic} delivered {mid!r} with destinations "
                            f"{_fmt_set(record_destinations)} but it was sent to "
                            f"{_fmt_set(msg.destinations)}",
                            (mid,),
                            (topic,),
                        )
                    )
            if check_timestamps and ts is not None:
                prior = final_ts.get(mid)
                if prior is None:
                    final_ts[mid] = (topic, ts)
                elif prior[1] != ts:
                    per_kind[ViolationKind.TIMESTAMP_MISMATCH].append(
                        Violation(
                            ViolationKind.TIMESTAMP_MISMATCH,
                            f"{mid!r} has final timestamp {prior[1]} at {prior[0]} but {ts} "
                            f"at {topic}",
                            (mid,),
                            (prior[0], topic),
                        )
                    )
                key = (ts, _layer_of(item), mid)
                if last_key is not None and key <= last_key and not ts_order_reported:
                    ts_order_reported = True  # one per topic: the rest would follow
                    per_kind[ViolationKind.TIMESTAMP_ORDER].append(
                        Violation(
                            ViolationKind.TIMESTAMP_ORDER,
                            f"{topic} delivered {mid!r} at (timeStamp, layer, messageID) {key} "
                            f"after {last_key[2]!r} at {last_key} (position {position})",
                            (last_key[2], mid),
                            (topic,),
                        )
                    )
                last_key = key
        sequences[topic] = sequence
        delivered_counts[topic] = count

    # Effective destination sets: what was sent, or where an invented id showed up.
    def dests(mid: str) -> frozenset[str] | list[str]:
        msg = sent_map.get(mid)
        return msg.destinations if msg is not None else delivered_at.get(mid, [])

    destinations_of: dict[str, frozenset[str] | list[str]] = {}
    for sequence in sequences.values():
        for mid in sequence:
            if mid not in destinations_of:
                destinations_of[mid] = dests(mid)

    per_kind[ViolationKind.ORDER], per_kind[ViolationKind.GAP] = _pairwise(
        topics, sequences, destinations_of
    )
    cycle = _find_cycle(sequences)
    if cycle is not None:
        per_kind[ViolationKind.CYCLE].append(cycle)

    missing_topics: set[str] = set()
    if complete:
        expected: dict[str, list[str]] = {}
        for mid, msg in sent_map.items():
            for t in msg.destinations:
                bucket = expected.get(t)
                if bucket is None:
                    bucket = expected[t] = []
                bucket.append(mid)
        missing_at: dict[str, list[str]] = {}
        for t, mids in expected.items():
            if t not in sequences:
                missing_topics.add(t)
            got = set(sequences.get(t, ()))
            for mid in [m for m in mids if m not in got]:
                missing_at.setdefault(mid, []).append(t)
        for mid in sent_map:  # in the order sent
            missing = missing_at.get(mid)
            if missing:
                missing.sort()
                msg = sent_map[mid]
                per_kind[ViolationKind.LOST].append(
                    Violation(
                        ViolationKind.LOST,
                        f"{mid!r} (sent to {_fmt_set(msg.destinations)}) was never "
                        f"delivered at {', '.join(missing)}",
                        (mid,),
                        tuple(missing),
                    )
                )

    collector = _Collector(max_violations)
    for kind in ViolationKind:
        for violation in per_kind[kind]:
            collector.add(violation)
    multicast = sum(1 for m in sent_map.values() if len(m.destinations) > 1)
    return CheckReport(
        complete=complete,
        topics=topics,
        sent=len(sent_map),
        multicast=multicast,
        delivered=delivered_counts,
        violations=collector.ordered(),
        counts=collector.counts,
        missing_topics=tuple(sorted(missing_topics)),
    )


def _pairwise(
    topics: Sequence[str],
    sequences: Mapping[str, list[str]],
    destinations_of: Mapping[str, frozenset[str] | list[str]],
) -> tuple[list[Violation], list[Violation]]:
    """For each pair of topics, compare their orders of the messages sent to both.

    Restricted to the messages addressed to both topics, the two delivery sequences
    must be prefixes of one sequence. The first place they differ is an ``order``
    violation when both delivered both messages, else a ``gap``.
    """
    orders: list[Violation] = []
    gaps: list[Violation] = []
    for i, a in enumerate(topics):
        seq_a_all = sequences[a]
        for b in topics[i + 1 :]:
            seq_b_all = sequences[b]
            seq_a = [m for m in seq_a_all if b in destinations_of[m] and a in destinations_of[m]]
            seq_b = [m for m in seq_b_all if a in destinations_of[m] and b in destinations_of[m]]
            if seq_a == seq_b[: len(seq_a)] or seq_b == seq_a[: len(seq_b)]:
                continue
            k = next(j for j, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)) if x != y)
            x, y = seq_a[k], seq_b[k]
            # a delivered x at position k (restricted), b delivered y there.
            x_at_b = x in set(seq_b[k:])
            y_at_a = y in set(seq_a[k:])
            if not x_at_b and not y_at_a:
                gaps.append(
                    Violation(
                        ViolationKind.GAP,
                        f"{a} delivered {x!r} and {b} delivered {y!r} where their common "
                        f"orders part, and neither has delivered the other's message: "
                        f"they can no longer agree on the order of {x!r} and {y!r}",
                        (x, y),
                        (a, b),
                    )
                )
            elif x_at_b and y_at_a:
                orders.append(
                    Violation(
                        ViolationKind.ORDER,
                        f"{a} and {b} disagree on the order of {x!r} and {y!r}: "
                        f"{a} delivered {x!r} before {y!r}, {b} delivered {y!r} before {x!r}",
                        (x, y),
                        (a, b),
                    )
                )
            elif y_at_a:
                gaps.append(_gap(a, b, x, y))
            else:
                gaps.append(_gap(b, a, y, x))
    return orders, gaps


def _gap(first: str, second: str, x: str, y: str) -> Violation:
    return Violation(
        ViolationKind.GAP,
        f"{second} delivered {y!r} without delivering {x!r} first, but {first} delivered "
        f"{x!r} before {y!r} and both are addressed to {second}",
        (x, y),
        (first, second),
    )


def _find_cycle(sequences: Mapping[str, list[str]]) -> Violation | None:
    """Kahn's topological sort over the union of the per-topic delivery chains.

    Returns a ``cycle`` violation naming one cycle, or ``None`` when the union of the
    delivery orders is acyclic (some single total order extends every topic's order).
    """
    index: dict[str, int] = {}
    number = index.setdefault
    chains = [[number(m, len(index)) for m in sequence] for sequence in sequences.values()]
    names = list(index)
    n = len(names)
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for chain in chains:
        for u, v in pairwise(chain):
            succ[u].append(v)
            indegree[v] += 1
    stack = [v for v in range(n) if indegree[v] == 0]
    done = 0
    while stack:
        u = stack.pop()
        done += 1
        for v in succ[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                stack.append(v)
    if done == n:
        return None
    # Every node left has a predecessor that is also left: walk predecessors backwards
    # until a node repeats; that stretch, reversed, is a cycle.
    left = {v for v in range(n) if indegree[v] > 0}
    pred: dict[int, tuple[int, str]] = {}
    for topic, chain in zip(sequences, chains, strict=True):
        for u, v in pairwise(chain):
            if u in left and v in left and v not in pred:
                pred[v] = (u, topic)
    start = min(left)
    walk: list[int] = []
    position: dict[int, int] = {}
    node = start
    while node not in position:
        position[node] = len(walk)
        walk.append(node)
        node = pred[node][0]
    loop = walk[position[node] :]
    loop.reverse()  # now in delivery direction: loop[i] -> loop[i+1]
    steps: list[str] = []
    topics: list[str] = []
    for i, v in enumerate(loop):
        w = loop[(i + 1) % len(loop)]
        u, topic = pred[w]
        assert u == v
        steps.append(f"{topic} delivered {names[v]!r} before {names[w]!r}")
        topics.append(topic)
    shown = steps if len(steps) <= 6 else [*steps[:5], f"... ({len(steps) - 5} more steps)"]
    return Violation(
        ViolationKind.CYCLE,
        f"the delivery orders form a cycle of {len(loop)} messages, so no single order "
        f"extends them all: {'; '.join(shown)}",
        tuple(names[v] for v in loop),
        tuple(dict.fromkeys(topics)),
    )


def _fmt_set(topics: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(topics)) + "}"


def _fmt_value(value: Any) -> str:
    if value is UNSET:
        return "(unknown)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------- files


def load_sent(path: str | os.PathLike[str]) -> list[SentMessage]:
    """Read ``SENT.jsonl``: one JSON object per line with ``messageID`` and ``topic``.

    ``topic`` (or ``destinations``) is the destination list; ``value`` is optional.
    Blank lines are skipped. Raises :class:`CheckInputError` naming file and line.
    """
    out: list[SentMessage] = []
    for where, obj in _json_lines(path):
        mid = obj.get("messageID")
        if not isinstance(mid, str) or not mid:
            raise CheckInputError(f"{where}: 'messageID' must be a non-empty string")
        raw = obj.get("topic", obj.get("destinations"))
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not raw or not all(is_valid_topic_name(t) for t in raw):
            raise CheckInputError(f"{where}: 'topic' must be a non-empty list of topic names")
        out.append(SentMessage(mid, frozenset(raw), obj.get("value", UNSET)))
    return out


def load_deliveries(paths: Iterable[str | os.PathLike[str]]) -> dict[str, list[DeliveryRecord]]:
    """Read delivery files (JSON lines, one Delivery record each) into per-topic logs.

    The delivering topic is the record's ``deliveredAt`` field or, without one, the file
    name (``T1.jsonl`` holds deliveries at ``T1``). Records of other message types
    (``messageType`` present and not ``DeliveryMessage``) are rejected. Order within a
    topic is file order; several files may add to the same topic, in the order given.
    """
    out: dict[str, list[DeliveryRecord]] = {}
    for path in paths:
        stem = Path(path).name
        for suffix in (".jsonl", ".json", ".ndjson", ".txt"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        for where, obj in _json_lines(path):
            kind = obj.get("messageType")
            if kind is not None and kind != "DeliveryMessage":
                raise CheckInputError(f"{where}: not a delivery record (messageType {kind!r})")
            topic = obj.get("deliveredAt")
            if topic is None:
                if not is_valid_topic_name(stem):
                    raise CheckInputError(
                        f"{where}: no 'deliveredAt' field and the file name does not name a "
                        "topic (<topic>.jsonl)"
                    )
                topic = stem
            if not is_valid_topic_name(topic):
                raise CheckInputError(f"{where}: 'deliveredAt' is not a topic name: {topic!r}")
            mid = obj.get("messageID")
            if not isinstance(mid, str) or not mid:
                raise CheckInputError(f"{where}: 'messageID' must be a non-empty string")
            raw = obj.get("topic", obj.get("destinations"))
            if isinstance(raw, str):
                raw = [raw]
            if raw is not None and not (
                isinstance(raw, list) and all(isinstance(t, str) for t in raw)
            ):
                raise CheckInputError(f"{where}: 'topic' must be a list of topic names")
            ts = obj.get("timeStamp")
            if ts is not None and (type(ts) is not int or ts < 0):
                raise CheckInputError(f"{where}: 'timeStamp' must be a non-negative integer")
            out.setdefault(topic, []).append(
                DeliveryRecord(
                    mid,
                    tuple(raw) if raw is not None else None,
                    ts,
                    obj.get("value", UNSET),
                    topic,
                )
            )
    return out


def _json_lines(path: str | os.PathLike[str]) -> Iterable[tuple[str, dict[str, Any]]]:
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{os.fspath(path)}:{number}"
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise CheckInputError(f"{where}: not valid JSON ({exc})") from None
                if not isinstance(obj, dict):
                    raise CheckInputError(f"{where}: not a JSON object")
                yield where, obj
    except OSError as exc:
        raise CheckInputError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None


def check_files(
    sent_path: str | os.PathLike[str],
    delivery_paths: Iterable[str | os.PathLike[str]],
    *,
    complete: bool = True,
    max_violations: int = 1000,
) -> CheckReport:
    """Load ``SENT.jsonl`` and delivery files, then :func:`check` them.

    A destination no delivery file mentions is listed in ``report.missing_topics``;
    with ``complete=True`` its messages are also reported lost.
    """
    sent = load_sent(sent_path)
    deliveries: dict[str, list[DeliveryRecord]] = load_deliveries(delivery_paths)
    return check(sent, deliveries, complete=complete, max_violations=max_violations)
