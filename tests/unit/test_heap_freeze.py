"""A node freezes its heap once a second (``gc.freeze``, node/runtime.py): safe only if
its loop makes no reference cycles, since a cycle that is garbage when frozen is never
freed. Checked here on the batch layer and the engine: with the collector off, a run
with deliveries, multicasts, refusals and dead letters leaves nothing for it to find."""

from __future__ import annotations

import gc
import random

import pytest

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.raw import encode_raw_client
from atomickafka.core.reader import PlainRecord
from atomickafka.core.wire import client_message
from atomickafka.node import runtime
from atomickafka.node.batch import NodeBatch, NodeSpec
from atomickafka.verify.simulator import Chaos, RandomChooser, Simulator, random_workload

NOW_MS = 1_795_000_000_000


def _spec() -> NodeSpec:
    return NodeSpec(
        topic="A",
        node_id="node-A",
        role="A",
        algorithm=Algorithm.DIRECT,
        input_topic="atomickafka-in.A",
        input_partition=0,
        delivery_topic="A",
        dead_letter_topic="atomickafka-dlq.A",
        snapshot_topic="atomickafka-snap.A",
        input_prefix="atomickafka-in.",
    )


def _inputs() -> list[PlainRecord]:
    values = []
    for i in range(40):
        dests = ["A", "B"] if i % 2 else ["A"]
        key, value, headers = encode_raw_client(
            client_message(f"c-{i}", dests, {"n": i}, "c", sent_at=NOW_MS)
        )
        values.append((key, value, headers))
    values.append((None, b"not json", []))  # a dead letter
    values.append((None, b'{"messageType": "NotifyMessage"}', []))  # refused: fields missing
    return [
        PlainRecord(v, key=k, headers=h, topic="atomickafka-in.A", offset=i, timestamp_ms=NOW_MS)
        for i, (k, v, h) in enumerate(values)
    ]


@pytest.mark.parametrize("algorithm", list(Algorithm))
def test_the_hot_path_makes_no_reference_cycles(algorithm: Algorithm) -> None:
    names = ["T1", "T2", "T3"]
    rng = random.Random(7)
    workload = random_workload(rng, names, clients=2, messages=60, multicast=0.5, relay=0.1)
    sim = Simulator(names, algorithm=algorithm, chooser=RandomChooser(rng), chaos=Chaos())
    logs = sim.run(workload, max_steps=1_000_000).logs
    records = _inputs()
    # an engine refers to itself (its handlers are bound methods): a cycle per process,
    # made once, so the engines are made (and kept) before the collector is turned off
    engines = {topic: Engine(topic, f"node-{topic}", algorithm) for topic in logs}
    batch = NodeBatch(_spec(), NodeBatch.fresh_engine(_spec()))
    gc.collect()
    gc.disable()
    try:
        for topic, log in logs.items():
            for start in range(0, len(log), 7):
                engines[topic].step(log[start : start + 7])
        batch.step(records[:20], wall_s=NOW_MS / 1000)
        batch.step(records[20:], wall_s=NOW_MS / 1000 + 1)
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0


def test_the_heap_is_frozen_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(runtime, "_frozen_at", 0.0)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    assert runtime.freeze_heap(100.0)
    assert not runtime.freeze_heap(100.5)
    assert runtime.freeze_heap(101.0)
    assert len(frozen) == 2
