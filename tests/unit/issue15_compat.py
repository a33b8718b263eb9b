# ruff: noqa: PLC0415
# mypy: disable-error-code="arg-type,assignment,attr-defined,unused-ignore,no-redef"
# (runs unchanged on fd868a8 too: per-version imports and fakes, see issue15_compat)
"""Adapters so that one scenario runs against fd868a8 (old) and lead (new) alike.

Only *how* a record gets into a log or a node is adapted; the scenario and its
assertions are the same for both versions.
"""

from __future__ import annotations

import inspect
from typing import Any

from atomickafka.core.engine import Algorithm
from atomickafka.core.wire import Message, MessageError, MessageType, decode_record
from atomickafka.verify.layered import LayeredSimulator
from atomickafka.verify.simulator import Simulator

NEW = hasattr(Simulator, "append_input")  # lead: logs of encoded records with log times

if NEW:
    from atomickafka.verify.workload import LayerSend, Send
else:
    from atomickafka.verify.layered import LayerSend  # type: ignore[no-redef]
    from atomickafka.verify.simulator import Send  # type: ignore[no-redef]

__all__ = [
    "NEW",
    "LayerSend",
    "LayeredSimulator",
    "Send",
    "at",
    "drain",
    "inject_bytes",
    "make_sim",
    "tick",
]

#: A log time (ms) for engine-level records on lead (2026-11-23, as its own tests use).
NOW_MS = 1_795_000_000_000


def at(message: Message) -> Message:
    """lead: the record as read from a log appended at NOW_MS; old: unchanged (no log time)."""
    if "logTime" in Message._fields:
        return message._replace(logTime=NOW_MS)
    return message


def tick(ts: int, topic: str, partition: int | None = None) -> Message:
    """A TickMessage from ``topic``'s merger id (old code checks no sender)."""
    return Message(
        f"tick-{ts}",
        MessageType.TICK,
        (),
        senderID=f"merger-{topic}",
        timeStamp=ts,
        partitionID=partition,
    )


def make_sim(
    topics: list[str], algorithm: Algorithm, protocols: dict[str, Algorithm] | None = None
) -> Any:
    """A Simulator; ``protocols`` per topic: lead takes a map, old an engine factory."""
    if protocols is None:
        return Simulator(topics, algorithm=algorithm)
    if "protocols" in inspect.signature(Simulator.__init__).parameters:
        return Simulator(topics, algorithm=algorithm, protocols=protocols)
    from atomickafka.core.engine import Engine

    return Simulator(
        topics,
        algorithm=algorithm,
        engine_factory=lambda t, alg: Engine(t, f"node-{t}", protocols.get(t, alg)),
    )


def inject_bytes(sim: Any, topic: str, raw: bytes) -> str:
    """A record of bytes into ``topic``'s input log, as a plain producer writes it.

    lead: appended as bytes (the node's batch layer decodes it). old: decoded with the
    old codec first, as the old runtime does before calling the engine; a record the
    codec refuses is dead-lettered there, so it is not appended. Returns what happened.
    """
    if NEW:
        sim.append_input(topic, raw, signed=True)
        return "appended"
    try:
        messages = decode_record(raw)
    except MessageError as exc:
        return f"dead-lettered by the old codec: {exc}"
    for m in messages:
        sim.append(topic, m)
    return "decoded and appended"


def drain(sim: Any) -> Any:
    return sim.drain(max_steps=20_000)
