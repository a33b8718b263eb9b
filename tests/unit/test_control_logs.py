"""Property tests of control logs (docs/DESIGN.md §7) through the simulator:
every node reads a control log (its peers' bundles, its own ticks, members records and
apply markers) beside its input log (client records, relayed copies), in drawn
interleavings, with crashes recovered from snapshots, producer gaps, duplicates, strays
and zombies (the instance a restart replaced going on for a while: its markers and
bundles written, its transaction fenced). The checker must pass, and rule 8 must hold
over the control log: a fresh node reading the final logs delivers what the client
read, also through takeovers by hot standbys that follow both logs. Not yet covered:
wrong restarts, layers."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.marker import decode_marker
from atomickafka.core.wire import Message
from atomickafka.verify.layered import MergerChaos
from atomickafka.verify.simulator import (
    Chaos,
    RandomChooser,
    SimulationResult,
    Simulator,
    random_workload,
)
from tests.unit.test_layered import (
    LANES,
    NO_LANE,
    TRICKLE,
    assert_merged_correct,
    layer_chaos,
    merger_chaos,
    three_topic_run,
)
from tests.unit.test_mutations import (
    CALM as CALM_MUTATION,
)
from tests.unit.test_mutations import (
    ROUGH,
    TOPICS,
    AckCarriesCoordinatorTimestamp,
    ClockWithoutIncrement,
    DecidesOneAckEarly,
    NoDeduplication,
)
from tests.unit.test_properties import delivery_modes

ALGORITHMS = list(Algorithm)
HOSTILE = Chaos(
    crash=0.03,
    checkpoint=0.1,
    delay=0.05,
    duplicate=0.05,
    commit=0.3,
    producer_gap=0.02,
    partial_write=0.1,
    unsequenced=0.02,
    stray=0.02,
    bad_value=0.01,
    stray_in_flight=0.02,
    absent=0.05,
    mixed_formats=True,
    upgrade=0.01,
    zombie=0.5,
    late_members=0.1,  # issue 35's hazards (tests/unit/test_default_path_hazards.py)
    downtime=0.002,
    misplaced=0.02,
    forged_marker=0.01,
)
#: Hot standbys following both logs (``NodeStandby``), taking over from dying nodes
#: whose zombies go on writing.
TAKEOVERS = Chaos(
    commit=0.3, zombie=1.0, takeover=0.05, follow=0.5, crash=0.01, checkpoint=0.1, duplicate=0.05
)


def assert_correct(result: SimulationResult) -> None:
    assert result.quiescent, result.describe()
    report = result.check()
    assert report.ok, f"{report.summary()}\n{result.describe()}"
    assert result.stuck() == {}, result.describe()
    assert result.determinism_errors == [], result.determinism_errors
    for topic in result.topics:
        replayed = result.replayed(topic)
        expected = [(m.messageID, m.timeStamp) for m in result.deliveries[topic]]
        assert [(m.messageID, m.timeStamp) for m in replayed] == expected, topic


#: The chance that a client writes a copy straight to its destination's control log (the
#: direct lane, §7.1) rather than to its input log; the tests draw from these.
DIRECT = st.sampled_from(LANES)


def run(
    algorithm: Algorithm,
    seed: int,
    chaos: Chaos,
    *,
    exactly_once: bool = True,
    n: int = 5,
    direct: tuple[float, int] = TRICKLE,
) -> tuple[Simulator, SimulationResult]:
    topics = [f"T{i}" for i in range(1, n + 1)]
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=30, relay=0.1)
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        exactly_once=exactly_once,
        control_logs=True,
        direct_lane=direct,
    )
    return sim, sim.run(workload)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), exactly_once=st.booleans(), direct=DIRECT)
def test_control_logs_keep_atomic_multicast(
    algorithm: Algorithm, seed: int, exactly_once: bool, direct: tuple[float, int]
) -> None:
    """Hostile chaos over two logs, with clients writing none, some or all of their
    copies straight to the control logs (the direct lane)."""
    _, result = run(algorithm, seed, HOSTILE, exactly_once=exactly_once, direct=direct)
    assert_correct(result)


def test_an_acks_entry_for_a_copy_that_never_came_is_abandoned_in_an_idle_run() -> None:
    """Rule 9 (found by the test above, 2026-11-29): a client died between its copies
    of ``c0-11`` (to T3, T4, T5), writing only T4's; T4's proposal made entries at T3 and
    T5, abandoned a memory window later -- but the run fell idle first, nothing moved
    their logs' time, and T4 held ``c0-6`` behind ``c0-11`` for ever. A node with such an
    entry now ticks its log once the deadline has passed."""
    _, result = run(Algorithm.POC, 398193521, HOSTILE, exactly_once=True, direct=(0.0, 0))
    assert_correct(result)


def test_a_notify_rewritten_after_downtime_may_find_its_message_abandoned_everywhere() -> None:
    """CI, 2026-11-29: T3 wrote two of the four Notifies of a multicast and crashed;
    T2's Ack made an entry at T5, and before T3 wrote T5's Notify again the nodes were
    down longer than the memory window (DOWNTIME): T5 abandoned the entry (rule 9) and
    the message was aborted everywhere. All-or-none holds; what a copy written more than
    half a window late may lose (§4.13), a Notify written that late may lose too."""
    _, result = run(Algorithm.POC, 362605, HOSTILE, exactly_once=True, direct=(2000.0, 200))
    assert_correct(result)
    assert "c0-4" not in {m.messageID for t in result.topics for m in result.deliveries[t]}


def test_a_late_notify_is_not_taken_up_where_its_message_was_aborted_and_forgotten() -> None:
    """§4.13 (found by the hostile test above, 2026-11-29): a stray Notify naming
    ``optimized`` made T2 abort ``c0-8`` (to T1..T5, ``direct``); T3, T4 and T5, which had
    proposed, dropped it on T2's answers. T1 was down and wrote its Notifies 88 s after
    the send: T2 and T3 had forgotten the abort, took the message up again and proposed,
    and T1 decided with T2's new proposal and the others' dropped ones -- delivered at
    T1 only. A late proposal sent before an abort forgotten there expired is now refused
    and answered with an Abort, which drops the message at its writer too."""
    _, result = run(Algorithm.DIRECT, 571762917, HOSTILE, exactly_once=False, direct=(0.0, 0))
    assert_correct(result)
    assert "c0-8" not in {m.messageID for t in result.topics for m in result.deliveries[t]}


def test_a_message_taken_up_again_is_aborted_by_a_peer_that_remembers_delivering_it() -> None:
    """Rule 9, §4.13 (found by the hostile runs above, 2026-11-29): T5 read a backlog
    across a downtime jump, delivering ``c2-5`` at its old log time and forgetting it a
    window later within the same step; a stray's Notify about ``c2-5`` "from" T4 (no
    ``seq``) then made T5 take it up again and ack T4, which still remembered
    delivering it and set the Ack aside as a duplicate -- T5 held ``c2-5``, and
    ``c2-11`` behind it, for good. A node that remembers delivering a version now
    answers a peer's new proposal for it with an Abort."""
    _, result = run(Algorithm.OPTIMIZED, 1306647817, HOSTILE, exactly_once=True, direct=(0.0, 0))
    assert_correct(result)
    assert result.engines["T5"].state.pending.get("c2-5") is None


#: Restarts with another protocol (§6.6), over two logs: the node's members records are
#: in its control log, so that is where its replay must refuse.
WRONG = Chaos(wrong_restart=0.05, checkpoint=0.1, duplicate=0.05, delay=0.03, commit=0.3)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_restart_with_another_protocol_is_refused_over_two_logs(
    algorithm: Algorithm, seed: int
) -> None:
    """A node with a control log restarted with another protocol refuses (from its
    snapshot, or at its own members record as it replays its control log) unless it had
    committed nothing protocol-specific; restarted as it should be, nothing is lost."""
    _, result = run(algorithm, seed, WRONG)
    assert_correct(result)  # determinism_errors name a restart that was not refused


def test_wrong_restarts_over_two_logs_are_refused_from_snapshots_and_replays() -> None:
    seen: Counter[str] = Counter()
    for algorithm in ALGORITHMS:
        for seed in range(4):
            _, result = run(algorithm, seed, WRONG)
            assert_correct(result)
            seen.update(k for k in result.events.elements() if k.startswith("wrong_restart"))
    assert seen["wrong_restart_refused"] >= 5, seen


def test_a_wrong_restart_that_skips_its_replay_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check has teeth: a restart that does not replay its control log (so never
    meets its own members record) is reported as not refused."""
    monkeypatch.setattr(Simulator, "replay", lambda *_args: None)
    errors = [
        e for seed in range(4) for e in run(Algorithm.DIRECT, seed, WRONG)[1].determinism_errors
    ]
    assert any("not refused" in e for e in errors), errors


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), direct=DIRECT)
def test_standbys_over_two_logs_take_over(
    algorithm: Algorithm, seed: int, direct: tuple[float, int]
) -> None:
    _, result = run(algorithm, seed, TAKEOVERS, direct=direct)
    assert_correct(result)


def test_the_chaos_is_not_idle() -> None:
    """Control records do go to the control logs (and only relays and client records to
    the input logs), markers are written, crashes replay them and zombies step."""
    events: Counter[str] = Counter()
    markers = void = 0
    for algorithm in ALGORITHMS:
        for seed in range(3):
            sim, result = run(algorithm, seed, HOSTILE)
            assert_correct(result)
            events.update(result.events)
            for topic in result.topics:
                markers += sum(decode_marker(r.value()) is not None for r in result.controls[topic])
                batch = sim.nodes[topic].batch
                void += batch.markers_void
    assert events["zombie_step"] >= 5 and events["crash"] >= 10, events
    assert markers > 100 and void > 0, (markers, void)
    for algorithm in ALGORITHMS:
        for seed in range(3):
            _, result = run(algorithm, seed, TAKEOVERS)
            assert_correct(result)
            events.update(result.events)
    assert events["takeover"] >= 10 and events["standby_jump"] >= 1, events
    assert events["direct_copy"] >= 100, events


class _RelaysShareTheSequence(Engine):
    """The engine before the control logs: a peer's relayed copies (in the input log)
    and its other control messages (in the control log) de-duplicated on one sequence."""

    def _link(self, record: Message) -> tuple[str, tuple[int, int]] | None:
        seq, sender = record.seq, record.sentFromTopic
        return None if seq is None or sender is None else (sender, seq)


def test_relays_need_their_own_sequence_with_control_logs() -> None:
    """A node applies a peer's relays and its other control messages in another
    interleaving than the peer wrote them (two logs): on one sequence per sender, the
    later-applied ones look like repeats and are dropped. Caught by the checker."""
    caught = 0
    for seed in range(6):
        topics = [f"T{i}" for i in range(1, 6)]
        rng = random.Random(seed)
        workload = random_workload(rng, topics, clients=3, messages=30, relay=0.3)
        sim = Simulator(
            topics,
            algorithm=Algorithm.DIRECT,
            chooser=RandomChooser(rng),
            engine_factory=lambda topic, alg: _RelaysShareTheSequence(topic, f"node-{topic}", alg),
            control_logs=True,
        )
        result = sim.run(workload)
        caught += not (result.quiescent and result.check().ok)
    assert caught >= 3


MUTANTS = [
    (AckCarriesCoordinatorTimestamp, Algorithm.OPTIMIZED, CALM_MUTATION),
    (ClockWithoutIncrement, Algorithm.POC, CALM_MUTATION),
    (DecidesOneAckEarly, Algorithm.OPTIMIZED, CALM_MUTATION),
    (NoDeduplication, Algorithm.DIRECT, ROUGH),
]


@pytest.mark.parametrize(("mutant", "algorithm", "chaos"), MUTANTS)
@pytest.mark.parametrize("direct", [NO_LANE, TRICKLE], ids=["no-lane", "trickle"])
def test_the_2019_defects_are_caught_with_control_logs(
    mutant: type[Engine], algorithm: Algorithm, chaos: Chaos, direct: tuple[float, int]
) -> None:
    """Rule 10 with control logs (clients' copies in the input logs, or half of them
    in the direct lane): each defect's mutant is caught by the checker within the seeds
    searched, and the real engine passes every one of them."""
    for seed in range(150):
        if not _mutation_run(mutant, algorithm, seed, chaos, direct).check().ok:
            break
    else:
        pytest.fail(f"{mutant.__name__} not caught with control logs")
    for good_seed in range(seed + 1):
        good = _mutation_run(Engine, algorithm, good_seed, chaos, direct)
        assert good.quiescent and good.check().ok, good_seed


def _mutation_run(
    engine_class: type[Engine],
    algorithm: Algorithm,
    seed: int,
    chaos: Chaos,
    direct: tuple[float, int],
) -> SimulationResult:
    rng = random.Random(seed)
    options: dict[str, Any] = {"clients": 3, "messages": 20, "multicast": 0.7, "skew": 30}
    workload = random_workload(rng, TOPICS, **options)
    sim = Simulator(
        TOPICS,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        engine_factory=lambda topic, alg: engine_class(topic, f"node-{topic}", alg),
        members_known=True,
        control_logs=True,
        direct_lane=direct,
    )
    return sim.run(workload)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    layers=st.integers(2, 3),
    chaos=layer_chaos,
    mchaos=merger_chaos,
    mode=delivery_modes,
    direct=DIRECT,
)
def test_layers_with_control_logs_keep_atomic_multicast(
    algorithm: Algorithm,
    seed: int,
    layers: int,
    chaos: Chaos,
    mchaos: MergerChaos,
    mode: tuple[bool, int],
    direct: tuple[float, int],
) -> None:
    """Partitioned topics whose layers' nodes have control logs: the merger's ticks go
    to the layers' input logs and apply where the nodes' markers place them; every
    layer and the merged streams keep atomic multicast, and each layer replays (rule 8
    over its control log) to what it delivered."""
    result = three_topic_run(
        algorithm, seed, layers, chaos, mchaos,
        control_logs=True, direct=direct, exactly_once=mode[0], commit_lag=mode[1],
    )  # fmt: skip
    assert_merged_correct(result)
