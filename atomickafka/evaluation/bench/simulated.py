"""The micro-benchmarks' workload (``eval/bench_engine.py``, ``eval/bench_batch.py``):
the thesis's 50-50 workload (chapter 5) run once in the simulator, whose nodes' logs and
calls they then replay and time. The scripts run with ``python -P`` (the compiled
wheel's form), where neither can import the other: they share this instead."""

from __future__ import annotations

import random

from atomickafka.core.engine import Algorithm
from atomickafka.evaluation.errors import RunError
from atomickafka.verify.simulator import (
    SNAPSHOT_EVERY,
    Chaos,
    RandomChooser,
    SimulationResult,
    Simulator,
    Workload,
    random_workload,
)

__all__ = ["run_correct", "thesis_simulation"]


def thesis_simulation(
    algorithm: Algorithm,
    messages: int,
    topics: int,
    clients: int,
    multicast: float,
    seed: int,
    *,
    snapshot_every: int = SNAPSHOT_EVERY,
    control_logs: bool = True,
) -> tuple[Simulator, Workload]:
    """The simulator of ``topics`` nodes (``T1``...) and the workload it runs: ``messages``
    from ``clients`` clients, a share ``multicast`` of them to every topic, the rest to one
    (no relays); drawn from ``seed``, its chaos only interleavings in batches of up to 200
    records and a crash-free run. ``control_logs=False``: each node's one log holds all
    it reads, in the order its engine takes it (the layout before §7)."""
    names = [f"T{i}" for i in range(1, topics + 1)]
    rng = random.Random(seed)
    workload = random_workload(
        rng,
        names,
        clients=clients,
        messages=messages,
        multicast=multicast,
        relay=0.0,
        all_topics=True,
    )
    sim = Simulator(
        names,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=Chaos(max_batch=200, duplicate=0.0, delay=0.0, checkpoint=0.0),
        snapshot_every=snapshot_every,
        control_logs=control_logs,
    )
    return sim, workload


def run_correct(sim: Simulator, workload: Workload) -> SimulationResult:
    """``sim`` runs ``workload`` to the end; the run must be complete and pass the order
    checker (what the benchmarks replay must be a correct run)."""
    result = sim.run(workload, max_steps=10_000_000)
    report = result.check()
    if not (result.quiescent and report.ok):
        raise RunError(f"simulated run is not correct:\n{report.summary()}")
    return result
