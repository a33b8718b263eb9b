"""Helpers the engine's scenario tests share (test_engine.py, test_engine_direct.py):
compact views of a step's outputs, the engine's state without its counters, realistic
input logs from a simulated run, and a log fed in batches of given sizes."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from atomickafka.core.engine import Algorithm, Engine, Output
from atomickafka.core.wire import Message, MessageType
from atomickafka.verify.simulator import Chaos, RandomChooser, Simulator, random_workload

__all__ = ["delivered", "kinds", "node_logs", "run_in_batches", "state"]


def kinds(outputs: Sequence[Output]) -> list[tuple[str, str, str, int | None]]:
    """(target topic, type, id, timestamp) of each output."""
    return [
        (o.topic, o.message.messageType.value, o.message.messageID, o.message.timeStamp)
        for o in outputs
    ]


def delivered(outputs: Sequence[Output]) -> list[tuple[str, int | None]]:
    """(id, timestamp) of each Delivery among the outputs."""
    return [
        (o.message.messageID, o.message.timeStamp)
        for o in outputs
        if o.message.messageType is MessageType.DELIVERY
    ]


def state(engine: Engine) -> dict[str, Any]:
    """The snapshot without the counters (which count duplicates, by design)."""
    snap = engine.snapshot()
    del snap["stats"]
    return snap


def node_logs(
    seed: int, algorithm: Algorithm, chaos: Chaos | None = None
) -> dict[str, list[Message]]:
    """Realistic input logs: a simulated run of a mixed workload over 5 topics."""
    topics = ["T1", "T2", "T3", "T4", "T5"]
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=40, relay=0.2, skew=10)
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=RandomChooser(seed),
        chaos=chaos or Chaos(duplicate=0.1, delay=0.05),
    )
    result = sim.run(workload)
    assert result.quiescent and result.check().ok
    return result.logs


def run_in_batches(engine: Engine, log: Sequence[Message], sizes: Sequence[int]) -> list[Output]:
    out: list[Output] = []
    position = 0
    i = 0
    while position < len(log):
        size = sizes[i % len(sizes)]
        out.extend(engine.handle_batch(log[position : position + size]))
        position += size
        i += 1
    return out
