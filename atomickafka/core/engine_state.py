"""An engine's whole state as one value, :class:`EngineState`, and its snapshot
format: plain JSON data, and back (docs/DESIGN.md §6).

A snapshot holds everything :class:`~atomickafka.core.engine.Engine` keeps: its
settings, clock and log time, undelivered messages, held messages (§4.11), the bounded
memory of settled ids and refused versions (§4.13), the last sequence taken from each
peer (§4.12) and the counters. Restoring it and feeding the rest of the log gives the
same state and outputs as a run that never stopped (property-tested). Values are JSON
bytes (raw values are any bytes, §3.8), so they are stored as base64.

This module knows the state and its format, not the engine: the engine hands its state
over as an :class:`EngineState` (``Engine.state``) and is built from one
(``Engine.from_state``); nothing here reads or writes the engine's fields, and this
module does not import the engine's (``tests/unit/test_layout.py`` holds the package
free of import cycles). ``tests/unit/test_engine_state.py`` keeps a snapshot written
before the state became one value, and loads it.
"""

from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from atomickafka.core.engine_types import EngineStats, PendingMessage
from atomickafka.core.memory import DEFAULT_WINDOW_MS, LinkSequences, SettledMemory
from atomickafka.core.timebounds import HeldMessages
from atomickafka.core.wire import Message, MessageType
from atomickafka.errors import AtomicKafkaError

__all__ = ["SNAPSHOT_VERSION", "EngineState", "SnapshotError"]

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
    data = [
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
    if m.arrived is not None:  # (optional: a reader before it reads the first 18)
        data.append(m.arrived)
    return data


def _message_from(data: list[Any]) -> Message:
    (mid, kind, topic, value, sender, sent_from, ts, layer, digest, protocol) = data[:10]
    sent_at, seq, log_time, origin, key, headers, encoding = data[10:17]
    answers = data[17] if len(data) > 17 else None  # absent before the answers field
    arrived = data[18] if len(data) > 18 else None  # absent before the arrival time (§7.1)
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
        arrived=None if arrived is None else int(arrived),
    )


@dataclass(slots=True)
class EngineState:
    """Everything an engine keeps between batches: its settings (what it was built
    with), its clock and progress, and its containers. The engine's rules read and
    write this object (``Engine.state``) and nothing else that lasts beyond a step but
    the delivery queue, an index of ``pending`` rebuilt from it.

    An engine's own state, not a copy: one taken from an engine is read (and written
    out) before the engine steps again; one given to an engine becomes its own.
    """

    # settings
    topic: str
    node_id: str
    algorithm: str
    partition: int | None
    max_value_bytes: int
    max_record_bytes: int
    merger_id: str
    # the clock and progress
    clock: int
    now_ms: int
    #: With a control log (§7.1): the log time of the latest input-log record applied
    #: (when it reached the input log), 0 before the first; ``None``: one log. Settled
    #: ids are forgotten only once both logs' times have passed their window (§4.13), so
    #: a client copy that waited in the input log finds its id still remembered.
    input_ms: int | None
    #: Offset of the record being handled, and the index of its next output.
    origin: int | None
    next_index: int
    # the containers
    pending: dict[str, PendingMessage]
    #: Held messages (§4.11), soonest due first.
    held: HeldMessages
    memory: SettledMemory
    links: LinkSequences
    #: The topics that have a node, as this node last wrote them into its log
    #: (§4.9.5); ``None``: not known, every destination is taken on trust (an engine
    #: driven by hand). A node's batch layer starts with its own topic alone: what
    #: names another topic waits for the node's first members record.
    members: frozenset[str] | None
    #: The log time of the last members record read (§4.9.5): the evidence a refusal
    #: needs. Only such a record refuses, so a members record lost with an aborted
    #: transaction (a crash) delays a message but never refuses it.
    members_log_ms: int | None
    #: Another protocol than this engine's, named by one of its own members records
    #: (written by an earlier process of this node): ``None`` while all agree.
    logged_protocol: str | None
    #: Entries created by a peer's Ack before this node heard of the message, with
    #: when to forget them if it never does (a stray Ack; §4.13).
    orphans: deque[tuple[int, str]]
    #: Messages naming a destination not (yet) a member, each with its log time plus
    #: the grace: they wait for a members record that names it (§4.9.5).
    awaiting: list[tuple[int, Message]]
    stats: EngineStats = field(default_factory=EngineStats)

    @classmethod
    def fresh(
        cls,
        topic: str,
        node_id: str,
        algorithm: str,
        *,
        partition: int | None,
        max_value_bytes: int,
        max_record_bytes: int,
        merger_id: str,
        window_ms: int = DEFAULT_WINDOW_MS,
        members: frozenset[str] | None = None,
    ) -> EngineState:
        """The state of an engine that has read nothing yet, with these settings."""
        return cls(
            topic=topic,
            node_id=node_id,
            algorithm=algorithm,
            partition=partition,
            max_value_bytes=max_value_bytes,
            max_record_bytes=max_record_bytes,
            merger_id=merger_id,
            clock=0,
            now_ms=0,
            input_ms=None,
            origin=None,
            next_index=0,
            pending={},
            held=HeldMessages(),
            memory=SettledMemory(window_ms),
            links=LinkSequences(),
            members=members,
            members_log_ms=None,
            logged_protocol=None,
            orphans=deque(),
            awaiting=[],
        )

    @property
    def window_ms(self) -> int:
        """How long settled ids are remembered (§4.13), a setting kept by the memory."""
        return self.memory.window_ms

    def to_data(self) -> dict[str, Any]:
        """The state as plain JSON-serialisable data: the snapshot's format."""
        data: dict[str, Any] = {
            "version": SNAPSHOT_VERSION,
            "topic": self.topic,
            "node_id": self.node_id,
            "algorithm": self.algorithm,
            "partition": self.partition,
            "max_value_bytes": self.max_value_bytes,
            "max_record_bytes": self.max_record_bytes,
            "merger_id": self.merger_id,
            "clock": self.clock,
            "now_ms": self.now_ms,
            "origin": [self.origin, self.next_index],
            "pending": {mid: _pending_data(e) for mid, e in self.pending.items()},
            "held": [_message_data(m) for m in self.held.messages()],
            "memory": self.memory.to_data(),
            "links": self.links.to_data(),
            "members": None if self.members is None else sorted(self.members),
            "members_log_ms": self.members_log_ms,
            "logged_protocol": self.logged_protocol,
            "orphans": [list(o) for o in self.orphans],
            "awaiting": [[t, _message_data(m)] for t, m in self.awaiting],
            "stats": {name: getattr(self.stats, name) for name in EngineStats.__dataclass_fields__},
        }
        if self.input_ms is not None:  # a node with a control log (§7.1); optional
            data["input_ms"] = self.input_ms
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> EngineState:
        """The state a snapshot holds; :class:`SnapshotError` when it is not a readable
        snapshot of this version."""
        if not isinstance(data, dict) or data.get("version") != SNAPSHOT_VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise SnapshotError(f"unsupported engine snapshot version {version!r}")
        try:
            return _state_from(data)
        except SnapshotError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise SnapshotError(f"engine snapshot unreadable: {type(exc).__name__}: {exc}") from exc


def _pending_data(e: PendingMessage) -> list[Any]:
    return [
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


def _pending_from(e: list[Any]) -> PendingMessage:
    destinations, digest, value, sent_at, proposals, local, final, coord, acked = e[:9]
    key, headers, encoding = e[9:12]
    sent, heard = (e[12], e[13]) if len(e) > 13 else ({}, {})  # absent before both
    return PendingMessage(
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


def _state_from(data: dict[str, Any]) -> EngineState:
    members = data.get("members")
    members_log_ms = data.get("members_log_ms")  # absent in older snapshots: wait for the next
    logged = data.get("logged_protocol")  # absent in older snapshots
    input_ms = data.get("input_ms")  # absent in older snapshots: one log, or 0 (§7.1)
    held = HeldMessages()
    for item in data["held"]:
        message = _message_from(item)
        if message.timeStamp is None:
            raise SnapshotError("engine snapshot unreadable: a held message without a timestamp")
        held.hold(message, message.timeStamp)
    return EngineState(
        topic=str(data["topic"]),
        node_id=str(data["node_id"]),
        algorithm=str(data["algorithm"]),
        partition=data["partition"],
        max_value_bytes=int(data["max_value_bytes"]),
        max_record_bytes=int(data["max_record_bytes"]),
        merger_id=str(data["merger_id"]),
        clock=int(data["clock"]),
        now_ms=int(data["now_ms"]),
        input_ms=None if input_ms is None else int(input_ms),
        origin=data["origin"][0],
        next_index=int(data["origin"][1]),
        pending={mid: _pending_from(e) for mid, e in data["pending"].items()},
        held=held,
        memory=SettledMemory.from_data(data["memory"]),
        links=LinkSequences.from_data(data["links"]),
        members=None if members is None else frozenset(str(t) for t in members),
        members_log_ms=None if members_log_ms is None else int(members_log_ms),
        logged_protocol=None if logged is None else str(logged),
        orphans=deque((int(t), str(mid)) for t, mid in data.get("orphans", [])),
        awaiting=[(int(t), _message_from(m)) for t, m in data.get("awaiting", [])],
        stats=EngineStats(**data["stats"]),
    )
