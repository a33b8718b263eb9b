"""The merge delay of partitioned topics: how long a layer's decided message waits in
its topic's merger before it is delivered.

Two measurements:

- in the simulator (:func:`measure_merge_delay`, in steps): the same random workloads
  through :class:`~atomickafka.verify.layered.LayeredSimulator` with every layer busy,
  with idle stretches, and with a silent layer, summed up by :func:`delay_profile`;
- on Kafka (:func:`kafka_merge_delays`, in ms, used by ``atomickafka bench
  --partitions N``): per delivered message and topic, from its layer's
  PartitionDelivery record to the merger's Delivery record, both Kafka timestamps.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from atomickafka.core.engine import Algorithm
from atomickafka.core.reader import KafkaRecord, read_delivery
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.consumer import make_consumer, read_partitions
from atomickafka.kafka.topics import layers_topic
from atomickafka.verify.layered import (
    LayeredResult,
    LayeredSimulator,
    MergeDelay,
    assign_layers,
)
from atomickafka.verify.simulator import CALM, Chaos, RandomChooser, random_workload

__all__ = [
    "DELAY_SCENARIOS",
    "DelayProfile",
    "delay_profile",
    "kafka_merge_delays",
    "measure_merge_delay",
]


@dataclass(frozen=True, slots=True)
class DelayProfile:
    """A summary of merge waits (:attr:`MergeDelay.wait`) over some releases."""

    releases: int
    mean: float
    median: float
    p90: int
    p99: int
    max: int
    immediate: int  # released in the step they arrived
    ticks: int

    def describe(self) -> str:
        """One line, for reports."""
        return (
            f"{self.releases} releases: wait mean {self.mean:.1f}, median {self.median:g}, "
            f"p90 {self.p90}, p99 {self.p99}, max {self.max} steps; "
            f"{self.immediate} at once; {self.ticks} ticks"
        )


# ---------------------------------------------------------------------------- in the simulator


def delay_profile(delays: Sequence[MergeDelay], ticks: int = 0) -> DelayProfile:
    """Summarise merge waits (release step - arrival step) of ``delays``."""
    waits = sorted(d.wait for d in delays)
    if not waits:
        return DelayProfile(0, 0.0, 0.0, 0, 0, 0, 0, ticks)

    def rank(q: float) -> int:
        return waits[min(len(waits) - 1, int(q * len(waits)))]

    return DelayProfile(
        releases=len(waits),
        mean=statistics.fmean(waits),
        median=statistics.median(waits),
        p90=rank(0.9),
        p99=rank(0.99),
        max=waits[-1],
        immediate=sum(1 for w in waits if w == 0),
        ticks=ticks,
    )


#: The workload shapes :func:`measure_merge_delay` compares.
DELAY_SCENARIOS: dict[str, dict[str, Any]] = {
    "busy": {},  # every layer gets messages all along
    "idle stretches": {"phases": 6},  # in each of 6 stretches, some layers get nothing
    "silent layer": {"silent": (0,)},  # layer 0 never gets a message
}


def measure_merge_delay(
    seeds: Sequence[int] = range(5),
    *,
    topics: Sequence[str] = ("T1", "T2", "T3", "T4"),
    layers: int = 3,
    messages: int = 60,
    algorithm: Algorithm | str = Algorithm.OPTIMIZED,
    chaos: Chaos = CALM,
) -> dict[str, tuple[DelayProfile, list[LayeredResult]]]:
    """How long items wait in the mergers, per scenario of :data:`DELAY_SCENARIOS`.

    Each scenario runs the same random workloads (one per seed, 3 clients, half
    multicast) assigned round-robin to ``layers`` layers, differing only in which
    layers are idle (a scenario that would silence every layer is left out); returns
    the profile over all runs and the runs themselves.
    """
    out: dict[str, tuple[DelayProfile, list[LayeredResult]]] = {}
    for name, options in DELAY_SCENARIOS.items():
        if len(options.get("silent", ())) >= layers:
            continue  # one layer: it cannot be silent
        results: list[LayeredResult] = []
        for seed in seeds:
            rng = random.Random(seed)
            base = random_workload(rng, list(topics), clients=3, messages=messages)
            workload = assign_layers(base, layers, chooser=RandomChooser(rng), **options)
            sim = LayeredSimulator(
                topics,
                layers,
                algorithm=algorithm,
                chooser=RandomChooser(rng),
                chaos=chaos,
            )
            results.append(sim.run(workload))
        delays = [d for r in results for d in r.delays]
        ticks = sum(sum(r.ticks.values()) for r in results)
        out[name] = (delay_profile(delays, ticks), results)
    return out


# ---------------------------------------------------------------------------- on Kafka


def kafka_merge_delays(
    connection: Connection, topics: Iterable[str], partitions: int
) -> list[float]:
    """Per delivered message and topic, ms from its layer's PartitionDelivery record to
    the merger's Delivery record (both Kafka timestamps, written on this machine), read
    through ``connection``."""
    delays: list[float] = []
    consumer = make_consumer(connection)
    try:
        for topic in topics:
            layers = read_partitions(consumer, layers_topic(topic), range(partitions))
            decided = _first_written(layers, topic)
            merged = _first_written(read_partitions(consumer, topic, [0]), topic)
            delays += [float(ts - decided[mid]) for mid, ts in merged.items() if mid in decided]
    finally:
        consumer.close()
    return delays


def _first_written(records: Iterable[KafkaRecord], topic: str) -> dict[str, int]:
    """messageID -> Kafka timestamp of its first delivery record written for ``topic``."""
    out: dict[str, int] = {}
    for record in records:
        message = read_delivery(record, at=topic)
        if message is not None:
            out.setdefault(message.messageID, record.timestamp()[1])
    return out
