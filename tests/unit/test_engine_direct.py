"""Scenario tests for the ``direct`` protocol, each tied to a rule of docs/DESIGN.md §4.

``direct`` (the default): the client writes the ClientMessage to every destination;
each destination, on first hearing of the message (its ClientMessage or a peer's
Notify), proposes and sends a Notify carrying the value to every other destination;
each decides alone on the maximum, keyed by topic. No Ack, no Decided.

Rule numbers: 1 fresh proposals, 2 every timestamp moves the clock, 3 final = max over
all destinations (by topic), 4 only the decided head is delivered, 5 duplicates change
nothing, 6 single-destination fast path, 7 relay (to every destination), 8
determinism whatever the batching, 9 refusals and Aborts. The tests that replay
simulated logs (rules 1, 5 and 8) run every protocol in test_engine.py; bad input of
every protocol is in test_engine_input.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from atomickafka.core.engine import Algorithm, Engine, Output, Waiting
from atomickafka.core.protocols import CARRIER, EVERY, routed_by_id
from atomickafka.core.reasons import Reason
from atomickafka.core.wire import Message, MessageType, value_digest
from atomickafka.verify.simulator import Send, Simulator
from tests.unit.engine_helpers import delivered, kinds, state
from tests.unit.records import abort, at, client, notify, tick, v

DIRECT = Algorithm.DIRECT


def direct(topic: str, partition: int | None = None) -> Engine:
    return Engine(topic, algorithm=DIRECT, partition=partition)


def peer_notify(mid: str, destinations: str, sender: str, ts: int, value: object = "v") -> Message:
    """A Notify from ``sender``'s direct node, carrying the value as direct's do."""
    return notify(mid, destinations, sender, ts, alg=DIRECT, value=value)


def run_by_hand(
    topics: Sequence[str], records: dict[str, list[Message]], notify_values: str = CARRIER
) -> Simulator:
    """A direct simulation whose logs start with ``records``, drained."""
    sim = Simulator(topics, algorithm=DIRECT, notify_values=notify_values)
    for topic, messages in records.items():
        for message in messages:
            sim.append(topic, message)
    sim.drain()
    return sim


# ---------------------------------------------------------------------------- §4.1


def test_rule1_a_client_message_proposes_and_notifies_every_other_destination() -> None:
    node = direct("A")
    out = node.step([client("m", "A", "B", "C", value={"k": 1})]).outputs
    assert kinds(out) == [("B", "NotifyMessage", "m", 1), ("C", "NotifyMessage", "m", 1)]
    assert all(o.message.value == v({"k": 1}) for o in out)  # a Notify carries the value
    assert all(o.message.protocol == "direct" for o in out)
    assert node.clock == 1
    assert node.oldest_pending() == Waiting("m", 1, False, ("B", "C"))


def test_rule1_a_peer_notify_heard_first_gets_a_proposal_above_its_timestamp() -> None:
    node = direct("B")
    out = node.step([peer_notify("m", "ABC", "A", 5)]).outputs
    # The clock moves to 5, the proposal is 6; the reply goes to every other
    # destination (not only to the sender), so C hears of m even if its client's
    # copy never arrives.
    assert kinds(out) == [("A", "NotifyMessage", "m", 6), ("C", "NotifyMessage", "m", 6)]
    # A Notify carrying a stale timestamp still gets a fresh proposal above the clock.
    out = node.step([peer_notify("n", "AB", "A", 2)]).outputs
    assert kinds(out)[0] == ("A", "NotifyMessage", "n", 7)
    out = node.step([client("o", "B", "C")]).outputs
    assert kinds(out) == [("C", "NotifyMessage", "o", 8)]


# ---------------------------------------------------------------------------- §4.2


def test_rule2_a_notify_moves_the_clock_and_later_proposals_sort_after_the_decision() -> None:
    node = direct("A")
    node.step([client("m", "A", "B")])
    assert node.clock == 1
    out = node.step([peer_notify("m", "AB", "B", 40)]).outputs
    assert delivered(out) == [("m", 40)]
    assert node.clock == 40  # the decision's timestamp moved the clock
    out = node.step([client("p", "A", "B")]).outputs
    assert kinds(out) == [("B", "NotifyMessage", "p", 41)]  # after m, at every node
    out = node.step([client("q", "A")]).outputs
    assert delivered(out) == []  # q (42) waits behind p (41)
    assert node.oldest_pending() == Waiting("p", 41, False, ("B",))


def test_rule2_a_tick_moves_a_layer_nodes_clock() -> None:
    node = direct("A", partition=0)
    node.step([tick(30, partition=0)])
    assert node.clock == 30 and node.watermark() == 31
    out = node.step([client("m", "A", "B", partition=0)]).outputs
    assert kinds(out) == [("B", "NotifyMessage", "m", 31)]


# ---------------------------------------------------------------------------- §4.3


def test_rule3_final_is_the_max_of_every_destinations_notify_keyed_by_topic() -> None:
    node = direct("A")
    node.step([client("m", "A", "B", "C")])  # A proposes 1
    assert node.step([peer_notify("m", "ABC", "B", 7)]).outputs == []
    # B's Notify again, and a Notify from D (not a destination) do not complete it:
    # proposals are keyed by destination topic, never counted.
    assert node.step([peer_notify("m", "ABC", "B", 7)]).outputs == []
    assert node.step([peer_notify("m", "ABC", "D", 99)]).rejected
    assert node.oldest_pending() == Waiting("m", 1, False, ("C",))
    out = node.step([peer_notify("m", "ABC", "C", 3)]).outputs
    # max(1, 7, 3); each destination decides alone: no Decided is sent.
    assert kinds(out) == [("A", "DeliveryMessage", "m", 7)]


def test_rule3_a_notify_naming_another_destination_set_is_not_a_proposal() -> None:
    node = direct("B")
    node.step([peer_notify("m", "ABC", "A", 1)])  # B proposes 2
    step = node.step([peer_notify("m", "ABCD", "D", 99)])  # a colliding id
    assert "reused" in step.rejected[0].reason
    out = node.step([peer_notify("m", "ABC", "C", 3)]).outputs
    assert delivered(out) == [("m", 3)]  # max(1, 2, 3), not 99


def test_rule3_every_destination_decides_the_same_final() -> None:
    sim = Simulator(["A", "B", "C"], algorithm=DIRECT)
    for i in range(5):  # C's clock runs ahead
        sim.send(Send("hot", f"hot-{i}", ("C",), i, "C"))
    sim.step_node("C", 5)
    sim.send(Send("c", "m", ("A", "B", "C"), "v", "A"))
    result = sim.drain()
    assert result.check().ok
    finals = {t: [d.timeStamp for d in result.deliveries[t] if d.messageID == "m"] for t in "ABC"}
    assert finals == {"A": [6], "B": [6], "C": [6]}  # C's proposal, the largest
    assert all(
        record.messageType is not MessageType.DECIDED
        for log in result.logs.values()
        for record in log
    )


# ---------------------------------------------------------------------------- §4.4


def test_rule4_only_the_decided_head_is_delivered() -> None:
    node = direct("A")
    node.step([client("m", "A", "B")])  # undecided, proposal 1
    out = node.step([client("s", "A")]).outputs  # decided at 2, but m is ahead
    assert delivered(out) == []
    assert node.oldest_pending() == Waiting("m", 1, False, ("B",))
    out = node.step([peer_notify("m", "AB", "B", 5)]).outputs
    assert delivered(out) == [("s", 2), ("m", 5)]
    assert node.oldest_pending() is None


def test_rule4_a_decided_message_waits_for_an_undecided_smaller_one() -> None:
    node = direct("B")
    node.step([peer_notify("x", "ABC", "A", 1)])  # B proposes 2, waits for C
    out = node.step([peer_notify("y", "BC", "C", 1)]).outputs  # B proposes 3: decided
    assert delivered(out) == []  # y@3 is decided, x@2 is not, and sorts first
    assert [w.messageID for w in node.waiting()] == ["x", "y"]
    out = node.step([peer_notify("x", "ABC", "C", 4)]).outputs
    assert delivered(out) == [("y", 3), ("x", 4)]


def test_rule4_ties_are_broken_by_message_id() -> None:
    node = direct("B")
    node.step([client("m2", "A", "B"), client("m1", "B", "C")])  # proposals 1, 2
    out = node.step([peer_notify("m2", "AB", "A", 5), peer_notify("m1", "BC", "C", 5)]).outputs
    assert delivered(out) == [("m1", 5), ("m2", 5)]


# ---------------------------------------------------------------------------- §4.5


def test_rule5_the_clients_copy_after_a_peers_notify_changes_nothing() -> None:
    node = direct("B")
    node.step([peer_notify("m", "ABC", "A", 1)])  # B proposes 2 and tells A and C
    before = state(node)
    step = node.step([client("m", "A", "B", "C")])
    assert step.outputs == [] and step.rejected == []
    assert state(node) == before  # no second proposal, no second round of Notifies
    assert node.stats.duplicates == 1


def test_rule5_records_about_a_delivered_message_change_nothing() -> None:
    node = direct("A")
    node.step([client("m", "A", "B"), peer_notify("m", "AB", "B", 4)])
    assert node.is_delivered("m")
    before = state(node)
    for record in (client("m", "A", "B"), peer_notify("m", "AB", "B", 4)):
        assert node.step([record]).outputs == []
        assert state(node) == before
    assert node.stats.duplicates == 2


# ---------------------------------------------------------------------------- §4.6


def test_rule6_a_single_destination_message_is_final_at_once() -> None:
    node = direct("T1")
    out = node.step([client("a", "T1"), client("b", "T1")]).outputs
    assert kinds(out) == [("T1", "DeliveryMessage", "a", 1), ("T1", "DeliveryMessage", "b", 2)]
    assert node.pending_count == 0
    assert out[0].message.protocol == "direct"


# ---------------------------------------------------------------------------- §4.7


def test_rule7_a_relay_forwards_to_every_destination_and_takes_no_part() -> None:
    node = direct("R")
    message = client("m", "A", "B", "C", value={"k": 1})
    out = node.step([message]).outputs
    assert kinds(out) == [
        ("A", "ClientMessage", "m", None),
        ("B", "ClientMessage", "m", None),
        ("C", "ClientMessage", "m", None),
    ]
    assert all(o.message.sentFromTopic == "R" and o.message.value == v({"k": 1}) for o in out)
    assert node.clock == 0 and node.pending_count == 0 and node.stats.relayed == 1
    assert node.step([message]).outputs == []  # relayed once
    # The destinations' Notifies are not addressed to the relay: refused, nothing moves.
    assert node.step([peer_notify("m", "ABC", "A", 5)]).rejected
    assert node.clock == 0


def test_rule7_a_relayed_message_is_delivered_once_by_its_destinations_only() -> None:
    sim = Simulator(["A", "B", "C", "R"], algorithm=DIRECT)
    sim.send(Send("c", "m", ("A", "B", "C"), "v", via="R"))
    sim.send(Send("c", "m", ("A", "B", "C"), "v", via="A"))  # a retry to the destinations
    result = sim.drain()
    assert result.check().ok
    assert result.delivered_ids("R") == []
    assert all(result.delivered_ids(t) == ["m"] for t in "ABC")


# ---------------------------------------------------------------------------- §4.8


def scripted_log() -> list[Message]:
    """B's input log: client copies, peers' Notifies (one before its client copy)."""
    return [
        client("m1", "A", "B"),
        peer_notify("m2", "BC", "C", 4),
        client("s", "B"),
        peer_notify("m1", "AB", "A", 2),
        client("m2", "B", "C"),
        client("m3", "A", "B", "C"),
        peer_notify("m3", "ABC", "C", 9),
        peer_notify("m3", "ABC", "A", 7),
    ]


@pytest.mark.parametrize("sizes", [[8], [1], [3, 1], [2, 5], [4, 4]])
def test_rule8_the_outputs_do_not_depend_on_the_batching(sizes: list[int]) -> None:
    log = scripted_log()
    whole = direct("B").step(log).outputs
    node = direct("B")
    out: list[Output] = []
    position, i = 0, 0
    while position < len(log):
        size = sizes[i % len(sizes)]
        out.extend(node.step(log[position : position + size]).outputs)
        position, i = position + size, i + 1
    # m1 = max(1, 2), m2 = max(4, 5): its client copy came after C's Notify and is a
    # duplicate; m3 = max(7, 9, 7).
    assert delivered(out) == delivered(whole) == [("m1", 2), ("m2", 5), ("s", 6), ("m3", 9)]

    def control(outputs: list[Output]) -> list[Output]:
        return [o for o in outputs if o.message.messageType is not MessageType.DELIVERY]

    assert control(out) == control(whole)


def test_rule8_replaying_the_log_rebuilds_the_same_state_and_outputs() -> None:
    log = scripted_log()
    first = direct("B")
    out = first.step(log).outputs
    again = direct("B")
    assert again.step(log).outputs == out
    assert state(again) == state(first)


# ---------------------------------------------------------------------------- §4.9


@pytest.mark.parametrize(("notify_values", "final"), [(EVERY, 2), (CARRIER, 3)])
def test_rule9_a_partial_client_write_stalls_nobody(notify_values: str, final: int) -> None:
    """The client wrote m to A only and died. ``every``: A's Notifies start B and C at
    once. ``carrier`` (§4.16): A's Notify to the carrier C starts it, and C's starts B,
    one hop later (so B proposes 3). Either way all three decide the same final."""
    sim = run_by_hand(
        ["A", "B", "C"], {"A": [client("m", "A", "B", "C", value="x")]}, notify_values
    )
    result = sim.result()
    assert result.stuck() == {}
    got = {t: [(d.messageID, d.timeStamp, d.value) for d in result.deliveries[t]] for t in "ABC"}
    assert got["A"] == got["B"] == got["C"] == [("m", final, v("x"))]


def test_rule9_the_value_comes_with_the_notify_when_the_client_copy_never_does() -> None:
    node = direct("B")
    node.step([peer_notify("m", "AB", "A", 1, value={"pay": 3})])
    assert node.delivered_count == 1  # decided alone at max(1, 2)
    node = direct("B")
    out = node.step([peer_notify("m", "ABC", "A", 1, value={"pay": 3})]).outputs
    assert all(o.message.value == v({"pay": 3}) for o in out)  # passed on to C
    out = node.step([peer_notify("m", "ABC", "C", 1, value={"pay": 3})]).outputs
    assert [(o.message.messageID, o.message.value) for o in out] == [("m", v({"pay": 3}))]


def lean(message: Message) -> Message:
    """``message`` (a Notify) as a lean one: its value's digest, not the value (§4.16)."""
    return message._replace(value=None)


def lean_direct(topic: str) -> Engine:
    node = direct(topic)
    node.lean_notifies = True
    return node


def carrier(mid: str, destinations: str) -> str:
    return routed_by_id(tuple(destinations), mid)


def test_rule16_a_lean_node_sends_the_value_only_to_the_carrier() -> None:
    """Of {A, B, C}, m's carrier is C and m1's is A: A's Notify of m carries the value
    to C only; of m1, to both (A is the carrier); with two destinations, always."""
    assert (carrier("m", "ABC"), carrier("m1", "ABC")) == ("C", "A")
    node = lean_direct("A")
    out = node.step([client("m", "A", "B", "C"), client("m1", "A", "B", "C")]).outputs
    valued = [(o.topic, o.message.messageID, o.message.value is not None) for o in out]
    assert valued == [("B", "m", False), ("C", "m", True), ("B", "m1", True), ("C", "m1", True)]
    assert all(o.message.digest == value_digest(v("v")) for o in out)  # the digest goes
    out = node.step([client("m2", "A", "B")]).outputs
    assert [o.message.value for o in out] == [v("v")]
    node = direct("A")  # --notify-values every: the value in every Notify
    out = node.step([client("m", "A", "B", "C")]).outputs
    assert all(o.message.value == v("v") for o in out)


def test_rule16_a_lean_notify_is_a_proposal_and_this_node_proposes_once_the_value_is_here() -> None:
    """B hears of m (carrier C) first from A's lean Notify: it records A's proposal,
    moves its clock (rule 2) and waits, with nothing in its queue. C's Notify brings the
    value: B proposes above both and decides (it holds all three proposals)."""
    node = lean_direct("B")
    step = node.step([lean(peer_notify("m", "ABC", "A", 5))])
    assert step.outputs == [] and step.rejected == []
    assert node.clock == 5 and node.oldest_pending() is None and node.is_pending("m")
    out = node.step([peer_notify("m", "ABC", "C", 7)]).outputs
    assert kinds(out) == [
        ("A", "NotifyMessage", "m", 8),
        ("C", "NotifyMessage", "m", 8),
        ("B", "DeliveryMessage", "m", 8),
    ]
    assert [o.message.value is not None for o in out] == [False, True, True]


def test_rule16_a_client_copy_after_a_lean_notify_proposes_with_its_value() -> None:
    node = lean_direct("B")
    node.step([lean(peer_notify("m", "ABC", "A", 5))])
    out = node.step([client("m", "A", "B", "C")]).outputs
    assert kinds(out) == [("A", "NotifyMessage", "m", 6), ("C", "NotifyMessage", "m", 6)]
    out = node.step([lean(peer_notify("m", "ABC", "C", 2))]).outputs
    assert [(o.message.messageID, o.message.timeStamp, o.message.value) for o in out] == [
        ("m", 6, v("v"))
    ]


def test_rule16_a_lean_notify_never_followed_by_its_value_is_aborted_a_window_later() -> None:
    """No copy reached B and the carrier never wrote: after a memory window of log time
    the entry is a stray's (§4.16, §4.13), refused, and its destinations are told (the
    Abort to A echoes A's proposal, so A drops the version too: delivered nowhere)."""
    node = lean_direct("B")
    heard = at(0, lean(peer_notify("m", "ABC", "A", 5)))._replace(seq=(3, 0))
    node.step([heard])
    step = node.step([at(node.window.window_ms + 1, client("x", "B"))])
    aborts = [(o.topic, o.message.messageType, o.message.answers) for o in step.outputs]
    assert ("A", MessageType.ABORT, (3, 0)) in aborts and ("C", MessageType.ABORT, None) in aborts
    assert not node.is_pending("m") and node.stats.forgotten == 1


@pytest.mark.parametrize("algorithm", [Algorithm.POC, Algorithm.OPTIMIZED])
def test_rule9_a_notify_without_its_value_is_refused_where_notifies_are_requests(
    algorithm: Algorithm,
) -> None:
    """poc and optimized: a Notify asks its reader to propose and answer, so it must
    carry the value (only direct's Notifies are proposals that may come lean)."""
    node = Engine("B", algorithm=algorithm)
    node.step([client("m", "A", "B")])
    before = state(node)
    bare = Message("n", MessageType.NOTIFY, ("A", "B"), None, "node-A", "A", 3,
                   digest=value_digest(v("v")), protocol=algorithm.value)  # fmt: skip
    step = node.step([bare])
    assert [r.reason for r in step.rejected] == ["NotifyMessage carries no value"]
    assert step.outputs == [] and state(node) == before


def test_rule9_an_id_reused_for_other_destinations_is_refused_and_aborted() -> None:
    """B knows m for {A, B}; a client reuses m for {B, C}. B refuses that version and
    tells C. C proposed for it, so B's first Abort (which answers nothing C wrote) only
    waits there; B's answer to C's own Notify drops it at C (§4.9.4), which then
    delivers what waited behind it."""
    b = direct("B")
    b.step([at(0, client("m", "A", "B"), origin=0)])
    step = b.step([at(0, client("m", "B", "C", value="second"), origin=1)])
    assert "the id was reused" in step.rejected[0].reason
    assert kinds(step.outputs) == [("C", "AbortMessage", "m", None)]
    unanswered = step.outputs[0].message
    c = direct("C")
    proposal = c.step([at(0, client("m", "B", "C", value="second"), origin=0)]).outputs
    assert kinds(proposal) == [("B", "NotifyMessage", "m", 1)]  # C proposes 1, waits for B
    c.step([at(0, client("s", "C"), origin=1)])  # s@2 waits behind m
    step = c.step([unanswered])
    assert step.aborted == [] and c.is_pending("m") and c.stats.unconfirmed_aborts == 1
    answer = b.step([proposal[0].message])  # B never proposes for the refused version...
    assert answer.rejected and kinds(answer.outputs) == [("C", "AbortMessage", "m", None)]
    assert answer.outputs[0].message.answers == proposal[0].message.seq  # ...and says so
    step = c.step([answer.outputs[0].message])
    assert [a.messageID for a in step.aborted] == ["m"]
    assert delivered(step.outputs) == [("s", 2)]
    assert b.waiting() == [Waiting("m", 1, False, ("A",))]


def test_rule9_an_id_reused_for_another_value_is_refused_and_aborted() -> None:
    node = direct("A")
    node.step([client("m", "A", "B", value="one")])
    step = node.step([client("m", "A", "B", value="two")])
    assert "value digest" in step.rejected[0].reason
    assert kinds(step.outputs) == [("B", "AbortMessage", "m", None)]
    assert node.oldest_pending() == Waiting("m", 1, False, ("B",))  # "one" still stands


def test_rule9_an_abort_before_the_message_keeps_it_from_being_taken_up() -> None:
    node = direct("C")
    node.step([abort("m", "BC", "B")])
    assert node.step([client("m", "B", "C")]).outputs == []
    # no proposal; the Notify's sender, which may be waiting, hears again it is aborted
    assert kinds(node.step([peer_notify("m", "BC", "B", 3)]).outputs) == [
        ("B", "AbortMessage", "m", None)
    ]
    assert node.pending_count == 0 and not node.is_delivered("m")


def test_rule13_a_late_notify_is_refused_where_an_abort_sent_after_it_was_forgotten() -> None:
    """§4.13: C aborted ``m`` (A's Abort came first) and forgot it a window later; B was
    down between reading ``m`` and writing its Notify, which comes 90 s after the send.
    Taken up, C would propose for a version it refused; it answers with an Abort that
    echoes B's Notify (which drops ``m`` at B). A Notify as late finds a node that
    forgot no abort, and one sent after the abort expired finds C, taking it up."""
    t0, sent = 1_000_000, 999_900
    late = at(t0 + 90_000, peer_notify("m", "ABC", "B", 3)._replace(sentAt=sent, seq=(7, 0)))
    node = direct("C")
    node.step([at(t0, abort("m", "ABC", "A"))])
    node.step([at(t0 + 61_000, client("x", "C"))])  # the abort is forgotten
    assert node.state.memory.outcome_of("m") is None
    step = node.step([late])
    assert [r.code for r in step.rejected] == [Reason.LATE]
    assert {(o.topic, o.message.messageType.value, o.message.answers) for o in step.outputs} == {
        ("A", "AbortMessage", None),
        ("B", "AbortMessage", (7, 0)),
    }
    assert node.pending_count == 0
    fresh = direct("C")
    assert ("B", "NotifyMessage", "m", 4) in [t[:4] for t in kinds(fresh.step([late]).outputs)]
    after = late._replace(messageID="n", sentAt=t0 + 60_001)
    assert ("A", "NotifyMessage", "n", 4) in kinds(node.step([after]).outputs)
