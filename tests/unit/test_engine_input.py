"""Bad input never stops or stalls a topic (docs/DESIGN.md §4.9).

Each test is one way a single record, or one reused id, used to take a topic down:
a value lost to an early Ack (§4.9.1), a timestamp that exhausts the clock (§4.9.3), a
reused messageID (§4.9.4), another protocol (§4.9.6), a value too big to copy (§4.9.2).
A refused message changes nothing: no state, no clock, no output but the Aborts that
free other destinations.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core.engine import MEMBERS_GRACE_MS, Algorithm, Engine, Output
from atomickafka.core.timebounds import CLOCK_HOLD_US, CLOCK_LEAD_US
from atomickafka.core.wire import (
    MAX_TIMESTAMP,
    Message,
    MessageType,
    decode_record,
    encode_members,
    value_digest,
)
from atomickafka.verify.checker import ViolationKind, check, deliveries_from_wire
from atomickafka.verify.simulator import (
    CALM,
    Chaos,
    RandomChooser,
    Send,
    Simulator,
    integer_ids,
    random_workload,
)
from tests.unit.records import abort, ack, at, client, decided, notify, tick, v

ALGORITHMS = list(Algorithm)
#: A log time (ms since the epoch) for tests that need one: 2026-11-23.
NOW = 1_795_000_000_000
BASE = settings().max_examples


def types(outputs: list[Output]) -> list[tuple[str, str, str]]:
    return [(o.topic, o.message.messageType.value, o.message.messageID) for o in outputs]


def state(engine: Engine) -> dict[str, Any]:
    snap = engine.snapshot()
    del snap["stats"]
    return snap


# ---------------------------------------------------------------------------- §4.9.1


def test_an_early_ack_never_costs_the_value() -> None:
    """poc: C's Ack reaches B before anything else; then the client's own copy (a retry
    via B) arrives. B's Notify must carry the value, not the Ack's absence of one."""
    node = Engine("B", algorithm=Algorithm.POC)
    node.step([ack("m", "ABC", "C", 3, alg="poc", value={"pay": 1})])  # digest only
    step = node.step([client("m", "A", "B", "C", value={"pay": 1})])
    notifies = [o.message for o in step.outputs if o.message.messageType is MessageType.NOTIFY]
    assert notifies and all(n.value == v({"pay": 1}) for n in notifies)


def test_an_unknown_value_never_replaces_a_known_one() -> None:
    node = Engine("B", algorithm=Algorithm.POC)
    node.step([notify("m", "ABC", "A", 1, alg="poc", value="real")])
    node.step([ack("m", "ABC", "A", 1, alg="poc", digest=value_digest(v("real")))])
    out = node.step([ack("m", "ABC", "C", 1, alg="poc", digest=value_digest(v("real")))])
    assert [(o.message.messageID, o.message.value) for o in out.outputs] == [("m", v("real"))]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("seed", range(6))
def test_outputs_do_not_depend_on_batch_boundaries(algorithm: Algorithm, seed: int) -> None:
    """Rule 8: one batch, one record at a time, or random batches: the same outputs."""
    topics = ["T1", "T2", "T3", "T4", "T5"]
    rng = random.Random(seed)
    workload = random_workload(rng, topics, clients=3, messages=40, relay=0.2, retry=0.2, skew=5)
    chaos = Chaos(duplicate=0.2, crash=0.05, delay=0.05, partial_write=0.3)
    logs = (
        Simulator(topics, algorithm=algorithm, chooser=RandomChooser(seed), chaos=chaos)
        .run(workload)
        .logs
    )
    for topic, log in logs.items():
        whole = Engine(topic, algorithm=algorithm).step(log).outputs
        single: list[Output] = []
        engine = Engine(topic, algorithm=algorithm)
        for record in log:
            single.extend(engine.step([record]).outputs)
        chunked: list[Output] = []
        engine = Engine(topic, algorithm=algorithm)
        position = 0
        while position < len(log):
            size = rng.randint(1, 9)
            chunked.extend(engine.step(log[position : position + size]).outputs)
            position += size

        def deliveries(out: list[Output]) -> list[tuple[str, int | None, bytes | None]]:
            return [
                (o.message.messageID, o.message.timeStamp, o.message.value)
                for o in out
                if o.message.messageType is MessageType.DELIVERY
            ]

        def control(out: list[Output]) -> list[Output]:
            return [o for o in out if o.message.messageType is not MessageType.DELIVERY]

        assert deliveries(single) == deliveries(whole) == deliveries(chunked), topic
        assert control(single) == control(whole) == control(chunked), topic


# ---------------------------------------------------------------------------- §4.9.3


@pytest.mark.parametrize("algorithm", [Algorithm.POC, Algorithm.OPTIMIZED])
def test_a_timestamp_beyond_the_hold_bound_is_refused_and_moves_nothing(
    algorithm: Algorithm,
) -> None:
    """§4.11: more than an hour ahead of the log's time is refused; the clock stays."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, client("m", "A", "B"))])
    before = state(node)
    far = NOW * 1000 + CLOCK_HOLD_US + 1
    step = node.step([at(NOW, ack("m", "AB", "B", far, alg=algorithm))])
    assert [r.reason for r in step.rejected] and "ahead of the log's time" in step.rejected[
        0
    ].reason
    assert state(node) == before and node.clock == 1
    # this node proposed for m: a bad record about it is set aside, m is not aborted
    assert not step.outputs and node.is_pending("m")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_timestamp_within_the_lead_is_applied(algorithm: Algorithm) -> None:
    """§4.11: up to a minute ahead of the log's time, a timestamp moves the clock, and
    the next proposal is encodable."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, client("m", "A", "B"))])
    lead = NOW * 1000 + CLOCK_LEAD_US
    node.step([at(NOW, ack("m", "AB", "B", lead, alg=algorithm))])
    assert node.clock == lead
    out = node.step([at(NOW, client("n", "A", "B"))]).outputs
    assert out[0].message.timeStamp == lead + 1 <= MAX_TIMESTAMP


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_timestamp_between_lead_and_hold_waits_for_its_time(algorithm: Algorithm) -> None:
    """§4.11: it is held -- nothing changes -- until the log's time has caught up."""
    node = Engine("A", algorithm=algorithm)
    ahead = NOW * 1000 + CLOCK_LEAD_US + 5_000  # 5 ms too early
    step = node.step([at(NOW, notify("m", "ABC", "B", ahead, alg=algorithm))])
    assert not step.outputs and not step.rejected
    assert node.held_count == 1 and node.clock == 0 and not node.is_pending("m")
    assert node.next_due_ms == NOW + 5
    node.step([at(NOW + 4, tick(0, topic="A"))])  # 1 ms short
    assert node.held_count == 1
    out = node.step([at(NOW + 5, tick(0, topic="A"))]).outputs
    assert node.held_count == 0 and node.is_pending("m")
    assert node.clock == ahead + 1
    assert [o.message.timeStamp for o in out if o.topic == "B"] == [ahead + 1]


def test_an_exhausted_clock_refuses_instead_of_crashing() -> None:
    node = Engine("A", algorithm=Algorithm.OPTIMIZED)
    node.state.clock = MAX_TIMESTAMP
    step = node.step([client("m", "A", "B"), notify("n", "AB", "B", 5)])
    assert [r.message.messageID for r in step.rejected] == ["m", "n"]
    assert all("exhausted" in r.reason for r in step.rejected)
    # no proposal, and the other destination is told not to wait for one
    assert types(step.outputs) == [("B", "AbortMessage", "m"), ("B", "AbortMessage", "n")]
    assert node.pending_count == 0
    # at the exact boundary: checked after the Notify's timestamp moves the clock, not
    # before (a clock of MAX_TIMESTAMP - 1 would otherwise propose 2^53 after it)
    node = Engine("A", algorithm=Algorithm.OPTIMIZED)
    node.state.clock = MAX_TIMESTAMP - 1
    step = node.step([at(MAX_TIMESTAMP // 1000, notify("n", "AB", "B", MAX_TIMESTAMP))])
    assert ["exhausted" in r.reason for r in step.rejected] == [True]
    assert types(step.outputs) == [("B", "AbortMessage", "n")]


def test_ticks_move_the_clock_within_the_same_bound() -> None:
    node = Engine("A", partition=1)
    node.step([tick(40, partition=1)])
    assert node.clock == 40 and node.watermark() == 41
    assert node.step([tick(CLOCK_HOLD_US + 1, partition=1)]).rejected
    assert node.step([tick(50, partition=2)]).rejected  # another layer's tick
    assert node.clock == 40


# ---------------------------------------------------------------------------- §4.9.4


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_id_reused_for_other_destinations_stalls_nobody(algorithm: Algorithm) -> None:
    """id m for {A, B}, then again for {B, C}: B refuses the second and tells C, so C
    does not wait for B's proposal forever and keeps delivering."""
    sim = Simulator(["A", "B", "C"], algorithm=algorithm)
    sim.send(Send("c1", "m", ("A", "B"), "first", via="A"))
    sim.drain()
    sim.send(Send("c2", "m", ("B", "C"), "second", via="C"))
    sim.send(Send("c2", "after", ("B", "C"), "later", via="C"))
    result = sim.drain()
    assert result.stuck() == {}
    assert result.delivered_ids("A") == ["m"] and result.delivered_ids("B") == ["m", "after"]
    assert result.delivered_ids("C") == ["after"]
    assert result.aborted["C"] == ["m"]
    assert any("reused" in reason for reason in result.rejected_reasons()["B"])
    report = result.check()
    assert report.kinds() == {ViolationKind.ID_REUSE}, report.summary()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_id_reused_for_another_value_is_delivered_nowhere(algorithm: Algorithm) -> None:
    """Two clients send different values under one id to the same topics, each via
    another destination. The destinations refuse whichever version they did not see
    first; a version is delivered only where every destination took it, so the id is
    delivered everywhere with one value, or nowhere, and nothing waits on it."""
    sim = Simulator(["A", "B"], algorithm=algorithm)
    sim.send(Send("c1", "m", ("A", "B"), "one", via="A"))
    sim.send(Send("c2", "m", ("A", "B"), "two", via="B"))
    sim.send(Send("c3", "after", ("A", "B"), "later", via="A"))
    result = sim.drain()
    assert result.stuck() == {}
    got = {t: [(m.messageID, m.value) for m in result.deliveries[t]] for t in "AB"}
    assert got["A"] == got["B"], got
    if algorithm is Algorithm.DIRECT:  # both destinations got both copies, "one" first
        assert got["A"] == [("m", v("one")), ("after", v("later"))]
    else:  # A took "one", B "two": each refused the other's
        assert got["A"] == [("after", v("later"))]
        assert result.aborted["A"] == ["m"] and result.aborted["B"] == ["m"]
    assert result.check(complete=False).kinds() <= {ViolationKind.ID_REUSE}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=max(10, BASE // 3))
@given(seed=st.integers(0, 2**32 - 1), messages=st.integers(5, 40))
def test_colliding_ids_never_stall_and_never_split(
    algorithm: Algorithm, seed: int, messages: int
) -> None:
    """Per-client integer ids collide all the time. Whatever the schedule: the run
    ends with nothing stuck, every id is delivered at most once per topic and, where it
    is delivered, as one message everywhere (one value, one destination list); every
    message whose id is not reused (by another client, or for other content) passes the
    checker."""
    topics = ["T1", "T2", "T3", "T4", "T5"]
    rng = random.Random(seed)
    workload = random_workload(
        rng, topics, clients=3, messages=messages, relay=0.2, retry=0.1, ids=integer_ids
    )
    chaos = Chaos(duplicate=0.1, delay=0.05, crash=0.02, partial_write=0.2)
    result = Simulator(topics, algorithm=algorithm, chooser=RandomChooser(rng), chaos=chaos).run(
        workload
    )
    assert result.quiescent and result.stuck() == {}, result.describe()
    assert result.determinism_errors == []
    versions: dict[str, dict[str, tuple[tuple[str, ...], bytes | None]]] = {}
    for topic in topics:
        ids = result.delivered_ids(topic)
        assert len(ids) == len(set(ids)), topic
        for m in result.deliveries[topic]:
            assert topic in m.topic
            versions.setdefault(m.messageID, {})[topic] = (m.topic, m.value)
    for mid, where in versions.items():  # no destination of a delivered version got another
        for version in where.values():
            assert all(where.get(t, version) == version for t in version[0]), (mid, where)
    by_id: dict[str, set[Any]] = {}
    for s in workload.sends:  # a message is its client's: its send time is in its version
        by_id.setdefault(s.messageID, set()).add((s.client, s.destinations, repr(s.value)))
    clean = {mid for mid, vs in by_id.items() if len(vs) == 1}
    sent = [s for s in result.sent if s.messageID in clean]
    deliveries = {t: [m for m in result.deliveries[t] if m.messageID in clean] for t in topics}
    report = check(sent, deliveries_from_wire(deliveries))
    assert report.ok, report.summary()


def test_an_abort_frees_the_queue_head() -> None:
    """§4.9.4: C proposed for m; B's Abort answering C's own Notify drops m, and what
    queued behind it is delivered."""
    node = Engine("C")
    proposal = node.step([at(NOW, client("m", "B", "C"), origin=0)]).outputs
    node.step([at(NOW, client("s", "C"), origin=1)])  # s queues behind m
    assert node.oldest_pending() is not None and node.oldest_pending().messageID == "m"  # type: ignore[union-attr]
    answer = abort("m", "BC", "B")._replace(seq=(5, 0), answers=proposal[0].message.seq)
    step = node.step([answer])
    assert [a.messageID for a in step.aborted] == ["m"]
    assert [o.message.messageID for o in step.outputs] == ["s"]  # s is delivered now
    # Late records of the aborted version change nothing; their sender, which may be
    # waiting, is told again that the version is aborted (Aborts are idempotent).
    late = ack("m", "BC", "B", 4)._replace(seq=(6, 0))
    again = node.step([late]).outputs
    assert types(again) == [("B", "AbortMessage", "m")] and again[0].message.answers == (6, 0)
    assert node.pending_count == 0 and node.stats.aborted == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_abort_that_answers_nothing_this_node_wrote_leaves_its_proposal_standing(
    algorithm: Algorithm,
) -> None:
    """§4.9.4: an Abort about a version this node proposed for may be a stray while
    another destination has delivered the version: unless it answers this node's own
    proposal to its sender, it is set aside, and the version is decided as usual."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, members("A", "B", "C"))])
    sent = node.step([at(NOW, client("m", "A", "B", "C"), origin=0)]).outputs
    to_b = next(o.message.seq for o in sent if o.topic == "B")
    to_c = next(o.message.seq for o in sent if o.topic == "C")
    assert to_b is not None and to_c is not None
    strays = [
        abort("m", "ABC", "B"),  # answers nothing
        abort("m", "ABC", "B")._replace(answers=to_c),  # A's Notify to C, not to B
        abort("m", "ABC", "C")._replace(answers=(to_c[0] + 1, 0)),  # nothing A wrote
    ]
    step = node.step([at(NOW, m, origin=1)._replace(seq=(9, i)) for i, m in enumerate(strays)])
    assert step.aborted == [] and node.is_pending("m")
    assert node.stats.unconfirmed_aborts == 3
    assert to_b != to_c
    # the proposals arrive: m is decided and delivered
    if algorithm is Algorithm.DIRECT:
        replies = [
            notify("m", "ABC", "B", 2, alg=algorithm),
            notify("m", "ABC", "C", 3, alg=algorithm),
        ]
    else:
        replies = [ack("m", "ABC", "B", 2, alg=algorithm), ack("m", "ABC", "C", 3, alg=algorithm)]
    node.step([at(NOW, m, origin=2)._replace(seq=(10, i)) for i, m in enumerate(replies)])
    assert node.is_delivered("m")


def test_an_abort_of_another_version_is_ignored_and_one_for_an_unknown_id_is_kept() -> None:
    node = Engine("C")
    node.step([client("m", "B", "C", value="mine")])
    node.step([abort("m", "BC", "B", value="theirs")])
    assert node.is_pending("m")
    node.step([abort("x", "BC", "B")])  # before C hears of x
    assert node.step([client("x", "B", "C")]).outputs == []  # never taken up
    assert not node.is_pending("x")


# ---------------------------------------------------------------------------- §4.9.6


@pytest.mark.parametrize("ours", ALGORITHMS)
def test_another_protocol_is_refused_with_a_clear_reason(ours: Algorithm) -> None:
    """§4.9.6: a record naming another protocol is refused. A version this node has not
    proposed for is refused for good and aborted (none can decide it without this node).
    One it proposed for is only set aside -- the record may be a stray, and another
    destination may have delivered it -- and the sender is answered with an Abort that
    echoes the record: if the record is the sender's own, its node runs another protocol,
    neither counts the other's proposals, and the version is decided nowhere. The version
    is dropped here once the sender answers this node's own proposal the same way."""
    for theirs in ALGORITHMS:
        if theirs is ours:
            continue
        node = Engine("A", algorithm=ours)
        mine = node.step([at(NOW, client("m", "A", "B"), origin=0)]).outputs
        assert types(mine) == [("B", "NotifyMessage", "m")]
        fresh = notify("n", "AB", "B", 4, alg=theirs)._replace(seq=(7, 0))
        proposed = notify("m", "AB", "B", 9, alg=theirs)._replace(seq=(7, 1))
        stray_decided = decided("m", "AB", "B", 9, alg=theirs)._replace(seq=(7, 2))
        step = node.step([at(NOW, r, origin=1) for r in (fresh, proposed, stray_decided)])
        assert len(step.rejected) == 3
        assert all(
            f"runs {theirs.value}, this node runs {ours.value}" in r.reason for r in step.rejected
        )
        assert types(step.outputs) == [("B", "AbortMessage", "n"), ("B", "AbortMessage", "m")]
        assert [o.message.answers for o in step.outputs] == [(7, 0), (7, 1)]
        assert step.aborted == [] and node.is_pending("m") and node.clock == 1
        assert node.stats.protocol_mismatches == 3
        answer = abort("m", "AB", "B")._replace(seq=(8, 0), answers=mine[0].message.seq)
        assert [a.messageID for a in node.step([at(NOW, answer, origin=2)]).aborted] == ["m"]
        assert node.pending_count == 0


def test_format_one_control_records_are_refused() -> None:
    node = Engine("A")
    step = node.step([notify("n", "AB", "B", 4, alg=None)])  # type: ignore[arg-type]
    assert "no stated protocol" in step.rejected[0].reason


# ---------------------------------------------------------------------------- §4.9.2


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_values_that_could_not_be_copied_are_refused_up_front(algorithm: Algorithm) -> None:
    node = Engine("A", algorithm=algorithm, max_value_bytes=100)
    step = node.step([client("big", "A", "B", value="x" * 200), client("ok", "A", "B", value="x")])
    assert [r.message.messageID for r in step.rejected] == ["big"]
    assert "100" in step.rejected[0].reason and "limit" in step.rejected[0].reason
    relay = Engine("R", algorithm=algorithm, max_value_bytes=100)
    assert relay.step([client("big", "A", "B", value="x" * 200)]).rejected


@pytest.mark.parametrize(
    "record",
    [
        notify("m", "BC", "B", 5),  # not addressed to A
        notify("m", "AB", "A", 5),  # our own, echoed
        notify("m", "AB", "C", 5),  # from a topic that is not a destination
        ack("m", "AB", "B", 5, partition=3),  # another layer's (A is layer 1)
    ],
)
def test_stray_control_records_are_refused_and_change_nothing(record: Any) -> None:
    node = Engine("A", partition=1)
    node.step([client("m", "A", "B", partition=1)])
    before = state(node)
    step = node.step([record])
    assert step.rejected, record
    assert state(node) == before
    assert node.clock == 1


def test_a_quiet_run_refuses_nothing() -> None:
    topics = ["T1", "T2", "T3"]
    result = Simulator(topics, chaos=CALM).run(random_workload(random.Random(1), topics))
    assert result.rejected_reasons() == {}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_destination_with_a_smaller_limit_refuses_for_everyone(algorithm: Algorithm) -> None:
    """Nodes configured with different value limits: the one that refuses a message
    tells the others, so it is delivered nowhere and nothing waits on it."""

    def factory(topic: str, alg: Algorithm) -> Engine:
        return Engine(topic, f"node-{topic}", alg, max_value_bytes=50 if topic == "B" else 10_000)

    sim = Simulator(["A", "B", "C"], algorithm=algorithm, engine_factory=factory)
    sim.send(Send("c", "big", ("A", "B", "C"), "x" * 100, via="B"))
    sim.send(Send("c", "after", ("A", "B", "C"), "small", via="A"))
    result = sim.drain()
    assert result.stuck() == {}
    assert all(result.delivered_ids(t) == ["after"] for t in "ABC")
    assert any("limit" in r for r in result.rejected_reasons()["B"])


# ---------------------------------------------------------------------------- §4.9.5 members


def members(*topics: str, sender: str = "node-A") -> Message:
    """A MembersMessage as node A writes it into its own log."""
    (message,) = decode_record(encode_members(sender, topics))
    return message


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_destination_without_a_node_is_refused_and_aborted_not_waited_for(
    algorithm: Algorithm,
) -> None:
    """A message naming a topic no node has ever served would hold A's queue head, and
    everything after it, forever: once A's log says which topics have a node, A refuses
    such a message on first hearing and tells its other destinations (§4.9.5)."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, members("A", "B"))])
    step = node.step([at(NOW, client("m", "A", "B", "nosuch"))])
    assert not step.rejected and node.held_count == 1  # it waits a grace period
    assert node.awaiting_members == ("nosuch",)
    assert [o.message.messageID for o in node.step([at(NOW + 1, client("n", "A"))]).outputs] == [
        "n"
    ]  # nothing queues behind a message that waits for members
    # log time alone refuses nothing: only a members record is evidence (a crash may
    # lose one with its transaction, and that must not refuse live destinations)
    assert not node.step([at(NOW + 2 * MEMBERS_GRACE_MS, tick(0, topic="A"))]).rejected
    # a members record within the grace of the message, without it, is no refusal either
    assert not node.step([at(NOW + MEMBERS_GRACE_MS - 1, members("A", "B"))]).rejected
    step = node.step([at(NOW + MEMBERS_GRACE_MS, members("A", "B"))])
    assert "has no node" in step.rejected[0].reason
    assert types(step.outputs) == [("B", "AbortMessage", "m")]
    assert node.pending_count == 0 and node.held_count == 0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_lost_members_record_delays_a_message_but_never_refuses_it(
    algorithm: Algorithm,
) -> None:
    """The members record naming C was lost (its transaction aborted in a crash); the
    node is down for longer than the grace. Records of later log time arrive first: the
    message waits until the restarted node writes its members record, which names C."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, members("A"))])
    node.step([at(NOW + 100, client("m", "A", "C"))])
    late = node.step([at(NOW + 3 * MEMBERS_GRACE_MS, client("n", "A"))])
    assert not late.rejected and node.awaiting_members == ("C",)
    step = node.step([at(NOW + 3 * MEMBERS_GRACE_MS + 1, members("A", "C"))])
    assert not step.rejected and node.is_pending("m")
    assert types(step.outputs) == [("C", "NotifyMessage", "m")]


def test_the_members_evidence_survives_a_snapshot() -> None:
    node = Engine("A")
    node.step([at(NOW, members("A", "B"))])
    node.step([at(NOW + 1, client("m", "A", "nosuch"))])
    restored = Engine.restore(node.snapshot())
    assert restored.members_log_ms == node.members_log_ms == NOW
    step = restored.step([at(NOW + MEMBERS_GRACE_MS + 1, members("A", "B"))])
    assert "has no node" in step.rejected[0].reason


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_destination_whose_node_just_started_is_taken_once_it_is_a_member(
    algorithm: Algorithm,
) -> None:
    """A brand-new topic's node may publish its first status after a client has seen
    it: the message waits until this node's members record names the topic."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, members("A", "B"))])
    node.step([at(NOW, client("m", "A", "C"))])
    step = node.step([at(NOW + 500, members("A", "B", "C"))])
    assert not step.rejected and node.held_count == 0 and node.is_pending("m")
    assert types(step.outputs) == [("C", "NotifyMessage", "m")]


def test_membership_comes_only_from_the_node_itself_and_only_grows_by_its_records() -> None:
    node = Engine("A")
    assert node.step([members("A", "B", sender="mallory")]).rejected
    assert node.members is None  # unknown: every destination is taken on trust
    node.step([members("B")])
    assert node.members == {"A", "B"}  # a node is always a member of its own topic
    assert not node.step([client("m", "A", "B")]).rejected
    # a later record from a partial read of the statuses (found by the three-broker test:
    # a node restarted during a broker failover) adds, and never takes B away
    node.step([members("C")])
    assert node.members == {"A", "B", "C"}
    assert not node.step([client("n", "A", "B")]).rejected


def test_an_entry_a_stray_ack_created_is_forgotten_after_the_window() -> None:
    """§4.13: an Ack for a message never heard of makes an entry; if no Notify follows
    within the memory window, it was a stray and is forgotten (memory stays bounded)."""
    node = Engine("A", algorithm=Algorithm.POC, window_ms=1000)
    node.step([at(NOW, ack("x", "AB", "B", 3, alg="poc"))])
    assert node.pending_count == 1
    node.step([at(NOW + 999, tick(0, topic="A"))])
    assert node.pending_count == 1
    out = node.step([at(NOW + 1000, tick(0, topic="A"))]).outputs
    assert node.pending_count == 0 and node.stats.forgotten == 1
    # ...and the version is refused for good, with an Abort to the other destination,
    # so a node that did propose for it stops waiting for this one (§4.9.4).
    assert types(out) == [("B", "AbortMessage", "x")]
    # A repeat is answered with the Abort again and makes no new entry.
    out = node.step([at(NOW + 1001, ack("x", "AB", "B", 3, alg="poc"))]).outputs
    assert types(out) == [("B", "AbortMessage", "x")] and node.pending_count == 0


def test_an_ack_to_a_node_that_never_coordinated_is_refused_and_aborted() -> None:
    """§4.9: under ``optimized`` only the coordinator is acked, and it took the message
    up before it wrote the Notify that an honest Ack answers. An Ack for an id it never
    coordinated answers a forged Notify elsewhere: the version is refused and aborted,
    so the node the forgery reached does not wait for a decision that never comes."""
    node = Engine("A", algorithm=Algorithm.OPTIMIZED)
    step = node.step([at(NOW, ack("x", "AB", "B", 7, alg="optimized"))])
    assert [r.reason for r in step.rejected] and "never coordinated" in step.rejected[0].reason
    assert types(step.outputs) == [("B", "AbortMessage", "x")]
    assert node.pending_count == 0 and node.clock == 0  # the forged timestamp moves nothing


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_decided_for_a_message_never_heard_of_is_set_aside(algorithm: Algorithm) -> None:
    """§4.9: an honest Decided comes after its Notify in the same log (only an
    ``optimized`` coordinator writes one, once every destination acked that Notify), so
    one for an id neither pending nor settled here is a forgery or a stray. It used to
    be delivered at this node alone, skipping the value and members checks: here with a
    value that is not JSON, to a destination no node serves. Set aside; nothing moves."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, members("A", "B"))])
    before = state(node)
    forged = [
        decided("x", "AB", "B", 7, alg=algorithm),
        decided("y", "AZ", "Z", 9, alg=algorithm),  # Z: no node has ever served it
        decided("z", "AB", "B", 8, alg=algorithm)._replace(value=b'\xff{"a": ['),
    ]
    step = node.step([at(NOW + 1, m) for m in forged])
    assert not step.outputs and not step.aborted  # nothing taken up: nobody waits on it
    assert [r.message.messageID for r in step.rejected] == ["x", "y", "z"]
    assert all("never heard of" in r.reason for r in step.rejected), step.rejected
    after = state(node)
    assert after.pop("now_ms") == NOW + 1 and before.pop("now_ms") == NOW
    assert after == before and node.clock == 0 and node.delivered_count == 0


@pytest.mark.parametrize("algorithm", [Algorithm.POC, Algorithm.DIRECT])
def test_a_decided_under_a_protocol_that_never_writes_one_is_set_aside(
    algorithm: Algorithm,
) -> None:
    """§4.9: ``poc`` and ``direct`` destinations decide alone; none writes a Decided. One
    for a pending message (here B's, naming 90) would set its final timestamp at this
    destination alone, and A and B would order it differently. Set aside; the message
    is decided by the real proposals."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, client("m", "A", "B"))])  # A proposes 1
    forged = node.step([at(NOW, decided("m", "AB", "B", 90, alg=algorithm))])
    assert not forged.outputs and "never write one" in forged.rejected[0].reason
    assert node.clock == 1 and node.pending_count == 1
    kind = notify if algorithm is Algorithm.DIRECT else ack
    out = node.step([at(NOW, kind("m", "AB", "B", 5, alg=algorithm))]).outputs
    assert [(o.message.messageID, o.message.timeStamp) for o in out if o.topic == "A"] == [("m", 5)]


def test_an_optimized_decided_from_a_coordinator_never_acked_is_set_aside() -> None:
    """§4.9: B acked A's Notify for ``m``; a Decided about ``m`` from C (a destination,
    but not the coordinator B answered) is a stray or a forgery: set aside, nothing
    moves. A's own Decided decides ``m``."""
    node = Engine("B", algorithm=Algorithm.OPTIMIZED)
    node.step([at(NOW, notify("m", "ABC", "A", 3))])  # B proposes 4, acks A
    stray = node.step([at(NOW, decided("m", "ABC", "C", 50))])
    assert not stray.outputs and "never acked" in stray.rejected[0].reason
    assert node.clock == 4 and node.pending_count == 1
    out = node.step([at(NOW, decided("m", "ABC", "A", 6))]).outputs
    assert [(o.message.messageID, o.message.timeStamp) for o in out] == [("m", 6)]


def test_a_refused_record_makes_nobody_a_member() -> None:
    """§4.9.5: a peer becomes a member through a record of its node that passed every
    check; a Notify refused (another protocol, a timestamp an hour ahead) names a topic
    that may have no node at all, and must not make messages to it wait for one."""
    node = Engine("A", algorithm=Algorithm.DIRECT)
    node.step([at(NOW, members("A", "B"))])
    other = node.step([at(NOW, notify("m", "AZ", "Z", 3, alg="poc"))])
    ahead = node.step([at(NOW, notify("n", "AY", "Y", NOW * 1000 + CLOCK_HOLD_US + 1))])
    assert other.rejected and ahead.rejected
    assert node.members == frozenset({"A", "B"})
    node.step([at(NOW, notify("p", "AB", "B", 3, alg="direct"))])
    assert node.members == frozenset({"A", "B"})  # B was one already


def test_a_decided_replayed_after_the_memory_window_is_a_repeat_not_a_new_message() -> None:
    """§4.9, §4.12, §4.13: B delivered ``m`` on A's Decided, then forgot it a window
    later. The coordinator's replay writes the Decided again with its original ``seq``:
    a repeat (the last ``seq`` per peer is never forgotten). A copy without ``seq``
    (a stray) is no longer a known message: it is set aside, not delivered again."""
    node = Engine("B", algorithm=Algorithm.OPTIMIZED, window_ms=1000)
    node.step([at(NOW, notify("m", "AB", "A", 3)._replace(seq=(10, 0)))])
    final = decided("m", "AB", "A", 5)._replace(seq=(11, 0))
    assert [o.message.messageID for o in node.step([at(NOW, final)]).outputs] == ["m"]
    node.step([at(NOW + 5000, tick(0, topic="B"))])
    assert node.stats.forgotten == 1 and not node.is_delivered("m")
    replay = node.step([at(NOW + 5001, final)])
    assert not replay.outputs and not replay.rejected and node.stats.duplicates == 1
    stray = node.step([at(NOW + 5002, final._replace(seq=None))])
    assert not stray.outputs and "never heard of" in stray.rejected[0].reason
    assert node.pending_count == 0 and node.clock == 5


def test_a_record_held_longer_than_a_record_may_be_late_is_set_aside() -> None:
    """§4.11 with §4.13: a stray about a delivered message, dated just under the hold
    bound, waits an hour; by then the memory window has forgotten the message, so
    applying it would take the old id up again. It is set aside as late instead."""
    node = Engine("A", algorithm=Algorithm.POC, window_ms=60_000)
    node.step([at(NOW, client("m", "A", "B"))])
    node.step([at(NOW + 1, notify("m", "AB", "B", 5, alg="poc"))])
    assert node.is_delivered("m")
    stray = at(NOW + 2, notify("m", "AB", "B", (NOW + 2) * 1000 + CLOCK_HOLD_US, alg="poc"))
    assert not node.step([stray]).rejected and node.held_count == 1
    due = node.next_due_ms
    assert due is not None
    step = node.step([at(due, tick(0, topic="A"))])
    assert node.held_count == 0 and node.pending_count == 0 and not step.outputs
    assert [r.reason for r in step.rejected] and "a stray" in step.rejected[0].reason
    assert node.stats.late == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_peer_refused_for_a_reused_id_is_told_even_before_it_is_a_member(
    algorithm: Algorithm,
) -> None:
    """Found by the fuzz test on the real broker: B delivered ``m`` to {B}; then A's
    Notify for another ``m`` to {A, B} arrives while B's members record does not name A
    yet (all nodes had just started). B refuses the version; A wrote the Notify, so A
    has a node and waits for B: B's Abort must reach A anyway."""
    node = Engine("B", algorithm=algorithm)
    node.step([at(NOW, members("B", sender="node-B"))])
    node.step([at(NOW, client("m", "B", value="first"))])
    step = node.step([at(NOW + 1, notify("m", "AB", "A", 5, alg=algorithm, value="second"))])
    assert "reused" in step.rejected[0].reason
    assert types(step.outputs) == [("A", "AbortMessage", "m")]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_peer_is_told_again_of_a_version_refused_before(algorithm: Algorithm) -> None:
    """B refused ``m`` to {A, B} once already (a client copy written into B's log, with
    no writer node to tell but A, which had then not started). A's Notify for that
    version comes later: A waits for B's proposal, so B answers it with an Abort again
    (Aborts are idempotent) instead of setting it aside in silence."""
    node = Engine("B", algorithm=algorithm)
    node.step([at(NOW, members("B", sender="node-B"))])
    node.step([at(NOW, client("m", "B", value="first"))])
    first = node.step([at(NOW + 1, client("m", "A", "B", value="second"))])
    assert first.rejected and types(first.outputs) == []  # A is no member: nobody to tell
    again = node.step([at(NOW + 2, notify("m", "AB", "A", 5, alg=algorithm, value="second"))])
    assert again.rejected
    assert types(again.outputs) == [("A", "AbortMessage", "m")]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_peer_that_writes_to_this_log_is_a_member(algorithm: Algorithm) -> None:
    """Found by the three-broker test: after a broker failover a restarted node's view
    of the statuses lagged, and messages to a live peer were refused as "no node" while
    that peer's own records kept arriving. A valid record from a peer's node proves the
    peer has one: the message waiting for it is taken up, not refused."""
    node = Engine("A", algorithm=algorithm)
    node.step([at(NOW, members("A"))])
    step = node.step([at(NOW, client("m", "A", "B"))])
    assert not step.rejected and node.awaiting_members == ("B",)
    node.step([at(NOW + 1, notify("other", "AB", "B", 3, alg=algorithm))])
    assert set(node.members or ()) == {"A", "B"}
    assert len(node.awaiting_members) == 0
    late = node.step([at(NOW + MEMBERS_GRACE_MS + 1, tick(0, topic="A"))])
    assert not [r for r in late.rejected if "has no node" in r.reason]


def test_a_proposal_for_a_version_delivered_here_is_answered_with_an_abort() -> None:
    """Rule 9, §4.13 (found by ``test_control_logs``, 2026-11-29): a peer that forgot a
    message after the window and took it up again (a stray's Notify about it reached
    it first) proposes for it anew; this node, which still remembers delivering that
    version, never proposes for it again, so the peer's entry is decided nowhere.
    Answering the proposal with an Abort releases it -- in silence, the peer held it at
    its queue head for good. Repeats (rule 12) and unsequenced strays stay unanswered."""
    coordinator = Engine("A", algorithm=Algorithm.OPTIMIZED)
    coordinator.step([at(NOW, client("m", "A", "B"), origin=0)])
    first = ack("m", "AB", "B", 5)._replace(seq=(3, 0))
    delivered = coordinator.step([at(NOW + 1, first)]).outputs
    assert ("A", "DeliveryMessage", "m") in types(delivered)
    again = ack("m", "AB", "B", 40)._replace(seq=(9, 0))  # B took m up again
    out = coordinator.step([at(NOW + 2, again)]).outputs
    assert types(out) == [("B", "AbortMessage", "m")] and out[0].message.answers == (9, 0)
    assert coordinator.step([at(NOW + 3, first)]).outputs == []  # a repeat: dropped
    assert coordinator.step([at(NOW + 4, ack("m", "AB", "B", 41))]).outputs == []
    # The same at a destination that acked and delivered, for its coordinator's Notify.
    destination = Engine("B", algorithm=Algorithm.OPTIMIZED)
    destination.step([at(NOW, notify("m", "AB", "A", 4)._replace(seq=(2, 0)))])
    final = decided("m", "AB", "A", 5)._replace(seq=(4, 0))
    assert ("B", "DeliveryMessage", "m") in types(destination.step([at(NOW + 1, final)]).outputs)
    retaken = notify("m", "AB", "A", 50)._replace(seq=(20, 0))
    out = destination.step([at(NOW + 2, retaken)]).outputs
    assert types(out) == [("A", "AbortMessage", "m")]
    assert out[0].message.answers == (20, 0) and destination.pending_count == 0
