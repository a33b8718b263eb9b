"""The ordering core: one node's atomic-multicast state machine, with no I/O.

Theory of operation
-------------------
Each AtomicKafka topic ``T`` has one node (per partition layer, §8). The node reads
``T``'s input log in order and feeds each decoded message to :meth:`Engine.step`, which
returns a :class:`Step`: the messages to send (:class:`Output`), the input messages it
set aside with a reason (:class:`Rejection`) and the messages it dropped because a
destination refused them (:class:`Aborted`). The engine never touches Kafka, a clock or
a random source, so everything it returns is a pure function of its input log: a
replay rebuilds the same state and the same outputs, which is what recovery stands on.
The rule numbers below are those of ``docs/DESIGN.md`` §4, which tests cite.

The protocol is Skeen's, in three forms (``Algorithm``):

``optimized`` (thesis Alg. 3/4)
    The destination that receives a message's ClientMessage coordinates it: it
    proposes, sends Notify to the others, collects their proposals in Acks, decides
    the maximum and sends Decided.
``poc`` (thesis Alg. 1/2)
    The coordinator sends Notify; every destination sends its proposal in an Ack to
    every other one, and each decides alone.
``direct``
    The client writes the ClientMessage to every destination. Each destination, on
    first hearing of the message (its ClientMessage or a peer's Notify), proposes and
    sends a Notify carrying the value to every other destination; each decides alone.
    Three hops: client, Notify, Delivery. A client that wrote to only some destinations
    stalls nobody: one copy is enough for the Notifies to reach every destination.

Rules (§4.1 to §4.8):

1. Proposals are strictly fresh: ``clock += 1``, on first hearing of a message.
2. Every accepted timestamp moves the clock: ``clock = max(clock, ts)``. With rule 1,
   anything proposed after a decision sorts after it.
3. The final timestamp is the maximum of the proposals of *all* destinations, kept in
   a map keyed by destination topic (never a count).
4. The delivery queue holds every undelivered message known here: undecided ones at
   the local proposal, decided ones at the final timestamp, ordered by ``(timeStamp,
   messageID)``. Only a decided head is delivered; after each batch. A final
   timestamp is never below the local proposal, and once ``m`` is decided here the
   clock is at least ``final(m)``, so nothing proposed later sorts before it.
5. Duplicates change nothing: messages are keyed by ``messageID``, proposals by topic,
   and delivered (and aborted) ids are remembered.
6. A single-destination message for this topic takes the fast path: proposal = final.
7. Relay: a ClientMessage written to a topic that is not among its destinations is
   forwarded (to one destination, or to all with ``direct``); the relay takes no
   further part.
8. Determinism: outputs are a pure function of the input log, whatever its batching.

Bad input never stops a topic (§4.9): a message is *refused* (returned as a
:class:`Rejection`, nothing changes, the clock does not move) when it names another
protocol, is not addressed to this topic, comes from a topic that is not a destination,
carries a timestamp more than :data:`MAX_CLOCK_STEP` ahead of the clock, carries a value
over the size limit, or contradicts what is known under its ``messageID`` (another
destination list or another value digest: a reused id). A destination that refuses a
message version for a reused id sends ``AbortMessage`` to that version's other
destinations; since a version needs every destination's proposal to be decided, a
refused version is decided nowhere, and the Abort frees whoever holds it in a queue.
A known value is never replaced by an unknown one.

The small ``_``-prefixed methods (``_propose``, ``_observe``, ``_ack_timestamp``,
``_complete``, ``_already_seen``) are the seams where the 2019 implementation went
wrong; the mutation tests override them to put those defects back.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, NamedTuple, NoReturn

from sortedcontainers import SortedList

from atomickafka.core.wire import (
    MAX_RECORD_BYTES,
    MAX_TIMESTAMP,
    MAX_VALUE_BYTES,
    Message,
    MessageType,
    envelope_bytes,
)

__all__ = [
    "DEFAULT_ALGORITHM",
    "MAX_CLOCK_STEP",
    "Aborted",
    "Algorithm",
    "Engine",
    "EngineStats",
    "Output",
    "Rejection",
    "Step",
    "Waiting",
]

SNAPSHOT_VERSION: Final = 2
#: A timestamp further than this ahead of the clock is refused (§4.9): one stray record
#: must not exhaust the clock. 2**48 proposals are 9 years at a million a second.
MAX_CLOCK_STEP: Final = 2**48


class Algorithm(StrEnum):
    """Which ordering protocol a node runs."""

    POC = "poc"
    OPTIMIZED = "optimized"
    DIRECT = "direct"


DEFAULT_ALGORITHM: Final = Algorithm.DIRECT

_Version = tuple[tuple[str, ...], str | None]  # (destinations, value digest)


class Output(NamedTuple):
    """A message to send: ``message`` addressed to AtomicKafka topic ``topic``.

    A Delivery goes to the topic's delivery stream; anything else into the topic's
    input log (bundled per batch and destination by the shell).
    """

    topic: str
    message: Message


class Rejection(NamedTuple):
    """Input message ``position`` of the batch, refused: it changed nothing."""

    position: int
    message: Message
    reason: str


class Aborted(NamedTuple):
    """A message this node held and dropped because a destination refused it."""

    messageID: str
    destinations: tuple[str, ...]
    reason: str


@dataclass(slots=True)
class Step:
    """What one batch produced."""

    outputs: list[Output] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    aborted: list[Aborted] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A queued message and what it waits for."""

    messageID: str
    timeStamp: int
    decided: bool
    missing: tuple[str, ...]  # destinations whose proposal has not arrived here


@dataclass(slots=True)
class EngineStats:
    """Counters since the engine started (or since the snapshot it was restored from)."""

    records_in: int = 0
    records_out: int = 0
    deliveries: int = 0
    relayed: int = 0
    duplicates: int = 0
    ignored: int = 0  # deliveries (the shared layout shows them), Aborts of other versions
    rejected: int = 0
    protocol_mismatches: int = 0
    conflicts: int = 0
    aborted: int = 0


@dataclass(slots=True)
class _Pending:
    """What this node knows about one undelivered message."""

    destinations: tuple[str, ...]
    digest: str | None
    value: bytes | None  # None: not known here yet
    proposals: dict[str, int] = field(default_factory=dict)
    local: int | None = None  # this node's proposal
    final: int | None = None
    coordinator: bool = False
    acked_to: set[str] = field(default_factory=set)  # optimized: coordinators acked

    @property
    def key_ts(self) -> int | None:
        return self.final if self.final is not None else self.local


class _Refused(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """Raised by a handler before it changes anything: the message is set aside."""

    def __init__(self, reason: str, outputs: Sequence[Output] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.outputs = outputs


class Engine:
    """The ordering state machine of the node for topic ``topic``.

    ``partition`` is the node's layer when the topic is partitioned (§8): outputs carry
    it and deliveries become ``PartitionDeliveryMessage`` for the merger.

    >>> from atomickafka.core.wire import client_message
    >>> node = Engine("T1", node_id="node-T1")
    >>> step = node.step([client_message("c1-0", ["T1"], "hi", "c1")])
    >>> [o.message.messageType.value for o in step.outputs]
    ['DeliveryMessage']
    """

    def __init__(
        self,
        topic: str,
        node_id: str | None = None,
        algorithm: Algorithm | str = DEFAULT_ALGORITHM,
        *,
        partition: int | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        self.topic = topic
        self.node_id = node_id if node_id is not None else f"node-{topic}"
        self.algorithm = Algorithm(algorithm)
        self._protocol = str(self.algorithm)  # what our control messages name
        self.partition = partition
        self.max_value_bytes = max_value_bytes
        self.max_record_bytes = max_record_bytes
        self.clock = 0
        self.stats = EngineStats()
        self._pending: dict[str, _Pending] = {}
        self._queue: SortedList = SortedList()  # of (timeStamp, messageID)
        self._delivered: dict[str, tuple[int, tuple[str, ...], str | None]] = {}
        self._aborted: dict[str, _Version] = {}
        self._relayed: dict[str, _Version] = {}
        self._refused_versions: set[tuple[str, _Version]] = set()
        self._check_due = False
        self._aborts: list[Aborted] = []
        self._delivery_type = (
            MessageType.DELIVERY if partition is None else MessageType.PARTITION_DELIVERY
        )
        self._handlers: dict[MessageType, Callable[[Message], list[Output]]] = {
            MessageType.CLIENT: self._on_client,
            MessageType.NOTIFY: self._on_notify,
            MessageType.ACK: self._on_ack,
            MessageType.DECIDED: self._on_decided,
            MessageType.ABORT: self._on_abort,
            MessageType.TICK: self._on_tick,
        }

    # ------------------------------------------------------------------ public API

    def step(self, records: Iterable[Message]) -> Step:
        """Apply a batch of input messages, then release deliveries (rule 4)."""
        result = self._apply(records)
        result.outputs.extend(self.deliver_ready())
        return result

    def handle_batch(self, records: Iterable[Message]) -> list[Output]:
        """:meth:`step`, returning only the outputs (for tests and tools)."""
        return self.step(records).outputs

    def handle(self, record: Message) -> list[Output]:
        """Apply one message without releasing deliveries (:meth:`deliver_ready` does)."""
        return self._apply([record]).outputs

    def _apply(self, records: Iterable[Message]) -> Step:
        result = Step()
        outputs = result.outputs
        handlers = self._handlers
        self._aborts = result.aborted
        seen = 0
        for index, record in enumerate(records):
            seen += 1
            handler = handlers.get(record.messageType)
            if handler is None:  # our own deliveries, in the shared layout
                self.stats.ignored += 1
                continue
            try:
                outputs.extend(handler(record))
            except _Refused as refusal:
                self.stats.rejected += 1
                result.rejected.append(Rejection(index, record, refusal.reason))
                outputs.extend(refusal.outputs)
        self.stats.records_in += seen
        self.stats.records_out += len(outputs)
        return result

    def deliver_ready(self) -> list[Output]:
        """Release every deliverable message at the head of the queue, in order."""
        if not self._check_due:
            return []
        self._check_due = False
        out: list[Output] = []
        queue = self._queue
        pending = self._pending
        while queue:
            ts, message_id = queue[0]
            entry = pending[message_id]
            if entry.final is None:
                break
            assert entry.value is not None  # decided here => a proposal => a value
            queue.pop(0)
            del pending[message_id]
            self._delivered[message_id] = (ts, entry.destinations, entry.digest)
            delivery = self._outgoing(
                self._delivery_type, message_id, entry.destinations, entry.digest, entry.value, ts
            )
            out.append(Output(self.topic, delivery))
        self.stats.deliveries += len(out)
        self.stats.records_out += len(out)
        return out

    # ------------------------------------------------------------------ introspection

    @property
    def pending_count(self) -> int:
        """Messages this node has heard of and not yet delivered."""
        return len(self._pending)

    @property
    def delivered_count(self) -> int:
        """Messages this node has delivered."""
        return len(self._delivered)

    def waiting(self, limit: int = 10) -> list[Waiting]:
        """The first ``limit`` queued messages (the head first) and what they wait for."""
        out = []
        for ts, message_id in self._queue.islice(0, limit):
            entry = self._pending[message_id]
            missing = tuple(t for t in entry.destinations if t not in entry.proposals)
            out.append(Waiting(message_id, ts, entry.final is not None, missing))
        return out

    def oldest_pending(self) -> Waiting | None:
        """The queue head, or ``None`` when nothing is waiting."""
        head = self.waiting(1)
        return head[0] if head else None

    def watermark(self) -> int:
        """No later delivery of this node has a timestamp below this (§8): the queue
        head's key (a final is never below the proposal) or, later messages, clock + 1."""
        if self._queue:
            head: int = self._queue[0][0]
            return min(head, self.clock + 1)
        return self.clock + 1

    def is_pending(self, message_id: str) -> bool:
        """True while this node holds ``message_id`` undelivered."""
        return message_id in self._pending

    def is_delivered(self, message_id: str) -> bool:
        """True once this node has delivered ``message_id``."""
        return message_id in self._delivered

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain JSON-serialisable data (see :meth:`restore`)."""

        def text(value: bytes | None) -> str | None:
            return None if value is None else value.decode()

        return {
            "version": SNAPSHOT_VERSION,
            "topic": self.topic,
            "node_id": self.node_id,
            "algorithm": self.algorithm.value,
            "partition": self.partition,
            "max_value_bytes": self.max_value_bytes,
            "max_record_bytes": self.max_record_bytes,
            "clock": self.clock,
            "pending": {
                mid: {
                    "destinations": list(e.destinations),
                    "digest": e.digest,
                    "value": text(e.value),
                    "proposals": dict(e.proposals),
                    "local": e.local,
                    "final": e.final,
                    "coordinator": e.coordinator,
                    "acked_to": sorted(e.acked_to),
                }
                for mid, e in self._pending.items()
            },
            "delivered": {mid: [ts, list(d), g] for mid, (ts, d, g) in self._delivered.items()},
            "aborted": {mid: [list(d), g] for mid, (d, g) in self._aborted.items()},
            "relayed": {mid: [list(d), g] for mid, (d, g) in self._relayed.items()},
            "refused": sorted(
                ([mid, list(d), g] for mid, (d, g) in self._refused_versions), key=str
            ),
            "stats": {name: getattr(self.stats, name) for name in EngineStats.__dataclass_fields__},
        }

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> Engine:
        """Rebuild an engine from :meth:`snapshot` output."""
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported snapshot version {snapshot.get('version')!r}")
        engine = cls(
            snapshot["topic"],
            snapshot["node_id"],
            snapshot["algorithm"],
            partition=snapshot["partition"],
            max_value_bytes=snapshot["max_value_bytes"],
            max_record_bytes=snapshot["max_record_bytes"],
        )
        engine.clock = int(snapshot["clock"])
        for mid, e in snapshot["pending"].items():
            entry = _Pending(
                destinations=tuple(e["destinations"]),
                digest=e["digest"],
                value=None if e["value"] is None else e["value"].encode(),
                proposals={str(k): int(v) for k, v in e["proposals"].items()},
                local=e["local"],
                final=e["final"],
                coordinator=bool(e["coordinator"]),
                acked_to=set(e["acked_to"]),
            )
            engine._pending[mid] = entry
            if entry.key_ts is not None:
                engine._queue.add((entry.key_ts, mid))
        engine._delivered = {
            mid: (int(ts), tuple(d), g) for mid, (ts, d, g) in snapshot["delivered"].items()
        }
        engine._aborted = {mid: (tuple(d), g) for mid, (d, g) in snapshot["aborted"].items()}
        engine._relayed = {mid: (tuple(d), g) for mid, (d, g) in snapshot["relayed"].items()}
        engine._refused_versions = {(mid, (tuple(d), g)) for mid, d, g in snapshot["refused"]}
        engine.stats = EngineStats(**snapshot["stats"])
        engine._check_due = True
        return engine

    # ------------------------------------------------------------------ seams

    def _observe(self, ts: int) -> None:
        """Rule 2: every accepted timestamp moves the clock."""
        self.clock = max(self.clock, ts)

    def _propose(self) -> int:
        """Rule 1: a strictly fresh proposal."""
        self.clock += 1
        return self.clock

    def _ack_timestamp(self, entry: _Pending, notify: Message) -> int:
        """The proposal a reply to a Notify carries (an Ack; ``direct``: a Notify): this
        node's own."""
        assert entry.local is not None
        return entry.local

    def _complete(self, entry: _Pending) -> bool:
        """Rule 3: a proposal from every destination, by topic, not by count."""
        proposals = entry.proposals
        destinations = entry.destinations
        return len(proposals) >= len(destinations) and all(t in proposals for t in destinations)

    def _already_seen(self, message_id: str) -> bool:
        """Rule 5: a delivered message is never taken up again."""
        return message_id in self._delivered

    # ------------------------------------------------------------------ admission (§4.9)

    def _known_version(self, mid: str) -> _Version | None:
        entry = self._pending.get(mid)
        if entry is not None:
            return entry.destinations, entry.digest
        done = self._delivered.get(mid)
        if done is not None:
            return done[1], done[2]
        return self._aborted.get(mid) or self._relayed.get(mid)

    def _check_version(self, record: Message) -> None:
        """Refuse a record that contradicts what this node knows under its id."""
        known = self._known_version(record.messageID)
        if known is None or known == (record.topic, record.digest):
            return
        self.stats.conflicts += 1
        self._refuse_version(
            record,
            f"conflict: messageID {record.messageID!r} already names a message to "
            f"{_names(known[0])} (value digest {known[1]}); this {record.messageType.value} "
            f"names one to {_names(record.topic)} (value digest {record.digest}): "
            "the id was reused",
        )

    def _refuse_version(self, record: Message, reason: str) -> NoReturn:
        """Refuse ``record``'s message version for good (§4.9.4): this node never
        proposes for it, so it is decided nowhere; the first time, tell its other
        destinations (Abort) so that none of them waits for this node's proposal."""
        mid = record.messageID
        version = (record.topic, record.digest)
        aborts: list[Output] = []
        if (mid, version) not in self._refused_versions:
            self._refused_versions.add((mid, version))
            if self._known_version(mid) is None:  # never take this version up again
                self._aborted[mid] = version
            if self.topic in record.topic:
                abort = self._outgoing(MessageType.ABORT, mid, record.topic, record.digest)
                aborts = [Output(t, abort) for t in record.topic if t != self.topic]
        raise _Refused(reason, aborts)

    def _check_peer(self, record: Message, *, versioned: bool = True) -> None:
        """The checks every control message from a peer node passes before it counts."""
        kind = record.messageType
        if record.protocol != self._protocol and kind is not MessageType.ABORT:
            self.stats.protocol_mismatches += 1
            raise _Refused(
                f"protocol mismatch: {record.senderID or 'the sender'} runs "
                f"{record.protocol or 'no stated protocol (a format-1 record?)'}, "
                f"this node runs {self.algorithm.value}"
            )
        if record.digest is None:
            raise _Refused(f"{kind.value} carries no value digest")
        sender = record.sentFromTopic
        if self.topic not in record.topic:
            raise _Refused(f"{kind.value} not addressed to {self.topic}")
        if sender == self.topic or sender not in record.topic:
            raise _Refused(f"{kind.value} from {sender}, which is not another destination")
        self._check_partition(record)
        if record.timeStamp is not None:
            self._check_timestamp(record.timeStamp)
        if versioned:
            self._check_version(record)

    def _check_partition(self, record: Message) -> None:
        layer = record.partitionID
        if self.partition is not None and layer is not None and layer != self.partition:
            raise _Refused(f"a record of layer {layer} in the log of layer {self.partition}")

    def _check_timestamp(self, ts: int) -> None:
        if ts > self.clock + MAX_CLOCK_STEP:
            raise _Refused(
                f"timestamp {ts} is more than {MAX_CLOCK_STEP} ahead of this node's clock "
                f"({self.clock}); refused so that one record cannot exhaust the clock"
            )

    def _check_can_propose(self, record: Message) -> None:
        if self.clock >= MAX_TIMESTAMP:
            self._refuse_version(record, f"the clock is exhausted ({self.clock} = {MAX_TIMESTAMP})")

    def _check_value(self, record: Message) -> None:
        size = len(record.value or b"")
        limit = min(
            self.max_value_bytes,
            self.max_record_bytes - envelope_bytes(record.messageID, record.topic),
        )
        if size > limit:
            self._refuse_version(
                record,
                f"value of {size} bytes is over the {limit}-byte limit for this message "
                f"(max value {self.max_value_bytes} bytes; its copies must fit a "
                f"{self.max_record_bytes}-byte record)",
            )

    # ------------------------------------------------------------------ handlers

    def _entry(self, record: Message) -> _Pending:
        """The message's entry, created on first hearing; a known value is kept."""
        mid = record.messageID
        entry = self._pending.get(mid)
        if entry is None:
            entry = self._pending[mid] = _Pending(record.topic, record.digest, record.value)
        elif entry.value is None:
            entry.value = record.value
        return entry

    def _settled(self, mid: str) -> bool:
        if self._already_seen(mid) or mid in self._aborted:
            self.stats.duplicates += 1
            return True
        return False

    def _on_client(self, record: Message) -> list[Output]:
        mid = record.messageID
        self._check_partition(record)
        if self.topic not in record.topic:
            return self._relay(record)
        self._check_version(record)
        if self._settled(mid):
            return []
        entry = self._pending.get(mid)
        if entry is not None and entry.local is not None:
            self.stats.duplicates += 1
            return []
        self._check_value(record)
        self._check_can_propose(record)
        entry = self._entry(record)
        proposal = self._propose()
        entry.local = proposal
        entry.proposals[self.topic] = proposal
        self._queue.add((proposal, mid))
        if len(record.topic) == 1:  # rule 6: the proposal is final
            entry.final = proposal
            self._check_due = True
            return []
        entry.coordinator = self.algorithm is not Algorithm.DIRECT
        out = self._notify_others(mid, entry, proposal)
        if self._complete(entry):  # poc, direct: the others' proposals may be here already
            out.extend(self._decide(mid, entry))
        return out

    def _notify_others(self, mid: str, entry: _Pending, proposal: int) -> list[Output]:
        notify = self._control(MessageType.NOTIFY, mid, entry, proposal)
        return [Output(t, notify) for t in entry.destinations if t != self.topic]

    def _relay(self, record: Message) -> list[Output]:
        mid = record.messageID
        self._check_version(record)
        if mid in self._relayed:
            self.stats.duplicates += 1
            return []
        self._check_value(record)
        self._relayed[mid] = (record.topic, record.digest)
        self.stats.relayed += 1
        destinations = record.topic
        forwarded = self._outgoing(
            MessageType.CLIENT, mid, destinations, record.digest, record.value
        )
        if self.algorithm is Algorithm.DIRECT:
            return [Output(t, forwarded) for t in destinations]
        target = destinations[zlib.crc32(mid.encode()) % len(destinations)]
        return [Output(target, forwarded)]

    def _on_notify(self, record: Message) -> list[Output]:
        mid = record.messageID
        sender = record.sentFromTopic
        ts = record.timeStamp
        assert sender is not None and ts is not None
        self._check_peer(record)
        if record.value is None:
            raise _Refused("NotifyMessage carries no value")
        entry = self._pending.get(mid)
        if entry is None or entry.local is None:
            self._check_can_propose(record)
        self._observe(ts)
        if self._settled(mid):
            return []
        entry = self._entry(record)
        entry.proposals.setdefault(sender, ts)  # a Notify is a proposal too
        if entry.final is not None:
            self.stats.duplicates += 1
            return []
        if entry.local is not None:
            return self._notify_again(mid, sender, entry, record)
        proposal = self._propose()
        entry.local = proposal
        entry.proposals[self.topic] = proposal
        self._queue.add((proposal, mid))
        if self.algorithm is Algorithm.DIRECT:  # the reply is a Notify to every other one
            out = self._notify_others(mid, entry, self._ack_timestamp(entry, record))
        elif self.algorithm is Algorithm.OPTIMIZED:
            entry.acked_to.add(sender)
            return [self._ack_to(sender, mid, entry, record)]
        else:
            out = [
                self._ack_to(t, mid, entry, record) for t in entry.destinations if t != self.topic
            ]
        if self._complete(entry):
            out.extend(self._decide(mid, entry))
        return out

    def _notify_again(
        self, mid: str, sender: str, entry: _Pending, record: Message
    ) -> list[Output]:
        """A Notify for a message this node has proposed for already.

        ``direct``: one more destination's proposal. ``poc``/``optimized``: only a
        second coordinator (the same id sent as a ClientMessage to two destinations)
        needs an answer, once. Its Notify may also be the last proposal this node was
        waiting for: the Ack it sends later is then a duplicate, so decide now or never.
        """
        out: list[Output] = []
        if self.algorithm is Algorithm.DIRECT:
            if self._complete(entry):
                out.extend(self._decide(mid, entry))
            return out
        if self.algorithm is Algorithm.OPTIMIZED and sender not in entry.acked_to:
            entry.acked_to.add(sender)
            out.append(self._ack_to(sender, mid, entry, record))
        if (self.algorithm is Algorithm.POC or entry.coordinator) and self._complete(entry):
            out.extend(self._decide(mid, entry))
        if not out:
            self.stats.duplicates += 1
        return out

    def _on_ack(self, record: Message) -> list[Output]:
        mid = record.messageID
        sender = record.sentFromTopic
        ts = record.timeStamp
        assert sender is not None and ts is not None
        self._check_peer(record)
        self._observe(ts)
        if self._settled(mid):
            return []
        entry = self._entry(record)  # poc: an Ack may overtake the Notify that starts us
        if sender in entry.proposals:
            self.stats.duplicates += 1
            return []
        entry.proposals[sender] = ts
        if entry.final is not None or entry.local is None:
            return []
        if self.algorithm is Algorithm.OPTIMIZED and not entry.coordinator:
            return []
        if self._complete(entry):
            return self._decide(mid, entry)
        return []

    def _on_decided(self, record: Message) -> list[Output]:
        mid = record.messageID
        final = record.timeStamp
        assert final is not None
        self._check_peer(record)
        known = self._pending.get(mid)
        if record.value is None and (known is None or known.value is None):
            raise _Refused("DecidedMessage without the value of a message unknown here")
        self._observe(final)
        if self._settled(mid):
            return []
        entry = self._entry(record)
        if entry.final is not None:
            self.stats.duplicates += 1
            return []
        self._set_final(mid, entry, final)
        return []

    def _on_abort(self, record: Message) -> list[Output]:
        mid = record.messageID
        self._check_peer(record, versioned=False)
        version = (record.topic, record.digest)
        known = self._known_version(mid)
        if known is None:  # refused elsewhere before it reached us: never take it up
            self._aborted[mid] = version
            return []
        if known != version:  # about another message under the same id
            self.stats.ignored += 1
            return []
        entry = self._pending.get(mid)
        if entry is None or entry.final is not None:
            # delivered, relayed or aborted already; a decided version cannot be
            # refused by one of its destinations (it proposed for it), so this is a copy
            self.stats.duplicates += 1
            return []
        if entry.key_ts is not None:
            self._queue.remove((entry.key_ts, mid))
        del self._pending[mid]
        self._aborted[mid] = version
        self._check_due = True  # the head may have been this message
        self.stats.aborted += 1
        self._aborts.append(
            Aborted(
                mid,
                entry.destinations,
                f"destination {record.sentFromTopic} refused it: the messageID was reused "
                "for another message",
            )
        )
        return []

    def _on_tick(self, record: Message) -> list[Output]:
        """§8: the merger moves an idle layer's clock through the log."""
        ts = record.timeStamp
        assert ts is not None
        self._check_partition(record)
        self._check_timestamp(ts)
        self._observe(ts)
        return []

    # ------------------------------------------------------------------ helpers

    def _decide(self, mid: str, entry: _Pending) -> list[Output]:
        destinations = entry.destinations  # proposals of other topics never count
        final = max(ts for t, ts in entry.proposals.items() if t in destinations)
        self._observe(final)
        self._set_final(mid, entry, final)
        if self.algorithm is not Algorithm.OPTIMIZED or not entry.coordinator:
            return []
        decided = self._control(MessageType.DECIDED, mid, entry, final)
        return [Output(t, decided) for t in entry.destinations if t != self.topic]

    def _set_final(self, mid: str, entry: _Pending, final: int) -> None:
        old = entry.key_ts
        entry.final = final
        if old != final:
            if old is not None:
                self._queue.remove((old, mid))
            self._queue.add((final, mid))
        self._check_due = True

    def _ack_to(self, target: str, mid: str, entry: _Pending, notify: Message) -> Output:
        ts = self._ack_timestamp(entry, notify)
        return Output(target, self._control(MessageType.ACK, mid, entry, ts, with_value=False))

    def _control(
        self, kind: MessageType, mid: str, entry: _Pending, ts: int, *, with_value: bool = True
    ) -> Message:
        value = entry.value if with_value else None
        return self._outgoing(kind, mid, entry.destinations, entry.digest, value, ts)

    def _outgoing(
        self,
        kind: MessageType,
        mid: str,
        destinations: tuple[str, ...],
        digest: str | None,
        value: bytes | None = None,
        ts: int | None = None,
    ) -> Message:
        """A message this node writes: it names the node, its topic, layer and protocol."""
        return Message(
            messageID=mid,
            messageType=kind,
            topic=destinations,
            value=value,
            senderID=self.node_id,
            sentFromTopic=self.topic,
            timeStamp=ts,
            partitionID=self.partition,
            digest=digest,
            protocol=self._protocol,
        )


def _names(topics: Sequence[str]) -> str:
    return "{" + ", ".join(topics) + "}"
