"""The live audit's rules (atomickafka/audit/rules.py, docs/DESIGN.md §10), without Kafka:
one scripted case per rule and per violation kind, then properties over generated runs
(a correct run is clean; any one fault is reported with its kind; whenever the audit is
clean, the independent order checker is clean too)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.audit.records import AuditedDelivery, Kind, Violation
from atomickafka.audit.rules import BUCKET_MS, AuditRules
from atomickafka.verify.checker import DeliveryRecord, SentMessage, check

TOPICS = ("A", "B", "C", "D")
#: A third of the profile's examples each (60 with dev, 500 with ci): the unit tier stays
#: about a minute.
EXAMPLES = settings(max_examples=max(20, settings().max_examples // 3))
BOUND_S = 10.0
BOUND_MS = 10_000


def dlv(
    topic: str,
    mid: str,
    ts: int,
    dests: Sequence[str],
    *,
    layer: int = 0,
    digest: str = "",
    at: int = 1_000,
    offset: int = 0,
) -> AuditedDelivery:
    return AuditedDelivery(
        topic=topic,
        partition=0,
        offset=offset,
        time_ms=at,
        message_id=mid,
        timestamp=ts,
        layer=layer,
        digest=digest or f"digest-{mid}",
        destinations=tuple(sorted(dests)),
    )


def kinds(violations: Sequence[Violation]) -> list[tuple[str, str, str]]:
    return [(v.kind.value, v.topic, v.message_id) for v in violations]


def observe_all(rules: AuditRules, deliveries: Sequence[AuditedDelivery]) -> list[Violation]:
    found: list[Violation] = []
    for d in deliveries:
        found.extend(rules.observe(d).violations)
    return found


# ---------------------------------------------------------------------------- scripted


def test_a_multicast_delivered_everywhere_in_order_is_clean_and_then_forgotten() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    found = observe_all(
        rules,
        [
            dlv("A", "m1", 5, "AB"),
            dlv("B", "m1", 5, "AB"),
            dlv("A", "m2", 7, "A"),
            dlv("B", "m3", 9, "BC"),
        ],
    )
    assert found == []
    assert rules.tracked_messages == 3 and rules.open_messages == 1  # m3 waits for C
    found = observe_all(rules, [dlv("C", "m3", 9, "BC", at=1_500)])
    assert found == [] and rules.open_messages == 0
    assert rules.advance(1_000 + BOUND_MS + BUCKET_MS) == []
    assert rules.tracked_messages == 0  # the state is bounded: nothing outlives the bound


def test_rule_1_order_a_record_not_above_the_previous_key() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    found = observe_all(rules, [dlv("A", "m2", 5, "A"), dlv("A", "m1", 3, "A", offset=1)])
    assert kinds(found) == [("order", "A", "m1")]
    (violation,) = found
    assert violation.offset == 1 and violation.key == (3, 0, "m1")
    assert violation.reference == {"previousKey": [5, 0, "m2"]}
    # the order is on the whole key: same timestamp, the layer and then the id decide
    rules = AuditRules(TOPICS, BOUND_S)
    found = observe_all(
        rules,
        [
            dlv("A", "b", 5, "A", layer=0),
            dlv("A", "a", 5, "A", layer=1),
            dlv("A", "c", 5, "A", layer=1),
            dlv("A", "a2", 5, "A", layer=1),
        ],
    )
    assert kinds(found) == [("order", "A", "a2")]


def test_rule_2_mismatch_another_timestamp_digest_or_destinations() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    found = observe_all(
        rules,
        [
            dlv("A", "m1", 5, "ABC"),
            dlv("B", "m1", 6, "ABC"),  # another timestamp
            dlv("C", "m1", 5, "ABC", digest="other"),  # another digest
            dlv("A", "m2", 7, "AB"),
            dlv("B", "m2", 7, "ABD"),  # another destination list (and D never delivers)
        ],
    )
    assert kinds(found) == [
        ("mismatch", "B", "m1"),
        ("mismatch", "C", "m1"),
        ("mismatch", "B", "m2"),
    ]
    assert "key (6, 0, 'm1') (not (5, 0, 'm1'))" in found[0].text
    assert found[0].reference is not None and found[0].reference["topic"] == "A"
    assert "digest other" in found[1].text
    assert "destinations" in found[2].text


def test_rule_2_a_topic_that_is_not_a_destination() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    found = observe_all(rules, [dlv("A", "m1", 5, "AB"), dlv("C", "m1", 5, "AB")])
    assert kinds(found) == [("not-a-destination", "C", "m1")]
    found = observe_all(rules, [dlv("D", "m9", 6, "A")])  # first read where it does not belong
    assert kinds(found) == [("not-a-destination", "D", "m9")]
    found = rules.advance(1_000 + BOUND_MS + BUCKET_MS)
    assert kinds(found) == [("missing", "B", "m1"), ("missing", "A", "m9")]


def test_rule_3_missing_after_the_bound_rounded_to_the_second() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    assert observe_all(rules, [dlv("A", "m1", 5, "ABC", at=1_500)]) == []
    assert rules.advance(1_500 + BOUND_MS) == []  # 1.5 s is in second 1: due at 2 s + bound
    assert rules.advance(2_000 + BOUND_MS - 1) == []
    found = rules.advance(2_000 + BOUND_MS)
    assert kinds(found) == [("missing", "B", "m1"), ("missing", "C", "m1")]
    assert found[0].text == "'m1' missing at B after 10 s: delivered at A"
    assert rules.open_messages == 0
    assert rules.advance(10**9) == []  # reported once


def test_a_late_delivery_after_missing_is_late_not_new() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    observe_all(rules, [dlv("A", "m1", 5, "AB")])
    assert kinds(rules.advance(50_000)) == [("missing", "B", "m1")]
    seen = rules.observe(dlv("B", "m1", 5, "AB", at=50_000))
    assert seen.late and not seen.violations
    assert rules.advance(1_000 + 10 * BOUND_MS + 2 * BUCKET_MS) == []  # nothing new, ever
    assert rules.tracked_messages == 0  # forgotten after FORGET_FACTOR bounds


def test_rule_4_exact_repeats_are_dropped_other_repeats_are_duplicates() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    first = dlv("A", "m1", 5, "AB")
    observe_all(rules, [first, dlv("B", "m1", 5, "AB"), dlv("A", "m2", 6, "A")])
    repeat = rules.observe(first)
    assert repeat.repeat and not repeat.violations  # as a node writes it again after a crash
    again = rules.observe(dlv("A", "m1", 9, "AB", offset=7))  # above the last key: no order
    assert again.violations and kinds(again.violations) == [("duplicate", "A", "m1")]
    assert rules.last_key("A") == (6, 0, "m2")  # a duplicate does not move the order on
    assert "first delivered there with key (5, 0, 'm1')" in again.violations[0].text
    # a mismatching delivery, written again exactly, is a repeat of itself
    observe_all(rules, [dlv("A", "m3", 8, "AC"), dlv("C", "m3", 4, "AC")])
    assert rules.observe(dlv("C", "m3", 4, "AC")).repeat


def test_replay_rebuilds_state_silently() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    assert rules.observe(dlv("A", "m1", 5, "AB"), replay=True).violations == ()
    assert rules.observe(dlv("A", "m0", 1, "A"), replay=True).violations == ()  # no order check
    assert rules.advance(1_000, replay=True) == []
    rules.restore_last_key("A", (5, 0, "m1"))
    assert observe_all(rules, [dlv("B", "m1", 5, "AB")]) == []  # completes the replayed one
    assert kinds(observe_all(rules, [dlv("A", "m3", 4, "A")])) == [("order", "A", "m3")]


def test_destinations_outside_the_audit_are_not_waited_for() -> None:
    rules = AuditRules(("A", "B"), BOUND_S)
    assert observe_all(rules, [dlv("A", "m1", 5, ("A", "X"))]) == []
    assert rules.open_messages == 0
    assert rules.advance(10**9) == []
    assert rules.observe(dlv("X", "m2", 5, "X")).violations == ()  # not audited: ignored


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="topic"):
        AuditRules((), BOUND_S)
    with pytest.raises(ValueError, match="positive"):
        AuditRules(TOPICS, 0)


def test_violations_as_json() -> None:
    rules = AuditRules(TOPICS, BOUND_S)
    (order,) = observe_all(rules, [dlv("A", "m2", 5, "A"), dlv("A", "m1", 3, "A", offset=4)])
    assert order.to_json() == {
        "kind": "order",
        "topic": "A",
        "messageID": "m1",
        "text": order.text,
        "partition": 0,
        "offset": 4,
        "recordTimeMs": 1_000,
        "key": [3, 0, "m1"],
        "reference": {"previousKey": [5, 0, "m2"]},
    }
    assert order.identity == ("order", "A", "m1", 4)
    assert str(order).startswith("[order] A delivered 'm1'")


# ---------------------------------------------------------------------------- generated runs


@dataclass(frozen=True)
class Msg:
    mid: str
    dests: tuple[str, ...]
    ts: int
    layer: int


@st.composite
def correct_runs(draw: st.DrawFn) -> tuple[list[Msg], dict[str, list[AuditedDelivery]]]:
    """Messages with distinct keys, each delivered at every destination, every topic in
    key order."""
    count = draw(st.integers(1, 25))
    msgs = []
    for i in range(count):
        dests = draw(st.sets(st.sampled_from(TOPICS), min_size=1, max_size=len(TOPICS)))
        msgs.append(
            Msg(f"m{i}", tuple(sorted(dests)), draw(st.integers(1, 40)), draw(st.integers(0, 2)))
        )
    logs: dict[str, list[AuditedDelivery]] = {t: [] for t in TOPICS}
    for m in sorted(msgs, key=lambda m: (m.ts, m.layer, m.mid)):
        for t in m.dests:
            logs[t].append(dlv(t, m.mid, m.ts, m.dests, layer=m.layer, offset=len(logs[t])))
    return msgs, logs


def interleave(logs: dict[str, list[AuditedDelivery]], seed: int) -> list[AuditedDelivery]:
    """One reading order: a random merge that keeps each topic's order, read within a
    few seconds (well inside the bound)."""
    rng = random.Random(seed)
    cursors = {t: 0 for t in logs}
    out: list[AuditedDelivery] = []
    time_ms = 1_000
    while any(cursors[t] < len(logs[t]) for t in logs):
        topic = rng.choice([t for t in logs if cursors[t] < len(logs[t])])
        time_ms += rng.randint(0, 50)
        out.append(replace(logs[topic][cursors[topic]], time_ms=time_ms))
        cursors[topic] += 1
    return out


def audit(reading: Sequence[AuditedDelivery]) -> tuple[list[Violation], Counter[str]]:
    rules = AuditRules(TOPICS, BOUND_S)
    found: list[Violation] = []
    checked: Counter[str] = Counter()
    for d in reading:
        seen = rules.observe(d)
        if not seen.repeat:
            checked[d.topic] += 1
        found.extend(seen.violations)
        found.extend(rules.advance(d.time_ms))
    found.extend(rules.advance(rules.clock_ms + BOUND_MS + BUCKET_MS))
    return found, checked


@EXAMPLES
@given(correct_runs(), st.integers(0, 2**32))
def test_a_correct_run_is_clean_whatever_the_reading_order(
    run: tuple[list[Msg], dict[str, list[AuditedDelivery]]], seed: int
) -> None:
    _msgs, logs = run
    found, checked = audit(interleave(logs, seed))
    assert found == []
    assert checked == Counter({t: len(log) for t, log in logs.items() if log})


FAULTS = ("swap", "retime", "drop", "duplicate", "foreign")
#: The kind each fault must be reported as.
EXPECTED = {
    "swap": Kind.ORDER,
    "retime": Kind.MISMATCH,
    "drop": Kind.MISSING,
    "duplicate": Kind.DUPLICATE,
    "foreign": Kind.NOT_A_DESTINATION,
}


def inject(
    fault: str, logs: dict[str, list[AuditedDelivery]], rng: random.Random
) -> dict[str, list[AuditedDelivery]] | None:
    """``logs`` with one ``fault``, or ``None`` when this run has no place for it."""
    out = {t: list(log) for t, log in logs.items()}
    multicast = [d for log in logs.values() for d in log if len(d.destinations) > 1]
    if fault == "swap":
        places = [(t, i) for t, log in logs.items() for i in range(len(log) - 1)]
        if not places:
            return None
        topic, i = rng.choice(places)
        log = out[topic]
        log[i], log[i + 1] = log[i + 1], log[i]
    elif fault in ("retime", "drop"):
        if not multicast:
            return None
        victim = rng.choice(multicast)
        log = out[victim.topic]
        index = log.index(victim)
        if fault == "drop":
            del log[index]
        else:
            log[index] = replace(victim, timestamp=victim.timestamp + rng.choice([-1000, 1000]))
    elif fault == "duplicate":
        topic = rng.choice([t for t in TOPICS if logs[t]] or ["A"])
        if not logs[topic]:
            return None
        original = rng.choice(logs[topic])
        out[topic].append(replace(original, digest="tampered"))
    else:  # foreign
        everywhere = [d for log in logs.values() for d in log if len(d.destinations) < len(TOPICS)]
        if not everywhere:
            return None
        original = rng.choice(everywhere)
        topic = rng.choice([t for t in TOPICS if t not in original.destinations])
        out[topic].append(replace(original, topic=topic))
    return out


@EXAMPLES
@given(correct_runs(), st.sampled_from(FAULTS), st.integers(0, 2**32))
def test_any_one_fault_is_reported_with_its_kind(
    run: tuple[list[Msg], dict[str, list[AuditedDelivery]]], fault: str, seed: int
) -> None:
    _msgs, logs = run
    faulty = inject(fault, logs, random.Random(seed))
    if faulty is None:
        return
    found, _checked = audit(interleave(faulty, seed))
    assert EXPECTED[fault] in {v.kind for v in found}, (fault, kinds(found))


def checker_view(
    msgs: Sequence[Msg], reading: Sequence[AuditedDelivery]
) -> tuple[list[SentMessage], dict[str, list[DeliveryRecord]]]:
    """What the checker is given: the messages delivered somewhere (the audit cannot
    know of the others) and each topic's log without exact repeats (which the audit
    drops by design: §10.1 rule 4)."""
    logs: dict[str, list[DeliveryRecord]] = {t: [] for t in TOPICS}
    kept: set[tuple[str, str, int, int, str, tuple[str, ...]]] = set()
    for d in reading:
        content = (d.topic, d.message_id, d.timestamp, d.layer, d.digest, d.destinations)
        if content in kept:
            continue
        kept.add(content)
        logs[d.topic].append(
            DeliveryRecord(
                d.message_id, d.destinations, d.timestamp, deliveredAt=d.topic, layer=d.layer
            )
        )
    delivered = {r.messageID for log in logs.values() for r in log}
    sent = [SentMessage(m.mid, frozenset(m.dests)) for m in msgs if m.mid in delivered]
    return sent, logs


@EXAMPLES
@given(
    correct_runs(),
    st.lists(st.sampled_from(FAULTS), max_size=3),
    st.integers(0, 2**32),
)
def test_whenever_the_audit_is_clean_the_checker_is_clean(
    run: tuple[list[Msg], dict[str, list[AuditedDelivery]]],
    faults: list[str],
    seed: int,
) -> None:
    msgs, logs = run
    rng = random.Random(seed)
    for fault in faults:
        logs = inject(fault, logs, rng) or logs
    reading = interleave(logs, seed)
    found, _checked = audit(reading)
    sent, deliveries = checker_view(msgs, reading)
    report = check(sent, deliveries)
    if not found:
        assert report.ok, report.summary()


def test_pairwise_order_needs_no_pairwise_state() -> None:
    """Two topics that disagree on the order of two common messages: one of them breaks
    rule 1 or rule 2, whichever way round it is read."""
    a = [dlv("A", "x", 1, "AB"), dlv("A", "y", 2, "AB")]
    b = [dlv("B", "y", 2, "AB"), dlv("B", "x", 1, "AB")]  # same keys, opposite order
    for order in itertools.permutations([*a, *b]):
        if [d for d in order if d.topic == "A"] != a or [d for d in order if d.topic == "B"] != b:
            continue
        assert Kind.ORDER in {v.kind for v in audit(order)[0]}
    b = [dlv("B", "y", 0, "AB"), dlv("B", "x", 1, "AB")]  # in order here, by another key
    assert {v.kind for v in audit([*a, *b])[0]} == {Kind.MISMATCH}


def test_a_mismatch_is_reported_at_the_later_delivery_whatever_was_read_first() -> None:
    a = dlv("A", "m1", 5, "ABC", at=1_000, offset=3)  # written last
    b = dlv("B", "m1", 6, "ABC", at=900, offset=7)
    c = dlv("C", "m1", 6, "ABC", at=950, offset=1)
    for order in itertools.permutations([a, b, c]):
        found = observe_all(AuditRules(TOPICS, BOUND_S), order)
        assert {v.identity for v in found} == {("mismatch", "A", "m1", 3)}, order
        assert len(found) == 1


# ------------------------------------------------ rules 5 and 6: Kafka's own anomalies


def test_an_exact_repeat_is_an_aborted_read_when_the_nodes_write_exactly_once() -> None:
    """Issue 39: with exactly-once nodes a read_committed reader never meets a delivery
    twice; an identical second one means a record of an aborted transaction was read
    (Jepsen's aborted read) or the delivery was committed twice. At-least-once nodes
    write such repeats after a crash: dropped, as before."""
    first, again = dlv("A", "m1", 5, ["A"], offset=3), dlv("A", "m1", 5, ["A"], offset=7)
    assert observe_all(AuditRules(TOPICS), [first, again]) == []
    found = observe_all(AuditRules(TOPICS, exactly_once=True), [first, again])
    assert kinds(found) == [("aborted-read", "A", "m1")] and found[0].offset == 7
    assert observe_all(AuditRules(TOPICS, exactly_once=True, offsets=True), [first, first]) == []


def test_one_offset_read_twice_with_two_values_is_reported() -> None:
    """The log was cut (an unclean election, a lost write) and written again: the
    consumer's position reset, and the offset read before now holds another record."""
    rules = AuditRules(TOPICS, offsets=True)
    read = [dlv("A", f"m{i}", i, ["A"], offset=i) for i in range(1, 4)]
    assert observe_all(rules, read) == []
    rewritten = dlv("A", "x2", 9, ["A"], offset=2)
    found = observe_all(rules, [read[0], rewritten])
    assert ("offset-two-values", "A", "x2") in kinds(found)
    assert found[-1].reference == {"messageID": "m2", "digest": "digest-m2"}


def test_a_delivery_a_second_read_passes_over_is_gone_after_read() -> None:
    rules = AuditRules(TOPICS, offsets=True)
    read = [dlv("A", f"m{i}", i, ["A"], offset=i) for i in range(1, 6)]
    assert observe_all(rules, read) == []
    # read again from offset 1: offsets 2 and 3 are gone, 4 is there again
    found = observe_all(rules, [read[0], read[3]])
    assert kinds(found) == [("gone-after-read", "A", "m2"), ("gone-after-read", "A", "m3")]
    assert [v.offset for v in found] == [2, 3]
    # the second read goes past the first one's end: 5 was never read again
    found = observe_all(rules, [dlv("A", "m6", 6, ["A"], offset=6)])
    assert kinds(found) == [("gone-after-read", "A", "m5")]


def test_offsets_are_forgotten_with_their_messages() -> None:
    rules = AuditRules(TOPICS, offsets=True)
    observe_all(rules, [dlv("A", "m1", 1, ["A"], offset=1, at=1_000)])
    rules.advance(1_000 + 100 * BOUND_MS)
    assert rules.tracked_messages == 0
    assert observe_all(rules, [dlv("A", "y", 2, ["A"], offset=1, at=200_000)]) == []
