"""What the metrics read off records, cheaply and without decoding them: an input
record's type, a delivery's ``sentAt``, a dead letter's reason as a short label (from
the :class:`~atomickafka.core.reasons.Reason` the batch layer set on it).

These run for every record a node reads or writes, so on the hot path none of them
parses JSON: they look at headers and at a bounded stretch of the record's bytes. Every
label they return is from a fixed set, so a metric's label values stay few whatever the
input holds.

:func:`record_type` is a shortcut of :func:`atomickafka.core.reader.peek`, the one
reader of the wire format: when the first ``messageType`` field of the record's first
bytes names a known type, that is the answer (in every record AtomicKafka writes, the
first such field is the envelope's: it comes before the value); otherwise the reader
decides. ``tests/unit/test_metrics_contract.py`` holds the two to the same answer for a
record of every :class:`~atomickafka.core.wire.MessageType`, in every form it is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from atomickafka.core.compact import compact_kind, is_compact
from atomickafka.core.raw import H_SENT
from atomickafka.core.reader import TYPE_HEADER, PlainRecord, peek
from atomickafka.core.reasons import LABELS, Reason
from atomickafka.core.wire import MessageType

__all__ = [
    "REASON_LABELS",
    "SENT_HEADER",
    "UNKNOWN",
    "dead_letter_reason",
    "record_type",
    "sent_at_ms",
]

#: The label of a record whose type cannot be seen.
UNKNOWN: Final = "unknown"
#: The label of a dead letter that carries no reason.
OTHER: Final = "other"
#: Header carrying ``sentAt`` (ms) on records whose value is the user's bytes (the raw
#: record form, docs/DESIGN.md §3.8).
SENT_HEADER: Final = H_SENT
#: How far into a record the ``messageType`` field is looked for: past the longest
#: ``messageID`` and ``senderID`` a ClientMessage puts before it.
_SNIFF_BYTES: Final = 2048
_TYPES: Final = frozenset(t.value for t in MessageType)
_TYPE_FIELD: Final = re.compile(rb'"messageType"\s*:\s*"(\w{1,40})"')
#: ``sentAt`` as the JSON envelope writes it: after the envelope's ``digest`` (which
#: every Delivery record has, after the value), before the sender's key, headers and
#: encoding when the message has them (docs/DESIGN.md §11.2).
_SENT_AT_FIELD: Final = b',"sentAt":'
_DIGEST_FIELD: Final = b',"digest":"'
_CLOSING_BRACE: Final = ord("}")
_DIGITS: Final = re.compile(rb"(\d{1,16})[,}]")

Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]

#: Every label :func:`dead_letter_reason` can give, the labels of every
#: :class:`~atomickafka.core.reasons.Reason` and ``other`` (so that each series can be
#: shown from the start, at 0).
REASON_LABELS: Final = (*(LABELS[reason] for reason in Reason), OTHER)


def _header(headers: Headers | None, name: str) -> bytes | None:
    if not headers:
        return None
    pairs: Iterable[tuple[str, str | bytes | None]] = (
        headers.items() if isinstance(headers, Mapping) else headers
    )
    for key, value in pairs:
        if key == name:
            return value.encode() if isinstance(value, str) else value
    return None


def record_type(value: bytes | None, headers: Headers | None) -> str:
    """The ``messageType`` of a record (``Bundle`` for a bundle) from its type header or
    the first ``messageType`` field of its first bytes, else as
    :func:`~atomickafka.core.reader.peek` reads it; :data:`UNKNOWN` when that is not a
    known type."""
    declared = _header(headers, TYPE_HEADER)
    if declared is not None:
        text = declared.decode(errors="replace")
        return text if text in _TYPES else UNKNOWN
    if not value:
        return UNKNOWN
    if is_compact(value):  # a compact bundle or tick (§3.9): its prefix says which
        return compact_kind(value) or UNKNOWN
    found = _TYPE_FIELD.search(value, 0, _SNIFF_BYTES)
    if found is not None:
        text = found.group(1).decode()
        if text in _TYPES:
            return text
    return _read_type(value, headers)


def _read_type(value: bytes, headers: Headers | None) -> str:
    """The slow path: the reader's verdict (ids long or escaped enough to push the
    field past the first bytes, another writer's escapes, records that are not ours)."""
    pairs = list(headers.items()) if isinstance(headers, Mapping) else headers
    kind = peek(PlainRecord(value, headers=pairs or None)).kind
    return kind if kind in _TYPES else UNKNOWN


def sent_at_ms(value: bytes | None, headers: Headers | None) -> int | None:
    """When the client sent a delivered message (ms since the epoch), from the
    delivery record's ``sentAt`` header or the envelope's ``sentAt`` field; ``None``
    when the record does not say.

    The envelope's field is looked for after its last ``"digest"`` field only: that
    one is the envelope's (it follows the value, and nothing after it is the user's
    JSON: the key and headers are base64, header names JSON-escaped), so a ``sentAt``
    inside the value is never taken. Only the record's tail is scanned."""
    stated = _header(headers, SENT_HEADER)
    if stated is not None:
        return int(stated) if stated.isdigit() else None
    if not value or value[-1] != _CLOSING_BRACE:
        return None
    digest = value.rfind(_DIGEST_FIELD)
    if digest < 0:
        return None
    start = value.find(_SENT_AT_FIELD, digest)
    if start < 0:
        return None
    found = _DIGITS.match(value, start + len(_SENT_AT_FIELD))
    return None if found is None else int(found.group(1))


def dead_letter_reason(reason: Reason | None) -> str:
    """A dead letter's reason as a short label: its code's (:data:`~atomickafka.core.
    reasons.LABELS`), or ``other`` for a letter without one. Never read off its prose."""
    return OTHER if reason is None else LABELS[reason]
