"""What the live audit reads and what it reports (``docs/DESIGN.md`` §10).

The audit reads one thing, a delivery record, and only through
:mod:`atomickafka.core.reader` (:func:`audited_delivery`): the wire format may change,
the reader is the one place that knows it. What it keeps of a record is an
:class:`AuditedDelivery`. What it reports is a :class:`Violation` of one
:class:`Kind`, one JSON object each (:meth:`Violation.to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from atomickafka.core.reader import KafkaRecord, Unaccepted, delivery_of, delivery_order_key
from atomickafka.core.signing import Signer

__all__ = ["AuditedDelivery", "Key", "Kind", "Violation", "audit_verdict", "audited_delivery"]

#: A delivery's place in the final order: ``(timeStamp, layer, messageID)``.
Key = tuple[int, int, str]


class Kind(StrEnum):
    """What a violation is; the value is its name in metrics, records and logs."""

    #: Rule 1: a topic's record is not above the topic's previous one in the final order.
    ORDER = "order"
    #: Rule 2: a message has another key, digest or destination list here than where it
    #: was first read.
    MISMATCH = "mismatch"
    #: Rule 2: a topic delivered a message whose destination list does not name it.
    NOT_A_DESTINATION = "not-a-destination"
    #: Rule 3: a message delivered somewhere was not delivered at one of its
    #: destinations within the bound.
    MISSING = "missing"
    #: Rule 4: a topic delivered a message a second time, not as an exact repeat.
    DUPLICATE = "duplicate"
    #: Rule 5 (exactly-once nodes): a ``read_committed`` read of a topic met a delivery
    #: a second time, identical: a record of an aborted transaction was read (Jepsen's
    #: *aborted read*), or the delivery was committed twice.
    ABORTED_READ = "aborted-read"
    #: Rule 6: one offset of a delivery topic read twice held two different records
    #: (the log was cut and written again: what was read at that offset is lost).
    OFFSET_TWO_VALUES = "offset-two-values"
    #: Rule 6: a delivery read at an offset was not there when the offsets around it
    #: were read again (read, and then gone: a lost write).
    GONE_AFTER_READ = "gone-after-read"


@dataclass(frozen=True, slots=True)
class AuditedDelivery:
    """One delivery record as the audit sees it: where it was read, when it was
    written (``time_ms``, the record's Kafka timestamp: the audit's event time) and
    the fields the rules compare."""

    topic: str
    partition: int
    offset: int
    time_ms: int
    message_id: str
    timestamp: int
    layer: int
    digest: str
    destinations: tuple[str, ...]

    @property
    def key(self) -> Key:
        """The record's place in the final order."""
        return (self.timestamp, self.layer, self.message_id)


def audited_delivery(record: KafkaRecord, signer: Signer | None = None) -> AuditedDelivery | None:
    """The delivery ``record`` holds, as the audit keeps it; ``None`` when it holds no
    delivery its own topic's node or merger wrote (:func:`audit_verdict` says why)."""
    found = audit_verdict(record, signer)
    return None if isinstance(found, Unaccepted) else found


def audit_verdict(
    record: KafkaRecord, signer: Signer | None = None, writers: frozenset[str] | None = None
) -> AuditedDelivery | Unaccepted:
    """The delivery ``record`` holds, as the audit keeps it; else why it holds none its
    own topic's node or merger (or one of ``writers``) wrote (core/reader's rule,
    :func:`~atomickafka.core.reader.delivery_of`: with ``signer``, only validly signed
    deliveries count)."""
    topic = record.topic() or ""
    message = delivery_of(record, topic, writers=writers, signer=signer, addressed=False)
    if isinstance(message, Unaccepted):
        return message
    timestamp, layer, message_id = delivery_order_key(message)
    _, time_ms = record.timestamp()
    return AuditedDelivery(
        topic=topic,
        partition=record.partition() or 0,
        offset=record.offset() or 0,
        time_ms=max(time_ms, 0),
        message_id=message_id,
        timestamp=timestamp,
        layer=layer,
        digest=message.digest or "",
        destinations=message.topic,
    )


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule.

    ``topic`` is where it shows: the topic whose record broke rule 1, 2 or 4 (with the
    record's ``partition``, ``offset``, Kafka time and ``key``), or, for ``missing``,
    the destination that has not delivered the message. ``reference`` says what the
    record was compared with: the topic's previous key (``order``), the first delivery
    read of the message (``mismatch``, ``duplicate``), its destinations
    (``not-a-destination``), where it was delivered (``missing``).
    """

    kind: Kind
    topic: str
    message_id: str
    text: str
    partition: int | None = None
    offset: int | None = None
    time_ms: int | None = None
    key: Key | None = None
    reference: dict[str, Any] | None = None

    @property
    def identity(self) -> tuple[str, str, str, int | None]:
        """What two audits of the same input agree on: kind, topic, message, offset."""
        return (self.kind.value, self.topic, self.message_id, self.offset)

    def to_json(self) -> dict[str, Any]:
        """The violation as one JSON object (the audit topic's records, the log's fields)."""
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "topic": self.topic,
            "messageID": self.message_id,
            "text": self.text,
        }
        if self.offset is not None:
            out["partition"] = self.partition
            out["offset"] = self.offset
            out["recordTimeMs"] = self.time_ms
        if self.key is not None:
            out["key"] = list(self.key)
        if self.reference is not None:
            out["reference"] = self.reference
        return out

    def __str__(self) -> str:
        return f"[{self.kind.value}] {self.text}"
