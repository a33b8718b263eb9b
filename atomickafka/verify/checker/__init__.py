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
layer, for partitioned topics, is the delivery's :attr:`DeliveryRecord.layer`).

:func:`check` returns a :class:`CheckReport`; ``report.first`` is the first violation,
in the order integrity, total order, validity, timestamps, and within a kind by
position in the delivery logs. :func:`check_files` does the same from files:
``SENT.jsonl`` (one object per line with ``messageID``, ``topic`` -- the destination
list -- and optionally ``value``) and delivery files of JSON lines as
``atomickafka tail --json`` prints them (``messageID``, ``value``, ``timeStamp``,
``topic``, and the delivering topic in ``deliveredAt`` or else the file name
``<topic>.jsonl``).

The package's modules: :mod:`~.records` (the checker's inputs, :class:`SentMessage` and
:class:`DeliveryRecord`), :mod:`~.adapters` (building them from files, plain data,
wire records and client deliveries), :mod:`~.checks` (one function, one pass, per
property) and :mod:`~.report` (:class:`CheckReport`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence

from atomickafka.verify.checker.adapters import (
    ClientDelivery,
    WireDelivery,
    deliveries_from_client,
    deliveries_from_ids,
    deliveries_from_json,
    deliveries_from_wire,
    load_deliveries,
    load_sent,
    sent_from_destinations,
    sent_from_pairs,
)
from atomickafka.verify.checker.checks import (
    cycle,
    index_sent,
    integrity,
    pairwise_order,
    read_logs,
    timestamps,
    validity,
)
from atomickafka.verify.checker.records import (
    UNSET,
    CheckInputError,
    DeliveryRecord,
    SentMessage,
)
from atomickafka.verify.checker.report import (
    ORDER_KINDS,
    CheckReport,
    Violation,
    ViolationKind,
)

__all__ = [
    "ORDER_KINDS",
    "UNSET",
    "CheckInputError",
    "CheckReport",
    "ClientDelivery",
    "DeliveryRecord",
    "SentMessage",
    "Violation",
    "ViolationKind",
    "WireDelivery",
    "check",
    "check_files",
    "deliveries_from_client",
    "deliveries_from_ids",
    "deliveries_from_json",
    "deliveries_from_wire",
    "load_deliveries",
    "load_sent",
    "sent_from_destinations",
    "sent_from_pairs",
]

#: Where each kind comes in a report: integrity, total order, validity, timestamps.
_RANK = {kind: rank for rank, kind in enumerate(ViolationKind)}


def check(
    sent: Mapping[str, SentMessage] | Iterable[SentMessage],
    deliveries: Mapping[str, Sequence[DeliveryRecord]],
    *,
    complete: bool = True,
    check_timestamps: bool = True,
    max_violations: int = 1000,
    all_or_none: Collection[str] = (),
) -> CheckReport:
    """Check delivery logs against what was sent; return a :class:`CheckReport`.

    ``sent`` holds :class:`SentMessage` records, as an iterable (which may hold the same
    id twice: a repeat of the same message is a client retry, a different message under
    the same id is ``id-reuse``) or a mapping from each one's ``messageID``.
    ``deliveries`` maps each topic to its :class:`DeliveryRecord` log, in delivery order.
    Anything else (ids, tuples, mappings, wire records) is converted first, explicitly,
    with :mod:`~atomickafka.verify.checker.adapters`: an entry of another type raises
    :class:`TypeError`, a mapping key that is not its message's id
    :class:`CheckInputError`.

    ``complete=False`` checks a prefix of a running system: everything but validity.
    ``all_or_none`` names messages a run may have aborted (a stray record reached
    them, §4.9): each must be delivered at all of its destinations or at none.
    At most ``max_violations`` violations are kept (all are counted).
    """
    messages, reused = index_sent(_sent_messages(sent))
    logs = read_logs(deliveries)
    found = [*reused, *integrity(messages, logs), *pairwise_order(messages, logs), *cycle(logs)]
    without_log: tuple[str, ...] = ()
    if complete:
        lost, without_log = validity(messages, logs, all_or_none)
        found += lost
    if check_timestamps:
        found += timestamps(logs)
    found.sort(key=lambda violation: _RANK[violation.kind])  # stable: topic, position
    counts: dict[ViolationKind, int] = {}
    for violation in found:
        counts[violation.kind] = counts.get(violation.kind, 0) + 1
    return CheckReport(
        complete=complete,
        topics=tuple(log.topic for log in logs),
        sent=len(messages),
        multicast=sum(1 for m in messages.values() if len(m.destinations) > 1),
        delivered={log.topic: log.count for log in logs},
        violations=found[: max(max_violations, 0)],
        counts=counts,
        missing_topics=without_log,
    )


def _sent_messages(
    sent: Mapping[str, SentMessage] | Iterable[SentMessage],
) -> Iterator[SentMessage]:
    """The sent records, each checked to be a :class:`SentMessage` under its own id."""
    keyed = sent.items() if isinstance(sent, Mapping) else ((None, m) for m in sent)
    for key, msg in keyed:
        if not isinstance(msg, SentMessage):
            raise TypeError(
                f"a sent entry is a {type(msg).__name__}, not a SentMessage "
                "(convert with atomickafka.verify.checker.adapters)"
            )
        if key is not None and key != msg.messageID:
            raise CheckInputError(f"sent message {msg.messageID!r} is filed under {key!r}")
        yield msg


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
    return check(
        load_sent(sent_path),
        load_deliveries(delivery_paths),
        complete=complete,
        max_violations=max_violations,
    )
