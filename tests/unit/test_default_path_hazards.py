"""Four ways a topic stopped or a message was lost on the default path (issue 35), each
scripted through the production batch layers in the simulator with a few records, in
both modes (control logs, the default, and one log) where the case exists in both:

1. an honest proposal that waited for the node's members record for more than half
   the memory window was refused as a stray (§4.9.5, §4.11);
2. one copy of a peer's relay in a control log made its earlier relays look like
   repeats (§7.1 "Records in the wrong log");
3. one forged apply marker held a control log for good (§7.1 "A marker names what was
   written before it");
4. a client copy that reached the input log in time was set aside as late because its
   node was down when it came (§4.13, §7.1 "A copy is timed by its arrival").

Each fails on the code before issue 35's fixes; the simulators draw the same cases as
chaos kinds (``Chaos.late_members``, ``copied_relay``, ``forged_marker``, ``downtime``)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core.engine import Algorithm, Engine, Step
from atomickafka.core.marker import MAX_MARKER_RANGE, Marker, encode_marker
from atomickafka.core.memory import DEFAULT_WINDOW_MS
from atomickafka.core.reasons import Refusal
from atomickafka.core.wire import Message
from atomickafka.node.batch import NodeBatch
from atomickafka.verify.simulator import (
    Chaos,
    RandomChooser,
    SimulationResult,
    Simulator,
    random_workload,
)
from atomickafka.verify.workload import Send
from tests.unit.batch_mutants import use_batch_class
from tests.unit.test_layered import TRICKLE, assert_merged_correct, three_topic_run

#: Longer than a record may be late (half the memory window, §4.13).
OVER_HALF_WINDOW_MS = DEFAULT_WINDOW_MS // 2 + 1_000
BOTH_MODES = pytest.mark.parametrize("control_logs", [True, False], ids=["ctl", "one-log"])


def _sim(
    control_logs: bool, algorithm: Algorithm = Algorithm.DIRECT, **options: object
) -> Simulator:
    return Simulator(
        ["A", "B"],
        algorithm=algorithm,
        chooser=RandomChooser(1),
        control_logs=control_logs,
        **options,  # type: ignore[arg-type]
    )


def _settle(sim: Simulator, *topics: str) -> None:
    """Each node steps until it has nothing left to read (its members record read back)."""
    for _ in range(50):
        busy = [t for t in topics if sim.has_work(t)]
        if not busy:
            return
        for topic in busy:
            sim.clock.advance()
            sim.step_node(topic, 100)


def _assert_delivered_everywhere(result: SimulationResult) -> None:
    assert result.quiescent, result.describe()
    report = result.check()
    assert report.ok, f"{report.summary()}\n{result.describe()}"
    assert result.stuck() == {}, result.describe()


@BOTH_MODES
@pytest.mark.parametrize("algorithm", list(Algorithm))
def test_a_proposal_that_waited_long_for_members_is_taken_up(
    control_logs: bool, algorithm: Algorithm
) -> None:
    """A fresh node starts half a memory window after a peer proposed a multicast naming
    it: the peer's proposal waits for the node's first members record (§4.9.5), then is
    taken up, not refused as a stray's record held too long (§4.11 is about time holds)."""
    sim = _sim(control_logs, algorithm)
    _settle(sim, "B")
    send = Send("c1", "m1", ("A", "B"), {"n": 1}, via="B")
    sim.send(send, only=["B"])  # the copy for A never comes (or goes to B: optimized)
    _settle(sim, "B")
    sim.clock.jump_to(sim.clock.now_ms + OVER_HALF_WINDOW_MS)  # A starts only now
    _assert_delivered_everywhere(sim.drain())


def test_a_copied_relay_in_a_control_log_loses_nothing() -> None:
    """A peer relays two messages to B (into B's input log); a copy of the second lands
    in B's control log. B sets the copy aside (no relay is written to a control log) and
    delivers both, in the order its input log has them."""
    sim = _sim(True)
    _settle(sim, "A", "B")
    for n in (1, 2):
        sim.send(Send("c1", f"m{n}", ("B",), {"n": n}, via="A"))
        _settle(sim, "A")
    relays = sim.inputs["B"].records
    assert len(relays) >= 2
    sim.controls["B"].append(relays[-1].value())  # one copy, by a plain producer
    _settle(sim, "B")
    result = sim.drain()
    _assert_delivered_everywhere(result)
    assert result.delivered_ids("B") == ["m1", "m2"]
    assert any("relay" in r and "control log" in r for r in result.rejected_reasons()["B"])


def test_a_forged_apply_marker_does_not_stop_the_topic() -> None:
    """An unsigned apply marker in A's name, naming input offsets nobody wrote, reaches
    A's control log. It is set aside once A's input log holds a record written after the
    marker in its range (the node writes one when the marker waits), and A goes on:
    every later multicast is delivered."""
    sim = _sim(True)
    _settle(sim, "A", "B")
    sim.send(Send("c1", "m1", ("A", "B"), {"n": 1}, via="A"))
    _settle(sim, "A", "B")
    applied = sim.nodes["A"].batch.applied
    forged = encode_marker("node-A", "A", applied, applied + MAX_MARKER_RANGE)
    sim.controls["A"].append(forged)
    for n in (2, 3):
        sim.send(Send("c1", f"m{n}", ("A", "B"), {"n": n}, via="A"))
    result = sim.drain()
    _assert_delivered_everywhere(result)
    assert result.delivered_ids("A") == ["m1", "m2", "m3"]
    assert any("apply marker" in r for r in result.rejected_reasons()["A"])


@BOTH_MODES
@pytest.mark.parametrize("multicast", [False, True], ids=["one-destination", "multicast"])
def test_copies_that_reached_the_input_log_in_time_are_delivered_after_downtime(
    control_logs: bool, multicast: bool
) -> None:
    """A's node is down for more than half the memory window while clients' copies reach
    its input log: they came in time, so they are delivered when it comes back -- they
    are judged by when they reached the log, not by when the node applied them."""
    sim = _sim(control_logs)
    _settle(sim, "A", "B")
    destinations = ("A", "B") if multicast else ("A",)
    for n in (1, 2):
        sim.send(Send("c1", f"m{n}", destinations, {"n": n}, via="A"))
    _settle(sim, "B")
    sim.clock.jump_to(sim.clock.now_ms + OVER_HALF_WINDOW_MS)  # A comes back only now
    result = sim.drain()
    _assert_delivered_everywhere(result)
    assert result.delivered_ids("A") == ["m1", "m2"]


# ---------------------------------------------------------------- drawn: the chaos kinds

#: The four hazards drawn, with crashes, takeovers, zombies and duplicates around them.
HAZARDS = Chaos(
    crash=0.02,
    checkpoint=0.1,
    duplicate=0.05,
    delay=0.03,
    partial_write=0.1,
    commit=0.3,
    zombie=0.5,
    late_members=0.3,
    downtime=0.003,
    misplaced=0.05,
    forged_marker=0.02,
)
HAZARDS_WITH_STANDBYS = replace(HAZARDS, takeover=0.03, follow=0.5, crash=0.01)


def _hazard_run(
    algorithm: Algorithm,
    seed: int,
    control_logs: bool,
    exactly_once: bool,
    *,
    chaos: Chaos = HAZARDS,
    engine: type[Engine] = Engine,
) -> tuple[Simulator, SimulationResult]:
    topics = [f"T{i}" for i in range(1, 6)]
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=25, relay=0.2)
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        control_logs=control_logs,
        direct_lane=TRICKLE,
        exactly_once=exactly_once,
        engine_factory=lambda topic, alg: engine(topic, f"node-{topic}", alg),
    )
    return sim, sim.run(workload, max_steps=20_000)


def _assert_survived(result: SimulationResult) -> None:
    _assert_delivered_everywhere(result)
    assert result.determinism_errors == [], result.determinism_errors


@pytest.mark.parametrize("algorithm", list(Algorithm))
@settings(max_examples=max(8, settings().max_examples // 12), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    control_logs=st.booleans(),
    exactly_once=st.booleans(),
    standbys=st.booleans(),
)
def test_the_hazards_are_survived(
    algorithm: Algorithm, seed: int, control_logs: bool, exactly_once: bool, standbys: bool
) -> None:
    """Downtime, late members records, misplaced copies and forged markers, drawn in
    either mode (control logs, the default, or one log), with crashes, standbys and
    zombies: the checker passes, nothing is stuck and every node's outputs replay."""
    chaos = HAZARDS_WITH_STANDBYS if standbys else HAZARDS
    _, result = _hazard_run(algorithm, seed, control_logs, exactly_once, chaos=chaos)
    _assert_survived(result)
    if control_logs:
        for topic in result.topics:
            replayed = result.replayed(topic)
            expected = [(m.messageID, m.timeStamp) for m in result.deliveries[topic]]
            assert [(m.messageID, m.timeStamp) for m in replayed] == expected, topic


@pytest.mark.parametrize("algorithm", list(Algorithm))
@settings(max_examples=max(5, settings().max_examples // 25), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), layers=st.integers(2, 3), control_logs=st.booleans())
def test_the_hazards_are_survived_by_partitioned_topics(
    algorithm: Algorithm, seed: int, layers: int, control_logs: bool
) -> None:
    """The same hazards in every layer of partitioned topics, merged."""
    result = three_topic_run(
        algorithm, seed, layers, HAZARDS, control_logs=control_logs, direct=TRICKLE
    )
    assert_merged_correct(result, honest=False)  # (forgeries are set aside)


def test_the_hazards_are_drawn() -> None:
    """Each kind happens, in both modes."""
    for control_logs in (True, False):
        events: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        for algorithm in Algorithm:
            for seed in range(4):
                _, result = _hazard_run(algorithm, seed, control_logs, seed % 2 == 0)
                _assert_survived(result)
                events.update(result.events)
                for reasons in result.rejected_reasons().values():
                    refused.update("marker" if "apply marker" in r else r[:20] for r in reasons)
        for kind in ("downtime", "late_members", "misplaced", "forged_marker"):
            assert events[kind] >= 5, (control_logs, events)
        if control_logs:
            assert refused["marker"] >= 5, refused


# ---------------------------------------------------------------- mutants: each is caught


class _HeldForMembersIsStray(Engine):
    """Finding 1 put back: a record that waited for members is judged as if it had been
    held for its timestamp, and refused as a stray's after half a window."""

    def _retake_awaiting(self, result: Step) -> None:
        if not self.state.awaiting:
            return
        due = [m for _, m in self.state.awaiting]
        self.state.awaiting = []
        for message in due:
            self._take(None, message, result, released=True, timed=True)


class _TimedByMarker(Engine):
    """Finding 4 put back: a copy is judged late by the time its marker applies it."""

    def _check_late(self, record: Message) -> None:
        super()._check_late(record._replace(arrived=None))


def _caught(
    seeds: range, control_logs: bool, engine: type[Engine] = Engine, chaos: Chaos = HAZARDS
) -> bool:
    for seed in seeds:
        for algorithm in Algorithm:
            _, result = _hazard_run(
                algorithm, seed, control_logs, seed % 2 == 0, engine=engine, chaos=chaos
            )
            report = result.check()
            if not (result.quiescent and report.ok and result.stuck() == {}):
                return True
    return False


@pytest.mark.parametrize("control_logs", [True, False], ids=["ctl", "one-log"])
def test_a_members_wait_judged_as_a_time_hold_is_caught(control_logs: bool) -> None:
    chaos = replace(HAZARDS, late_members=1.0, downtime=0.0, forged_marker=0.0, misplaced=0.0)
    assert _caught(range(10), control_logs, _HeldForMembersIsStray, chaos)


def test_a_copy_timed_by_its_marker_is_caught() -> None:
    chaos = replace(HAZARDS, late_members=0.0, downtime=0.01, forged_marker=0.0, misplaced=0.0)
    assert _caught(range(10), True, _TimedByMarker, chaos)


class _TakesMisplaced(NodeBatch):
    def _misplaced(self, messages: list[Message], from_input: bool) -> Refusal | None:
        return None


class _BelievesForgedMarkers(NodeBatch):
    def _written_after(self, marker: Marker, marked_at: int | None) -> Refusal | None:
        return None


def test_a_misplaced_record_taken_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    use_batch_class(monkeypatch, _TakesMisplaced)
    chaos = replace(HAZARDS, late_members=0.0, downtime=0.0, forged_marker=0.0, misplaced=0.2)
    assert _caught(range(10), True, chaos=chaos)


def test_a_forged_marker_believed_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    use_batch_class(monkeypatch, _BelievesForgedMarkers)
    chaos = replace(HAZARDS, late_members=0.0, downtime=0.0, forged_marker=0.05, misplaced=0.0)
    assert _caught(range(10), True, chaos=chaos)
