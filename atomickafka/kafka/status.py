"""The status topic: what nodes and mergers say about themselves, and who reads it.

Every node and merger publishes a :class:`Status` to the compacted topic
``atomickafka-status`` about once a second, keyed by :func:`~atomickafka.kafka.topics.
node_key` (``T``, ``T/p`` for layer ``p``, ``T/merger``). It is the nodes' heartbeat:
clients refuse destinations whose node has not published within :data:`LIVE_WINDOW_S`
(§5.3), learn from it which protocol a topic's node runs, and ``atomickafka status``
prints it.

Reading it costs the same whatever the cluster's age: a client (and ``wait_for_nodes``)
reads only the records of the last :data:`STATUS_READ_WINDOW_S` seconds (the offsets
Kafka finds for that time, per partition), since an older status is not live anyway;
of each key's records in a batch only the newest is parsed. The topic itself stays
small with :data:`STATUS_TOPIC_CONFIGS` (short segments, eager compaction), which
``atomickafka status`` relies on, as it reads every key ever published.

A tombstone (a record without a value) under a key forgets that node for good (for a
topic that is retired). A node that stops cleanly publishes a last status in state
:attr:`NodeState.STOPPED` (:meth:`Status.stopped`): it is no longer live at once, and
``status`` forgets it instead of calling it stale.

The record's fields are camelCase since format 3 (:data:`STATUS_FORMAT_VERSION`);
records of format 2 (snake_case) still parse, and a record carries ``node_id`` too, the
one field readers of format 2 require (:meth:`Status.to_record`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Final

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from atomickafka.core.engine import Algorithm
from atomickafka.core.reader import KafkaRecord
from atomickafka.errors import TimedOutError
from atomickafka.jsonnames import camel_keys, json_name
from atomickafka.kafka.admin import TopicSpec
from atomickafka.kafka.connection import Where
from atomickafka.kafka.consumer import (
    assign_from,
    consume_batch,
    make_consumer,
    retry_transient,
    usable,
    watermarks,
)
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.topics import STATUS_TOPIC, Layout

__all__ = [
    "FAILOVER_GRACE_S",
    "LIVE_WINDOW_S",
    "STATUS_FORMAT_VERSION",
    "STATUS_READ_WINDOW_S",
    "STATUS_TOPIC_CONFIGS",
    "LayerState",
    "NodeState",
    "Role",
    "Status",
    "StatusWatch",
    "WaitingHead",
    "newest_statuses",
    "odd_signers",
    "parse_status",
    "publish_status",
    "read_statuses",
    "status_topic_spec",
    "wait_for_nodes",
]

log = logging.getLogger(__name__)

#: The status record's format: 3 since the fields are camelCase (2: snake_case).
STATUS_FORMAT_VERSION: Final = 3
#: A node whose last status is older than this is not live (statuses come each second).
LIVE_WINDOW_S: Final = 15.0
#: A running node's status older than :data:`LIVE_WINDOW_S` by at most this is *late*,
#: not gone: Kafka may be failing over (a status partition without a leader, a node
#: whose writes wait out a coordinator's move), and a client waits for a fresh one
#: (bounded) before it refuses the node's topic. Past it, the node is taken for gone.
FAILOVER_GRACE_S: Final = 30.0
#: How far back a :class:`StatusWatch` reads by default: the live window, the failover
#: grace, and a margin for the clocks of the publishers (Kafka timestamps are the
#: producer's clock).
STATUS_READ_WINDOW_S: Final = LIVE_WINDOW_S + FAILOVER_GRACE_S + 15.0

#: The status topic's configs. Compaction only cleans closed segments, so segments
#: roll every minute (``segment.ms``); a dirty share of 1 % suffices to clean, and no
#: record waits more than 5 minutes to be compacted (``max.compaction.lag.ms``), so the
#: topic holds about one record per key plus a few minutes of heartbeats however long
#: the cluster runs. Tombstones are dropped 5 minutes after compaction.
STATUS_TOPIC_CONFIGS: Final[Mapping[str, str]] = {
    "cleanup.policy": "compact",
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.01",
    "max.compaction.lag.ms": "300000",
    "delete.retention.ms": "300000",
}


def status_topic_spec() -> TopicSpec:
    """The status topic as :func:`~atomickafka.kafka.admin.ensure_topics` should create
    it (and enforce on an existing one): one partition, :data:`STATUS_TOPIC_CONFIGS`."""
    return TopicSpec(1, STATUS_TOPIC_CONFIGS)


class Role(StrEnum):
    """Who publishes a status: a topic's (or a layer's) node, or a topic's merger."""

    NODE = "node"
    MERGER = "merger"


class NodeState(StrEnum):
    """What a node says of itself: running, or stopped cleanly (its last status)."""

    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class WaitingHead:
    """A message at the head of a queue (or near it) and what it waits for.

    ``waiting_for`` names the destinations whose proposal has not arrived (a node), or
    the layers whose watermark is still below the message (a merger, ``"layer 1"``);
    empty when the message only waits for its decision.
    """

    message_id: str
    timestamp: int
    decided: bool
    waiting_for: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the wire's names for the message and its timestamp)."""
        return {
            "messageID": self.message_id,
            "timeStamp": self.timestamp,
            "decided": self.decided,
            "waitingFor": list(self.waiting_for),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WaitingHead:
        """Inverse of :meth:`to_dict`, also of the snake_case form of format 2; other
        keys (older mergers wrote some) are ignored."""
        data = camel_keys(data)
        waiting_for = data.get("waitingFor") or ()
        return cls(
            str(data["messageID"]),
            int(data.get("timeStamp") or 0),
            bool(data.get("decided", False)),
            tuple(map(str, waiting_for)) if waiting_for else (),
        )


@dataclass(frozen=True, slots=True)
class LayerState:
    """One partition layer of a topic, as the topic's merger sees it (§8)."""

    layer: int
    #: The layer delivers nothing more at or below this timestamp.
    watermark: int
    #: The merged stream's head waits for this layer's watermark to pass it.
    holds_head: bool


#: Status fields whose JSON form is not the attribute itself.
_ENCODED: Final = frozenset(
    {"role", "algorithm", "layout", "waiting", "layers", "state", "signing_keys"}
)


@dataclass(frozen=True, slots=True)
class Status:
    """One node's (or merger's) published status: the value of its status record.

    Reading a status changes nothing; rates are over the interval that ended when the
    publisher took them. In JSON (:meth:`to_dict`) fields have their camelCase names
    (:func:`~atomickafka.jsonnames.json_name`: ``nodeID``, ``oldestPendingAgeSeconds``),
    enums are their strings, ``waiting`` is a list of objects and ``layers`` is
    ``layerWatermarks`` and ``blockedBy``; records of every version parse
    (:meth:`from_dict`), the snake_case ones of format 2 included.
    """

    key: str
    topic: str
    role: Role
    node_id: str
    algorithm: Algorithm
    layout: Layout
    time: float  # wall-clock seconds when it was taken: the heartbeat
    pid: int = 0
    layer: int | None = None  # a layer's node: which layer
    partitions: int = 1
    format_version: int = STATUS_FORMAT_VERSION
    clock: int = 0
    #: A layer's node: its layer's watermark; a merger: the lowest of its layers'.
    watermark: int | None = None
    pending: int = 0
    oldest_pending_id: str | None = None
    oldest_pending_age_s: float | None = None
    #: The head of the queue and the messages behind it, with what each waits for.
    waiting: tuple[WaitingHead, ...] = ()
    records_in: int = 0
    records_out: int = 0
    deliveries: int = 0
    dead_letters: int = 0
    rejected: int = 0
    #: Records taken as repeats of what the node knows already (§4.5): ignored, counted.
    duplicates: int = 0
    protocol_mismatches: int = 0
    aborted: int = 0
    records_in_per_s: float = 0.0
    records_out_per_s: float = 0.0
    deliveries_per_s: float = 0.0
    replaying: bool = False
    #: A merger: each layer's watermark and whether the head waits for it.
    layers: tuple[LayerState, ...] = ()
    #: ``stopped`` in the last status of a node that stopped cleanly.
    state: NodeState = NodeState.RUNNING
    #: With signing on (``--secret-file``, §4.14): the ids of the secrets it accepts
    #: (:meth:`~atomickafka.core.signing.Signer.key_ids`, the signing one first); empty:
    #: it checks no signature. A client refuses to send it what it would set aside.
    signing_keys: tuple[str, ...] = ()
    #: A node: records of its input log it has not read yet, how long the oldest of them
    #: has waited (by the log's time), and how long reading them would take at the rate
    #: it worked through its input over the last 2 s or more: what a client holds back
    #: for (:attr:`behind_s`, §5.3).
    input_lag: int = 0
    input_lag_s: float = 0.0
    input_drain_s: float = 0.0
    #: A node that reads its peers' proposals from a control log of its own
    #: (``--control-log``, §7); ``input_buffered``: records it has read of its input log
    #: and not yet applied (they apply where its markers come back).
    control_log: bool = False
    input_buffered: int = 0
    #: A node: what its ``direct`` Notifies carry (``--notify-values``, §4.16): ``carrier``
    #: or ``every``; ``None``: a release before the setting, which refuses lean Notifies.
    notify_values: str | None = None
    #: A node with signing on: records it set aside for their signature, by whom they
    #: claim to come from (a member's topic: that member signs with a secret this node
    #: does not hold, or this node with one the others do not).
    bad_signatures: Mapping[str, int] = field(default_factory=dict)
    #: A node: records it set aside as of a newer format than it reads, by whom they
    #: come from (a member of a newer release that writes what this one cannot read).
    newer_formats: Mapping[str, int] = field(default_factory=dict)

    @property
    def head(self) -> WaitingHead | None:
        """The message at the head of the queue, if any."""
        return self.waiting[0] if self.waiting else None

    @property
    def blocked_by(self) -> tuple[int, ...]:
        """A merger: the layers whose watermark the head waits for."""
        return tuple(state.layer for state in self.layers if state.holds_head)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON, under the fields' JSON names."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name not in _ENCODED:
                out[json_name(f.name)] = getattr(self, f.name)
            elif f.name == "waiting":
                out["waiting"] = [w.to_dict() for w in self.waiting]
            elif f.name == "signing_keys":
                out["signingKeys"] = list(self.signing_keys)
            elif f.name != "layers":
                out[f.name] = getattr(self, f.name).value  # role, algorithm, layout, state
        out["layerWatermarks"] = [state.watermark for state in self.layers]
        out["blockedBy"] = list(self.blocked_by)
        return out

    def to_record(self) -> dict[str, Any]:
        """The value of its status record: :meth:`to_dict` and, for readers of format 2
        (clients of earlier versions during a rolling upgrade), ``node_id``, which they
        require; the other fields they default."""
        return {**self.to_dict(), "node_id": self.node_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        """Inverse of :meth:`to_dict`, also of the snake_case records of format 2;
        unknown fields are ignored, missing ones defaulted. Raises ``KeyError``,
        ``ValueError`` or ``TypeError`` on a record that is not a status."""
        data = camel_keys(data)
        plain = {name: data[json] for name, json in _PLAIN_FIELDS.items() if json in data}
        for name, value in plain.items():
            wanted = _PLAIN_TYPES.get(name)
            if wanted is not None and not _of_type(value, *wanted):
                raise TypeError(f"status field {_PLAIN_FIELDS[name]}: {value!r}")
        waiting = data.get("waiting")
        marks = data.get("layerWatermarks")
        layers: tuple[LayerState, ...] = ()
        if marks:
            blocked = set(data.get("blockedBy") or ())
            layers = tuple(
                LayerState(layer, int(mark), layer in blocked) for layer, mark in enumerate(marks)
            )
        return cls(
            **plain,
            role=_ROLES[data["role"]],
            algorithm=_ALGORITHMS[data["algorithm"]],
            layout=_LAYOUTS[data["layout"]],
            waiting=tuple(map(WaitingHead.from_dict, waiting)) if waiting else (),
            layers=layers,
            state=_STATES[data.get("state") or "running"],
            signing_keys=tuple(map(str, data.get("signingKeys") or ())),
        )

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the status was taken."""
        return (time.time() if now is None else now) - self.time

    @property
    def behind_s(self) -> float:
        """How far a node is behind its input, in seconds: the longer of how long its
        oldest unread record has waited and how long the unread records would take (the
        second sees a flood at once, the first only once it has waited)."""
        return max(self.input_lag_s, self.input_drain_s)

    def live(self, now: float | None = None) -> bool:
        """Running, and published recently enough to count as running."""
        return self.state is NodeState.RUNNING and self.age_s(now) <= LIVE_WINDOW_S

    def late(self, now: float | None = None) -> bool:
        """Running, not live, but late by at most :data:`FAILOVER_GRACE_S`: the node may
        be alive behind a Kafka failover."""
        age = self.age_s(now)
        return self.state is NodeState.RUNNING and LIVE_WINDOW_S < age <= (
            LIVE_WINDOW_S + FAILOVER_GRACE_S
        )

    @property
    def is_stopped(self) -> bool:
        """True for the last status of a node (or merger) that stopped cleanly."""
        return self.state is NodeState.STOPPED

    def stopped(self, now: float | None = None) -> Status:
        """This status as the last one of a clean stop: state ``stopped``, taken at
        ``now`` (default: the current time). Publish it (:func:`publish_status`) and
        flush before exiting: ``status`` then forgets the node, and clients refuse its
        topic at once rather than after :data:`LIVE_WINDOW_S`."""
        when = time.time() if now is None else now
        return replace(self, state=NodeState.STOPPED, time=when)


#: The fields stored as they are, with their JSON names.
_PLAIN_FIELDS: Final = {f.name: json_name(f.name) for f in fields(Status) if f.name not in _ENCODED}
#: The plain fields' JSON types, from their annotations: (types, whether null is allowed).
#: A record whose fields have others is no status (a client computing with a string
#: where a node's lag should be would fail its send: one forged record must not).
_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
}
_PLAIN_TYPES: Final = {
    f.name: (_JSON_TYPES[str(f.type).removesuffix(" | None")], str(f.type).endswith("| None"))
    for f in fields(Status)
    if f.name in _PLAIN_FIELDS and str(f.type).removesuffix(" | None") in _JSON_TYPES
}


def _of_type(value: object, types: tuple[type, ...], nullable: bool) -> bool:
    """Whether ``value`` is one of ``types`` (a bool is not a number), or ``None`` where
    that is allowed."""
    if value is None:
        return nullable
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


# Enum members by value, looked up without the enum machinery (a KeyError for others).
_ROLES: Final = {r.value: r for r in Role}
_ALGORITHMS: Final = {a.value: a for a in Algorithm}
_LAYOUTS: Final = {x.value: x for x in Layout}
_STATES: Final = {x.value: x for x in NodeState}


def odd_signers(statuses: Iterable[Status]) -> dict[str, tuple[str, str]]:
    """Nodes that sign with another secret than most of the others (issue 26): by key,
    the key id it signs with and the one most sign with. Only live nodes with signing on
    count; with a tie, nobody is singled out."""
    signing = [s for s in statuses if s.role is Role.NODE and s.signing_keys and s.live()]
    counts: dict[str, int] = {}
    for status in signing:
        counts[status.signing_keys[0]] = counts.get(status.signing_keys[0], 0) + 1
    if len(counts) < 2:
        return {}
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if ranked[0][1] == ranked[1][1]:
        return {}
    usual = ranked[0][0]
    return {s.key: (s.signing_keys[0], usual) for s in signing if usual not in s.signing_keys}


def parse_status(raw: bytes | None) -> Status | None:
    """The status a status record holds, or ``None`` (a tombstone, something else)."""
    if raw is None:
        return None
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or "key" not in data:
            return None
        return Status.from_dict(data)
    except (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError):
        return None  # a tombstone, or a record that is not a status


def publish_status(producer: RecordProducer, status: Status) -> bool:
    """Queue ``status`` under its key, unless the send queue is full (the next status
    will do); return whether it was queued."""
    return producer.send_if_room(
        STATUS_TOPIC, orjson.dumps(status.to_record()), key=status.key.encode()
    )


class StatusWatch:
    """Follows the status topic with one consumer and keeps each key's latest status.

    :meth:`refresh` reads what is new without blocking for long; the first call reads
    the topic up to its current end, from the first record of the last ``window_s``
    seconds (Kafka's offsets for that time, per partition), or from the beginning when
    ``window_s`` is ``None``. A status older than the window is not live, so a window
    of at least :data:`LIVE_WINDOW_S` misses no live node, and the first read costs the
    same however long the cluster has run.
    """

    def __init__(
        self,
        where: Where,
        timeout_s: float = 10.0,
        *,
        window_s: float | None = STATUS_READ_WINDOW_S,
    ) -> None:
        self._consumer: Consumer = make_consumer(where)
        self._timeout_s = timeout_s
        self._window_s = window_s
        self._assigned = False
        self.statuses: dict[str, Status] = {}

    def refresh(self) -> dict[str, Status]:
        """Read what was published since the last call; return every key's latest."""
        consumer = self._consumer
        if not self._assigned:
            meta = consumer.list_topics(STATUS_TOPIC, timeout=self._timeout_s).topics.get(
                STATUS_TOPIC
            )
            if meta is None or meta.error is not None or not meta.partitions:
                return self.statuses  # nobody has published yet (or it is just created)
            parts = sorted(meta.partitions)
            ends = {
                p: watermarks(consumer, TopicPartition(STATUS_TOPIC, p), self._timeout_s)[1]
                for p in parts
            }
            starts = self._starts(parts, ends)
            assign_from(consumer, [TopicPartition(STATUS_TOPIC, p, starts[p]) for p in parts])
            self._assigned = True
            self._catch_up(starts, ends)
        else:
            self._take(consume_batch(consumer, 10_000, 0.0))
        return self.statuses

    def _starts(self, parts: list[int], ends: Mapping[int, int]) -> dict[int, int]:
        """Where each partition is read from: the first offset of the window (its end
        when nothing was published within it), or the beginning without a window."""
        if self._window_s is None:
            return {p: OFFSET_BEGINNING for p in parts}
        since_ms = int((time.time() - self._window_s) * 1000)
        query = [TopicPartition(STATUS_TOPIC, p, since_ms) for p in parts]
        found = retry_transient(
            lambda: self._consumer.offsets_for_times(query, timeout=self._timeout_s),
            "status offsets for the live window",
            self._timeout_s,
        )
        starts = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
            # -1: no record at or after that time, so none within the window
            starts[tp.partition] = tp.offset if tp.offset >= 0 else ends[tp.partition]
        return starts

    def _catch_up(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> None:
        todo = {p for p, end in ends.items() if end > 0 and starts[p] != end}
        deadline = time.monotonic() + self._timeout_s
        while todo and time.monotonic() < deadline:
            for record in self._take(consume_batch(self._consumer, 10_000, 0.2)):
                part, offset = record.partition(), record.offset()
                if part in todo and offset is not None and offset + 1 >= ends[part]:
                    todo.discard(part)

    def _take(self, batch: list[Any]) -> list[Any]:
        records = usable(batch)
        for key, status in newest_statuses(records).items():
            if status is None:  # a tombstone: that node is forgotten
                self.statuses.pop(key, None)
            else:
                self.statuses[key] = status
        return records

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


def newest_statuses(records: Iterable[KafkaRecord]) -> dict[str, Status | None]:
    """The newest status of each key among ``records`` (in log order), ``None`` for a
    key whose newest record is a tombstone (that node is forgotten for good). Only the
    newest record of a key is parsed, unless it is not a status: then the one before."""
    by_key: dict[str, list[bytes | None]] = {}
    found: dict[str, Status | None] = {}
    for record in records:
        key = record.key()
        if key is None:  # keyed by its value alone: parse it where it stands
            status = parse_status(record.value())
            if status is not None:
                found[status.key] = status
        else:
            text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            by_key.setdefault(text, []).append(record.value())
    for key, values in by_key.items():
        if values[-1] is None:
            found[key] = None
            continue
        for raw in reversed(values):
            status = parse_status(raw)
            if status is not None:
                found[status.key] = status
                break
    return found


def read_statuses(
    where: Where,
    timeout_s: float = 5.0,
    *,
    window_s: float | None = None,
) -> dict[str, Status]:
    """The latest status each node and merger published, keyed by its status key:
    every key ever published (``window_s=None``, what ``atomickafka status`` shows), or
    those that published within the last ``window_s`` seconds."""
    watch = StatusWatch(where, timeout_s, window_s=window_s)
    try:
        return dict(watch.refresh())
    finally:
        watch.close()


def wait_for_nodes(
    where: Where,
    keys: Iterable[str],
    *,
    timeout_s: float = 60.0,
    since: float | None = None,
) -> dict[str, Status]:
    """Wait until every key's node (or merger) has published a live, not-replaying
    status taken after ``since`` (default: now)."""
    wanted = set(keys)
    now = time.time()
    since = now if since is None else since
    deadline = time.monotonic() + timeout_s
    # statuses taken before ``since`` do not count: read from a little before it
    window = max(STATUS_READ_WINDOW_S, now - since + STATUS_READ_WINDOW_S)
    watch = StatusWatch(where, timeout_s=5.0, window_s=window)
    try:
        while True:
            try:
                statuses = watch.refresh()
            except KafkaException as exc:  # e.g. the status topic's leader not elected yet
                log.debug("status topic not readable yet: %s", exc)
                statuses = {}
            live = {
                k: s
                for k, s in statuses.items()
                if k in wanted and s.time >= since and not s.replaying and not s.is_stopped
            }
            if len(live) == len(wanted):
                return live
            if time.monotonic() >= deadline:
                missing = ", ".join(sorted(wanted - set(live)))
                raise TimedOutError(f"nodes not up after {timeout_s:.0f}s: {missing}")
            time.sleep(0.3)
    finally:
        watch.close()
