"""The ordering core: one node's atomic-multicast state machine, with no I/O.

Theory of operation
-------------------
Each AtomicKafka topic ``T`` has one node. The node reads ``T``'s input log (client and
control records) in log order and feeds each decoded record to :meth:`Engine.handle`;
:meth:`Engine.deliver_ready` then releases what may be delivered. Both return
:class:`Output` values, records to produce. The engine never touches Kafka, a clock or
a random source, so its outputs are a pure function of its input log: replaying the log
rebuilds the same state and the same outputs, which is what recovery stands on.

The protocol is Skeen's, as the thesis adapts it (DESIGN.md §3):

1. A message's coordinator is the destination that receives its ClientMessage. A topic
   that is not a destination *relays* the ClientMessage to one destination and takes
   no further part.
2. Every destination proposes a strictly fresh Lamport timestamp for the message
   (``clock += 1``) when it first hears of it (ClientMessage or Notify). Every timestamp
   seen moves the clock forward (``clock = max(clock, ts)``).
3. The final timestamp is the maximum of the proposals of all destinations, collected
   in a map keyed by destination topic. ``poc`` (thesis Alg. 1/2): every destination
   sends its proposal to every other one and decides alone. ``optimized`` (Alg. 3/4):
   destinations send their proposal to the coordinator, which decides and sends
   Decided to the others.
4. The delivery queue holds every undelivered message that has a timestamp here:
   undecided ones at their local proposal, decided ones at their final timestamp,
   ordered by ``(timeStamp, messageID)``. Only a decided head is delivered. A final
   timestamp is never below the local proposal, and once ``m`` is decided here the
   clock is at least ``final(m)``, so nothing proposed later can sort before it: the
   head is safe to deliver, and every destination delivers in the same order.
5. A single-destination message for this topic takes the fast path: its proposal is
   final.
6. Records seen twice change nothing: messages are keyed by ``messageID``, proposals by
   destination topic, and delivered ids are remembered.

The queue is a :class:`sortedcontainers.SortedList`, so moving a message from its
proposal to its final timestamp is O(log n), and the delivery check only looks at the
head.

The small ``_``-prefixed methods (``_propose``, ``_ack_timestamp``, ``_complete``,
``_already_seen``) are the seams where the 2019 implementation went wrong; the mutation
tests override them to put those defects back and show that the tests catch them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from sortedcontainers import SortedList

from atomickafka.messages import Message, MessageType

__all__ = ["Algorithm", "Engine", "EngineStats", "OldestPending", "Output"]

SNAPSHOT_VERSION = 1


class Algorithm(StrEnum):
    """Which of the thesis's two protocols a node runs."""

    POC = "poc"
    OPTIMIZED = "optimized"


class Output(NamedTuple):
    """A record to produce: ``message`` addressed to AtomicKafka topic ``topic``.

    The shell maps it to a Kafka topic: a ``DeliveryMessage`` goes to the topic's
    delivery stream, everything else to the topic's input log.
    """

    topic: str
    message: Message


@dataclass(frozen=True, slots=True)
class OldestPending:
    """The head of the delivery queue: the message everything else waits for."""

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
    ignored: int = 0  # records that are not for this node (stray acks, deliveries, ...)


@dataclass(slots=True)
class _Pending:
    """What this node knows about one undelivered message."""

    destinations: tuple[str, ...]
    value: Any
    proposals: dict[str, int] = field(default_factory=dict)
    local: int | None = None  # this node's proposal
    final: int | None = None
    coordinator: bool = False
    acked_to: set[str] = field(default_factory=set)  # optimized: coordinators acked

    @property
    def key_ts(self) -> int | None:
        return self.final if self.final is not None else self.local


class Engine:
    """The ordering state machine of the node for topic ``topic``.

    >>> from atomickafka.messages import Message, MessageType
    >>> node = Engine("T1", node_id="node-T1")
    >>> msg = Message("c1-0", MessageType.CLIENT, ("T1",), value="hi", senderID="c1")
    >>> [o.message.messageType.value for o in node.handle_batch([msg])]
    ['DeliveryMessage']
    """

    def __init__(
        self,
        topic: str,
        node_id: str | None = None,
        algorithm: Algorithm | str = Algorithm.OPTIMIZED,
    ) -> None:
        self.topic = topic
        self.node_id = node_id if node_id is not None else f"node-{topic}"
        self.algorithm = Algorithm(algorithm)
        self.clock = 0
        self.stats = EngineStats()
        self._pending: dict[str, _Pending] = {}
        self._queue: SortedList = SortedList()  # of (timeStamp, messageID)
        self._delivered: dict[str, int] = {}  # messageID -> final timestamp
        self._relayed: set[str] = set()
        self._decided_since_check = False
        self._handlers: dict[MessageType, Callable[[Message], list[Output]]] = {
            MessageType.CLIENT: self._on_client,
            MessageType.NOTIFY: self._on_notify,
            MessageType.ACK: self._on_ack,
            MessageType.DECIDED: self._on_decided,
        }

    # ------------------------------------------------------------------ public API

    def handle(self, record: Message) -> list[Output]:
        """Apply one record of this node's input log; return the control records to send.

        Deliveries are not released here but by :meth:`deliver_ready`, once per batch.
        Delivery records (which the shared layout shows the node) are ignored.
        """
        self.stats.records_in += 1
        handler = self._handlers.get(record.messageType)
        if handler is None:
            self.stats.ignored += 1
            return []
        out = handler(record)
        self.stats.records_out += len(out)
        return out

    def deliver_ready(self) -> list[Output]:
        """Release every deliverable message at the head of the queue, in order."""
        if not self._decided_since_check:
            return []
        self._decided_since_check = False
        out: list[Output] = []
        queue = self._queue
        pending = self._pending
        while queue:
            ts, message_id = queue[0]
            entry = pending[message_id]
            if entry.final is None:
                break
            queue.pop(0)
            del pending[message_id]
            self._delivered[message_id] = ts
            out.append(
                Output(
                    self.topic,
                    Message(
                        messageID=message_id,
                        messageType=MessageType.DELIVERY,
                        topic=entry.destinations,
                        value=entry.value,
                        senderID=self.node_id,
                        sentFromTopic=self.topic,
                        timeStamp=ts,
                    ),
                )
            )
        self.stats.deliveries += len(out)
        self.stats.records_out += len(out)
        return out

    def handle_batch(self, records: Iterable[Message]) -> list[Output]:
        """Apply a batch of records, then release deliveries: the shell's unit of work."""
        out: list[Output] = []
        handlers = self._handlers
        seen = 0
        for record in records:
            seen += 1
            handler = handlers.get(record.messageType)
            if handler is None:
                self.stats.ignored += 1
            else:
                out.extend(handler(record))
        self.stats.records_in += seen
        self.stats.records_out += len(out)
        out.extend(self.deliver_ready())
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

    def oldest_pending(self) -> OldestPending | None:
        """The queue head, or ``None`` when nothing is waiting."""
        if not self._queue:
            return None
        ts, message_id = self._queue[0]
        entry = self._pending[message_id]
        missing = tuple(t for t in entry.destinations if t not in entry.proposals)
        return OldestPending(message_id, ts, entry.final is not None, missing)

    def is_pending(self, message_id: str) -> bool:
        """True while this node holds ``message_id`` undelivered."""
        return message_id in self._pending

    def is_delivered(self, message_id: str) -> bool:
        """True once this node has delivered ``message_id``."""
        return message_id in self._delivered

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain JSON-serialisable data (see :meth:`restore`)."""
        return {
            "version": SNAPSHOT_VERSION,
            "topic": self.topic,
            "node_id": self.node_id,
            "algorithm": self.algorithm.value,
            "clock": self.clock,
            "pending": {
                mid: {
                    "destinations": list(e.destinations),
                    "value": e.value,
                    "proposals": dict(e.proposals),
                    "local": e.local,
                    "final": e.final,
                    "coordinator": e.coordinator,
                    "acked_to": sorted(e.acked_to),
                }
                for mid, e in self._pending.items()
            },
            "delivered": dict(self._delivered),
            "relayed": sorted(self._relayed),
            "stats": {name: getattr(self.stats, name) for name in EngineStats.__dataclass_fields__},
        }

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> Engine:
        """Rebuild an engine from :meth:`snapshot` output."""
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported snapshot version {snapshot.get('version')!r}")
        engine = cls(snapshot["topic"], snapshot["node_id"], snapshot["algorithm"])
        engine.clock = int(snapshot["clock"])
        for mid, e in snapshot["pending"].items():
            entry = _Pending(
                destinations=tuple(e["destinations"]),
                value=e["value"],
                proposals={str(k): int(v) for k, v in e["proposals"].items()},
                local=e["local"],
                final=e["final"],
                coordinator=bool(e["coordinator"]),
                acked_to=set(e["acked_to"]),
            )
            engine._pending[mid] = entry
            if entry.key_ts is not None:
                engine._queue.add((entry.key_ts, mid))
        engine._delivered = {str(k): int(v) for k, v in snapshot["delivered"].items()}
        engine._relayed = set(snapshot["relayed"])
        engine.stats = EngineStats(**snapshot["stats"])
        engine._decided_since_check = True
        return engine

    # ------------------------------------------------------------------ seams

    def _observe(self, ts: int) -> None:
        """Rule 2: every timestamp seen moves the clock."""
        self.clock = max(self.clock, ts)

    def _propose(self) -> int:
        """Rule 1: a strictly fresh proposal."""
        self.clock += 1
        return self.clock

    def _ack_timestamp(self, entry: _Pending, notify: Message) -> int:
        """The proposal an Ack carries: this node's own."""
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

    # ------------------------------------------------------------------ handlers

    def _on_client(self, record: Message) -> list[Output]:
        mid = record.messageID
        destinations = record.topic
        if self.topic not in destinations:
            return self._relay(record)
        entry = self._pending.get(mid)
        if self._already_seen(mid) or (
            entry is not None and (entry.local is not None or entry.final is not None)
        ):
            self.stats.duplicates += 1
            return []
        if entry is None:
            entry = self._pending[mid] = _Pending(destinations, record.value)
        proposal = self._propose()
        entry.local = proposal
        entry.proposals[self.topic] = proposal
        if len(destinations) == 1:  # fast path: the proposal is final
            entry.final = proposal
            self._queue.add((proposal, mid))
            self._decided_since_check = True
            return []
        entry.coordinator = True
        self._queue.add((proposal, mid))
        out = [
            Output(t, self._control(MessageType.NOTIFY, mid, entry, proposal))
            for t in destinations
            if t != self.topic
        ]
        if self._complete(entry):  # poc: every other proposal may already be here
            out.extend(self._decide(mid, entry))
        return out

    def _relay(self, record: Message) -> list[Output]:
        mid = record.messageID
        if mid in self._relayed:
            self.stats.duplicates += 1
            return []
        self._relayed.add(mid)
        self.stats.relayed += 1
        destinations = record.topic
        target = destinations[zlib.crc32(mid.encode()) % len(destinations)]
        forwarded = Message(
            messageID=mid,
            messageType=MessageType.CLIENT,
            topic=destinations,
            value=record.value,
            senderID=self.node_id,
            sentFromTopic=self.topic,
        )
        return [Output(target, forwarded)]

    def _on_notify(self, record: Message) -> list[Output]:
        mid = record.messageID
        sender = record.sentFromTopic
        assert sender is not None and record.timeStamp is not None
        if sender == self.topic or self.topic not in record.topic or sender not in record.topic:
            self.stats.ignored += 1
            return []
        if self._already_seen(mid):
            self.stats.duplicates += 1
            return []
        self._observe(record.timeStamp)
        entry = self._pending.get(mid)
        if entry is None:
            entry = self._pending[mid] = _Pending(record.topic, record.value)
        else:
            entry.value = record.value  # an early poc Ack carries no value
        entry.proposals.setdefault(sender, record.timeStamp)  # a Notify is an ack too
        if entry.final is not None:
            self.stats.duplicates += 1
            return []
        if entry.local is not None:
            # Already proposed. Only a second coordinator (the same id sent as a
            # ClientMessage to two destinations) needs an answer, once. Its Notify
            # may also be the last proposal this node was waiting for: the Ack it
            # sends later is then a duplicate, so decide now or never.
            out: list[Output] = []
            if self.algorithm is Algorithm.OPTIMIZED and sender not in entry.acked_to:
                entry.acked_to.add(sender)
                out.append(self._ack_to(sender, mid, entry, record))
            if (self.algorithm is Algorithm.POC or entry.coordinator) and self._complete(entry):
                out.extend(self._decide(mid, entry))
            if not out:
                self.stats.duplicates += 1
            return out
        proposal = self._propose()
        entry.local = proposal
        entry.proposals[self.topic] = proposal
        self._queue.add((proposal, mid))
        if self.algorithm is Algorithm.OPTIMIZED:
            entry.acked_to.add(sender)
            return [self._ack_to(sender, mid, entry, record)]
        out = [self._ack_to(t, mid, entry, record) for t in entry.destinations if t != self.topic]
        if self._complete(entry):
            out.extend(self._decide(mid, entry))
        return out

    def _on_ack(self, record: Message) -> list[Output]:
        mid = record.messageID
        sender = record.sentFromTopic
        assert sender is not None and record.timeStamp is not None
        self._observe(record.timeStamp)
        if self._already_seen(mid):
            self.stats.duplicates += 1
            return []
        if self.topic not in record.topic or sender not in record.topic:
            self.stats.ignored += 1
            return []
        entry = self._pending.get(mid)
        if entry is None:  # poc: an ack may overtake the Notify that starts us off
            entry = self._pending[mid] = _Pending(record.topic, record.value)
        elif sender not in entry.destinations:  # names topics the message does not
            self.stats.ignored += 1
            return []
        if sender in entry.proposals:
            self.stats.duplicates += 1
            return []
        entry.proposals[sender] = record.timeStamp
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
        self._observe(final)
        if self._already_seen(mid):
            self.stats.duplicates += 1
            return []
        if self.topic not in record.topic:
            self.stats.ignored += 1
            return []
        entry = self._pending.get(mid)
        if entry is None:
            entry = self._pending[mid] = _Pending(record.topic, record.value)
        if entry.final is not None:
            self.stats.duplicates += 1
            return []
        self._set_final(mid, entry, final)
        return []

    # ------------------------------------------------------------------ helpers

    def _decide(self, mid: str, entry: _Pending) -> list[Output]:
        destinations = entry.destinations  # proposals of other topics never count
        final = max(ts for t, ts in entry.proposals.items() if t in destinations)
        self._observe(final)
        self._set_final(mid, entry, final)
        if self.algorithm is Algorithm.POC or not entry.coordinator:
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
        self._decided_since_check = True

    def _ack_to(self, target: str, mid: str, entry: _Pending, notify: Message) -> Output:
        ts = self._ack_timestamp(entry, notify)
        return Output(target, self._control(MessageType.ACK, mid, entry, ts, with_value=False))

    def _control(
        self, kind: MessageType, mid: str, entry: _Pending, ts: int, *, with_value: bool = True
    ) -> Message:
        return Message(
            messageID=mid,
            messageType=kind,
            topic=entry.destinations,
            value=entry.value if with_value else None,
            senderID=self.node_id,
            sentFromTopic=self.topic,
            timeStamp=ts,
        )
