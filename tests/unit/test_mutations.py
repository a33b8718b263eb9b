"""Mutation tests: put each 2019 defect (docs/DESIGN.md §4.10) back; the tests catch it.

Each mutant is an :class:`Engine` subclass overriding one of the seams (``_propose``,
``_observe``, ``_ack_timestamp``, ``_complete``, ``_already_seen``, and ``_on_ack`` for
counting acks). For each, a deterministic search over simulator seeds (or a scripted
scenario) must make the independent checker report a violation, and the real engine
must pass the very same runs -- so these tests show the suite *can* fail.

Defect (docs/DESIGN.md §4.10) -> mutant -> how it is caught:

- (a) Ack carries the coordinator's timestamp -> ``AckCarriesCoordinatorTimestamp``
  -> order violation (seed search with a skewed clock, and a scripted scenario); with
  ``direct`` the same seam makes a reply Notify carry the notifier's timestamp;
- (b) clock set to max without +1 -> ``ClockWithoutIncrement`` -> order violation
  (seed search, and a scripted tie);
- (c) coordinator decides one ack early -> ``DecidesOneAckEarly`` -> order violation;
- (d) ack completeness by count -> ``CountsAcks`` -> order violation (seed search
  with Acks repeated by records without ``seq``, and a scripted stray Ack); ``direct``
  has no Acks and keys Notify proposals by topic, which (c) covers;
- (e) no de-duplication -> ``NoDeduplication`` -> duplicate deliveries;
- (f) per-client integer message ids (client side, ``integer_ids``) -> id-reuse and
  messages lost.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import pytest

from atomickafka.core.engine import Algorithm, Engine, Output
from atomickafka.core.engine_types import PendingMessage as _Pending
from atomickafka.core.wire import Message, MessageType
from atomickafka.verify.checker import ORDER_KINDS, CheckReport, ViolationKind
from atomickafka.verify.simulator import (
    Chaos,
    RandomChooser,
    Send,
    SimulationResult,
    Simulator,
    Workload,
    integer_ids,
    random_workload,
)

ALGORITHMS = list(Algorithm)
ACK_ALGORITHMS = [Algorithm.POC, Algorithm.OPTIMIZED]
TOPICS = ["T1", "T2", "T3", "T4", "T5"]
SEEDS = 400  # search bound

# ---------------------------------------------------------------------------- mutants


class AckCarriesCoordinatorTimestamp(Engine):
    """(a) The Ack was cloned from the Notify before the local proposal was set."""

    def _ack_timestamp(self, entry: _Pending, notify: Message) -> int:
        assert notify.timeStamp is not None
        return notify.timeStamp


class ClockWithoutIncrement(Engine):
    """(b) Thesis Alg. 1 lines 12-13 (use the clock, then increment) and Alg. 2 line 13
    (set the clock to the decided timestamp): after observing ``ts`` the next proposal
    is ``ts`` itself, a tie with what was just decided."""

    def _propose(self) -> int:
        proposal = self.state.clock
        self.state.clock += 1
        return proposal

    def _observe(self, ts: int) -> None:
        self.state.clock = max(self.state.clock, ts)  # no +1 to make up for the post-increment


class DecidesOneAckEarly(Engine):
    """(c) The coordinator counted itself once too often: it decides with one
    destination's proposal still missing."""

    def _complete(self, entry: _Pending) -> bool:
        have = sum(1 for t in entry.destinations if t in entry.proposals)
        return have >= len(entry.destinations) - 1


class CountsAcks(Engine):
    """(d) Completeness by count: acks kept in a list (duplicates and acks from
    non-destinations included) and compared with the number of destinations."""

    def _complete(self, entry: _Pending) -> bool:
        return len(entry.proposals) >= len(entry.destinations)

    def _on_ack(self, record: Message) -> list[Output]:
        mid, sender, ts = record.messageID, record.sentFromTopic, record.timeStamp
        assert sender is not None and ts is not None
        self._observe(ts)
        if self._already_seen(mid) or self.topic not in record.topic:
            return []
        entry = self.state.pending.get(mid)
        if entry is None:
            entry = self.state.pending[mid] = _Pending(record.topic, record.digest, record.value)
        # The 2019 list of acks: a repeat or a stranger is one more entry.
        key = sender if sender not in entry.proposals else f"{sender}#{len(entry.proposals)}"
        entry.proposals[key] = ts
        if entry.final is not None or entry.local is None:
            return []
        if self.algorithm is Algorithm.OPTIMIZED and not entry.coordinator:
            return []
        return self._decide(mid, entry) if self._complete(entry) else []


class NoDeduplication(Engine):
    """(e) Nothing remembers what was delivered: a record seen again starts over."""

    def _already_seen(self, message_id: str) -> bool:
        return False


# ---------------------------------------------------------------------------- helpers


def factory(engine_class: type[Engine]) -> Callable[[str, Algorithm], Engine]:
    return lambda topic, algorithm: engine_class(topic, f"node-{topic}", algorithm)


def seeded_run(
    engine_class: type[Engine],
    algorithm: Algorithm,
    seed: int,
    chaos: Chaos,
    *,
    control_logs: bool = True,
    **workload_options: Any,
) -> SimulationResult:
    rng = random.Random(seed)
    options: dict[str, Any] = {"clients": 3, "messages": 20, "multicast": 0.7, "skew": 30}
    options.update(workload_options)
    workload = random_workload(rng, TOPICS, **options)
    sim = Simulator(
        TOPICS,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        engine_factory=factory(engine_class),
        members_known=True,
        control_logs=control_logs,
    )
    return sim.run(workload)


def search(
    engine_class: type[Engine],
    algorithm: Algorithm,
    caught: Callable[[CheckReport], bool],
    chaos: Chaos,
    seeds: Iterable[int] = range(SEEDS),
    **workload_options: Any,
) -> tuple[int, CheckReport]:
    """The first seed whose run the checker flags as ``caught``; fails if none does,
    and checks that the real engine passes every seed searched."""
    searched: list[int] = []
    for seed in seeds:
        searched.append(seed)
        result = seeded_run(engine_class, algorithm, seed, chaos, **workload_options)
        report = result.check()
        if caught(report):
            break
    else:
        pytest.fail(f"{engine_class.__name__} ({algorithm.value}) not caught in {SEEDS} seeds")
    for s in searched:
        good = seeded_run(Engine, algorithm, s, chaos, **workload_options)
        assert good.quiescent and good.check().ok, (s, good.check().summary())
        assert good.stuck() == {}
    return seed, report


def order_violation(report: CheckReport) -> bool:
    return bool(report.kinds() & ORDER_KINDS)


CALM = Chaos(duplicate=0.0, delay=0.05, crash=0.0, checkpoint=0.0)
ROUGH = Chaos(duplicate=0.1, unsequenced=0.2, delay=0.05, crash=0.0, checkpoint=0.0)
PARTIAL = Chaos(duplicate=0.0, delay=0.05, crash=0.0, checkpoint=0.0, partial_write=0.8)


# ---------------------------------------------------------------------------- (a)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_ack_with_coordinator_timestamp_breaks_order(algorithm: Algorithm) -> None:
    # Skewed clocks: topic T1 handles 30 single-topic messages first. With direct, a
    # destination replies to a Notify only when the client's copy has not reached it
    # first: clients that write to some destinations only make that common.
    chaos = PARTIAL if algorithm is Algorithm.DIRECT else CALM
    _, report = search(AckCarriesCoordinatorTimestamp, algorithm, order_violation, chaos)
    assert report.first is not None
    assert report.first.kind in ORDER_KINDS, report.summary()


def scripted_skewed_clock(engine_class: type[Engine]) -> SimulationResult:
    """C's clock runs ahead; with the defect every final is its coordinator's proposal.

    m1 (A and C) is coordinated by A, m2 (A and C) by C. C proposes 21 for m2, then 22
    for m1 but acks m1 with A's 1, so A decides m1 at 1 and delivers it first. C decides
    m2 at 21 (A acked it with 21, C's own) and delivers it while m1 still sits at 22
    there; m1's Decided (1) comes too late. A delivers m1, m2; C m2, m1.
    """
    sim = Simulator(
        ["A", "C"],
        algorithm="optimized",
        engine_factory=factory(engine_class),
        members_known=True,
        record_trace=True,
    )
    for i in range(20):
        sim.send(Send("hot", f"hot-{i}", ("C",), i, "C"))
    sim.send(Send("c", "m1", ("A", "C"), 1, "A"))
    sim.send(Send("c", "m2", ("A", "C"), 2, "C"))
    sim.step_node("A", 1)  # m1: A proposes 1, notifies C
    sim.step_node("C", 21)  # hot messages; m2: C proposes 21, notifies A
    sim.step_node("C", 1)  # m1: C proposes 22, acks (each step's outputs are one bundle)
    sim.step_node("A", 1)  # m2: A proposes, acks C
    sim.step_node("A", 1)  # m1: A decides, delivers
    sim.step_node("C", 1)  # m2: C decides (and delivers) before m1's Decided
    return sim.drain()


def test_a_scripted_skewed_clock() -> None:
    """Two nodes deliver two messages in opposite orders when one clock runs ahead."""
    assert scripted_skewed_clock(Engine).check().ok
    result = scripted_skewed_clock(AckCarriesCoordinatorTimestamp)
    report = result.check()
    assert report.of_kind(ViolationKind.ORDER), "\n".join(result.trace)
    assert result.delivered_ids("A") == ["m1", "m2"]
    assert result.delivered_ids("C")[-2:] == ["m2", "m1"]


# ---------------------------------------------------------------------------- (b)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_b_clock_without_increment_breaks_order(algorithm: Algorithm) -> None:
    # Ties are rarer than (a): a few per cent of runs; the search is deterministic.
    search(ClockWithoutIncrement, algorithm, order_violation, CALM)


def scripted_tie(engine_class: type[Engine]) -> SimulationResult:
    """A proposal ties a decided timestamp; B and A then order m1 and m2 differently.

    C's clock runs ahead, so m2's final (5) is C's proposal. A, the coordinator, moves
    its clock to 5 and delivers m2@5; without the +1 its next proposal, for m1, is 5
    too. B coordinates m1 and decides max(1, 5) = 5 while m2 still waits there for
    its Decided: B orders (5, m1) before (5, m2), A delivered m2 first.
    """
    sim = Simulator(
        ["A", "B", "C"],
        algorithm="optimized",
        engine_factory=factory(engine_class),
        members_known=True,
        record_trace=True,
    )
    for i in range(5):
        sim.send(Send("hot", f"hot-{i}", ("C",), i, "C"))
    sim.step_node("C", 5)
    sim.send(Send("c", "m2", ("A", "B", "C"), 2, "A"))
    sim.step_node("A", 1)  # Notify B, C
    sim.send(Send("c", "m1", ("A", "B"), 1, "B"))
    sim.step_node("B", 1)  # m2: B proposes, acks A
    sim.step_node("C", 1)  # m2: C proposes 5, acks A
    sim.step_node("A", 2)  # A decides m2 = 5, delivers it, sends Decided
    sim.step_node("B", 1)  # m1: B proposes, notifies A
    sim.step_node("A", 1)  # m1: A proposes (5 without the +1), acks B
    return sim.drain()


def test_b_scripted_tie() -> None:
    assert scripted_tie(Engine).check().ok
    result = scripted_tie(ClockWithoutIncrement)
    report = result.check()
    assert report.of_kind(ViolationKind.ORDER), "\n".join(result.trace)
    assert result.delivered_ids("A") == ["m2", "m1"]
    assert result.delivered_ids("B") == ["m1", "m2"]
    assert {m.timeStamp for t in "AB" for m in result.deliveries[t]} == {5}


# ---------------------------------------------------------------------------- (c)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_c_deciding_one_ack_early_breaks_order(algorithm: Algorithm) -> None:
    search(DecidesOneAckEarly, algorithm, order_violation, CALM)


# ---------------------------------------------------------------------------- (d)


@pytest.mark.parametrize("algorithm", ACK_ALGORITHMS)
def test_d_counting_acks_breaks_with_duplicate_acks(algorithm: Algorithm) -> None:
    # Copies of bundles without their ``seq`` (as written before §4.12) repeat Acks past
    # the de-duplication by sequence number; a count mistakes them for others.
    # Unsequenced bundles come only from releases before §4.12, which wrote no control
    # logs: one log is where a node reads them.
    search(CountsAcks, algorithm, order_violation, ROUGH, control_logs=False)


def scripted_stray_ack(engine_class: type[Engine]) -> SimulationResult:
    """A stray Ack (from D, not a destination) completes the count one ack early.

    n goes to {B, C} and m to {A, B, C}; C's clock runs ahead. A counts B's Ack and the
    stray one as three of three and decides m at 2, but C has proposed 12 and already
    delivered n at 12: C delivers n before m, B m before n.
    """
    sim = Simulator(
        ["A", "B", "C"],
        algorithm="optimized",
        engine_factory=factory(engine_class),
        members_known=True,
        record_trace=True,
    )
    for i in range(10):
        sim.send(Send("hot", f"hot-{i}", ("C",), i, "C"))
    sim.send(Send("c", "a-n", ("B", "C"), "n", "C"))
    sim.send(Send("c", "b-m", ("A", "B", "C"), "m", "A"))
    sim.step_node("A", 1)  # m: A proposes 1, notifies B and C
    sim.step_node("C", 11)  # the hot messages; n: C proposes 11, notifies B
    sim.step_node("B", 2)  # m: B proposes 2, acks A; n: B proposes 12, acks C
    stray = Message(
        "b-m", MessageType.ACK, ("A", "B", "C"), None, "node-D", "D", 0, digest="0" * 16
    )
    sim.append("A", stray)
    sim.step_node("C", 2)  # m: C proposes 12, acks A; n decided at 12 and delivered
    sim.step_node("A", 3)
    return sim.drain()


def test_d_scripted_stray_ack() -> None:
    assert scripted_stray_ack(Engine).check().ok
    result = scripted_stray_ack(CountsAcks)
    report = result.check()
    assert report.of_kind(ViolationKind.ORDER), "\n".join(result.trace)
    assert result.delivered_ids("B") == ["b-m", "a-n"]
    assert result.delivered_ids("C")[-2:] == ["a-n", "b-m"]


# ---------------------------------------------------------------------------- (e)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_e_no_deduplication_delivers_duplicates(algorithm: Algorithm) -> None:
    _, report = search(
        NoDeduplication,
        algorithm,
        lambda r: ViolationKind.DUPLICATE in r.kinds(),
        ROUGH,
    )
    duplicate = report.of_kind(ViolationKind.DUPLICATE)[0]
    assert "twice" in duplicate.text


def test_a_mutant_engine_survives_crashes() -> None:
    """The mutation seam holds across restarts: a crashed node comes back from its
    snapshot as the same engine class, so a search with crashes tests the mutant."""
    rng = random.Random(3)
    workload = random_workload(rng, TOPICS, clients=3, messages=30, multicast=0.7)
    chaos = Chaos(crash=0.2, checkpoint=0.3, duplicate=0.1)
    for exactly_once in (True, False):
        sim = Simulator(
            TOPICS,
            chooser=RandomChooser(rng),
            chaos=chaos,
            engine_factory=factory(NoDeduplication),
            exactly_once=exactly_once,
        )
        result = sim.run(workload)
        assert result.events["crash"] > 0 and result.events["checkpoint"] > 0
        assert all(type(e) is NoDeduplication for e in result.engines.values())


# ---------------------------------------------------------------------------- (f)


def unique_values(workload: Workload) -> Workload:
    """Give every send a distinct value, to tell colliding messages apart."""
    clients = {
        client: [dataclasses.replace(s, value=f"{client}/{i}") for i, s in enumerate(sends)]
        for client, sends in workload.clients.items()
    }
    return Workload(clients, workload.preload)


def lost_sends(workload: Workload, result: SimulationResult) -> list[Send]:
    values = {
        t: {orjson.loads(m.value or b"") for m in result.deliveries[t]} for t in result.topics
    }
    return [s for s in workload.sends if any(s.value not in values[t] for t in s.destinations)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_f_per_client_integer_ids_lose_messages(algorithm: Algorithm) -> None:
    for ids, expect_ok in ((None, True), (integer_ids, False)):
        rng = random.Random(11)
        options: dict[str, Any] = {"clients": 3, "messages": 30, "multicast": 0.5}
        if ids is not None:
            options["ids"] = ids
        workload = unique_values(random_workload(rng, TOPICS, **options))
        sim = Simulator(TOPICS, algorithm=algorithm, chooser=RandomChooser(rng), chaos=CALM)
        result = sim.run(workload)
        report = result.check()
        assert report.ok is expect_ok, report.summary()
        lost = lost_sends(workload, result)
        if expect_ok:
            assert lost == []
        else:
            # Two clients both used ids 1, 2, 3...: the checker sees reused ids, and
            # whole messages never reach some of their destinations.
            assert ViolationKind.ID_REUSE in report.kinds()
            assert lost, report.summary()
