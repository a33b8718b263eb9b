"""Property tests: random workloads under hostile schedules, judged by the checker.

Every run drives the production batch layer (``NodeBatch``) through the simulator:
at least five topics, random overlapping destination sets (one topic to all of them),
several clients, relays, client retries via another topic, random interleavings and
batch sizes, duplicated records (byte for byte, and without ``seq``), delays, crashes
recovered as production recovers (newest snapshot, then replay), hot standbys that
follow the logs below the committed offsets and take over from a dying node, both
delivery modes
(exactly-once; at-least-once with lagging commits and producer gaps), and skewed
clocks. The independent checker must find integrity, validity and total order for
every protocol, and each node's deliveries must be what a fresh node replaying its
final input log delivers (rule 8). Deliveries are JSON envelopes, as in production,
and raw records in a share of the runs. The hostile inputs of issue 15 are in
``test_hostile.py``.

Example counts scale with the Hypothesis profile (``tests/unit/conftest.py``): with
``ci`` this module makes about 2,900 simulated runs, with ``dev`` about 350.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core.engine import Algorithm, Engine, Output, _Refused
from atomickafka.core.reasons import Reason, refusal
from atomickafka.core.wire import Message
from atomickafka.errors import ConfigError
from atomickafka.verify.simulator import (
    Chaos,
    DataChooser,
    RandomChooser,
    Send,
    SimulationResult,
    Simulator,
    Workload,
    random_workload,
)

ALGORITHMS = list(Algorithm)
BASE = settings().max_examples  # 60 with the dev profile, 500 with ci


def examples(factor: float) -> settings:
    return settings(max_examples=max(10, int(BASE * factor)))


def topic_names(n: int) -> list[str]:
    return [f"T{i}" for i in range(1, n + 1)]


def assert_correct(result: SimulationResult, *, honest: bool = True) -> None:
    """The checker passes, nothing is stuck, no delivery stream breaks its order (nor,
    exactly-once, repeats one), and rule 8 holds for every node: a fresh node reading
    its final input log through the batch layer delivers what the client read."""
    assert result.quiescent, result.describe()
    report = result.check()
    assert report.ok, f"{report.summary()}\n{result.describe()}"
    assert result.stuck() == {}, result.describe()
    assert result.determinism_errors == [], result.determinism_errors
    if honest:
        assert result.rejected_reasons() == {}, result.rejected_reasons()
    for topic in result.topics:
        replayed = result.replayed(topic)
        expected = [(m.messageID, m.timeStamp) for m in result.deliveries[topic]]
        assert [(m.messageID, m.timeStamp) for m in replayed] == expected, topic


def seeded_run(algorithm: Algorithm, seed: int, chaos: Chaos, **options: Any) -> SimulationResult:
    """30 messages from three clients over five topics (some relayed), every choice
    drawn from ``seed``; ``options`` go to the :class:`Simulator`."""
    topics = topic_names(5)
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=30, relay=0.1)
    sim = Simulator(topics, algorithm=algorithm, chooser=RandomChooser(rng), chaos=chaos, **options)
    return sim.run(workload)


# ---------------------------------------------------------------------------- seeded runs

chaos_settings = st.builds(
    Chaos,
    max_batch=st.integers(1, 8),
    duplicate=st.sampled_from([0.0, 0.05, 0.2]),
    unsequenced=st.sampled_from([0.0, 0.0, 0.1]),  # copies without seq: rule 5 below §4.12
    delay=st.sampled_from([0.0, 0.05, 0.1]),
    crash=st.sampled_from([0.0, 0.0, 0.02, 0.05]),
    takeover=st.sampled_from([0.0, 0.0, 0.02, 0.05]),  # hot standbys take over (§6.4)
    follow=st.sampled_from([0.2, 0.5, 1.0]),
    partial_write=st.sampled_from([0.0, 0.1, 0.5]),  # direct: a client dies mid-write
    checkpoint=st.sampled_from([0.05, 0.2]),
    max_delay=st.integers(1, 40),
    commit=st.sampled_from([1.0, 0.5, 0.2]),  # exactly-once: transactions over steps (§6.3)
    zombie=st.sampled_from([0.0, 0.5, 1.0]),  # a fenced instance goes on writing control
    mixed_formats=st.booleans(),  # nodes writing JSON and binary control records (§3.9)
    upgrade=st.sampled_from([0.0, 0.0, 0.02]),  # restarts in the other control format
    mixed_notify_values=st.booleans(),  # nodes writing lean Notifies and full ones (§4.16)
)
#: The delivery modes: exactly-once, or at-least-once with commits lagging 0 to 6 steps.
delivery_modes = st.sampled_from([(True, 0), (False, 0), (False, 2), (False, 6)])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(1.6)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_topics=st.integers(5, 7),
    clients=st.integers(2, 4),
    messages=st.integers(1, 40),
    multicast=st.sampled_from([0.1, 0.5, 0.9, 1.0]),
    relay=st.sampled_from([0.0, 0.1, 0.3]),
    retry=st.sampled_from([0.0, 0.0, 0.1]),
    skew=st.sampled_from([0, 0, 10, 40]),
    chaos=chaos_settings,
    mode=delivery_modes,
    delivery_format=st.sampled_from(["json", "raw"]),
    per_host=st.sampled_from([1, 1, 2, 3]),
)
def test_random_runs_keep_atomic_multicast(
    algorithm: Algorithm,
    seed: int,
    n_topics: int,
    clients: int,
    messages: int,
    multicast: float,
    relay: float,
    retry: float,
    skew: int,
    chaos: Chaos,
    mode: tuple[bool, int],
    delivery_format: str,
    per_host: int,
) -> None:
    """``per_host`` above 1 (exactly-once): that many topics' nodes per host process
    (§6.7), which crash together and commit in one transaction."""
    topics = topic_names(n_topics)
    rng = random.Random(seed)
    workload = random_workload(
        rng,
        topics,
        clients=clients,
        messages=messages,
        multicast=multicast,
        relay=relay,
        retry=retry,
        skew=skew,
    )
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        exactly_once=mode[0],
        commit_lag=mode[1],
        delivery_format=delivery_format,  # JSON envelopes (the default), raw records
        hosts=hosted(topics, per_host) if mode[0] else (),
    )
    assert_correct(sim.run(workload))


def hosted(topics: list[str], per_host: int) -> list[list[str]]:
    """The topics in host processes of ``per_host`` nodes each, in order."""
    return [topics[i : i + per_host] for i in range(0, len(topics), per_host)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_standbys_do_take_over_and_jump_to_snapshots(algorithm: Algorithm) -> None:
    """The standby chaos is not idle: over a few seeded runs, standbys take over many
    times and some jump to a snapshot first."""
    events: Counter[str] = Counter()
    for seed in range(4):
        chaos = Chaos(takeover=0.05, follow=0.3, crash=0.01)
        result = seeded_run(algorithm, seed, chaos, exactly_once=seed % 2 == 0)
        assert_correct(result)
        events.update(result.events)
    assert events["takeover"] >= 10 and events["standby_jump"] >= 1, events


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.4)
@given(seed=st.integers(0, 2**32 - 1), hot=st.integers(20, 120), messages=st.integers(5, 30))
def test_skewed_clocks(algorithm: Algorithm, seed: int, hot: int, messages: int) -> None:
    """One topic handles many single-topic messages first, so its clock runs far ahead;
    the rest is multicast to every topic, some to a sub-set (the 2019 failure case)."""
    topics = topic_names(5)
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=messages, multicast=1.0, skew=hot)
    # The hot topic keeps receiving single-topic traffic while the multicasts run.
    workload.clients["hot"] = [
        Send("hot", f"hot-{i}", (topics[0],), i, topics[0]) for i in range(hot // 2)
    ]
    sim = Simulator(
        topics, algorithm=algorithm, chooser=RandomChooser(rng), chaos=Chaos(max_batch=6)
    )
    assert_correct(sim.run(workload))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.5)
@given(seed=st.integers(0, 2**32 - 1), cut=st.integers(1, 400))
def test_every_prefix_is_consistent(algorithm: Algorithm, seed: int, cut: int) -> None:
    """Stopped at any step, the deliveries so far pass the prefix check."""
    topics = topic_names(5)
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=30, relay=0.2, skew=10)
    sim = Simulator(topics, algorithm=algorithm, chooser=RandomChooser(rng), chaos=Chaos())
    result = sim.run(workload, max_steps=cut)
    report = result.check(complete=False)
    assert report.ok, f"{report.summary()}\n{result.describe()}"


@examples(0.2)
@given(seed=st.integers(0, 2**32 - 1), algorithm=st.sampled_from(ALGORITHMS))
def test_runs_are_deterministic_given_the_seed(seed: int, algorithm: Algorithm) -> None:
    def once() -> SimulationResult:
        topics = topic_names(5)
        rng = random.Random(seed)
        workload = random_workload(rng, topics, messages=25, relay=0.2, retry=0.1)
        sim = Simulator(
            topics,
            algorithm=algorithm,
            chooser=RandomChooser(rng),
            chaos=Chaos(crash=0.03, producer_gap=0.03),
            exactly_once=False,
        )
        return sim.run(workload)

    first, second = once(), once()
    assert first.deliveries == second.deliveries
    assert first.logs == second.logs
    assert first.events == second.events


# ---------------------------------------------------------------------------- drawn schedules


@st.composite
def workloads(draw: st.DrawFn, topics: list[str]) -> Workload:
    """Explicit workloads: every destination set, entry topic and retry is drawn."""
    n_clients = draw(st.integers(1, 3))
    clients: dict[str, list[Send]] = {f"c{i}": [] for i in range(n_clients)}
    for k in range(draw(st.integers(1, 10))):
        client = draw(st.sampled_from(sorted(clients)))
        destinations = tuple(sorted(draw(st.sets(st.sampled_from(topics), min_size=1))))
        via = draw(st.sampled_from(topics))  # a destination, or any other topic: relay
        value: Any = draw(st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5))
        send = Send(client, f"{client}-{k}", destinations, value, via)
        clients[client].append(send)
        if draw(st.integers(0, 9)) == 9:  # a client retry, via some topic
            clients[client].append(
                Send(client, send.messageID, destinations, value, draw(st.sampled_from(topics)))
            )
    hot = draw(st.sampled_from(topics))
    preload = [Send("skew", f"skew-{i}", (hot,), i, hot) for i in range(draw(st.integers(0, 20)))]
    return Workload(clients, preload)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.2)
@given(data=st.data(), n_topics=st.integers(5, 6))
def test_drawn_schedules_keep_atomic_multicast(
    algorithm: Algorithm, data: st.DataObject, n_topics: int
) -> None:
    """Every scheduling choice is a Hypothesis draw, so a failure shrinks to a minimal
    schedule: fewest copies, delays and crashes, smallest batches."""
    topics = topic_names(n_topics)
    workload = data.draw(workloads(topics))
    chaos = Chaos(
        max_batch=3,
        duplicate=0.1,
        unsequenced=0.05,
        delay=0.05,
        crash=0.02,
        takeover=0.02,
        checkpoint=0.1,
        partial_write=0.2,
    )
    exactly_once = data.draw(st.booleans())
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=DataChooser(data),
        chaos=chaos,
        exactly_once=exactly_once,
        commit_lag=0 if exactly_once else 3,
    )
    assert_correct(sim.run(workload))


# ---------------------------------------------------------------------------- split writes

#: Exactly-once as the nodes write it (§6.3): control records at once, the rest in
#: transactions committed over several steps; standbys take over and the fenced
#: instance goes on for a while as a zombie.
SPLIT = Chaos(commit=0.3, zombie=1.0, takeover=0.05, follow=0.5, crash=0.01, checkpoint=0.1)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.3)
@given(seed=st.integers(0, 2**32 - 1))
def test_zombies_writing_after_a_takeover_change_nothing(algorithm: Algorithm, seed: int) -> None:
    """Issue 24: a node that lost its role writes control records outside any
    transaction (repeats of the new instance's, dropped by seq) and transactional
    records that are never committed. The checker, rule 8 and the readers agree: a
    ``read_committed`` stream holds every delivery once, in order, and what the client
    reads ``read_uncommitted`` with its repeat filter is exactly that stream."""
    assert_correct(seeded_run(algorithm, seed, SPLIT))


def test_zombies_and_interval_commits_do_happen() -> None:
    """The chaos above is not idle: zombies step, transactions span several steps, and
    aborted transactions show in the uncommitted view."""
    events: Counter[str] = Counter()
    aborted_shown = 0
    for algorithm in ALGORITHMS:
        for seed in range(4):
            topics = topic_names(5)
            rng = random.Random(seed)
            workload = random_workload(rng, topics, clients=3, messages=30, relay=0.1)
            sim = Simulator(topics, algorithm=algorithm, chooser=RandomChooser(rng), chaos=SPLIT)
            result = sim.run(workload)
            assert_correct(result)
            events.update(result.events)
            aborted_shown += sum(len(sim.uncommitted[t]) - len(sim.streams[t]) for t in topics)
    assert events["zombie_step"] >= 10 and events["commit"] < events["batch"], events
    assert aborted_shown > 0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.3)
@given(seed=st.integers(0, 2**32 - 1), per_host=st.integers(2, 5))
def test_host_processes_crashing_and_taken_over_keep_atomic_multicast(
    algorithm: Algorithm, seed: int, per_host: int
) -> None:
    """§6.7: nodes hosted together crash together, their standby (cold) takes over as
    the group's restart with the old process a zombie, and one transaction commits all
    their records and offsets: checker, rule 8 and the readers agree."""
    chaos = Chaos(commit=0.3, zombie=1.0, takeover=0.05, crash=0.03, checkpoint=0.1)
    result = seeded_run(algorithm, seed, chaos, hosts=hosted(topic_names(5), per_host))
    assert_correct(result)


def test_host_processes_do_crash_together() -> None:
    """The model does what §6.7 says: a crash of one hosted node restarts the group
    (every node's restart counted); a run with every node in one host is correct; and
    hosts are refused at-least-once (a host needs one transaction)."""
    topics = topic_names(3)
    sim = Simulator(topics, hosts=[topics[:2]], members_known=True)
    sim.crash(topics[0])
    assert sim.events["crash"] == 2
    rng = random.Random(1)
    workload = random_workload(rng, topics, clients=2, messages=20)
    result = Simulator(topics, chooser=RandomChooser(rng), hosts=[topics]).run(workload)
    assert_correct(result)
    with pytest.raises(ConfigError, match="exactly-once"):
        Simulator(topics, hosts=[topics[:2]], exactly_once=False)


class CommitsOnlyTheCallersRecords(Simulator):
    """A mutant host writer: its commit moves every hosted node's offset but makes only
    the calling node's transactional records visible (as if each node had its own
    transaction and the offsets were committed for all)."""

    def _commit(self, topic: str) -> None:
        for hosted in self.host_of[topic]:
            node = self.nodes[hosted]
            if hosted == topic:
                for record in node.txn:
                    self._route(hosted, record)
            if node.txn_commit is not None:
                node.committed = node.txn_commit
            node.txn, node.txn_commit = [], None
        self.events["commit"] += 1


def test_a_host_that_commits_offsets_without_their_records_is_caught() -> None:
    """The mutation test of §6.7's one transaction: the checker finds the deliveries the
    mutant lost on the seeds where the real model is correct."""
    topics = topic_names(4)
    caught = 0
    for seed in range(5):
        for simulator in (Simulator, CommitsOnlyTheCallersRecords):
            rng = random.Random(seed)
            workload = random_workload(rng, topics, clients=2, messages=20)
            chaos = Chaos(commit=0.3, checkpoint=0.1)
            sim = simulator(topics, chooser=RandomChooser(rng), chaos=chaos, hosts=[topics])
            result = sim.run(workload)
            if simulator is Simulator:
                assert_correct(result)
            else:
                caught += not result.check().ok
    assert caught == 5


def test_a_node_that_knows_its_members_restarts_knowing_them() -> None:
    """``members_known`` starts the nodes as restarted from a snapshot that knows every
    member; that snapshot is in each node's store, so a crash before the node took
    another restarts from it, not from nothing (the simulator once restarted such a
    node with no members known: its replay waited for a members record the first run
    never waited for, and decided otherwise)."""
    topics = topic_names(3)
    sim = Simulator(topics, members_known=True)
    sim.crash("T1")
    assert sim.engines["T1"].members == frozenset(topics)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("notify_values", ["every", "carrier"])
def test_crashes_with_members_known_keep_atomic_multicast(
    algorithm: Algorithm, notify_values: str
) -> None:
    """Nodes that start knowing their members, crashing often (among these seeds, runs
    that broke total order and lost messages before the fix above)."""
    chaos = Chaos(crash=0.05, checkpoint=0.1)
    for seed in range(6):
        result = seeded_run(algorithm, seed, chaos, members_known=True, notify_values=notify_values)
        assert_correct(result)
        assert result.events["crash"] > 0


class _WallClockSetAside(Engine):
    """A mutant whose decision depends on something outside the input log (a stand-in
    for the wall clock): every third Notify it handles is set aside, counting handlings
    across the process, so a replay decides otherwise than the first run did."""

    handled = 0

    def _on_notify(self, record: Message) -> list[Output]:
        _WallClockSetAside.handled += 1
        if _WallClockSetAside.handled % 3 == 0:
            raise _Refused(refusal(Reason.STRAY, "set aside by the clock"))
        return super()._on_notify(record)


def test_a_mutant_that_breaks_determinism_is_caught() -> None:
    """Issue 24: the argument for writing control records outside transactions rests on
    rule 8. A node whose set-asides depend on the wall clock breaks it, and the
    simulator catches it: replays disagree with what was written (or order breaks)."""
    caught = 0
    for seed in range(6):
        topics = topic_names(5)
        rng = random.Random(seed)
        workload = random_workload(rng, topics, clients=3, messages=30, multicast=0.8)
        sim = Simulator(
            topics,
            algorithm=Algorithm.DIRECT,
            chooser=RandomChooser(rng),
            chaos=SPLIT,
            engine_factory=lambda topic, alg: _WallClockSetAside(topic, f"node-{topic}", alg),
        )
        result = sim.run(workload, max_steps=20_000)
        replays_agree = all(
            [(m.messageID, m.timeStamp) for m in result.replayed(t)]
            == [(m.messageID, m.timeStamp) for m in result.deliveries[t]]
            for t in topics
        )
        if (
            not result.quiescent
            or not result.check().ok
            or result.determinism_errors
            or result.stuck()
            or not replays_agree
        ):
            caught += 1
    assert caught >= 4, caught
