"""The simulators' faults pause while back-pressure holds every client (Chaos.storm_steps).

CI, 2026-11-29: a layered ``poc`` run (two layers of four topics, a record read per node
step, a copy of a recent record every five steps, a crash every twenty) never ended: its
nodes read slower than the faults wrote, back-pressure held the one client with sends
left until they caught up, and the faults, scheduled while a client has sends left, went
on: 200,000 steps, every node further behind at each. The run below is that draw; it
ends once the faults pause for the held client and resume when it may send."""

from __future__ import annotations

import random

from atomickafka.core.engine import Algorithm
from atomickafka.verify.layered import LayeredSimulator, MergerChaos
from atomickafka.verify.sim.chaos import Chaos, FaultWindow
from atomickafka.verify.simulator import RandomChooser
from atomickafka.verify.workload import LayerPolicy, assign_layers, random_workload

STORMY = Chaos(
    max_batch=1, duplicate=0.2, unsequenced=0.1, delay=0.0, max_delay=22, crash=0.05,
    takeover=0.05, follow=0.2, checkpoint=0.05, zombie=0.5, mixed_formats=True, upgrade=0.02,
)  # fmt: skip


STORMY_MERGERS = MergerChaos(
    max_batch=2, max_picks=2, duplicate=0.2, delay=0.1, crash=0.02, checkpoint=0.0,
    duplicate_window=3, max_delay=36, producer_gap=0.03,
)  # fmt: skip


def test_faults_run_while_clients_send_and_a_tail_after() -> None:
    window = FaultWindow(Chaos(tail_steps=3, storm_steps=10))
    window.observe(0, waiting=2, held=1)
    assert window.active(1) and window.sending()
    window.observe(5, waiting=0, held=0)
    assert not window.sending()
    assert window.active(8) and not window.active(9)


def test_faults_pause_while_every_waiting_client_is_held_and_resume_after() -> None:
    window = FaultWindow(Chaos(storm_steps=10))
    for step in range(10):
        window.observe(step, waiting=2, held=2)
        assert window.active(step + 1) == (step + 1 < 10)
    window.observe(11, waiting=2, held=2)
    assert not window.active(12)  # the nodes are left to catch up
    window.observe(12, waiting=2, held=1)  # a client may send again
    assert window.active(13)


def test_a_run_whose_faults_outgrow_its_nodes_still_ends() -> None:
    """The CI case (hypothesis's draw, rebuilt): without the pause, 200,000 steps and
    the client still held with four sends left."""
    topics = ["T1", "T2", "T3", "T4"]
    rng = random.Random(4_257_429_316)
    base = random_workload(
        rng, topics, clients=1, messages=29, multicast=0.5, relay=0.1, retry=0.1, skew=0
    )
    workload = assign_layers(base, 2, policy=LayerPolicy.DRAWN, chooser=RandomChooser(rng))
    sim = LayeredSimulator(
        topics,
        2,
        algorithm=Algorithm.POC,
        chooser=RandomChooser(rng),
        chaos=STORMY,
        merger_chaos=STORMY_MERGERS,
        exactly_once=False,
        commit_lag=6,
        control_logs=True,
    )
    result = sim.run(workload, max_steps=60_000)
    assert result.quiescent, result.describe()
    assert result.check().ok, result.check()
