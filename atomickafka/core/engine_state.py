"""An engine's whole state as plain JSON data, and back (docs/DESIGN.md §6).

A snapshot holds everything :class:`~atomickafka.core.engine.Engine` keeps: its
settings, clock and log time, undelivered messages, held messages (§4.11), the bounded
memory of settled ids and refused versions (§4.13), the last sequence taken from each
peer (§4.12) and the counters. Restoring it and feeding the rest of the log gives the
same state and outputs as a run that never stopped (property-tested). Values are JSON
bytes (raw values are any bytes, §3.8), so they are stored as base64.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, Final

from atomickafka.core.engine_types import EngineStats, PendingMessage
from atomickafka.core.memory import LinkSequences, SettledMemory
from atomickafka.core.wire import Message, MessageType
from atomickafka.errors import AtomicKafkaError

if TYPE_CHECKING:
    from atomickafka.core.engine import Engine

__all__ = [
    "SNAPSHOT_VERSION",
    "SnapshotError",
    "engine_settings",
    "engine_to_data",
    "load_engine_state",
]

#: Version 3: log time, held messages, bounded memory, link sequences.
SNAPSHOT_VERSION: Final = 3


class SnapshotError(AtomicKafkaError, ValueError):
    """A snapshot that cannot be read: another version, or missing or mistyped data."""


def _text(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _headers_data(headers: tuple[tuple[str, bytes], ...]) -> list[list[str]]:
    return [[n, base64.b64encode(v).decode()] for n, v in headers]


def _headers_from(data: list[list[str]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((str(n), base64.b64decode(v)) for n, v in data)


def _message_data(m: Message) -> list[Any]:
    return [
        m.messageID,
        m.messageType.value,
        list(m.topic),
        _text(m.value),
        m.senderID,
        m.sentFromTopic,
        m.timeStamp,
        m.partitionID,
        m.digest,
        m.protocol,
        m.sentAt,
        None if m.seq is None else list(m.seq),
        m.logTime,
        m.origin,
        _text(m.key),
        _headers_data(m.headers),
        m.encoding,
        None if m.answers is None else list(m.answers),
    ]


def _message_from(data: list[Any]) -> Message:
    (mid, kind, topic, value, sender, sent_from, ts, layer, digest, protocol) = data[:10]
    sent_at, seq, log_time, origin, key, headers, encoding = data[10:17]
    answers = data[17] if len(data) > 17 else None  # absent before the answers field
    return Message(
        messageID=mid,
        messageType=MessageType(kind),
        topic=tuple(topic),
        value=_bytes(value),
        senderID=sender,
        sentFromTopic=sent_from,
        timeStamp=ts,
        partitionID=layer,
        digest=digest,
        protocol=protocol,
        sentAt=sent_at,
        seq=None if seq is None else (int(seq[0]), int(seq[1])),
        logTime=log_time,
        origin=origin,
        key=_bytes(key),
        headers=_headers_from(headers),
        encoding=encoding,
        answers=None if answers is None else (int(answers[0]), int(answers[1])),
    )


def engine_to_data(engine: Engine) -> dict[str, Any]:
    """The whole state of ``engine`` as plain JSON-serialisable data."""
    return {
        "version": SNAPSHOT_VERSION,
        "topic": engine.topic,
        "node_id": engine.node_id,
        "algorithm": engine.algorithm.value,
        "partition": engine.partition,
        "max_value_bytes": engine.max_value_bytes,
        "max_record_bytes": engine.max_record_bytes,
        "merger_id": engine.merger_id,
        "clock": engine.clock,
        "now_ms": engine.now_ms,
        "origin": [engine._origin, engine._next_index],
        "pending": {
            mid: [
                list(e.destinations),
                e.digest,
                _text(e.value),
                e.sent_at,
                dict(e.proposals),
                e.local,
                e.final,
                e.coordinator,
                sorted(e.acked_to),
                _text(e.key),
                _headers_data(e.headers),
                e.encoding,
                {t: list(seq) for t, seq in e.sent.items()},
                {t: list(seq) for t, seq in e.heard.items()},
            ]
            for mid, e in engine._pending.items()
        },
        "held": [_message_data(m) for m in engine._held.messages()],
        "memory": engine._memory.to_data(),
        "links": engine._links.to_data(),
        "members": None if engine.members is None else sorted(engine.members),
        "members_log_ms": engine.members_log_ms,
        "logged_protocol": engine.logged_protocol,
        "orphans": [list(o) for o in engine._orphans],
        "awaiting": [[t, _message_data(m)] for t, m in engine._awaiting],
        "stats": {name: getattr(engine.stats, name) for name in EngineStats.__dataclass_fields__},
    }


def engine_settings(data: dict[str, Any]) -> dict[str, Any]:
    """The constructor settings a snapshot names; :class:`SnapshotError` when it is not
    a readable snapshot of this version."""
    if not isinstance(data, dict) or data.get("version") != SNAPSHOT_VERSION:
        version = data.get("version") if isinstance(data, dict) else None
        raise SnapshotError(f"unsupported engine snapshot version {version!r}")
    try:
        return {
            "topic": str(data["topic"]),
            "node_id": str(data["node_id"]),
            "algorithm": str(data["algorithm"]),
            "partition": data["partition"],
            "max_value_bytes": int(data["max_value_bytes"]),
            "max_record_bytes": int(data["max_record_bytes"]),
            "window_ms": int(data["memory"]["window_ms"]),
            "merger_id": str(data["merger_id"]),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"engine snapshot unreadable: {type(exc).__name__}: {exc}") from exc


def load_engine_state(engine: Engine, data: dict[str, Any]) -> None:
    """Put a snapshot's state into ``engine`` (fresh, built from :func:`engine_settings`);
    :class:`SnapshotError` when the data cannot be read."""
    try:
        _load(engine, data)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise SnapshotError(f"engine snapshot unreadable: {type(exc).__name__}: {exc}") from exc


def _load(engine: Engine, data: dict[str, Any]) -> None:
    engine.clock = int(data["clock"])
    engine.now_ms = int(data["now_ms"])
    engine._origin, engine._next_index = data["origin"][0], int(data["origin"][1])
    for mid, e in data["pending"].items():
        destinations, digest, value, sent_at, proposals, local, final, coord, acked = e[:9]
        key, headers, encoding = e[9:12]
        sent, heard = (e[12], e[13]) if len(e) > 13 else ({}, {})  # absent before both
        entry = PendingMessage(
            destinations=tuple(destinations),
            digest=digest,
            value=_bytes(value),
            sent_at=sent_at,
            proposals={str(k): int(v) for k, v in proposals.items()},
            local=local,
            final=final,
            coordinator=bool(coord),
            acked_to=set(acked),
            key=_bytes(key),
            headers=_headers_from(headers),
            encoding=encoding,
            sent={str(t): (int(q[0]), int(q[1])) for t, q in sent.items()},
            heard={str(t): (int(q[0]), int(q[1])) for t, q in heard.items()},
        )
        engine._pending[mid] = entry
        if entry.key_ts is not None:
            engine._queue.add((entry.key_ts, mid))
    for item in data["held"]:
        message = _message_from(item)
        assert message.timeStamp is not None
        engine._held.hold(message, message.timeStamp)
    engine._memory = SettledMemory.from_data(data["memory"])
    engine._links = LinkSequences.from_data(data["links"])
    engine._orphans.extend((int(t), str(mid)) for t, mid in data.get("orphans", []))
    engine._awaiting = [(int(t), _message_from(m)) for t, m in data.get("awaiting", [])]
    members = data.get("members")
    engine.members = None if members is None else frozenset(str(t) for t in members)
    members_log_ms = data.get("members_log_ms")  # absent in older snapshots: wait for the next
    engine.members_log_ms = None if members_log_ms is None else int(members_log_ms)
    logged = data.get("logged_protocol")  # absent in older snapshots
    engine.logged_protocol = None if logged is None else str(logged)
    engine.stats = EngineStats(**data["stats"])
    engine._check_due = True
