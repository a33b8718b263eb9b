"""Hostile input through the simulators (issue 15): what found the bugs, kept as tests.

Every run drives the production batch layers (``NodeBatch``, ``MergerBatch``) under one
of the hostile inputs below, for every protocol and both delivery modes, and must keep
atomic multicast for the honest traffic (the checker on every message that was sent by
a client and could be ordered), leave nothing stuck and keep rule 8. §4.9: no single
record -- whatever its type, timestamp, sender or size -- may stop a topic.

- stray records with extreme timestamps: a TickMessage (from the merger's id, or an
  intruder's) or an Ack/Notify about a delivered message, dated at the edges of the
  §4.11 bounds of its log time: just under and just over ``CLOCK_LEAD_US``, just under
  and just over ``CLOCK_HOLD_US``, and ``MAX_TIMESTAMP``;
- producer gaps: a step whose write fails at one record -- those before it written,
  none after -- and a restart (with a producer that writes what follows a failure, the
  negative control, order breaks);
- foreign records at the end of ``T``: not JSON, a ClientMessage and, on a signed run,
  a Delivery forged under the merger's id with a huge timestamp; then a merger restart
  (unsigned, such a forgery suppresses what follows: the negative control);
- nodes of different protocols: messages whose destinations mix protocols are aborted
  everywhere and delivered nowhere; the others are delivered in order;
- bundled values that are not JSON: set aside, never delivered.

Example counts scale with the Hypothesis profile (``tests/unit/conftest.py``).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.engine import Algorithm
from atomickafka.core.signing import Signer
from atomickafka.core.wire import Message, MessageType, encode_bundle, value_digest
from atomickafka.verify.checker import ViolationKind
from atomickafka.verify.hostile import BAD_VALUE, StrayBound, foreign_delivery_records
from atomickafka.verify.layered import LayeredResult, LayeredSimulator, MergerChaos, assign_layers
from atomickafka.verify.simulator import (
    Chaos,
    RandomChooser,
    Send,
    SimulationResult,
    Simulator,
    random_workload,
)
from atomickafka.verify.streams import BASE_LOG_MS
from tests.unit.test_layered import assert_merged_correct
from tests.unit.test_properties import (
    ALGORITHMS,
    assert_correct,
    delivery_modes,
    examples,
    seeded_run,
    topic_names,
)

SECRET = b"hostile-tests-secret-0123456789ab"
#: What a node may set aside in a run with strays: timestamps past the hold bound,
#: ticks from intruders, and client copies duplicated after an hour of held log time.
STRAY_REASONS = (
    "more than an hour ahead",
    "TickMessage from intruder",
    "late: sent",
    "in the input log: with control logs",  # a stray in the wrong log (§7.1)
    "a stray, not a proposal anyone waits for",  # held past the lateness bound (§4.11)
)


def single_run(
    algorithm: Algorithm,
    seed: int,
    chaos: Chaos,
    mode: tuple[bool, int] = (True, 0),
    *,
    signer: Signer | None = None,
    messages: int = 30,
    **options: Any,
) -> SimulationResult:
    """A run of ``messages`` over five topics under ``chaos``; ``options`` go to the
    :class:`Simulator`."""
    topics = topic_names(5)
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=messages, relay=0.1, retry=0.1)
    sim = Simulator(
        topics,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        exactly_once=mode[0],
        commit_lag=mode[1],
        signer=signer,
        **options,
    )
    return sim.run(workload)


def layered_run(
    algorithm: Algorithm,
    seed: int,
    chaos: Chaos,
    merger_chaos: MergerChaos,
    mode: tuple[bool, int] = (True, 0),
    *,
    signer: Signer | None = None,
) -> LayeredResult:
    topics = topic_names(4)
    rng = random.Random(seed)
    base = random_workload(rng, topics, clients=3, messages=25, relay=0.1, retry=0.1)
    workload = assign_layers(base, 3, chooser=RandomChooser(rng), phases=3)
    sim = LayeredSimulator(
        topics,
        3,
        algorithm=algorithm,
        chooser=RandomChooser(rng),
        chaos=chaos,
        merger_chaos=merger_chaos,
        exactly_once=mode[0],
        commit_lag=mode[1],
        signer=signer,
    )
    return sim.run(workload)


def reasons(result: SimulationResult) -> list[str]:
    return [r for rs in result.rejected_reasons().values() for r in rs]


def jumped_clocks(result: SimulationResult) -> int:
    """Deliveries at a timestamp only a stray's clock move explains (µs since the epoch)."""
    return sum(
        1 for ms in result.deliveries.values() for m in ms if (m.timeStamp or 0) > BASE_LOG_MS
    )


# ---------------------------------------------------------------------------- strays

STRAYS = Chaos(stray=0.25, duplicate=0.05, crash=0.02, checkpoint=0.1, delay=0.03)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.15)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_stray_records_with_extreme_timestamps_stop_nothing(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    result = single_run(algorithm, seed, STRAYS, mode)
    assert_correct(result, honest=False)
    assert all(any(k in r for k in STRAY_REASONS) for r in reasons(result)), reasons(result)


def test_strays_move_clocks_are_held_and_are_refused() -> None:
    """What the strays do, summed over a few runs of each protocol: clocks moved by an
    applied stray (finals far above any Lamport count), holds that outlast every log
    (time passes until they are due), refusals past the hold bound and of intruders."""
    seen: Counter[str] = Counter()
    for algorithm in ALGORITHMS:
        for seed in range(4):
            result = single_run(algorithm, seed, STRAYS)
            assert_correct(result, honest=False)
            seen["jumped"] += jumped_clocks(result)
            seen["time_jump"] += result.events["time_jump"]
            for reason in reasons(result):
                seen["refused: an hour ahead"] += "more than an hour ahead" in reason
                seen["refused: an intruder"] += "TickMessage from intruder" in reason
            seen.update(k for k in result.events if k.startswith("stray_"))
    assert seen["jumped"] and seen["time_jump"], seen
    assert seen["refused: an hour ahead"] and seen["refused: an intruder"], seen
    assert {f"stray_{b.value}" for b in StrayBound} <= set(seen), seen


def test_a_stray_tick_at_the_lead_bound_moves_the_clock_and_peers_still_agree() -> None:
    """Issue 15, item 1: a tick from the merger's id just under the bound is applied;
    A's next proposals are far above B's clock, yet B takes them (held for the moment
    its log's time needs to catch up, §4.11) and both deliver the same order."""
    for algorithm in ALGORITHMS:
        sim = Simulator(["A", "B"], algorithm=algorithm)
        sim.stray("A", 0, StrayBound.UNDER_LEAD)
        sim.clock.advance()
        sim.send(Send("c", "m1", ("A", "B"), 1, "A"))
        sim.send(Send("c", "m2", ("A", "B"), 2, "B"))
        result = sim.drain()
        assert_correct(result)
        assert result.engines["A"].clock > BASE_LOG_MS * 1000
        assert result.delivered_ids("A") == result.delivered_ids("B")
        assert {m.timeStamp for m in result.deliveries["B"]} == {
            m.timeStamp for m in result.deliveries["A"]
        }


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_stray_records_stop_no_partitioned_topic(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """Strays in the layers' logs, ticks from the merger's id included: a layer whose
    clock a stray moved delivers far ahead, the merger asks the idle layers to tick
    that far, and they do -- nothing waits for good (issue 15, item 2)."""
    mchaos = MergerChaos(crash=0.02, checkpoint=0.05)
    result = layered_run(algorithm, seed, STRAYS, mchaos, mode)
    assert_merged_correct(result, honest=False)


def test_a_signed_cluster_sets_every_stray_aside() -> None:
    """With signing, a stray (written without the secret) is set aside as unsigned:
    no clock moves, nothing is held."""
    signer = Signer([SECRET])
    for algorithm in ALGORITHMS:
        result = single_run(algorithm, 5, STRAYS, signer=signer)
        assert_correct(result, honest=False)
        assert result.events["stray_under-lead"]
        assert jumped_clocks(result) == 0 and result.events["time_jump"] == 0
        assert all(r.startswith("unsigned") for r in reasons(result)), reasons(result)


# ---------------------------------------------------------------------------- producer gaps

GAPS = Chaos(producer_gap=0.1, crash=0.02, checkpoint=0.1, duplicate=0.05, delay=0.03)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.15)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_producer_gaps_lose_nothing_and_keep_order(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """A failed write leaves a prefix of the step's records (at-least-once: the
    producer is gapless; exactly-once: the transaction aborts), the node restarts from
    its snapshot and replays: the order holds and nothing is lost (issue 15, item 6)."""
    assert_correct(single_run(algorithm, seed, GAPS, mode))


def test_producer_gaps_happen_at_every_point_of_a_step() -> None:
    """The gaps the test above draws do happen, in both modes, each followed by a
    restart from the newest snapshot."""
    events: Counter[str] = Counter()
    for algorithm in ALGORITHMS:
        for mode in ((True, 0), (False, 3)):
            result = single_run(algorithm, 1, GAPS, mode)
            assert_correct(result)
            events.update(result.events)
    assert events["producer_gap"] >= 6 and events["crash"] >= events["producer_gap"]
    assert events["checkpoint"]


def test_without_gapless_writes_a_failed_batch_breaks_order() -> None:
    """The negative control: a producer that writes what follows a failed record (no
    ``enable.gapless.guarantee``) loses control records to the receivers' ``seq``
    de-duplication and delivers late: the checker and the readers catch it."""
    for algorithm in ALGORITHMS:
        caught = 0
        for seed in range(10):
            topics = topic_names(5)
            chaos = Chaos(producer_gap=0.15)
            result = seeded_run(
                algorithm, seed, chaos, exactly_once=False, commit_lag=3, gapless=False
            )
            if not result.check().ok or result.determinism_errors or result.stuck():
                caught += 1
            good = Simulator(
                topics,
                algorithm=algorithm,
                chooser=RandomChooser(random.Random(seed)),
                chaos=chaos,
                exactly_once=False,
                commit_lag=3,
            )
            rng = random.Random(seed)
            assert_correct(good.run(random_workload(rng, topics, clients=3, messages=30)))
        assert caught >= 3, (algorithm, caught)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_producer_gaps_of_layers_and_mergers_lose_nothing(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    mchaos = MergerChaos(producer_gap=0.05, crash=0.02, checkpoint=0.05, duplicate=0.05)
    result = layered_run(algorithm, seed, GAPS, mchaos, mode)
    assert_merged_correct(result)


# ---------------------------------------------------------------------------- foreign records


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes, signed=st.booleans())
def test_foreign_records_in_t_never_stop_or_mislead_the_merger(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int], signed: bool
) -> None:
    """Records of other writers at the end of ``T`` before a merger restart: the merger
    resumes after its own last record, never fails on theirs and never suppresses a
    later genuine delivery; with signing, a Delivery forged under its id is not its own
    (issue 15, item 5)."""
    signer = Signer([SECRET]) if signed else None
    mchaos = MergerChaos(foreign=0.08, crash=0.02, checkpoint=0.1, producer_gap=0.02)
    chaos = Chaos(crash=0.02, checkpoint=0.1)
    result = layered_run(algorithm, seed, chaos, mchaos, mode, signer=signer)
    assert_merged_correct(result)
    if result.events["foreign"]:
        assert result.events["foreign_passed"] >= 3  # every restart read past them


def test_unsigned_a_delivery_forged_under_the_mergers_id_is_trusted() -> None:
    """The negative control of the test above: without signing nothing tells a forged
    Delivery from the merger's own, so one at a huge timestamp makes a restarted merger
    suppress everything after it. Signing is the answer (§4.14)."""
    outcomes = {}
    for signer in (None, Signer([SECRET])):
        topics = topic_names(3)
        base = random_workload(random.Random(2), topics, clients=2, messages=20)
        sim = LayeredSimulator(topics, 2, chooser=RandomChooser(2), signer=signer)
        sim.load(assign_layers(base, 2))
        sim.advance(40)
        merger = sim.mergers["T1"]
        for value in foreign_delivery_records("T1", merger.spec.sender_id, forged=True):
            merger.target.append(value)
        sim.restart_merger("T1", from_checkpoint=False)
        assert sim.advance(100_000)
        outcomes[signer is not None] = sim.result()
    assert ViolationKind.LOST in outcomes[False].check().kinds()
    assert outcomes[False].mergers["T1"].stats.suppressed > 0
    assert_merged_correct(outcomes[True])


# ---------------------------------------------------------------------------- mixed protocols


def assert_doomed_nowhere(result: SimulationResult | LayeredResult) -> None:
    """Messages whose destinations run different protocols: delivered nowhere (the
    checker would call them invented too) and, when any were sent, refused for it."""
    delivered = {
        m.messageID
        for ms in (
            result.deliveries.values()
            if isinstance(result, SimulationResult)
            else result.merged.values()
        )
        for m in ms
    }
    assert not delivered & result.doomed, delivered & result.doomed


@examples(0.25)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_nodes_of_different_protocols_abort_what_they_cannot_order(
    seed: int, mode: tuple[bool, int]
) -> None:
    """Each topic's node runs a drawn protocol; clients write as their entry topic's
    protocol says (a stale view of the statuses). A message whose destinations mix
    protocols is aborted at every destination; the others are delivered in order
    (issue 15, item 7)."""
    chaos = Chaos(mixed_protocols=True, crash=0.02, checkpoint=0.1, duplicate=0.05)
    result = single_run(Algorithm.DIRECT, seed, chaos, mode)
    assert_correct(result, honest=False)
    assert_doomed_nowhere(result)
    if result.doomed:
        assert any("protocol mismatch" in r for r in reasons(result)), result.describe()


def test_a_protocol_map_aborts_a_mixed_message_everywhere() -> None:
    protocols = {"A": "direct", "B": "poc", "C": "poc"}
    sim = Simulator(["A", "B", "C"], protocols=protocols)
    sim.send(Send("c", "mixed", ("A", "B", "C"), 1, "A"))  # written to A, B and C
    sim.send(Send("c", "poc-only", ("B", "C"), 2, "B"))
    sim.send(Send("c", "after", ("A", "B"), 3, "B"))  # mixed too, written to B only
    result = sim.drain()
    assert_correct(result, honest=False)
    assert result.doomed == {"mixed", "after"}
    assert result.delivered_ids("B") == result.delivered_ids("C") == ["poc-only"]
    assert result.delivered_ids("A") == []
    assert {"mixed"} <= set(result.aborted["A"]) | set(result.aborted["B"])


@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_partitioned_topics_of_different_protocols_stall_nothing(
    seed: int, mode: tuple[bool, int]
) -> None:
    chaos = Chaos(mixed_protocols=True, crash=0.02, checkpoint=0.1)
    result = layered_run(Algorithm.DIRECT, seed, chaos, MergerChaos(crash=0.02), mode)
    assert_merged_correct(result, honest=False)
    assert_doomed_nowhere(result)


# ---------------------------------------------------------------------------- bad values


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.1)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_bundled_values_that_are_not_json_are_set_aside(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """A forged Bundle whose ClientMessage value is ``\\xff{"a": [}``: set aside with
    the reason, never delivered (issue 15, item 4)."""
    chaos = Chaos(bad_value=0.15, crash=0.02, checkpoint=0.1, duplicate=0.05)
    result = single_run(algorithm, seed, chaos, mode)
    assert_correct(result, honest=False)
    assert_doomed_nowhere(result)
    refused = [r for r in reasons(result) if "not a valid UTF-8 JSON" in r]
    assert len(refused) >= result.events["bad_value"]
    assert len(refused) == len(reasons(result))
    letters = [d for ds in result.dead_letters.values() for d in ds]
    assert sum(BAD_VALUE in (d.value or b"") for d in letters) >= result.events["bad_value"]


# ---------------------------------------------------------------------------- forged decisions


def forged_decided(mid: str, destinations: tuple[str, ...], sender: str, value: bytes) -> bytes:
    """A Bundle holding a Decided for ``mid`` under ``sender``'s real node id (no
    ``seq``, unsigned): a decision about a message its reader never heard of."""
    node = f"node-{sender}"
    message = Message(mid, MessageType.DECIDED, destinations, value, senderID=node,
                      sentFromTopic=sender, timeStamp=3, digest=value_digest(value),
                      protocol="optimized")  # fmt: skip
    return encode_bundle([message], sender_id=node, sent_from=sender, protocol="optimized")


def test_a_decided_for_a_message_never_heard_of_is_delivered_nowhere() -> None:
    """§4.9: forged Decideds for fresh ids (under B's and C's real node ids; one naming
    a destination without a node) in A's log amid honest ``optimized`` traffic used to
    be delivered at A alone. They are set aside with the reason, into A's dead letters,
    and the honest messages around them are delivered in order everywhere."""
    sim = Simulator(["A", "B", "C"], algorithm=Algorithm.OPTIMIZED)
    sim.send(Send("c", "m1", ("A", "B"), 1, "A"))
    forged = [
        forged_decided("forged-1", ("A", "B"), "B", b'"forged"'),
        forged_decided("forged-2", ("A", "B", "C"), "C", b'{"a": 2}'),
        forged_decided("forged-3", ("A", "nosuch"), "nosuch", b"3"),
    ]
    for value in forged:
        sim.append_input("A", value, signed=False)
    sim.send(Send("c", "m2", ("A", "B", "C"), 2, "B"))
    result = sim.drain()
    assert_correct(result, honest=False)
    delivered = {m.messageID for ms in result.deliveries.values() for m in ms}
    assert delivered == {"m1", "m2"}, delivered
    assert reasons(result) and all("never heard of" in r for r in reasons(result))
    assert sorted(d.value or b"" for d in result.dead_letters["A"]) == sorted(forged)


# ---------------------------------------------------------------------------- all at once


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.04)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes, signed=st.booleans())
def test_every_hostile_input_at_once_on_partitioned_topics(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int], signed: bool
) -> None:
    """Strays, producer gaps of nodes and mergers, bad values and foreign records in
    ``T`` in one run of partitioned topics, signed or not."""
    chaos = Chaos(
        stray=0.1,
        producer_gap=0.05,
        bad_value=0.05,
        crash=0.02,
        checkpoint=0.1,
        duplicate=0.05,
        delay=0.03,
    )
    mchaos = MergerChaos(foreign=0.03, producer_gap=0.03, crash=0.02, checkpoint=0.1)
    signer = Signer([SECRET]) if signed else None
    result = layered_run(algorithm, seed, chaos, mchaos, mode, signer=signer)
    assert_merged_correct(result, honest=False)
    assert_doomed_nowhere(result)
    if signed:  # every stray is unsigned: set aside, so no clock was moved by one
        assert all(k.timeStamp < BASE_LOG_MS for ks in result.keys.values() for k in ks)


# ---------------------------------------------------------------------------- issue 23

IN_FLIGHT = Chaos(
    stray_in_flight=0.2,
    duplicate=0.05,
    crash=0.02,
    checkpoint=0.1,
    delay=0.03,
    takeover=0.01,
    commit=0.4,
    zombie=0.5,
)


def assert_agreement(result: SimulationResult | LayeredResult) -> None:
    """Every message a stray reached was delivered at all its destinations or none."""
    streams = (
        result.deliveries
        if isinstance(result, SimulationResult)
        else {t: result.merged[t] for t in result.topics}
    )
    hit = (
        result.all_or_none
        if isinstance(result, SimulationResult)
        else frozenset().union(*(r.all_or_none for r in result.layer_results))
    )
    sent = {s.messageID: s.destinations for s in result.sent}
    for mid in hit & sent.keys():
        at = {t for t, ms in streams.items() if any(m.messageID == mid for m in ms)}
        assert at in (set(), set(sent[mid])), (mid, at, sent[mid])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.15)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_strays_about_messages_in_flight_never_split_or_hold_one(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """§4.9, issue 23: Notifies and Acks naming another protocol (or none), and Aborts
    answering nothing, about messages in flight, reaching any destination at any point
    of a message's life: each message is delivered everywhere or nowhere, nothing is
    held for good, and everything else keeps atomic multicast."""
    result = single_run(algorithm, seed, IN_FLIGHT, mode)
    assert result.events["stray_in_flight"] or not result.sent, result.describe()
    assert_correct(result, honest=False)
    assert_agreement(result)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_strays_about_messages_in_flight_stop_no_partitioned_topic(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    mchaos = MergerChaos(crash=0.02, checkpoint=0.05)
    result = layered_run(algorithm, seed, IN_FLIGHT, mchaos, mode)
    assert_merged_correct(result, honest=False)
    assert_agreement(result)


def test_strays_in_flight_are_set_aside_and_some_abort_what_they_reach() -> None:
    """What the strays above do, over a few runs of each protocol: set aside (another
    protocol, format 1, an unanswered Abort), and some messages aborted everywhere
    (a stray reaching a destination before it proposed) -- never split."""
    seen: Counter[str] = Counter()
    for algorithm in ALGORITHMS:
        for seed in range(6):
            result = single_run(algorithm, seed, IN_FLIGHT)
            assert_correct(result, honest=False)
            assert_agreement(result)
            seen["strays"] += result.events["stray_in_flight"]
            for reason in reasons(result):
                seen["mismatch"] += reason.startswith("protocol mismatch")
                seen["unanswered abort"] += "answers none of this node's proposals" in reason
            delivered = {m.messageID for ms in result.deliveries.values() for m in ms}
            seen["aborted everywhere"] += len(result.all_or_none - delivered)
    assert seen["strays"] and seen["mismatch"] and seen["unanswered abort"], seen
    assert seen["aborted everywhere"], seen


ABSENT = Chaos(absent=0.15, duplicate=0.05, crash=0.02, checkpoint=0.1, delay=0.03)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.1)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_a_topic_without_a_node_is_refused_before_and_after_the_first_members_record(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """§4.9.5, issue 23: clients name a topic that has no node, also in the first steps,
    before the nodes read their first members record. Such a message is refused
    everywhere (10 s of log time later) and holds nothing; the rest is delivered."""
    result = single_run(algorithm, seed, ABSENT, mode)
    assert_correct(result, honest=False)
    assert_doomed_nowhere(result)
    if result.events["absent_destination"]:
        assert any("has no node" in r for r in reasons(result)), reasons(result)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_topic_without_a_node_stops_no_partitioned_topic(algorithm: Algorithm, seed: int) -> None:
    result = layered_run(algorithm, seed, ABSENT, MergerChaos(crash=0.02, checkpoint=0.05))
    assert_merged_correct(result, honest=False)
    assert_doomed_nowhere(result)


WRONG = Chaos(wrong_restart=0.05, checkpoint=0.1, duplicate=0.05, delay=0.03)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.1)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_a_restart_with_another_protocol_is_refused(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """§6.6, issue 23: a node restarted with another protocol refuses (from its snapshot,
    or at its own members record in its replay) unless it had committed nothing
    protocol-specific; restarted as it should be, nothing is lost or split."""
    result = single_run(algorithm, seed, WRONG, mode)
    assert_correct(result)  # determinism_errors name a restart that was not refused


def test_restarts_with_another_protocol_are_refused_from_snapshots_and_replays() -> None:
    seen: Counter[str] = Counter()
    for algorithm in ALGORITHMS:
        for seed in range(4):
            result = single_run(algorithm, seed, WRONG)
            assert_correct(result)
            seen.update(k for k in result.events.elements() if k.startswith("wrong_restart"))
    assert seen["wrong_restart_refused"] >= 5, seen


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_restart_with_another_protocol_stops_no_partitioned_topic(
    algorithm: Algorithm, seed: int
) -> None:
    result = layered_run(algorithm, seed, WRONG, MergerChaos(crash=0.02, checkpoint=0.05))
    assert_merged_correct(result)
