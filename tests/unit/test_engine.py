"""Scenario tests for the ordering engine, each tied to a rule of docs/DESIGN.md §4.

Rule numbers: 1 fresh proposals, 2 every timestamp moves the clock, 3 final = max over
all destinations (by topic), 4 only the decided head is delivered, 5 duplicates change
nothing, 6 single-destination fast path, 7 relay, 8 determinism / replay. The scripted
scenarios here are ``poc``'s and ``optimized``'s; ``direct``'s are in
test_engine_direct.py, and bad input (§4.9) has tests of its own
(test_engine_input.py). The tests that replay simulated logs (rules 1, 5 and 8) run
every protocol.
"""

from __future__ import annotations

import random
import zlib

import orjson
import pytest

from atomickafka.core.engine import Algorithm, Engine, Waiting
from atomickafka.core.wire import Message, MessageType
from atomickafka.verify.simulator import Send, Simulator
from tests.unit.engine_helpers import delivered, kinds, node_logs, run_in_batches, state
from tests.unit.records import ack, client, decided, notify, v

ALGORITHMS = [Algorithm.POC, Algorithm.OPTIMIZED]  # the scripted scenarios
EVERY_ALGORITHM = list(Algorithm)  # the tests over simulated logs

# ---------------------------------------------------------------------------- rule 6


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule6_single_destination_fast_path(algorithm: Algorithm) -> None:
    node = Engine("T1", algorithm=algorithm)
    out = node.handle_batch([client("a", "T1"), client("b", "T1")])
    assert kinds(out) == [
        ("T1", "DeliveryMessage", "a", 1),
        ("T1", "DeliveryMessage", "b", 2),
    ]  # no control traffic at all, proposals are final
    assert node.clock == 2
    assert node.pending_count == 0
    assert node.delivered_count == 2
    delivery = out[0].message
    assert delivery.topic == ("T1",)
    assert delivery.value == v("v")
    assert delivery.sentFromTopic == "T1"
    assert delivery.senderID == "node-T1"


# ---------------------------------------------------------------------------- rule 7


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule7_relay_forwards_to_one_destination_and_takes_no_part(algorithm: Algorithm) -> None:
    node = Engine("R", algorithm=algorithm)
    destinations = ("T1", "T2", "T3")
    message = client("c-9", *destinations, value={"k": 1})
    out = node.handle_batch([message])
    target = destinations[zlib.crc32(b"c-9") % 3]
    assert kinds(out) == [(target, "ClientMessage", "c-9", None)]
    forwarded = out[0].message
    assert forwarded.topic == destinations
    assert forwarded.value == v({"k": 1})
    assert forwarded.sentFromTopic == "R"
    assert node.clock == 0  # the relay proposes nothing
    assert node.pending_count == 0 and node.delivered_count == 0
    assert node.stats.relayed == 1
    # A duplicate is relayed once only; the relay ignores the protocol's control records.
    assert node.handle_batch([message]) == []
    assert node.handle_batch([notify("c-9", destinations, "T1", 5)]) == []
    assert node.handle_batch([ack("c-9", destinations, "T2", 5)]) == []
    assert node.handle_batch([decided("c-9", destinations, "T1", 5)]) == []
    assert node.pending_count == 0 and node.delivered_count == 0


def test_rule7_relay_is_deterministic_per_id() -> None:
    targets = {Engine("R").handle(client("same-id", "A", "B", "C"))[0].topic for _ in range(5)}
    assert len(targets) == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule7_relayed_message_is_delivered_by_destinations_only(algorithm: Algorithm) -> None:
    sim = Simulator(["A", "B", "C", "R"], algorithm=algorithm)
    sim.send(Send("c", "m", ("A", "B", "C"), "v", via="R"))
    result = sim.drain()
    assert result.check().ok
    assert result.delivered_ids("R") == []
    assert all(result.delivered_ids(t) == ["m"] for t in "ABC")


# ---------------------------------------------------------------------------- rule 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule1_proposals_are_strictly_fresh(algorithm: Algorithm) -> None:
    node = Engine("T1", algorithm=algorithm)
    out = node.handle_batch([client("a", "T1", "T2")])
    assert kinds(out) == [("T2", "NotifyMessage", "a", 1)]
    # A Notify carrying 5 moves the clock to 5; the proposal is 6, above it.
    out = node.handle_batch([notify("b", ["T1", "T2"], "T2", 5, alg=algorithm)])
    assert [(k, ts) for _, k, _, ts in kinds(out)] == [("AckMessage", 6)]
    # A Notify carrying a stale timestamp still gets a fresh proposal, above the clock.
    out = node.handle_batch([notify("c", ["T1", "T2"], "T2", 2, alg=algorithm)])
    assert [ts for *_, ts in kinds(out)] == [7]
    out = node.handle_batch([client("d", "T1", "T3")])
    assert [ts for *_, ts in kinds(out)] == [8]
    assert node.clock == 8


@pytest.mark.parametrize("algorithm", EVERY_ALGORITHM)
def test_rule1_no_two_proposals_are_equal(algorithm: Algorithm) -> None:
    for topic, log in node_logs(3, algorithm).items():
        node = Engine(topic, algorithm=algorithm)
        proposals: dict[str, int] = {}  # message -> this node's proposal, in order made
        for record in log:
            for o in node.handle_batch([record]):
                if o.message.messageType in (MessageType.NOTIFY, MessageType.ACK):
                    proposals.setdefault(o.message.messageID, o.message.timeStamp or 0)
        values = list(proposals.values())
        assert values == sorted(set(values)), topic  # strictly increasing


# ---------------------------------------------------------------------------- rule 2


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule2_every_timestamp_moves_the_clock(algorithm: Algorithm) -> None:
    node = Engine("A", algorithm=algorithm)
    node.handle_batch([client("m", "A", "B")])
    assert node.clock == 1
    node.handle_batch([ack("m", ["A", "B"], "B", 40, alg=algorithm)])  # Ack
    assert node.clock >= 40
    node.handle_batch(
        [notify("n", ["A", "B"], "B", 70, alg=algorithm)]
    )  # Notify: 70, then propose 71
    assert node.clock == 71
    if algorithm is Algorithm.OPTIMIZED:  # B coordinates n: its Decided moves the clock
        node.handle_batch([decided("n", ["A", "B"], "B", 90, alg=algorithm)])
        final = 90
    else:  # poc: A decides n alone, at max(70, 71); no poc node writes a Decided (§4.9)
        step = node.step([decided("n", ["A", "B"], "B", 90, alg=algorithm)])
        assert not step.outputs and "never write one" in step.rejected[0].reason
        final = 71
    assert node.clock == final
    assert node.delivered_count == 2  # m at 40, n at its final timestamp
    # Anything proposed after a decision sorts after it (rules 1 and 2 together).
    out = node.handle_batch([client("p", "A", "B")])
    assert [ts for _, kind, _, ts in kinds(out) if kind == "NotifyMessage"] == [final + 1]
    out = node.handle_batch([client("q", "A")])
    assert delivered(out) == []  # q waits behind p
    assert node.oldest_pending() == Waiting("p", final + 1, False, ("B",))


def test_rule2_decided_moves_a_non_coordinator_clock() -> None:
    node = Engine("B", algorithm=Algorithm.OPTIMIZED)
    node.handle_batch([notify("m", ["A", "B"], "A", 3)])
    assert node.clock == 4
    out = node.handle_batch([decided("m", ["A", "B"], "A", 50)])
    assert delivered(out) == [("m", 50)]
    assert node.clock == 50
    out = node.handle_batch([client("s", "B")])
    assert delivered(out) == [("s", 51)]


# ---------------------------------------------------------------------------- rule 3


def test_rule3_optimized_final_is_max_over_all_destinations() -> None:
    node = Engine("A", algorithm=Algorithm.OPTIMIZED)
    dests = ["A", "B", "C"]
    out = node.handle_batch([client("m", *dests)])
    assert kinds(out) == [("B", "NotifyMessage", "m", 1), ("C", "NotifyMessage", "m", 1)]
    assert node.handle_batch([ack("m", dests, "B", 7)]) == []
    assert node.oldest_pending() == Waiting("m", 1, False, ("C",))
    # A second Ack from B and a stray Ack from a non-destination do not complete it:
    # proposals are a set keyed by destination, not a count.
    assert node.handle_batch([ack("m", dests, "B", 7)]) == []
    assert node.handle_batch([ack("m", dests, "D", 99)]) == []
    assert node.pending_count == 1 and node.delivered_count == 0
    out = node.handle_batch([ack("m", dests, "C", 3)])
    assert kinds(out) == [
        ("B", "DecidedMessage", "m", 7),
        ("C", "DecidedMessage", "m", 7),
        ("A", "DeliveryMessage", "m", 7),
    ]
    assert out[0].message.value == v("v")


def test_rule3_poc_every_destination_decides_alone_on_the_max() -> None:
    dests = ["A", "B", "C"]
    node = Engine("B", algorithm=Algorithm.POC)
    out = node.handle_batch([notify("m", dests, "A", 2, alg=Algorithm.POC)])
    # B proposes 3 and tells every other destination.
    assert kinds(out) == [("A", "AckMessage", "m", 3), ("C", "AckMessage", "m", 3)]
    assert (
        node.handle_batch([ack("m", dests, "A", 2, alg=Algorithm.POC)]) == []
    )  # a stray ack from A: no-op
    out = node.handle_batch([ack("m", dests, "C", 9, alg=Algorithm.POC)])
    assert kinds(out) == [("B", "DeliveryMessage", "m", 9)]  # no Decided in poc


def test_rule3_poc_ack_may_overtake_the_notify() -> None:
    dests = ["A", "B", "C"]
    node = Engine("B", algorithm=Algorithm.POC)
    assert node.handle_batch([ack("m", dests, "C", 9, alg=Algorithm.POC)]) == []
    assert node.pending_count == 1
    assert node.oldest_pending() is None  # heard of, but no timestamp here yet
    assert node.clock == 9  # the early Ack moved the clock
    out = node.handle_batch([notify("m", dests, "A", 2, alg=Algorithm.POC)])
    # B proposes 10, above everything seen; the final is max(2, 10, 9).
    assert kinds(out)[-1] == ("B", "DeliveryMessage", "m", 10)
    assert out[-1].message.value == v("v")  # the value comes with the Notify


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule3_same_id_sent_to_two_destinations(algorithm: Algorithm) -> None:
    """Regression: both destinations become coordinators of the same message.

    Each proposes, then reads the other's Notify, which carries the last missing
    proposal; the Ack that follows is a duplicate. Before the fix neither decided and
    both topics stalled for good behind the message.
    """
    sim = Simulator(["A", "B"], algorithm=algorithm)
    sim.send(Send("c", "m", ("A", "B"), "v", via="A"))
    sim.send(Send("c", "m", ("A", "B"), "v", via="B"))  # a retry via the other destination
    sim.step_node("A", 1)
    sim.step_node("B", 1)
    sim.send(Send("c", "after", ("A",), "v", via="A"))
    result = sim.drain()
    assert result.check().ok, result.check()
    assert result.stuck() == {}
    assert result.delivered_ids("A") == ["m", "after"]
    assert result.delivered_ids("B") == ["m"]
    assert result.deliveries["A"][0].timeStamp == result.deliveries["B"][0].timeStamp


def test_rule3_stray_ack_naming_other_destinations_is_not_a_proposal() -> None:
    dests = ["A", "B", "C"]
    node = Engine("B", algorithm=Algorithm.POC)
    node.handle_batch([notify("m", dests, "A", 1, alg=Algorithm.POC)])  # B proposes 2
    # A stray Ack for the same id (e.g. a colliding id) from D, naming D a destination.
    node.handle_batch([ack("m", ["A", "B", "C", "D"], "D", 99, alg=Algorithm.POC)])
    out = node.handle_batch([ack("m", dests, "C", 3, alg=Algorithm.POC)])
    # A and C decide max(1, 2, 3) = 3; B must too, or the destinations disagree.
    assert delivered(out) == [("m", 3)]


# ---------------------------------------------------------------------------- rule 4


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule4_only_the_decided_head_is_delivered(algorithm: Algorithm) -> None:
    node = Engine("A", algorithm=algorithm)
    node.handle_batch([client("m", "A", "B")])  # undecided, proposal 1
    out = node.handle_batch([client("s", "A")])  # decided at 2, but m is ahead
    assert delivered(out) == []
    assert node.pending_count == 2
    assert node.oldest_pending() == Waiting("m", 1, False, ("B",))
    # m is decided at 5 (B's proposal): s (2) is now the head and goes first.
    out = node.handle_batch([ack("m", "AB", "B", 5, alg=algorithm)])
    assert delivered(out) == [("s", 2), ("m", 5)]
    assert node.oldest_pending() is None


def test_rule4_decided_message_waits_for_an_undecided_smaller_one() -> None:
    node = Engine("B", algorithm=Algorithm.OPTIMIZED)
    node.handle_batch([notify("x", "AB", "A", 1)])  # local 2, undecided
    node.handle_batch([notify("y", "BC", "C", 1)])  # local 3, undecided
    out = node.handle_batch([decided("y", "BC", "C", 3)])
    assert delivered(out) == []  # y is decided but x (2) is ahead of it
    # B has every proposal it will see (A's came with the Notify) and waits for Decided.
    assert node.oldest_pending() == Waiting("x", 2, False, ())
    out = node.handle_batch([decided("x", "AB", "A", 4)])
    assert delivered(out) == [("y", 3), ("x", 4)]


def test_rule4_ties_are_broken_by_message_id() -> None:
    node = Engine("B", algorithm=Algorithm.OPTIMIZED)
    node.handle_batch([notify("m2", "AB", "A", 1), notify("m1", "BC", "C", 1)])
    out = node.handle_batch([decided("m2", "AB", "A", 7), decided("m1", "BC", "C", 7)])
    assert delivered(out) == [("m1", 7), ("m2", 7)]


def test_rule4_handle_does_not_release_deliveries() -> None:
    node = Engine("T1")
    assert node.handle(client("a", "T1")) == []
    assert node.pending_count == 1
    assert delivered(node.deliver_ready()) == [("a", 1)]
    assert node.deliver_ready() == []


# ---------------------------------------------------------------------------- rule 5


@pytest.mark.parametrize("algorithm", EVERY_ALGORITHM)
@pytest.mark.parametrize("seed", [1, 2])
def test_rule5_duplicate_records_change_nothing(algorithm: Algorithm, seed: int) -> None:
    """A message read again changes nothing. It is fed without its log position and
    without its sender's sequence number, so that the de-duplication by id and topic
    (rule 5) is what is tested, not the one by ``seq`` (§4.12), which would drop it
    before it reached the protocol."""
    rng = random.Random(seed)
    for topic, log in node_logs(seed, algorithm).items():
        node = Engine(topic, algorithm=algorithm)
        for i, record in enumerate(log):
            node.handle_batch([record])
            for j in {i, rng.randrange(i + 1)}:  # the record just read, and an older one
                again = log[j]._replace(origin=None, logTime=None, seq=None)
                before = state(node)
                assert node.handle_batch([again]) == [], (topic, j, again)
                assert state(node) == before, (topic, j, again)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rule5_duplicates_are_counted(algorithm: Algorithm) -> None:
    node = Engine("T1", algorithm=algorithm)
    node.handle_batch([client("a", "T1"), client("a", "T1"), client("b", "T1", "T2")])
    node.handle_batch([client("b", "T1", "T2")])
    assert node.stats.duplicates == 2
    assert node.delivered_count == 1
    assert node.is_delivered("a") and not node.is_delivered("b")


# ---------------------------------------------------------------------------- rule 8


@pytest.mark.parametrize("algorithm", EVERY_ALGORITHM)
@pytest.mark.parametrize("seed", [4, 5])
def test_rule8_snapshot_and_replay_of_the_rest_equals_one_straight_run(
    algorithm: Algorithm, seed: int
) -> None:
    sizes = [3, 1, 7, 2]
    for topic, log in node_logs(seed, algorithm).items():
        straight = Engine(topic, algorithm=algorithm)
        expected = run_in_batches(straight, log, sizes)
        for cut_batches in (0, 1, 5, 17, 1000):
            cut = min(len(log), sum(sizes[i % len(sizes)] for i in range(cut_batches)))
            first = Engine(topic, algorithm=algorithm)
            out = run_in_batches(first, log[:cut], sizes)
            # The snapshot survives a trip through JSON, as it would on disk.
            snap = orjson.loads(orjson.dumps(first.snapshot()))
            second = Engine.restore(snap)
            k = cut_batches % len(sizes)  # carry on with the same batch sizes
            out += run_in_batches(second, log[cut:], sizes[k:] + sizes[:k])
            assert delivered(out) == delivered(expected), (topic, cut)
            assert [o for o in out if o.message.messageType is not MessageType.DELIVERY] == [
                o for o in expected if o.message.messageType is not MessageType.DELIVERY
            ]
            assert state(second) == state(straight)


@pytest.mark.parametrize("algorithm", EVERY_ALGORITHM)
def test_rule8_replaying_a_whole_log_reproduces_the_same_outputs(algorithm: Algorithm) -> None:
    for topic, log in node_logs(6, algorithm).items():
        first = Engine(topic, algorithm=algorithm).handle_batch(log)
        again = Engine(topic, algorithm=algorithm).handle_batch(log)
        assert first == again
        # Batch boundaries move deliveries within the output, never change them.
        one_by_one = run_in_batches(Engine(topic, algorithm=algorithm), log, [1])
        assert delivered(one_by_one) == delivered(first)


def test_rule8_restore_rejects_unknown_snapshot_versions() -> None:
    snap = Engine("T1").snapshot()
    snap["version"] = 999
    with pytest.raises(ValueError, match="version"):
        Engine.restore(snap)


# ---------------------------------------------------------------------------- records not for us


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_records_not_for_this_node_are_ignored(algorithm: Algorithm) -> None:
    node = Engine("A", algorithm=algorithm)
    assert node.handle_batch([notify("m", "AB", "A", 5)]) == []  # own Notify echoed back
    assert node.handle_batch([notify("m", "BC", "B", 5)]) == []  # not addressed to A
    assert node.handle_batch([notify("m", "AB", "C", 5)]) == []  # sender not a destination
    assert node.handle_batch([decided("m", "BC", "B", 5)]) == []
    delivery = Message("m", MessageType.DELIVERY, ("A",), b'"v"', "node-A", "A", 3)
    assert node.handle_batch([delivery]) == []  # a node never re-reads deliveries
    assert node.pending_count == 0
    assert node.stats.rejected == 4 and node.stats.ignored == 1


# ---------------------------------------------------------------------------- introspection


def test_introspection() -> None:
    node = Engine("A", node_id="n-A", algorithm=Algorithm.OPTIMIZED)
    assert (node.pending_count, node.delivered_count, node.clock) == (0, 0, 0)
    assert node.oldest_pending() is None
    node.handle_batch([client("m", "A", "B", "C")])
    node.handle_batch([client("s", "A")])
    assert node.pending_count == 2
    assert node.clock == 2
    assert node.oldest_pending() == Waiting("m", 1, False, ("B", "C"))
    node.handle_batch([ack("m", "ABC", "C", 4)])
    assert node.oldest_pending() == Waiting("m", 1, False, ("B",))
    node.handle_batch([ack("m", "ABC", "B", 2)])
    assert node.pending_count == 0 and node.delivered_count == 2
    assert node.is_delivered("m") and node.is_delivered("s")
    assert node.clock == 4
    stats = node.stats
    assert (stats.records_in, stats.deliveries) == (4, 2)
    assert stats.records_out == 2 + 2 + 2  # two Notify, two Decided, two deliveries
    snap = node.snapshot()
    assert snap["clock"] == 4 and snap["node_id"] == "n-A" and snap["algorithm"] == "optimized"


# ---------------------------------------------------------------------------- odd input


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_decided_before_its_message_is_set_aside_and_the_message_goes_on(
    algorithm: Algorithm,
) -> None:
    """§4.9: a Decided for an id this node never heard of has no honest writer (it
    comes after its Notify in the same log); it is set aside, changes nothing, and the
    message, when it does come, is taken up once and decided by the real proposals."""
    node = Engine("A", algorithm=algorithm)
    step = node.step([decided("n", ["A", "B"], "B", 9, alg=algorithm)])
    assert step.outputs == [] and step.aborted == []
    assert len(step.rejected) == 1 and "never heard of" in step.rejected[0].reason
    assert (node.clock, node.pending_count, node.delivered_count) == (0, 0, 0)
    out = node.handle_batch([client("n", "A", "B")])
    assert delivered(out) == [] and node.pending_count == 1
    answer = notify if algorithm is Algorithm.DIRECT else ack
    out = node.handle_batch([answer("n", ["A", "B"], "B", 9, alg=algorithm)])
    assert delivered(out) == [("n", 9)]
    assert node.pending_count == 0
