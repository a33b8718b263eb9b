"""The properties of atomic multicast, one function and one pass each.

Each check reads the sent messages by id (:func:`index_sent`) and the delivery logs
as :func:`read_logs` indexes them, and returns its violations, each kind in order of
topic name and then position in the log. The theory is in the package's docstring
(:mod:`atomickafka.verify.checker`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from atomickafka.verify.checker.records import UNSET, DeliveryRecord, SentMessage
from atomickafka.verify.checker.report import Violation, ViolationKind

__all__ = [
    "TopicLog",
    "cycle",
    "index_sent",
    "integrity",
    "pairwise_order",
    "read_logs",
    "timestamps",
    "validity",
]

K = ViolationKind


# ---------------------------------------------------------------------------- inputs


def index_sent(
    sent: Iterable[SentMessage],
) -> tuple[dict[str, SentMessage], list[Violation]]:
    """The sent messages by id, and an ``id-reuse`` violation for each id sent for two
    different messages.

    The same message sent again is a client retry; a retry that knows the value stands
    for one that did not.
    """
    by_id: dict[str, SentMessage] = {}
    reuse: dict[str, Violation] = {}  # one per id, in the order found
    for msg in sent:
        old = by_id.setdefault(msg.messageID, msg)
        if old is msg:
            continue
        if _is_retry(old, msg):
            if old.value is UNSET and msg.value is not UNSET:
                by_id[msg.messageID] = msg
        elif msg.messageID not in reuse:
            reuse[msg.messageID] = _id_reuse(old, msg)
    return by_id, list(reuse.values())


def _is_retry(old: SentMessage, new: SentMessage) -> bool:
    return old.destinations == new.destinations and (
        old.value is UNSET or new.value is UNSET or old.value == new.value
    )


def _id_reuse(old: SentMessage, new: SentMessage) -> Violation:
    mid = new.messageID
    return Violation(
        K.ID_REUSE,
        f"message id {mid!r} was sent for two different messages "
        f"(to {_fmt_set(old.destinations)} with value {_fmt_value(old.value)}, "
        f"and to {_fmt_set(new.destinations)} with value {_fmt_value(new.value)})",
        (mid,),
        tuple(sorted(old.destinations | new.destinations)),
    )


@dataclass(frozen=True, slots=True)
class TopicLog:
    """One topic's delivery log as the checks read it: each message's first delivery
    and where it was, and the repeats."""

    topic: str
    count: int  # records, repeats included
    firsts: list[DeliveryRecord]  # each message's first delivery, in delivery order
    ids: list[str]  # the ids of ``firsts``
    positions: dict[str, int]  # where in the log each id was first delivered
    repeats: list[tuple[str, int, int]]  # (id, first position, later position)


def read_logs(deliveries: Mapping[str, Sequence[DeliveryRecord]]) -> list[TopicLog]:
    """Index every topic's log, topics in name order.

    Raises :class:`TypeError` for an entry that is not a :class:`DeliveryRecord`.
    """
    return [_read_log(topic, deliveries[topic]) for topic in sorted(deliveries)]


def _read_log(topic: str, records: Iterable[DeliveryRecord]) -> TopicLog:
    firsts: list[DeliveryRecord] = []
    ids: list[str] = []
    positions: dict[str, int] = {}
    repeats: list[tuple[str, int, int]] = []
    for position, record in enumerate(records):
        if not isinstance(record, DeliveryRecord):
            raise TypeError(
                f"delivery {position} at {topic!r} is a {type(record).__name__}, not a "
                "DeliveryRecord (convert with atomickafka.verify.checker.adapters)"
            )
        mid = record.messageID
        first = positions.setdefault(mid, position)
        if first == position:
            firsts.append(record)
            ids.append(mid)
        else:
            repeats.append((mid, first, position))
    return TopicLog(topic, len(ids) + len(repeats), firsts, ids, positions, repeats)


# ---------------------------------------------------------------------------- integrity


def integrity(sent: Mapping[str, SentMessage], logs: Sequence[TopicLog]) -> list[Violation]:
    """``duplicate``, ``invented``, ``not-a-destination``, ``value-mismatch`` and
    ``destinations-mismatch`` (``id-reuse`` comes from :func:`index_sent`)."""
    found: list[Violation] = []
    for log in logs:
        topic = log.topic
        found.extend(
            Violation(
                K.DUPLICATE,
                f"{topic} delivered {mid!r} twice (positions {first} and {again})",
                (mid,),
                (topic,),
            )
            for mid, first, again in log.repeats
        )
        for record in log.firsts:
            msg = sent.get(record.messageID)
            if msg is None:
                found.append(_invented(topic, log.positions[record.messageID], record.messageID))
            elif (  # else nothing about it can be wrong: the common case, made quick
                topic not in msg.destinations
                or record.value is not UNSET
                or record.destinations is not None
            ):
                found.extend(_record_integrity(topic, log.positions[msg.messageID], record, msg))
    return found


def _invented(topic: str, position: int, mid: str) -> Violation:
    return Violation(
        K.INVENTED,
        f"{topic} delivered {mid!r} (position {position}), which was never sent",
        (mid,),
        (topic,),
    )


def _record_integrity(
    topic: str, position: int, record: DeliveryRecord, msg: SentMessage
) -> Iterator[Violation]:
    """What is wrong with one delivery of a sent message: where and what it delivered."""
    mid = record.messageID
    if topic not in msg.destinations:
        yield Violation(
            K.NOT_A_DESTINATION,
            f"{topic} delivered {mid!r} (position {position}) but is not "
            f"among its destinations {_fmt_set(msg.destinations)}",
            (mid,),
            (topic,),
        )
    if msg.value is not UNSET and record.value is not UNSET and msg.value != record.value:
        yield Violation(
            K.VALUE_MISMATCH,
            f"{topic} delivered {mid!r} with value {_fmt_value(record.value)}"
            f" but {_fmt_value(msg.value)} was sent",
            (mid,),
            (topic,),
        )
    if record.destinations is not None and frozenset(record.destinations) != msg.destinations:
        yield Violation(
            K.DESTINATIONS_MISMATCH,
            f"{topic} delivered {mid!r} with destinations "
            f"{_fmt_set(record.destinations)} but it was sent to "
            f"{_fmt_set(msg.destinations)}",
            (mid,),
            (topic,),
        )


# ---------------------------------------------------------------------------- validity


def validity(
    sent: Mapping[str, SentMessage],
    logs: Sequence[TopicLog],
    all_or_none: Collection[str] = (),
) -> tuple[list[Violation], tuple[str, ...]]:
    """``lost``: a message not delivered at one of its destinations, in the order sent;
    and the destinations that have no delivery log at all. A message of ``all_or_none``
    (one a run may have aborted) is lost only when some destination delivered it."""
    delivered = {log.topic: set(log.ids) for log in logs}
    lost: list[Violation] = []
    for mid, msg in sent.items():
        missing = sorted(t for t in msg.destinations if mid not in delivered.get(t, ()))
        if missing and mid in all_or_none and len(missing) == len(msg.destinations):
            continue  # aborted everywhere
        if missing:
            lost.append(
                Violation(
                    K.LOST,
                    f"{mid!r} (sent to {_fmt_set(msg.destinations)}) was never "
                    f"delivered at {', '.join(missing)}",
                    (mid,),
                    tuple(missing),
                )
            )
    without_log = {t for msg in sent.values() for t in msg.destinations} - delivered.keys()
    return lost, tuple(sorted(without_log))


# ---------------------------------------------------------------------------- total order


def pairwise_order(sent: Mapping[str, SentMessage], logs: Sequence[TopicLog]) -> list[Violation]:
    """For each pair of topics, compare their orders of the messages addressed to both.

    Restricted to those messages, the two delivery sequences must be prefixes of one
    sequence. The first place they differ is an ``order`` violation when both delivered
    both messages, else a ``gap``. A message that was never sent is addressed to the
    topics that delivered it.
    """
    destinations = _destinations_of(sent, logs)
    found: list[Violation] = []
    for i, log_a in enumerate(logs):
        a = log_a.topic
        for log_b in logs[i + 1 :]:
            b = log_b.topic
            seq_a = [m for m in log_a.ids if b in destinations[m] and a in destinations[m]]
            seq_b = [m for m in log_b.ids if a in destinations[m] and b in destinations[m]]
            if seq_a == seq_b[: len(seq_a)] or seq_b == seq_a[: len(seq_b)]:
                continue
            found.append(_first_difference(a, b, seq_a, seq_b))
    return found


def _destinations_of(
    sent: Mapping[str, SentMessage], logs: Sequence[TopicLog]
) -> dict[str, frozenset[str]]:
    """Each delivered message's destinations: what it was sent to, or, for an invented
    one, the topics that delivered it."""
    destinations = {mid: msg.destinations for mid, msg in sent.items()}
    invented: dict[str, set[str]] = {}
    for log in logs:
        for mid in log.ids:
            if mid not in sent:
                invented.setdefault(mid, set()).add(log.topic)
    destinations.update((mid, frozenset(at)) for mid, at in invented.items())
    return destinations


def _first_difference(a: str, b: str, seq_a: list[str], seq_b: list[str]) -> Violation:
    """The violation at the first place where ``a``'s and ``b``'s common orders part."""
    k = next(j for j, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)) if x != y)
    x, y = seq_a[k], seq_b[k]
    # a delivered x at position k (restricted), b delivered y there.
    x_at_b = x in set(seq_b[k:])
    y_at_a = y in set(seq_a[k:])
    if x_at_b and y_at_a:
        return Violation(
            K.ORDER,
            f"{a} and {b} disagree on the order of {x!r} and {y!r}: "
            f"{a} delivered {x!r} before {y!r}, {b} delivered {y!r} before {x!r}",
            (x, y),
            (a, b),
        )
    if y_at_a:
        return _gap(a, b, x, y)
    if x_at_b:
        return _gap(b, a, y, x)
    return Violation(
        K.GAP,
        f"{a} delivered {x!r} and {b} delivered {y!r} where their common "
        f"orders part, and neither has delivered the other's message: "
        f"they can no longer agree on the order of {x!r} and {y!r}",
        (x, y),
        (a, b),
    )


def _gap(first: str, second: str, x: str, y: str) -> Violation:
    return Violation(
        K.GAP,
        f"{second} delivered {y!r} without delivering {x!r} first, but {first} delivered "
        f"{x!r} before {y!r} and both are addressed to {second}",
        (x, y),
        (first, second),
    )


def cycle(logs: Sequence[TopicLog]) -> list[Violation]:
    """A ``cycle`` violation naming one cycle when the union of the per-topic delivery
    orders has one (no single total order extends every topic's order), else none.

    Kahn's topological sort over the graph whose edges join consecutive deliveries at
    each topic: linear in the number of deliveries.
    """
    graph = _DeliveryGraph(logs)
    left = graph.unsorted()
    return [graph.cycle_in(left)] if left else []


class _DeliveryGraph:
    """The messages as numbered nodes; each topic's log a chain of edges."""

    def __init__(self, logs: Sequence[TopicLog]) -> None:
        index: dict[str, int] = {}
        number = index.setdefault
        self.topics = [log.topic for log in logs]
        self.chains = [[number(m, len(index)) for m in log.ids] for log in logs]
        self.names = list(index)

    def unsorted(self) -> set[int]:
        """The nodes Kahn's sort cannot order: empty when the graph is acyclic."""
        n = len(self.names)
        successors: list[list[int]] = [[] for _ in range(n)]
        indegree = [0] * n
        for chain in self.chains:
            for u, v in pairwise(chain):
                successors[u].append(v)
                indegree[v] += 1
        stack = [v for v in range(n) if indegree[v] == 0]
        while stack:
            for v in successors[stack.pop()]:
                indegree[v] -= 1
                if indegree[v] == 0:
                    stack.append(v)
        return {v for v in range(n) if indegree[v] > 0}

    def cycle_in(self, left: set[int]) -> Violation:
        """Name one cycle among ``left``, the nodes the sort could not order.

        Every node left has a predecessor that is also left: walk predecessors backwards
        until a node repeats; that stretch, reversed, is a cycle.
        """
        pred: dict[int, tuple[int, str]] = {}
        for topic, chain in zip(self.topics, self.chains, strict=True):
            for u, v in pairwise(chain):
                if u in left and v in left and v not in pred:
                    pred[v] = (u, topic)
        walk: list[int] = []
        position: dict[int, int] = {}
        node = min(left)
        while node not in position:
            position[node] = len(walk)
            walk.append(node)
            node = pred[node][0]
        loop = walk[position[node] :]
        loop.reverse()  # now in delivery direction: loop[i] -> loop[i+1]
        return self._describe(loop, pred)

    def _describe(self, loop: list[int], pred: Mapping[int, tuple[int, str]]) -> Violation:
        names = self.names
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
            K.CYCLE,
            f"the delivery orders form a cycle of {len(loop)} messages, so no single order "
            f"extends them all: {'; '.join(shown)}",
            tuple(names[v] for v in loop),
            tuple(dict.fromkeys(topics)),
        )


# ---------------------------------------------------------------------------- timestamps


def timestamps(logs: Sequence[TopicLog]) -> list[Violation]:
    """Protocol diagnostics on deliveries that carry final timestamps: a message has the
    same one at every topic (``timestamp-mismatch``), and each topic delivers in
    increasing ``(timeStamp, layer, messageID)`` (``timestamp-order``, once per topic:
    the rest would follow)."""
    final: dict[str, tuple[str, int]] = {}  # id -> (first topic, final timestamp)
    mismatches: list[Violation] = []
    disorders: list[Violation] = []
    for log in logs:
        mismatches.extend(_timestamp_mismatches(log, final))
        disorders.extend(_timestamp_disorder(log))
    return [*mismatches, *disorders]


def _timestamp_mismatches(log: TopicLog, final: dict[str, tuple[str, int]]) -> Iterator[Violation]:
    topic = log.topic
    for record in log.firsts:
        ts = record.timeStamp
        if ts is None:
            continue
        mid = record.messageID
        first_topic, first_ts = final.setdefault(mid, (topic, ts))
        if first_ts != ts:
            yield Violation(
                K.TIMESTAMP_MISMATCH,
                f"{mid!r} has final timestamp {first_ts} at {first_topic} but {ts} at {topic}",
                (mid,),
                (first_topic, topic),
            )


def _timestamp_disorder(log: TopicLog) -> Iterator[Violation]:
    """The first delivery at ``log``'s topic that does not come after the one before."""
    last: tuple[int, int, str] | None = None
    for record in log.firsts:
        if record.timeStamp is None:
            continue
        key = (record.timeStamp, record.layer, record.messageID)
        if last is not None and key <= last:
            yield Violation(
                K.TIMESTAMP_ORDER,
                f"{log.topic} delivered {key[2]!r} at (timeStamp, layer, messageID) {key} "
                f"after {last[2]!r} at {last} (position {log.positions[key[2]]})",
                (last[2], key[2]),
                (log.topic,),
            )
            return
        last = key


# ---------------------------------------------------------------------------- text


def _fmt_set(topics: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(topics)) + "}"


def _fmt_value(value: Any) -> str:
    if value is UNSET:
        return "(unknown)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
