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

Everything the engine keeps from one step to the next is one value, ``Engine.state``
(an :class:`~atomickafka.core.engine_state.EngineState`: settings, clock, log time,
undelivered and held messages, the memory of settled ids, the peers' sequences, the
members, the counters), which is also what a snapshot writes. The engine is the rules
over it: its methods read and write ``self.state`` and keep beside it only the delivery
queue (an index of the undelivered messages, rebuilt from the state on restore), what
the settings imply (the protocol's table, §4.14) and one step's scratch.

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
   messageID)``. Only a decided head is delivered; after each record. A final
   timestamp is never below the local proposal, and once ``m`` is decided here the
   clock is at least ``final(m)``, so nothing proposed later sorts before it.
5. Duplicates change nothing: messages are keyed by ``messageID``, proposals by topic,
   control messages by their sender's sequence (§4.12), and settled ids are remembered
   for a window of log time (§4.13; with a control log, until both logs' times have
   passed it, and a client copy is judged late by when it reached its log, §7.1).
6. A single-destination message for this topic takes the fast path: proposal = final.
7. Relay: a ClientMessage written to a topic that is not among its destinations is
   forwarded (to one destination, or to all with ``direct``); the relay takes no
   further part.
8. Determinism: outputs are a pure function of the input log, whatever its batching.

Bad input never stops a topic (§4.9): no single record, whatever it holds, makes a node
refuse an honest member's later record, hold a queue head for good, or fail. A message
is *refused* (returned as a :class:`Rejection`; nothing changes, the clock does not
move) when it names another protocol, is not addressed to this topic, comes from a
topic that is not a destination, carries a timestamp too far ahead of real time
(§4.11: beyond a minute it waits, beyond an hour it is refused), carries a value that
is not JSON or is over the size limit, would need a proposal above ``MAX_TIMESTAMP``,
or contradicts what is known under its ``messageID`` (a reused id); a Decided for a
message it never heard of is set aside too (no honest one exists). A destination that
refuses a message *version* it has not proposed for -- whatever the reason -- refuses
it for good and sends ``AbortMessage`` to its other destinations: a version needs every
destination's proposal to be decided, so a refused version is decided nowhere, and the
Abort frees whoever holds it in a queue. A version this node *has* proposed for may be
decided elsewhere with that proposal, so it is dropped only on an Abort that answers
this node's own proposal (echoes its ``seq``: its sender read the proposal and still
refused); any other record about it is set aside, and the node that drops it forwards
the Abort to every peer whose proposal it heard. A record naming another protocol
about a proposed version is answered that way: if it is its sender's own, the two run
different protocols and the version is decided nowhere. A known value is never replaced
by an unknown one.

The small ``_``-prefixed methods (``_propose``, ``_observe``, ``_ack_timestamp``,
``_complete``, ``_already_seen``) are the seams where the 2019 implementation went
wrong; the mutation tests override them to put those defects back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

from mypy_extensions import mypyc_attr

from atomickafka.core.delivery_queue import DeliveryQueue
from atomickafka.core.engine_state import EngineState
from atomickafka.core.engine_types import (
    DEFAULT_ALGORITHM,
    Aborted,
    Algorithm,
    EngineStats,
    Output,
    PendingMessage,
    Rejection,
    Step,
    Waiting,
)
from atomickafka.core.memory import (
    DEFAULT_WINDOW_MS,
    Outcome,
    Version,
    Window,
)
from atomickafka.core.protocols import PROTOCOLS, Reply, route, routed_by_id
from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.core.timebounds import CLOCK_LEAD_US, Verdict, judge
from atomickafka.core.wire import (
    MAX_RECORD_BYTES,
    MAX_TIMESTAMP,
    MAX_VALUE_BYTES,
    Message,
    MessageError,
    MessageType,
    check_json_value,
    envelope_bytes,
)
from atomickafka.errors import ConfigError

__all__ = [
    "DEFAULT_ALGORITHM",
    "Aborted",
    "Algorithm",
    "Engine",
    "EngineStats",
    "Output",
    "Rejection",
    "Step",
    "Waiting",
]

_DELIVERY_TYPES: Final = frozenset({MessageType.DELIVERY, MessageType.PARTITION_DELIVERY})
#: The records that carry a proposal to a peer.
_PROPOSAL_TYPES: Final = frozenset({MessageType.NOTIFY, MessageType.ACK})
_new_tuple: Final = tuple.__new__
#: Bits of a ``seq``'s index that number one record's outputs when a record's origin
#: splits (:attr:`Engine.origin_shift`, §7): a record has fewer outputs than this.
ORIGIN_INDEX_BITS: Final = 24
#: Positions of a Message's type and seq fields (tuples built by position, hot path).
_TYPE: Final = Message._fields.index("messageType")
_SEQ: Final = Message._fields.index("seq")
#: How long (log time) a message naming a destination not known to have a node waits
#: for a members record that names it: a members record written this long or longer
#: after the message that still does not name it refuses it (§4.9.5).
MEMBERS_GRACE_MS: Final = 10_000


class _Refused(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """Raised by a handler before it changes anything: the message is set aside."""

    def __init__(self, why: Refusal, outputs: Sequence[Output] = ()) -> None:
        super().__init__(why.text)
        self.reason = why.text
        self.code = why.code
        self.outputs = outputs


class _AwaitingMembers(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """Raised before anything changes: the message names a destination not known yet."""

    def __init__(self, until_ms: int) -> None:
        super().__init__(until_ms)
        self.until_ms = until_ms


class _Held(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """Raised by a handler before it changes anything: the message waits (§4.11)."""

    def __init__(self, ts: int) -> None:
        super().__init__(ts)
        self.ts = ts


def _version(record: Message) -> Version:
    return record.topic, record.digest


@mypyc_attr(allow_interpreted_subclasses=True)  # the mutation tests' and transcripts' engines
class Engine:
    """The ordering state machine of the node for topic ``topic``.

    ``partition`` is the node's layer when the topic is partitioned (§8): outputs carry
    it and deliveries become ``PartitionDeliveryMessage`` for the merger, whose ticks
    (sender ``merger_id``, by default ``merger-<topic>``) move the layer's clock.
    ``window_ms`` is how long settled ids are remembered (§4.13).

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
        window_ms: int = DEFAULT_WINDOW_MS,
        merger_id: str | None = None,
        members: frozenset[str] | None = None,
    ) -> None:
        self.state = EngineState.fresh(
            topic,
            node_id if node_id is not None else f"node-{topic}",
            str(Algorithm(algorithm)),
            partition=partition,
            max_value_bytes=max_value_bytes,
            max_record_bytes=max_record_bytes,
            merger_id=merger_id if merger_id is not None else f"merger-{topic}",
            window_ms=window_ms,
            members=None if members is None else members | {topic},
        )
        self._settle_settings()
        # Derived from the state, rebuilt by from_state: the queue indexes pending.
        self._queue = DeliveryQueue()  # of (timeStamp, messageID)
        #: How a record's origin splits (§7, control logs): ``0``, the origin is the
        #: input offset and ``seq`` is (origin, index); ``n``, the origin is ``(offset <<
        #: n) | k`` -- the ``k``-th input-log record a control-log marker at ``offset``
        #: applies -- and ``seq`` is (offset, ``k << ORIGIN_INDEX_BITS | index``), so
        #: each record's outputs are numbered apart from the other records' of its
        #: marker, as on one log. A setting of the node, not state.
        self.origin_shift = 0
        #: ``direct``: a Notify carries the value only from or to the message's carrier
        #: (§4.16), instead of to every destination. A setting of the node (what it
        #: writes; every release since reads both), not state.
        self.lean_notifies = False
        # Scratch of one step, never part of the state.
        self._check_due = False
        self._aborts: list[Aborted] = []
        self._members_changed = False
        self._handlers: dict[MessageType, Callable[[Message], list[Output]]] = {
            MessageType.CLIENT: self._on_client,
            MessageType.NOTIFY: self._on_notify,
            MessageType.ACK: self._on_ack,
            MessageType.DECIDED: self._on_decided,
            MessageType.ABORT: self._on_abort,
            MessageType.TICK: self._on_tick,
            MessageType.MEMBERS: self._on_members,
        }

    def _settle_settings(self) -> None:
        """The values derived from the state's settings: the protocol's table, the
        delivery type, the memory's window."""
        state = self.state
        self.algorithm = Algorithm(state.algorithm)
        self._rules = PROTOCOLS[self.algorithm]  # who proposes, decides, answers whom
        self._protocol = str(self.algorithm)  # what our control messages name
        self.window = Window(state.memory.window_ms)
        self._delivery_type = (
            MessageType.DELIVERY if state.partition is None else MessageType.PARTITION_DELIVERY
        )

    # ------------------------------------------------------------------ the state, read

    @property
    def topic(self) -> str:
        """The topic this engine orders."""
        return self.state.topic

    @property
    def node_id(self) -> str:
        """The id this engine's control messages carry."""
        return self.state.node_id

    @property
    def partition(self) -> int | None:
        """The node's layer of a partitioned topic (§8), or ``None``."""
        return self.state.partition

    @property
    def max_value_bytes(self) -> int:
        """The largest value taken up (§4.9)."""
        return self.state.max_value_bytes

    @property
    def max_record_bytes(self) -> int:
        """The largest record written."""
        return self.state.max_record_bytes

    @property
    def merger_id(self) -> str:
        """The sender of the merger's ticks (§8)."""
        return self.state.merger_id

    @property
    def clock(self) -> int:
        """The Lamport clock (rules 1 and 2)."""
        return self.state.clock

    @property
    def now_ms(self) -> int:
        """The log's time: the largest log append time seen (ms, §4.11)."""
        return self.state.now_ms

    @property
    def stats(self) -> EngineStats:
        """The counters (part of the state: a restored engine counts on)."""
        return self.state.stats

    @property
    def members(self) -> frozenset[str] | None:
        """The topics that have a node, as this node last wrote them (§4.9.5)."""
        return self.state.members

    @property
    def members_log_ms(self) -> int | None:
        """The log time of the last members record read (§4.9.5)."""
        return self.state.members_log_ms

    @property
    def logged_protocol(self) -> str | None:
        """Another protocol named by one of this node's own members records, or ``None``."""
        return self.state.logged_protocol

    # ------------------------------------------------------------------ public API

    def step(self, records: Iterable[Message]) -> Step:
        """Apply a batch of input messages, releasing deliveries as each is applied
        (rule 4; so what a record finds does not depend on where a batch ends, rule 8)."""
        result = self._apply(records, deliver=True)
        result.outputs.extend(self.deliver_ready())
        return result

    def handle_batch(self, records: Iterable[Message]) -> list[Output]:
        """:meth:`step`, returning only the outputs (for tests and tools)."""
        return self.step(records).outputs

    def handle(self, record: Message) -> list[Output]:
        """Apply one message without releasing deliveries (:meth:`deliver_ready` does)."""
        return self._apply([record]).outputs

    def _apply(self, records: Iterable[Message], *, deliver: bool = False) -> Step:
        state = self.state
        result = Step()
        self._aborts = result.aborted
        seen = 0
        delivered = 0  # counted by deliver_ready
        take = self._take
        for index, record in enumerate(records):
            seen += 1
            origin = record.origin
            if origin is not None and origin != state.origin:
                state.origin, state.next_index = origin, 0
            log_time = record.logTime
            if log_time is not None and log_time > state.now_ms:
                self._advance(log_time, result)
            arrived = record.arrived
            if arrived is not None and state.input_ms is not None and arrived > state.input_ms:
                state.input_ms = arrived  # the input log's time moves on (§7.1)
                state.stats.forgotten += state.memory.expire(min(state.now_ms, arrived))
            take(index, record, result)
            if self._members_changed:
                self._members_changed = False
                self._retake_awaiting(result)
            if deliver and self._check_due:
                # rule 8: deliver as each record is applied, whatever the batching (a
                # record about a decided message finds it delivered and settled at the
                # log time it was decided, in one batch or record by record)
                released = self.deliver_ready()
                delivered += len(released)
                result.outputs.extend(released)
        state.stats.records_in += seen
        state.stats.records_out += len(result.outputs) - delivered
        return result

    def _advance(self, log_time: int, result: Step) -> None:
        """The log's time moves on to ``log_time`` (a record's, past the log's time):
        what was held until then is applied, and what settled a window ago is
        forgotten (§4.11, §4.13) -- with a control log, a window ago by the time of both
        logs (§7.1)."""
        state = self.state
        state.now_ms = log_time
        horizon = log_time if state.input_ms is None else min(log_time, state.input_ms)
        state.stats.forgotten += state.memory.expire(horizon)
        orphans = state.orphans
        if orphans and orphans[0][0] <= log_time:
            result.outputs.extend(self._numbered(self._abandon_orphans(log_time)))
        if state.held:
            for held in state.held.due(log_time * 1000):
                self._take(None, held, result, released=True, timed=True)

    def _retake_awaiting(self, result: Step) -> None:
        """Take the messages that waited for members again, after a members record (or
        a new member): each is taken, refused, or waits on."""
        if not self.state.awaiting:
            return
        due = [m for _, m in self.state.awaiting]
        self.state.awaiting = []
        for message in due:
            self._take(None, message, result, released=True)

    def _abandon_orphans(self, now_ms: int) -> list[Output]:
        """An entry a peer's Ack created a window ago for a message this node has not
        heard of since is a stray's (an honest Ack's Notify is written in the same batch
        as the Notify that caused the Ack): refuse the version, which this node never
        proposed for, and tell the other destinations, so none waits for this node."""
        out: list[Output] = []
        orphans = self.state.orphans
        while orphans and orphans[0][0] <= now_ms:
            _, mid = orphans.popleft()
            entry = self.state.pending.get(mid)
            if entry is None or entry.local is not None:
                continue
            del self.state.pending[mid]
            self.state.stats.forgotten += 1
            out.extend(self._abort_version(mid, entry.version, entry.sent_at, heard=entry.heard))
        return out

    def _take(
        self,
        position: int | None,
        record: Message,
        result: Step,
        *,
        released: bool = False,
        timed: bool = False,
    ) -> None:
        """Apply one record (``released``: one kept earlier, taken again; ``timed``: it
        was held until the log's time reached its timestamp, §4.11 -- not a record that
        waited for members, §4.9.5, which is never refused for its wait)."""
        state = self.state
        handler = self._handlers.get(record.messageType)
        if handler is None:  # deliveries (the shared layout), watermarks
            state.stats.ignored += 1
            return
        link = None if released else self._link(record)
        # (links[0], links[1], not *link: mypyc calls a native method with * generically)
        if link is not None and state.links.seen(link[0], link[1]):
            state.stats.duplicates += 1
            return
        if released and record.origin is not None:
            result.released.append(record.origin)  # until it is kept again, below
        if timed and self._held_too_long(record):
            self._refuse_late(position, record, result)
            return
        try:
            outputs = handler(record)
            if link is not None and record.messageType is not MessageType.ABORT:
                state.links.take(link[0], link[1])
            if outputs:
                result.outputs.extend(self._numbered(outputs))
        except _Refused as refusal:
            state.stats.rejected += 1
            result.rejected.append(Rejection(position, record, refusal.reason, refusal.code))
            result.outputs.extend(self._numbered(refusal.outputs))
        except _Held as held:
            if link is not None:
                state.links.take(*link)
            state.stats.held += 1
            pushed_out = state.held.hold(record, held.ts)
            self._kept(position, record, result, released)
            if pushed_out is not None:
                self._refuse_held(pushed_out, result)
        except _AwaitingMembers as awaiting:
            if link is not None:
                state.links.take(*link)
            state.awaiting.append((awaiting.until_ms, record))
            self._kept(position, record, result, released)

    def _refuse_late(self, position: int | None, record: Message, result: Step) -> None:
        """Refuse ``record``, held until the log's time reached its timestamp for longer
        than a record may be late: a stray (§4.11, §4.13)."""
        state = self.state
        state.stats.late += 1
        state.stats.rejected += 1
        result.rejected.append(
            Rejection(
                position,
                record,
                f"held until the log's time reached its timestamp, longer than the "
                f"{self.window.max_age_ms} ms a record may be late (§4.11, §4.13): "
                "a stray, not a proposal anyone waits for",
                Reason.STRAY,
            )
        )

    @staticmethod
    def _kept(position: int | None, record: Message, result: Step, released: bool) -> None:
        """Tell the caller that ``record`` is kept for later (its input record is the
        dead letter should a later batch refuse it)."""
        if position is not None:
            result.deferred.append(position)
        elif released and result.released and result.released[-1] == record.origin:
            result.released.pop()  # kept again: not released after all

    def _held_too_long(self, record: Message) -> bool:
        """A record held (§4.11) for longer than a record may be late is a stray's: an
        honest proposal is at most the apply bound ahead of the log, so it is never held
        for long, and the memory window may have forgotten what this one was about
        (§4.13). Decided by log times alone, so a replay in other batches decides the
        same. (Only for time holds: a wait for a members record, §4.9.5, is as long as a
        fresh node takes to start, and an honest proposal waits it out.)"""
        if record.messageType is MessageType.TICK or record.logTime is None:
            return False
        return self.state.now_ms - record.logTime > self.window.max_age_ms

    def _refuse_held(self, record: Message, result: Step) -> None:
        reason = (
            f"held with {len(self.state.held)} other messages whose timestamps are ahead of the "
            "log's time; the one furthest ahead is refused (§4.11)"
        )
        self.state.stats.rejected += 1
        try:
            self._refuse_version(record, Reason.HELD_OVERFLOW, reason)
        except _Refused as refusal:
            result.rejected.append(Rejection(None, record, refusal.reason, refusal.code))
            result.outputs.extend(self._numbered(refusal.outputs))

    def _link(self, record: Message) -> tuple[str, tuple[int, int]] | None:
        """§4.12: the sender and ``seq`` of a control message (or relay copy); one at or
        below the last ``seq`` taken from its sender is a repeat. A ``seq`` is taken from
        every record that passed the checks but an Abort (Aborts change nothing when read
        again, and one set aside silences nobody: a stray's high ``seq`` is never
        taken).

        Relayed client copies keep their own sequence per sender (the key ``"<topic>
        relay"``: no topic name holds a space): with control logs (§7) a peer's relays
        go to this node's input log and its other control messages to its control log,
        and the node applies the two in another interleaving than the peer wrote them;
        each is in its sender's order within its own log. (A method, not a static one:
        the compiled form calls a subclass's, for the mutation tests.)"""
        seq, sender = record.seq, record.sentFromTopic
        if seq is None or sender is None:
            return None
        if record.messageType is MessageType.CLIENT:
            return (sender + " relay", seq)
        return (sender, seq)

    def _numbered(self, outputs: Iterable[Output]) -> list[Output]:
        """Give each control output its ``seq`` (§4.12): the offset of the input record
        being handled and the output's index among that record's outputs. (Tuples
        are built with ``tuple.__new__``: this runs for every control output.)"""
        origin = self.state.origin
        if origin is None:
            return list(outputs)
        index = self.state.next_index
        shift = self.origin_shift
        base = 0
        if shift:
            base = (origin & ((1 << shift) - 1)) << ORIGIN_INDEX_BITS
            origin >>= shift
        out: list[Output] = []
        append = out.append
        pending = self.state.pending
        for output in outputs:
            message = output[1]
            kind = message[_TYPE]
            if kind in _DELIVERY_TYPES:
                append(output)
                continue
            seq = (origin, base + index)
            fields = list(message)  # (not two slices: mypyc copies those generically)
            fields[_SEQ] = seq
            numbered = _new_tuple(Message, fields)
            append(_new_tuple(Output, (output[0], numbered)))
            index += 1
            if kind in _PROPOSAL_TYPES:  # what an Abort answering it must echo (§4.9.4)
                entry = pending.get(message[0])
                if entry is not None:
                    entry.sent[output[0]] = seq
        self.state.next_index = index
        return out

    def deliver_ready(self) -> list[Output]:
        """Release every deliverable message at the head of the queue, in order."""
        state = self.state
        if not self._check_due:
            return []
        self._check_due = False
        out: list[Output] = []
        queue = self._queue
        pending = state.pending
        while queue:
            ts, message_id = queue[0]
            entry = pending[message_id]
            if entry.final is None:
                break
            assert entry.value is not None  # decided here => a proposal => a value
            queue.pop(0)
            del pending[message_id]
            state.memory.settle(message_id, Outcome.DELIVERED, entry.version, state.now_ms)
            delivery = self._control(self._delivery_type, message_id, entry, ts)
            out.append(_new_tuple(Output, (state.topic, delivery)))
        state.stats.deliveries += len(out)
        state.stats.records_out += len(out)
        return out

    def know_members(self, topics: Iterable[str]) -> None:
        """Know ``topics`` as members, as from a members record read before any other
        record (what a node restarted from a snapshot knows; for scripted runs)."""
        state = self.state
        state.members = (state.members or frozenset()) | frozenset(topics) | {state.topic}
        if state.members_log_ms is None:
            state.members_log_ms = 0

    def reconfigure(self, algorithm: Algorithm) -> None:
        """Run ``algorithm`` from now on: only while nothing is pending or held (a
        drained node, §6.6). Its next members record names the new protocol."""
        state = self.state
        if state.pending or state.held or state.awaiting:
            raise ConfigError("a node changes protocol only with nothing in flight")
        state.algorithm = str(Algorithm(algorithm))
        state.logged_protocol = None
        self._settle_settings()

    # ------------------------------------------------------------------ introspection

    @property
    def pending_count(self) -> int:
        """Messages this node has heard of and not yet delivered."""
        return len(self.state.pending)

    @property
    def delivered_count(self) -> int:
        """Messages this node has delivered (since it started, or since the snapshot it
        was restored from: the counter is part of the state)."""
        return self.state.stats.deliveries

    @property
    def held_count(self) -> int:
        """Messages waiting for the log's time to reach their timestamp (§4.11), or for
        their destinations to be known members (§4.9.5)."""
        return len(self.state.held) + len(self.state.awaiting)

    @property
    def awaiting_members(self) -> tuple[str, ...]:
        """Destinations that messages here wait to see in a members record (§4.9.5)."""
        members = self.state.members if self.state.members_log_ms is not None else None
        known = members or frozenset({self.state.topic})
        return tuple(sorted({t for _, m in self.state.awaiting for t in m.topic if t not in known}))

    @property
    def next_due_ms(self) -> int | None:
        """The log time (ms) at which the next held message is due, or ``None``."""
        due = self.state.held.next_due_us
        return None if due is None else -(-due // 1000)

    @property
    def next_orphan_due_ms(self) -> int | None:
        """The log time (ms) at which the oldest entry a peer's Ack made for a message
        this node has not heard of (``poc``) is abandoned (rule 9), or ``None``. Until the
        log's time reaches it, the entry holds back every later message of the other
        destinations, so an idle node ticks its log then (the shell, §4.11)."""
        pending = self.state.pending
        for due, mid in self.state.orphans:
            entry = pending.get(mid)
            if entry is not None and entry.local is None:
                return due
        return None

    @property
    def remembered_count(self) -> int:
        """Settled ids and refused versions remembered now (§4.13)."""
        return len(self.state.memory)

    def waiting(self, limit: int = 10) -> list[Waiting]:
        """The first ``limit`` queued messages (the head first) and what they wait for."""
        out = []
        for ts, message_id in self._queue.islice(0, limit):
            entry = self.state.pending[message_id]
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
            return min(head, self.state.clock + 1)
        return self.state.clock + 1

    def is_pending(self, message_id: str) -> bool:
        """True while this node holds ``message_id`` undelivered."""
        return message_id in self.state.pending

    def is_delivered(self, message_id: str) -> bool:
        """True once this node has delivered ``message_id`` (and still remembers it)."""
        return self._already_seen(message_id)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain JSON-serialisable data (see :meth:`restore`)."""
        return self.state.to_data()

    @classmethod
    def restore(cls, snapshot: dict[str, Any]) -> Engine:
        """Rebuild an engine from :meth:`snapshot` output (``SnapshotError`` if it
        cannot be read)."""
        return cls.from_state(EngineState.from_data(snapshot))

    @classmethod
    def from_state(cls, state: EngineState) -> Engine:
        """An engine whose state is ``state`` (taken over, not copied: the state is not
        to be used after); what is derived from it, the delivery queue, is rebuilt."""
        engine = cls(state.topic, state.node_id, state.algorithm)
        engine.state = state
        engine._settle_settings()
        for mid, entry in state.pending.items():
            if entry.key_ts is not None:
                engine._queue.add((entry.key_ts, mid))
        engine._check_due = True
        return engine

    # ------------------------------------------------------------------ seams

    def _observe(self, ts: int) -> None:
        """Rule 2: every accepted timestamp moves the clock."""
        self.state.clock = max(self.state.clock, ts)

    def _propose(self) -> int:
        """Rule 1: a strictly fresh proposal."""
        self.state.clock += 1
        return self.state.clock

    def _ack_timestamp(self, entry: PendingMessage, notify: Message) -> int:
        """The proposal a reply to a Notify carries (an Ack; ``direct``: a Notify): this
        node's own."""
        assert entry.local is not None
        return entry.local

    def _complete(self, entry: PendingMessage) -> bool:
        """Rule 3: a proposal from every destination, by topic, not by count."""
        proposals = entry.proposals
        destinations = entry.destinations
        if len(proposals) < len(destinations):
            return False
        for topic in destinations:  # noqa: SIM110 -- no generator per record: hot path
            if topic not in proposals:
                return False
        return True

    def _already_seen(self, message_id: str) -> bool:
        """Rule 5: a delivered message is never taken up again."""
        return self.state.memory.outcome_of(message_id) is Outcome.DELIVERED

    # ------------------------------------------------------------------ admission (§4.9)

    def _known_version(self, mid: str) -> Version | None:
        entry = self.state.pending.get(mid)
        if entry is not None:
            return entry.version
        settled = self.state.memory.outcome(mid)
        return None if settled is None else settled[1]

    def _check_version(self, record: Message) -> None:
        """Refuse a record that contradicts what this node knows under its id."""
        entry = self.state.pending.get(record.messageID)
        if entry is not None:  # the common case, without building the version tuples
            if entry.digest == record.digest and entry.destinations == record.topic:
                return
            known: Version = entry.version
        else:
            found = self._known_version(record.messageID)
            if found is None or found == _version(record):
                return
            known = found
        self.state.stats.conflicts += 1
        self._refuse_version(
            record,
            Reason.CONFLICT,
            f"messageID {record.messageID!r} already names a message to "
            f"{_names(known[0])} (value digest {known[1]}); this {record.messageType.value} "
            f"names one to {_names(record.topic)} (value digest {record.digest}): "
            "the id was reused",
        )

    def _refuse_version(
        self, record: Message, code: Reason, details: str, *, mismatch: bool = False
    ) -> NoReturn:
        """Refuse ``record`` and, unless this node proposed for its version, the version
        itself, for good (§4.9.4): this node never proposes for it, so it is decided
        nowhere; the first time, tell its other destinations (Abort) so that none of them
        waits for this node's proposal. The Abort to the record's sender answers it
        (echoes its ``seq``), and so do those to every peer whose proposal was heard.

        A record about a version this node proposed for is only set aside: another
        destination may have decided it. ``mismatch``: the record names another
        protocol. If it is its sender's own proposal, the sender runs another protocol,
        and neither ever counts the other's proposals, so the version is decided
        nowhere: the sender is answered with an Abort echoing the record, which drops
        the version there (§4.9.6). A stray's ``seq`` echoes nothing its sender wrote.
        The refusal's prose is ``code``'s with ``details``."""
        why = refusal(code, details)
        mid, version = record.messageID, _version(record)
        entry = self.state.pending.get(mid)
        ours = entry is not None and entry.version == version
        if ours:
            assert entry is not None
            if entry.final is not None or entry.local is not None:
                answer: list[Output] = []
                sender, seq = record.sentFromTopic, record.seq
                if (
                    mismatch
                    and entry.final is None
                    and sender is not None
                    and seq is not None
                    and record.messageType in _PROPOSAL_TYPES
                ):
                    answer = [Output(sender, self._abort(mid, version, record.sentAt, seq))]
                raise _Refused(why, answer)  # the version goes on here
        heard = entry.heard if ours and entry is not None else {}
        sender = record.sentFromTopic if record.messageType is not MessageType.ABORT else None
        aborts: list[Output] = []
        if not self.state.memory.is_refused(mid, version):
            if ours:
                self._drop(mid, why.text)
            answering = record if sender is not None else None
            aborts = self._abort_version(mid, version, record.sentAt, answering, heard)
        elif sender not in (None, self.state.topic) and {sender, self.state.topic} <= set(
            version[0]
        ):
            # refused before: the peer that wrote this waits for this node -- tell it
            # again (an Abort is idempotent), as for a settled message (_answer_settled)
            aborts = [Output(sender, self._abort(mid, version, record.sentAt, record.seq))]
        raise _Refused(why, aborts)

    def _abort_version(
        self,
        mid: str,
        version: Version,
        sent_at: int | None,
        answering: Message | None = None,
        heard: Mapping[str, tuple[int, int]] | None = None,
    ) -> list[Output]:
        """Refuse ``mid``'s ``version`` for good here and tell its other destinations
        (those known to have a node, and the sender of ``answering``, the record that
        brought the version here: it has one): the Aborts to write (§4.9.4). The one to
        ``answering``'s sender echoes its ``seq``; one to a peer whose proposal this node
        heard (``heard``) echoes that proposal's."""
        state = self.state
        state.memory.refuse(mid, version, state.now_ms)
        if self._known_version(mid) is None:  # never take this version up again
            state.memory.settle(mid, Outcome.ABORTED, version, state.now_ms)
        destinations = version[0]
        if state.topic not in destinations:
            return []
        members = state.members
        replied = answering.sentFromTopic if answering is not None else None
        out: list[Output] = []
        for t in destinations:
            if t == state.topic:
                continue
            if t == replied:
                assert answering is not None
                echo = answering.seq
            else:
                echo = heard.get(t) if heard else None
                if echo is None and members is not None and t not in members:
                    continue
            out.append(Output(t, self._abort(mid, version, sent_at, echo)))
        return out

    def _abort(
        self, mid: str, version: Version, sent_at: int | None, answers: tuple[int, int] | None
    ) -> Message:
        """The Abort of ``mid``'s ``version`` this node writes (``answers``: the ``seq`` of
        the peer's record it answers)."""
        destinations, digest = version
        return self._outgoing(
            MessageType.ABORT, mid, destinations, digest, sent_at=sent_at, answers=answers
        )

    def _drop(self, mid: str, reason: str) -> None:
        """Forget the undelivered message ``mid`` here: it is aborted."""
        entry = self.state.pending.pop(mid)
        if entry.key_ts is not None:
            self._queue.remove((entry.key_ts, mid))
        self.state.memory.settle(mid, Outcome.ABORTED, entry.version, self.state.now_ms)
        self._check_due = True  # the head may have been this message
        self.state.stats.aborted += 1
        self._aborts.append(Aborted(mid, entry.destinations, reason))

    def _check_peer(self, record: Message, *, versioned: bool = True) -> None:
        """The checks every control message from a peer node passes before it counts:
        its form and addressing (set aside), its protocol (aborted: a version whose
        destinations run different protocols is decided nowhere, §4.9.6), its version
        (§4.9.4) and its timestamp (§4.11)."""
        state = self.state
        kind = record.messageType
        if record.digest is None:
            raise _Refused(refusal(Reason.MISADDRESSED, f"{kind.value} carries no value digest"))
        sender = record.sentFromTopic
        destinations = record.topic
        if state.topic not in destinations:
            raise _Refused(
                refusal(Reason.MISADDRESSED, f"{kind.value} not addressed to {state.topic}")
            )
        if sender == state.topic or sender not in destinations:
            raise _Refused(
                refusal(
                    Reason.MISADDRESSED,
                    f"{kind.value} from {sender}, which is not another destination",
                )
            )
        if state.partition is not None:
            self._check_partition(record)
        if record.protocol != self._protocol and kind is not MessageType.ABORT:
            state.stats.protocol_mismatches += 1
            self._refuse_version(
                record,
                Reason.PROTOCOL_MISMATCH,
                f"{record.senderID or 'the sender'} runs "
                f"{record.protocol or 'no stated protocol (a format-1 record?)'}, "
                f"this node runs {self.algorithm.value}",
                mismatch=True,
            )
        if versioned:
            self._check_version(record)
        ts = record.timeStamp
        if ts is not None and ts > state.now_ms * 1000 + CLOCK_LEAD_US:  # else applied at once
            self._check_timestamp(record, ts)
        members = state.members
        if members is not None and sender is not None and sender not in members:
            # its node wrote a record into our log that passed every check: the topic has
            # a node (§4.9.5), whatever the status topic has told us so far (it lags in a
            # broker failover); a refused record makes nobody a member
            state.members = members | {sender}
            self._members_changed = True

    def _check_partition(self, record: Message) -> None:
        layer = record.partitionID
        if self.state.partition is not None and layer is not None and layer != self.state.partition:
            raise _Refused(
                refusal(
                    Reason.WRONG_LAYER,
                    f"a record of layer {layer} in the log of layer {self.state.partition}",
                )
            )

    def _check_timestamp(self, record: Message, ts: int) -> None:
        """§4.11: a timestamp too far ahead of the log's time waits, or is refused."""
        verdict = judge(ts, self.state.now_ms * 1000)
        if verdict is Verdict.APPLY:
            return
        if verdict is Verdict.HOLD:
            raise _Held(ts)
        reason = (
            f"timestamp {ts} is more than an hour ahead of the log's time "
            f"({self.state.now_ms * 1000} µs since the epoch): refused so that one record cannot "
            "run a clock ahead (§4.11)"
        )
        if record.messageType is MessageType.TICK or record.digest is None:
            raise _Refused(refusal(Reason.TIMESTAMP_AHEAD, reason))
        self._refuse_version(record, Reason.TIMESTAMP_AHEAD, reason)

    def _check_can_propose(self, record: Message, ts: int | None = None) -> None:
        """A proposal after observing ``ts`` must not pass ``MAX_TIMESTAMP`` (§4.9.3)."""
        clock = self.state.clock if ts is None else max(self.state.clock, ts)
        if clock >= MAX_TIMESTAMP:
            self._refuse_version(
                record,
                Reason.CLOCK_EXHAUSTED,
                f"the clock is exhausted ({clock} = {MAX_TIMESTAMP})",
            )

    def _check_value(self, record: Message) -> None:
        """§4.9.1-2 on first hearing: the value is JSON and its copies fit a record."""
        value = record.value or b""
        size = len(value)
        limit = min(
            self.state.max_value_bytes,
            self.state.max_record_bytes - envelope_bytes(record.messageID, record.topic),
        )
        if size > limit:
            self._refuse_version(
                record,
                Reason.TOO_LARGE,
                f"value of {size} bytes is over the {limit}-byte limit for this message "
                f"(max value {self.state.max_value_bytes} bytes; its copies must fit a "
                f"{self.state.max_record_bytes}-byte record)",
            )
        if record.encoding is not None:
            return  # raw bytes (§3.8): any value is a value
        try:
            check_json_value(value)
        except MessageError as exc:
            self._refuse_version(record, Reason.INVALID_RECORD, str(exc))

    def _check_members(self, record: Message) -> None:
        """§4.9.5 on first hearing: every destination has a node. A destination no node
        has ever served would hold the message -- and every later one here -- forever.
        One this node has not heard of yet waits (a brand-new topic's node may have just
        started) until a members record names it, and is refused by a members record
        written the grace period or more after it that does not (the shell writes one
        every second while messages wait)."""
        state = self.state
        members = state.members
        if members is None:
            return
        unknown = [t for t in record.topic if t not in members]
        if not unknown and (state.members_log_ms is not None or record.topic == (state.topic,)):
            return
        # (before its first members record a node takes up nothing that names another
        # topic, even one whose node wrote here: nothing protocol-specific happens before
        # the record that names the protocol, so a restart under another protocol is
        # caught by it (§6.6))
        since = record.logTime if record.logTime is not None else state.now_ms
        evidence = state.members_log_ms
        if evidence is None or evidence < since + MEMBERS_GRACE_MS:
            raise _AwaitingMembers(since + MEMBERS_GRACE_MS)
        self._refuse_version(
            record,
            Reason.NO_NODE,
            f"destination {_names(unknown)} has no node (no node of it has published a "
            f"status within {MEMBERS_GRACE_MS // 1000} s of this message); start one, or check "
            "the destination's name",
        )

    def _check_late(self, record: Message) -> None:
        """§4.13: a client copy of a message unknown here that reached the log too late
        (or dated ahead) is set aside -- without an Abort. A copy is judged by when it
        reached its log, also one a control log's marker applies later (§7.1)."""
        arrived = record.arrived
        reached = record.logTime if arrived is None else arrived
        why = self.window.lateness(record.sentAt, reached)
        if why is not None:
            self.state.stats.late += 1
            raise _Refused(why)

    def _check_forgotten(self, record: Message) -> None:
        """§4.13: a peer's proposal that would make this node take up a message it does
        not know, written late (its writer was down between reading the message and
        writing it), may be about a version this node aborted and has forgotten since;
        taken up, this node would propose for a version it refused, after its peers
        dropped theirs on its Abort, and the writer would decide with their stale
        proposals. So it is refused, answered with an Abort (rule 9), when it reached
        the log more than half a window after it was sent, as a late client copy, and
        was sent no later than an abort forgotten here expired."""
        arrived = record.arrived
        reached = record.logTime if arrived is None else arrived
        sent_at = record.sentAt
        if not self.state.memory.may_have_aborted(sent_at) or reached is None:
            return
        assert sent_at is not None
        age = reached - sent_at
        if age <= self.window.max_age_ms:
            return
        self.state.stats.late += 1
        self._refuse_version(
            record,
            Reason.LATE,
            f"a {record.messageType.value} of a message sent {age} ms before it reached "
            f"this log, more than the {self.window.max_age_ms} ms a copy may take, and no "
            "later than an abort this node has forgotten (§4.13): a proposal for a "
            "version this node may have refused",
        )

    def _answer_settled(self, record: Message) -> list[Output]:
        """A peer's record about a message settled here. If this node aborted or
        refused that version, the peer may be waiting for it: tell it again (the Abort
        is idempotent). If this node delivered that version, a proposal for it (with a
        ``seq``: rule 12 let it through, so no replay) was written by a peer that took
        the message up again after forgetting it (§4.13: a stray's Notify, or a copy
        written again after the window, reached it first): this node never proposes
        for it again while it remembers, so that entry is decided nowhere -- answer the
        proposal with an Abort, or the peer holds it at its queue head for good (rule
        9). Otherwise it changes nothing."""
        mid = record.messageID
        settled = self.state.memory.outcome(mid)
        version = _version(record)
        sender = record.sentFromTopic
        # (not ``settled == (Outcome.ABORTED, version)``: mypyc's == of nested tuples
        # reads uninitialised memory when the first items differ)
        same = settled is not None and settled[1] == version
        refused = self.state.memory.is_refused(mid, version) or (
            same and settled is not None and settled[0] is Outcome.ABORTED
        )
        retaken = (
            same
            and settled is not None
            and settled[0] is Outcome.DELIVERED
            and record.seq is not None
            and record.messageType in _PROPOSAL_TYPES
        )
        self.state.stats.duplicates += 1
        if not (refused or retaken) or sender is None or self.state.topic not in record.topic:
            return []
        return [Output(sender, self._abort(mid, version, record.sentAt, record.seq))]

    # ------------------------------------------------------------------ handlers

    def _entry(self, record: Message, entry: PendingMessage | None) -> PendingMessage:
        """The message's entry (``entry``: what ``_pending`` holds for it now), created
        on first hearing; a known value is kept."""
        mid = record.messageID
        if entry is None:
            entry = self.state.pending[mid] = PendingMessage(
                record.topic,
                record.digest,
                record.value,
                record.sentAt,
                record.key,
                record.headers,
                record.encoding,
            )
        elif entry.value is None:
            entry.value = record.value
            entry.sent_at, entry.key = record.sentAt, record.key
            entry.headers, entry.encoding = record.headers, record.encoding
        return entry

    def _settled(self, mid: str) -> bool:
        """Delivered (rule 5), aborted or relayed here, as far as memory goes."""
        if self._already_seen(mid):
            return True
        outcome = self.state.memory.outcome_of(mid)
        return outcome is not None and outcome is not Outcome.DELIVERED

    def _on_client(self, record: Message) -> list[Output]:
        state = self.state
        mid = record.messageID
        if state.partition is not None:
            self._check_partition(record)
        if state.topic not in record.topic:
            return self._relay(record)
        self._check_version(record)
        if self._settled(mid):
            state.stats.duplicates += 1
            return []
        entry = state.pending.get(mid)
        if entry is not None and entry.local is not None:
            state.stats.duplicates += 1
            return []
        if entry is None:
            self._check_late(record)
        self._check_members(record)
        self._check_value(record)
        self._check_can_propose(record)
        entry = self._entry(record, entry)
        proposal = self._propose()
        entry.local = proposal
        entry.proposals[state.topic] = proposal
        self._queue.add((proposal, mid))
        if len(record.topic) == 1:  # rule 6: the proposal is final
            entry.final = proposal
            self._check_due = True
            return []
        entry.coordinator = self._rules.entry_coordinates
        out = self._notify_others(mid, entry, proposal)
        if self._complete(entry):  # poc, direct: the others' proposals may be here already
            out.extend(self._decide(mid, entry))
        return out

    def _notify_others(self, mid: str, entry: PendingMessage, proposal: int) -> list[Output]:
        """This node's proposal to every other destination. With ``lean_notifies``
        (``direct``, three or more destinations) only the Notifies from and to the
        message's carrier carry the value (§4.16): O(k) copies of it, not O(k²)."""
        notify = self._control(MessageType.NOTIFY, mid, entry, proposal)
        own = self.state.topic
        destinations = entry.destinations
        if self.lean_notifies and len(destinations) > 2 and self._rules.notifies_are_proposals:
            carrier = routed_by_id(destinations, mid)
            if carrier != own:
                lean = self._control(MessageType.NOTIFY, mid, entry, proposal, with_value=False)
                return [
                    _new_tuple(Output, (t, notify if t == carrier else lean))
                    for t in destinations
                    if t != own
                ]
        return [_new_tuple(Output, (t, notify)) for t in destinations if t != own]

    def _relay(self, record: Message) -> list[Output]:
        mid = record.messageID
        self._check_version(record)
        if self._settled(mid):
            self.state.stats.duplicates += 1
            return []
        self._check_late(record)
        self._check_members(record)
        self._check_value(record)
        self.state.memory.settle(mid, Outcome.RELAYED, _version(record), self.state.now_ms)
        self.state.stats.relayed += 1
        destinations = record.topic
        forwarded = self._outgoing(
            MessageType.CLIENT, mid, destinations, record.digest, record.value,
            sent_at=record.sentAt, key=record.key, headers=record.headers,
            encoding=record.encoding,
        )  # fmt: skip
        targets, by_id = route(destinations, None, self.algorithm)
        if by_id:
            return [Output(routed_by_id(targets, mid), forwarded)]
        return [Output(t, forwarded) for t in targets]

    def _on_notify(self, record: Message) -> list[Output]:
        mid = record.messageID
        sender = record.sentFromTopic
        ts = record.timeStamp
        assert sender is not None and ts is not None
        self._check_peer(record)
        lean = record.value is None
        if lean and not self._rules.notifies_are_proposals:
            raise _Refused(refusal(Reason.INVALID_RECORD, "NotifyMessage carries no value"))
        if self._settled(mid):
            self._observe(ts)
            return self._answer_settled(record)
        state = self.state
        entry = state.pending.get(mid)
        if entry is None or entry.local is None:  # first hearing: this node will propose
            self._check_first_notify(record, ts, entry)
        self._observe(ts)
        entry = self._entry(record, entry)
        entry.proposals.setdefault(sender, ts)  # a Notify is a proposal too
        if record.seq is not None:
            entry.heard[sender] = record.seq
        if entry.final is not None:
            self.state.stats.duplicates += 1
            return []
        if entry.local is not None:
            return self._notify_again(mid, sender, entry, record)
        if entry.value is None:  # a lean Notify (§4.16): propose once the value is here
            return []
        proposal = self._propose()
        entry.local = proposal
        entry.proposals[state.topic] = proposal
        self._queue.add((proposal, mid))
        reply = self._rules.reply_to_notify
        if reply is Reply.NOTIFY_EVERY_OTHER:
            out = self._notify_others(mid, entry, self._ack_timestamp(entry, record))
        elif reply is Reply.ACK_THE_SENDER:
            entry.acked_to.add(sender)
            return [self._ack_to(sender, mid, entry, record)]
        else:
            out = [
                self._ack_to(t, mid, entry, record)
                for t in entry.destinations
                if t != self.state.topic
            ]
        if self._complete(entry):
            out.extend(self._decide(mid, entry))
        return out

    def _check_first_notify(self, record: Message, ts: int, entry: PendingMessage | None) -> None:
        """The checks of a Notify about a message this node has not proposed for: it
        makes this node propose, now or (a lean Notify, §4.16) once the value is here.
        A lean one that starts an entry makes it an orphan until the value comes (with
        the carrier's Notify or a client copy): one that never gets it within a window is
        a stray's, refused then (:meth:`_abandon_orphans`)."""
        self._check_forgotten(record)
        self._check_members(record)
        lean = record.value is None
        if not lean:
            self._check_value(record)
        self._check_can_propose(record, ts)
        if entry is None and lean:
            state = self.state
            state.orphans.append((state.now_ms + self.window.window_ms, record.messageID))

    def _notify_again(
        self, mid: str, sender: str, entry: PendingMessage, record: Message
    ) -> list[Output]:
        """A Notify for a message this node has proposed for already.

        ``direct``: one more destination's proposal. ``poc``/``optimized``: only a
        second coordinator (the same id sent as a ClientMessage to two destinations)
        needs an answer, once. Its Notify may also be the last proposal this node was
        waiting for: the Ack it sends later is then a duplicate, so decide now or never.
        """
        out: list[Output] = []
        rules = self._rules
        if rules.notifies_are_proposals:
            if self._complete(entry):
                out.extend(self._decide(mid, entry))
            return out
        if rules.reply_to_notify is Reply.ACK_THE_SENDER and sender not in entry.acked_to:
            entry.acked_to.add(sender)
            out.append(self._ack_to(sender, mid, entry, record))
        if (not rules.coordinator_decides or entry.coordinator) and self._complete(entry):
            out.extend(self._decide(mid, entry))
        if not out:
            self.state.stats.duplicates += 1
        return out

    def _on_ack(self, record: Message) -> list[Output]:
        state = self.state
        mid = record.messageID
        sender = record.sentFromTopic
        ts = record.timeStamp
        assert sender is not None and ts is not None
        self._check_peer(record)
        settled = self._settled(mid)  # pending or settled does not depend on batching
        if self._rules.coordinator_decides and not settled and mid not in state.pending:
            self._refuse_version(  # only a coordinator gets Acks, and it knows its own
                record,
                Reason.STRAY,
                f"an Ack for {mid!r}, which this node never coordinated (a forged Notify "
                "elsewhere?)",
            )
        self._observe(ts)  # before the settled answer: the clock must not depend on batching
        if settled:
            return self._answer_settled(record)
        entry = state.pending.get(mid)
        if entry is None:
            # poc: an Ack may overtake the Notify that starts us. Before the members
            # record that lets this node take the message up it waits, as that Notify
            # does (§4.9.5): an entry made now would be abandoned as a stray's, should
            # the wait outlast the memory window, before the Notify could join it.
            self._check_members(record)
            state.orphans.append((state.now_ms + self.window.window_ms, mid))
        entry = self._entry(record, entry)
        if record.seq is not None:
            entry.heard[sender] = record.seq
        if sender in entry.proposals:
            state.stats.duplicates += 1
            return []
        entry.proposals[sender] = ts
        if entry.final is not None or entry.local is None:
            return []
        if self._rules.coordinator_decides and not entry.coordinator:
            return []
        if self._complete(entry):
            return self._decide(mid, entry)
        return []

    def _on_decided(self, record: Message) -> list[Output]:
        mid = record.messageID
        final = record.timeStamp
        assert final is not None
        known = self.state.pending.get(mid)
        if known is None and not self._settled(mid):
            # §4.9: an honest Decided follows its Notify in this log; a replay is a repeat.
            # Refused before anything of it counts (not even its sender as a member).
            raise _Refused(
                refusal(
                    Reason.STRAY,
                    f"DecidedMessage for {mid!r}, a message this node never heard of: an "
                    "honest Decided comes after its Notify in the same log (§4.9); a stray or "
                    "a forgery",
                )
            )
        if not self._rules.coordinator_decides and record.protocol == self._protocol:
            # §4.9: poc and direct decide at every destination; none writes a Decided
            raise _Refused(
                refusal(
                    Reason.STRAY,
                    f"DecidedMessage under {self.algorithm.value}, whose nodes never write one "
                    "(§4.9): a stray or a forgery",
                )
            )
        self._check_peer(record)
        if known is not None and known.final is None:
            self._check_decider(record, known)
        if record.value is None and known is not None and known.value is None:
            raise _Refused(
                refusal(
                    Reason.INVALID_RECORD,
                    "DecidedMessage without a value, for a message whose value is unknown",
                )
            )
        self._observe(final)
        if self._settled(mid):
            return self._answer_settled(record)
        entry = self._entry(record, known)
        if entry.final is not None:
            self.state.stats.duplicates += 1
            return []
        self._set_final(mid, entry, final)
        return []

    def _check_decider(self, record: Message, entry: PendingMessage) -> None:
        """§4.9: an honest Decided for a pending message comes from a coordinator this node
        acked; one from any other sender would set a final timestamp at this destination
        alone. (What the final timestamp is cannot be checked here: only the coordinator
        holds every proposal. Signing, §4.14, keeps non-members from writing one.)"""
        sender = record.sentFromTopic
        if sender not in entry.acked_to:
            raise _Refused(
                refusal(
                    Reason.STRAY,
                    f"DecidedMessage for {record.messageID!r} from {sender}, a coordinator "
                    "this node never acked (§4.9): a stray or a forgery",
                )
            )

    def _on_abort(self, record: Message) -> list[Output]:
        """§4.9.4: a destination refused a version. An honest Abort comes from a
        destination that never proposed for it (or from one that learnt of such a
        refusal), so nobody can have decided it. A version this node has not proposed
        for is dropped on any Abort (this node will never propose for it: decided
        nowhere). One it proposed for is dropped only on an Abort that answers its own
        proposal to that sender (echoes its ``seq``): anything else may be a stray, and
        another destination may have delivered the version. When it drops such a
        version, it tells every peer whose proposal it heard, echoing it."""
        state = self.state
        mid = record.messageID
        self._check_peer(record, versioned=False)
        version = _version(record)
        known = self._known_version(mid)
        if known is None:  # refused elsewhere before it reached us: never take it up
            state.memory.settle(mid, Outcome.ABORTED, version, state.now_ms)
            return []
        if known != version:  # about another message under the same id
            state.stats.ignored += 1
            return []
        entry = state.pending.get(mid)
        if entry is None or entry.final is not None:
            # delivered, relayed or aborted already; a decided version cannot be
            # refused by one of its destinations (it proposed for it), so this is a copy
            state.stats.duplicates += 1
            return []
        sender = record.sentFromTopic
        assert sender is not None  # _check_peer
        if entry.local is not None and (
            record.answers is None or entry.sent.get(sender) != record.answers
        ):
            state.stats.unconfirmed_aborts += 1
            raise _Refused(
                refusal(
                    Reason.STRAY,
                    f"an Abort from {sender} that answers none of this node's proposals to "
                    "it: the version goes on here, and is dropped when that destination "
                    "answers this node's proposal (§4.9.4); a stray, or the Abort it sends "
                    "before that",
                )
            )
        out = [
            Output(t, self._abort(mid, version, entry.sent_at, seq))
            for t, seq in entry.heard.items()
            if t != sender
        ]
        self._drop(mid, f"destination {sender} aborted it (see its dead-letter topic)")
        return out

    def _on_tick(self, record: Message) -> list[Output]:
        """§8: the merger moves an idle layer's clock through the log; a node's own tick
        moves only the log's time (§4.11)."""
        ts = record.timeStamp
        assert ts is not None
        self._check_partition(record)
        if record.senderID not in (self.state.merger_id, self.state.node_id):
            raise _Refused(
                refusal(
                    Reason.STRAY,
                    f"TickMessage from {record.senderID or 'an unnamed sender'}: only "
                    f"{self.state.merger_id} (and this node itself) may tick this log",
                )
            )
        self._check_timestamp(record, ts)
        self._observe(ts)
        return []

    def _on_members(self, record: Message) -> list[Output]:
        """§4.9.5: this node's own record of which topics have a node."""
        state = self.state
        if record.senderID != state.node_id:
            raise _Refused(
                refusal(
                    Reason.STRAY,
                    f"MembersMessage from {record.senderID or 'an unnamed sender'}: only "
                    "this node writes its own",
                )
            )
        if record.protocol is not None and record.protocol != self._protocol:
            # this node's log was processed under another protocol up to here: a node
            # restarted with another --algorithm; its batch layer refuses to go on (§6.6)
            state.logged_protocol = record.protocol
        # only ever grows: a record written from a partial read of the statuses (a
        # restarted node, a broker failover) must not make live destinations unknown
        state.members = (state.members or frozenset()) | frozenset(record.topic) | {state.topic}
        if record.logTime is not None:  # the evidence a refusal needs: a time in the log
            state.members_log_ms = max(record.logTime, state.members_log_ms or 0)
        self._members_changed = True
        return []

    # ------------------------------------------------------------------ helpers

    def _decide(self, mid: str, entry: PendingMessage) -> list[Output]:
        proposals = entry.proposals  # proposals of other topics never count
        final = max([proposals[t] for t in entry.destinations if t in proposals])
        self._observe(final)
        self._set_final(mid, entry, final)
        if not self._rules.coordinator_decides or not entry.coordinator:
            return []
        decided = self._control(MessageType.DECIDED, mid, entry, final)
        return [Output(t, decided) for t in entry.destinations if t != self.state.topic]

    def _set_final(self, mid: str, entry: PendingMessage, final: int) -> None:
        old = entry.key_ts
        entry.final = final
        if old != final:
            if old is not None:
                self._queue.remove((old, mid))
            self._queue.add((final, mid))
        self._check_due = True

    def _ack_to(self, target: str, mid: str, entry: PendingMessage, notify: Message) -> Output:
        ts = self._ack_timestamp(entry, notify)
        return Output(target, self._control(MessageType.ACK, mid, entry, ts, with_value=False))

    def _control(
        self,
        kind: MessageType,
        mid: str,
        entry: PendingMessage,
        ts: int,
        *,
        with_value: bool = True,
    ) -> Message:
        """A message about ``entry`` this node writes (a control message, or its
        delivery), with the value and the user's key and headers unless ``with_value``
        is false."""
        if not with_value:
            return self._outgoing(
                kind, mid, entry.destinations, entry.digest, None, ts, sent_at=entry.sent_at
            )
        return self._outgoing(
            kind,
            mid,
            entry.destinations,
            entry.digest,
            entry.value,
            ts,
            sent_at=entry.sent_at,
            key=entry.key,
            headers=entry.headers,
            encoding=entry.encoding,
        )

    def _outgoing(
        self,
        kind: MessageType,
        mid: str,
        destinations: tuple[str, ...],
        digest: str | None,
        value: bytes | None = None,
        ts: int | None = None,
        *,
        sent_at: int | None = None,
        key: bytes | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        encoding: str | None = None,
        answers: tuple[int, int] | None = None,
    ) -> Message:
        """A message this node writes: it names the node, its topic, layer and protocol
        (every field by position, built with ``tuple.__new__``: this is on the hot path)."""
        return _new_tuple(
            Message,
            (
                mid,
                kind,
                destinations,
                value,
                self.state.node_id,
                self.state.topic,
                ts,
                self.state.partition,
                digest,
                self._protocol,
                sent_at,
                None,  # seq: numbered when written (_numbered)
                None,  # logTime, origin: an output has none
                None,
                key,
                headers,
                encoding,
                answers,
                None,  # arrived: an output has none
            ),
        )


def _names(topics: Sequence[str]) -> str:
    return "{" + ", ".join(topics) + "}"
