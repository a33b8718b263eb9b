"""What the node's batch layer (:mod:`atomickafka.node.batch`) needs beside its rules:
who a record claims to come from, the settings a snapshot records and how a start
compares them (§6.6), a set-aside record's own headers, the input records kept for
verbatim dead letters, and a record's log time. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from atomickafka.core.compact import compact_writer
from atomickafka.core.engine import Engine
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import KafkaRecord
from atomickafka.core.signing import SIGNATURE_HEADER
from atomickafka.core.wire import MessageError
from atomickafka.node.batch_types import HOW_TO_RECONFIGURE, NodeSpec, SettingsChangedError
from atomickafka.node.snapshots import LoadedSnapshot

__all__ = [
    "DeferredRecords",
    "claimed_sender",
    "log_time",
    "original_headers",
    "settings_of",
    "take_settings",
]

_LOG_APPEND_TIME: Final = 2  # confluent-kafka's TIMESTAMP_LOG_APPEND_TIME


def log_time(record: KafkaRecord) -> int | None:
    """A record's log append time (ms), or its create time when that is all it has (a
    positive one); ``None`` when it has neither."""
    kind, stamp = record.timestamp()
    return stamp if kind == _LOG_APPEND_TIME or stamp > 0 else None


def claimed_sender(record: KafkaRecord) -> str:
    """Whom a record claims to come from (it may lie: its signature failed): the topic
    of the node that wrote a control record, else the writer's id as a client."""
    try:
        messages = decode_any(record.value(), record.key(), record.headers())
    except MessageError:
        return named_in_header(record.value())
    if not messages:
        return "an empty record"
    first = messages[0]
    if first.sentFromTopic is not None:
        return first.sentFromTopic
    return f"client {first.senderID}" if first.senderID else "a client"


def named_in_header(raw: bytes | None) -> str:
    """Who a record this node cannot decode says it comes from (a newer format's, say):
    the writer a compact record's prefix names, or the ``sentFromTopic`` or ``senderID``
    of its first line, if that is a JSON object."""
    writer = compact_writer(raw)
    if writer is not None:
        return writer
    try:
        head = orjson.loads((raw or b"").split(b"\n", 1)[0])
    except orjson.JSONDecodeError:
        return "an unreadable record"
    if isinstance(head, dict):
        for field_name in ("sentFromTopic", "senderID"):
            value = head.get(field_name)
            if isinstance(value, str) and value:
                return value
    return "an unreadable record"


def settings_of(spec: NodeSpec) -> dict[str, Any]:
    """What a snapshot records of the settings its state was built with (§6.6)."""
    return {"deliveryFormat": spec.delivery_format, "signed": spec.signer is not None}


def take_settings(spec: NodeSpec, snapshot: LoadedSnapshot, engine: Engine, committed: int) -> bool:
    """Compare the settings ``snapshot``'s state was built with to ``spec``'s (§6.6): the
    same, False; different and ``spec.reconfigure`` with the snapshot drained at the
    committed offset, take them up (True); otherwise :class:`SettingsChangedError`."""
    assert snapshot.state is not None
    recorded = snapshot.state.get("node") or {}  # absent in older snapshots: not compared
    now = settings_of(spec)
    changes = []
    if engine.algorithm is not spec.algorithm:
        changes.append(f"protocol {engine.algorithm.value} -> {spec.algorithm.value}")
    for name, label in (("deliveryFormat", "delivery format"), ("signed", "signing")):
        if name in recorded and recorded[name] != now[name]:
            old, new = recorded[name], now[name]
            if name == "signed":
                old, new = ("on" if old else "off"), ("on" if new else "off")
            changes.append(f"{label} {old} -> {new}")
    if not changes:
        return False
    what = f"node {spec.role}: its state (snapshot {snapshot.seq}) differs from its settings: "
    what += ", ".join(changes)
    if not spec.reconfigure:
        raise SettingsChangedError(f"{what}; {HOW_TO_RECONFIGURE}")
    start = snapshot.offsets.get(spec.input_partition, 0)
    if start != committed or engine.held_count or engine.pending_count:
        raise SettingsChangedError(
            f"{what}; --reconfigure needs the node's newest snapshot at its committed "
            f"offset with nothing in flight (snapshot at {start}, committed {committed}, "
            f"{engine.pending_count} pending, {engine.held_count} held): stop the node "
            "cleanly once `atomickafka status` shows nothing pending, then start it again"
        )
    engine.reconfigure(spec.algorithm)
    return True


def original_headers(source: KafkaRecord) -> list[tuple[str, bytes]]:
    """The set-aside record's own headers, after the dead letter's (so that a reader
    taking a header's first value gets the dead letter's reason, never a forged one):
    a raw record's ``atomickafka-id``, ``-to``, ``-sender`` and the user's headers say
    which message was refused. Its signature is left out (it covered the input log,
    and the dead letter carries its own)."""
    headers = source.headers()
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [
        (name, value.encode() if isinstance(value, str) else value or b"")
        for name, value in pairs
        if name != SIGNATURE_HEADER
    ]


class DeferredRecords:
    """Input records of messages the engine kept for later, by offset, within a byte
    budget (oldest dropped first): only for verbatim dead letters, never for state."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._records: dict[int, KafkaRecord] = {}  # insertion order = oldest first
        self._bytes = 0

    def keep(self, record: KafkaRecord, key: int | None = None) -> None:
        """Keep ``record`` under ``key`` (the origin of its messages; by default its
        offset)."""
        offset = record.offset() if key is None else key
        if offset is None or offset in self._records:
            return
        self._records[offset] = record
        self._bytes += len(record.value() or b"")
        while self._bytes > self._budget and self._records:
            oldest = next(iter(self._records))
            self._bytes -= len(self._records.pop(oldest).value() or b"")

    def pop(self, offset: int | None) -> KafkaRecord | None:
        record = self._records.pop(offset, None) if offset is not None else None
        if record is not None:
            self._bytes -= len(record.value() or b"")
        return record
