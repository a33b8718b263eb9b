"""Hand-made input messages for engine tests, as a node's decoder would produce them.

Control messages name the protocol of the node that wrote them: pass ``alg`` when the
engine under test runs another one than ``optimized``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from atomickafka.core.engine import Algorithm
from atomickafka.core.wire import Message, MessageType, client_message, value_bytes, value_digest

__all__ = ["abort", "ack", "at", "client", "control", "decided", "notify", "tick", "v"]


def v(value: Any) -> bytes:
    """A value as the core carries it (JSON text)."""
    return value_bytes(value)


def client(mid: str, *destinations: str, value: Any = "v", partition: int | None = None) -> Message:
    """A client's ClientMessage."""
    return client_message(mid, destinations, value, "c", partition)


def control(
    kind: MessageType,
    mid: str,
    destinations: Sequence[str],
    sender: str,
    ts: int | None,
    value: Any = "v",
    alg: Algorithm | str | None = Algorithm.OPTIMIZED,
    *,
    digest: str | None = None,
    partition: int | None = None,
) -> Message:
    """A control message from ``sender``'s node; Acks and Aborts carry no value."""
    data = v(value)
    carries = kind not in (MessageType.ACK, MessageType.ABORT)
    return Message(
        mid,
        kind,
        tuple(sorted(set(destinations))),
        data if carries else None,
        senderID=f"node-{sender}",
        sentFromTopic=sender,
        timeStamp=ts,
        partitionID=partition,
        digest=digest or value_digest(data),
        protocol=None if alg is None else Algorithm(alg).value,
    )


def notify(
    mid: str,
    destinations: Sequence[str],
    sender: str,
    ts: int,
    alg: Algorithm | str = "optimized",
    **kw: Any,
) -> Message:
    return control(MessageType.NOTIFY, mid, destinations, sender, ts, alg=alg, **kw)


def ack(
    mid: str,
    destinations: Sequence[str],
    sender: str,
    ts: int,
    alg: Algorithm | str = "optimized",
    **kw: Any,
) -> Message:
    return control(MessageType.ACK, mid, destinations, sender, ts, alg=alg, **kw)


def decided(
    mid: str,
    destinations: Sequence[str],
    sender: str,
    ts: int,
    alg: Algorithm | str = "optimized",
    **kw: Any,
) -> Message:
    return control(MessageType.DECIDED, mid, destinations, sender, ts, alg=alg, **kw)


def abort(mid: str, destinations: Sequence[str], sender: str, value: Any = "v") -> Message:
    return control(MessageType.ABORT, mid, destinations, sender, None, value)


def tick(ts: int, partition: int | None = None, *, topic: str = "A") -> Message:
    """A tick from ``topic``'s merger."""
    return Message(
        f"tick-{ts}",
        MessageType.TICK,
        (),
        senderID=f"merger-{topic}",
        timeStamp=ts,
        partitionID=partition,
    )


def at(log_time_ms: int, message: Message, origin: int | None = None) -> Message:
    """``message`` as read from a record appended at ``log_time_ms`` (at ``origin``)."""
    return message._replace(logTime=log_time_ms, origin=origin)
