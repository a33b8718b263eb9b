"""The merger (atomickafka/core/merger.py), each test tied to a rule of its header.

Rule numbers: 1 release order ``(timeStamp, layer, messageID)``, 2 release only when
every empty layer has promised nothing smaller, 3 tick requests for idle layers, 4
duplicates change nothing and violations are rejected, 5 determinism over
interleavings and batchings, 6 recovery (``resume_after``, snapshots).

Scripted tests first, then property tests on random layer streams (1 to 6 layers, up to
25 items each). Example counts scale with the Hypothesis profile
(``tests/unit/conftest.py``): with ``ci`` the property tests make 3,500 generated runs,
most of which feed two mergers, with ``dev`` 420.
"""

from __future__ import annotations

import ast
import doctest
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core import merger as merger_module
from atomickafka.core.merger import (
    LayerDelivery,
    LayerRecord,
    LayerWatermark,
    MergeKey,
    Merger,
    MergerOutput,
    RejectReason,
    Release,
    TickRequest,
)
from atomickafka.core.raw import decode_any
from atomickafka.core.signing import Signer
from atomickafka.core.wire import decode_record
from atomickafka.node import merger_runtime
from atomickafka.node.batch import OutKind, OutRecord, Ready
from atomickafka.node.config import NodeConfig
from atomickafka.node.merger_batch import MergerBatch
from atomickafka.verify.layered import LayeredSimulator
from atomickafka.verify.workload import LayerSend

BASE = settings().max_examples  # 60 with the dev profile, 500 with ci


def examples(factor: float) -> settings:
    return settings(max_examples=max(10, int(BASE * factor)))


# ---------------------------------------------------------------------------- helpers


def d(layer: int, ts: int, mid: str, payload: object = None) -> LayerDelivery:
    return LayerDelivery(layer, ts, mid, payload if payload is not None else f"p-{mid}")


def w(layer: int, ts: int) -> LayerWatermark:
    return LayerWatermark(layer, ts)


def released(outputs: Iterable[MergerOutput]) -> list[str]:
    """The ids of the Releases, in order."""
    return [o.messageID for o in outputs if isinstance(o, Release)]


def ticks(outputs: Iterable[MergerOutput]) -> list[tuple[int, int]]:
    """(layer, timeStamp) of each TickRequest, in order."""
    return [(o.layer, o.timeStamp) for o in outputs if isinstance(o, TickRequest)]


def round_trip(m: Merger) -> Merger:
    """Restore ``m`` from its snapshot after a trip through JSON bytes."""
    return Merger.restore(orjson.loads(orjson.dumps(m.snapshot())))


# ---------------------------------------------------------------------------- rule 1


def test_rule1_equal_timestamps_order_by_layer_then_id() -> None:
    m = Merger("T", layers=3)
    out = m.handle_batch(
        [d(2, 5, "a"), d(1, 5, "z"), d(0, 5, "y"), d(1, 5, "zz"), d(0, 6, "b"), d(2, 6, "c")]
    )
    # ts 5: layer 0 (y), then layer 1 (z, zz). Layer 2's a waits: layer 1 promised only
    # 5, and (5, layer 1) sorts before (5, layer 2).
    assert released(out) == ["y", "z", "zz"]
    assert m.blocked_by() == (1,)
    assert released(m.handle_batch([w(1, 6)])) == ["a", "b"]  # (5, 2, a) < (6, 0, b)
    assert m.blocked_by() == (0, 1)  # both could still send something at 6 before c
    assert released(m.handle_batch([w(0, 7)])) == []
    assert m.blocked_by() == (1,)
    assert released(m.handle_batch([w(1, 7)])) == ["c"]


def test_rule1_releases_are_strictly_increasing_and_carry_the_payload() -> None:
    m = Merger("T", layers=2)
    out = m.handle_batch(
        [d(0, 1, "a", {"v": 1}), d(1, 1, "b", [2]), d(0, 4, "c", None), w(1, 9), w(0, 9)]
    )
    rel = [o for o in out if isinstance(o, Release)]
    assert [r.key for r in rel] == [
        MergeKey(1, 0, "a"),
        MergeKey(1, 1, "b"),
        MergeKey(4, 0, "c"),
    ]
    assert [r.payload for r in rel] == [{"v": 1}, [2], "p-c"]
    assert m.last_released == MergeKey(4, 0, "c")
    assert m.stats.releases == 3


# ---------------------------------------------------------------------------- rule 2


def test_rule2_an_idle_layer_blocks_until_its_watermark_passes() -> None:
    m = Merger("T", layers=3)
    assert released(m.handle_batch([d(0, 3, "a"), d(2, 3, "b")])) == []
    assert m.head == MergeKey(3, 0, "a")
    assert m.blocked_by() == (1,)  # layer 2's buffered item is past the head already
    assert m.pending_count == 2
    assert released(m.handle_batch([w(1, 2)])) == []
    assert m.watermark(1) == 2
    # W_1 == 3 with layer 1 > layer 0: a is safe. b (3, layer 2) now waits for layer 1
    # and for layer 0, whose buffer is empty and which promised only 3.
    assert released(m.handle_batch([w(1, 3)])) == ["a"]
    assert m.blocked_by() == (0, 1)
    assert released(m.handle_batch([w(1, 4)])) == []
    assert m.blocked_by() == (0,)
    assert released(m.handle_batch([w(0, 4)])) == ["b"]
    assert m.blocked_by() == ()
    assert m.head is None
    assert m.pending_count == 0
    assert m.watermarks == (4, 4, 3)


def test_rule2_a_delivery_is_a_promise_too() -> None:
    m = Merger("T", layers=2)
    assert released(m.handle_batch([d(0, 5, "a")])) == []
    assert released(m.handle_batch([d(1, 2, "x")])) == ["x"]  # layer 0 promised 5
    assert m.blocked_by() == (1,)
    assert released(m.handle_batch([d(1, 7, "y")])) == ["a"]  # layer 1's stream is past 5
    assert m.blocked_by() == (0,)


def test_rule2_an_empty_layer_at_the_same_timestamp_blocks_only_if_lower() -> None:
    m = Merger("T", layers=3)
    m.handle_batch([w(0, 4), w(2, 4)])
    assert released(m.handle_batch([d(1, 4, "m")])) == []
    assert m.blocked_by() == (0,)  # (4, layer 0) < (4, layer 1) <= (4, layer 2)
    assert released(m.handle_batch([w(0, 5)])) == ["m"]


def test_rule2_the_buffer_holds_a_layer_stream_in_order() -> None:
    m = Merger("T", layers=2)
    m.handle_batch([d(0, t, f"a{t:02d}") for t in range(1, 20)])
    assert m.pending_count == 19
    # (10, layer 0) < (10, layer 1): a10 goes too.
    assert released(m.handle_batch([w(1, 10)])) == [f"a{t:02d}" for t in range(1, 11)]
    assert released(m.handle_batch([w(1, 100)])) == [f"a{t:02d}" for t in range(11, 20)]


# ---------------------------------------------------------------------------- rule 3


def test_rule3_blocked_head_requests_one_tick_per_blocking_layer() -> None:
    m = Merger("T", layers=4)
    out = m.handle_batch([d(2, 6, "a")])
    assert ticks(out) == [(0, 6), (1, 6), (3, 6)]
    assert m.stats.ticks == 3
    # Still blocked, nothing new: no tick again (rule 3: never at or below one requested).
    assert ticks(m.handle_batch([])) == []
    assert ticks(m.handle_batch([w(0, 3), d(2, 6, "a")])) == []
    # Layer 0 answers; the others still block at the same head: nothing new.
    out = m.handle_batch([w(0, 7)])
    assert (released(out), ticks(out)) == ([], [])
    out = m.handle_batch([w(1, 7), w(3, 7)])
    assert released(out) == ["a"]
    assert ticks(out) == []


def test_rule3_a_new_head_requests_a_higher_tick_only() -> None:
    m = Merger("T", layers=2)
    assert ticks(m.handle_batch([d(0, 5, "a")])) == [(1, 5)]
    out = m.handle_batch([w(1, 6), d(0, 9, "b")])
    assert (released(out), ticks(out)) == (["a"], [(1, 9)])
    # Layer 1 delivers at 7: x goes, and b (9) waits for layer 1 again, which was asked
    # for 9 already: no new tick.
    out = m.handle_batch([d(1, 7, "x")])
    assert (released(out), ticks(out)) == (["x"], [])
    assert m.blocked_by() == (1,)
    # Layer 1 at 12: b goes; y (12, layer 1) now waits for layer 0, which is asked for 12.
    out = m.handle_batch([d(1, 12, "y")])
    assert released(out) == ["b"]
    assert ticks(out) == [(0, 12)]


def test_rule3_no_tick_when_nothing_blocks() -> None:
    m = Merger("T", layers=2)
    out = m.handle_batch([w(1, 10), d(0, 3, "a")])
    assert released(out) == ["a"]
    assert ticks(out) == []
    assert ticks(m.handle_batch([])) == []


def test_rule3_a_tick_lost_on_its_way_is_asked_for_again() -> None:
    """The tick to layer 1 never arrives (its write was lost, or layer 1 refused it):
    the merger never asks again at or below a tick it requested, so only
    :meth:`Merger.retry_ticks` -- what the shell calls once the head has stayed
    blocked -- asks the blocking layers again, at the same height; once the layer
    answers, the head goes and nothing more is asked."""
    m = Merger("T", layers=3)
    assert ticks(m.handle_batch([w(2, 9), d(0, 5, "a")])) == [(1, 5)]
    assert ticks(m.handle_batch([])) == [] and m.blocked_by() == (1,)  # lost: silence
    assert ticks(m.retry_ticks()) == [(1, 5)]
    assert ticks(m.handle_batch([])) == []  # asked again: not flooded between retries
    assert ticks(m.retry_ticks()) == [(1, 5)]  # refused too: asked once more
    assert m.stats.ticks == 3
    out = m.handle_batch([w(1, 6)])
    assert released(out) == ["a"] and m.blocked_by() == ()
    assert m.retry_ticks() == []  # nothing blocks: nothing to ask for
    # a snapshot keeps the retried request, so a restarted merger does not ask again
    assert ticks(round_trip(m).handle_batch([d(0, 5, "a")])) == []


@pytest.mark.parametrize("fate", ["lost", "refused"])
def test_rule3_a_lost_or_refused_tick_is_written_again_and_the_layer_takes_it(
    fate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the batch layers (``MergerBatch``, the layers' ``NodeBatch``) on a signed
    cluster: the merger's first tick record is lost, or reaches layer 1 altered (its
    node sets it aside: wrong signature). The shell's retry (``MergerBatch.retry_ticks``)
    writes it again, layer 1 takes it and T's merged stream goes on. Without the retry
    the head waits for good (the control)."""
    outcomes: dict[bool, tuple[list[str], dict[str, int], list[str]]] = {}
    for retry in (True, False):
        if not retry:
            monkeypatch.setattr(MergerBatch, "retry_ticks", lambda self: Ready())
        sim = LayeredSimulator(
            ["T", "U"], 2, signer=Signer([b"merger-tests-secret-0123456789ab"]), members_known=True
        )
        route, first = sim._route_merger, list[OutRecord]()

        def spoil(topic: str, record: OutRecord, route=route, first=first) -> None:  # type: ignore[no-untyped-def]
            if record.kind is OutKind.TICK and not first:
                first.append(record)
                if fate == "lost":
                    return
                record = OutRecord(record.kind, record.topic, (record.value or b"") + b" ",
                                   record.partition, record.key, record.headers)  # fmt: skip
            route(topic, record)

        monkeypatch.setattr(sim, "_route_merger", spoil)
        sim.send(LayerSend("c", "first", ("T",), "v", "T", layer=0))
        sim.send(LayerSend("c", "second", ("T", "U"), "w", "T", layer=0))
        sim.advance(20_000)
        result = sim.result()
        refused = [r for lr in result.layer_results for rs in lr.rejected_reasons().values()
                   for r in rs]  # fmt: skip
        outcomes[retry] = (result.merged_ids("T"), dict(result.events), refused)
        assert first, "the merger asked layer 1 for a tick"
    merged, events, refused = outcomes[True]
    assert merged == ["first", "second"], outcomes
    assert events["tick_retry"] >= 1
    if fate == "refused":
        assert refused and all(r.startswith("wrong signature") for r in refused), refused
    assert "second" not in outcomes[False][0], outcomes[False]  # no retry: stuck for good


def test_rule3_the_merger_shell_retries_once_the_head_stayed_blocked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``MergerRuntime``: a head blocked for ``TICK_RETRY_S`` (monotonic time) makes the
    shell write the blocking layer's tick again, into that layer's partition of T's
    input log; not before, and not while nothing blocks."""
    runtime = merger_runtime.MergerRuntime(
        NodeConfig("localhost:1", "T", partitions=2, create_topics=False)
    )
    now = [1000.0]
    clock = SimpleNamespace(monotonic=lambda: now[0], time=time.time)
    monkeypatch.setattr(merger_runtime, "time", clock)
    written: list[OutRecord] = []

    class Writer:
        reports_written = False  # the shell counts what it hands over

        def write(self, records: list[OutRecord], commit: object) -> None:
            written.extend(records)

    writer = Writer()
    payload = decode_record(orjson.dumps({"messageID": "a", "messageType": "ClientMessage",
                                          "topic": ["T"], "value": 1}))[0]  # fmt: skip
    runtime.batch.merger.handle_batch([d(0, 5, "a", payload)])  # its tick: lost
    for elapsed in (0.0, merger_runtime.TICK_RETRY_S - 0.01):
        now[0] = 1000.0 + elapsed
        runtime._retry_ticks_if_blocked(writer)  # type: ignore[arg-type]
        assert written == []
    now[0] = 1000.0 + merger_runtime.TICK_RETRY_S
    runtime._retry_ticks_if_blocked(writer)  # type: ignore[arg-type]
    assert [(r.kind, r.topic, r.partition) for r in written] == [
        (OutKind.TICK, runtime.spec.input_topic, 1)
    ]
    (tick,) = decode_any(written[0].value)
    assert (tick.timeStamp, tick.senderID) == (5, runtime.sender_id)
    runtime.batch.merger.handle_batch([w(1, 6)])  # layer 1 answered: nothing blocks
    now[0] += 10 * merger_runtime.TICK_RETRY_S
    runtime._retry_ticks_if_blocked(writer)  # type: ignore[arg-type]
    assert len(written) == 1


def test_rule3_transcript_of_an_idle_layer_ticked_through_its_log() -> None:
    """A golden transcript: layer 1 sends nothing but its answers to the ticks."""
    m = Merger("T", layers=2)
    transcript: list[tuple[str, ...]] = []
    feed: list[list[LayerRecord]] = [
        [d(0, 1, "a"), d(0, 2, "b")],
        [w(1, 1)],  # a low answer to the tick at 1: a (1, layer 0) goes, b (2) waits
        [d(0, 4, "c")],  # the head is still b, asked for already
        [w(1, 3)],  # the answer to the tick at 2: b goes, c (4) waits
        [w(1, 5)],  # the answer to the tick at 4
    ]
    for batch in feed:
        transcript.append(tuple(repr(o) for o in m.handle_batch(batch)))
    assert transcript == [
        ("TickRequest(layer=1, timeStamp=2)",),  # to the highest buffered: b
        ("Release(layer=0, timeStamp=1, messageID='a', payload='p-a')",),
        ("TickRequest(layer=1, timeStamp=4)",),  # c is the highest now
        ("Release(layer=0, timeStamp=2, messageID='b', payload='p-b')",),
        ("Release(layer=0, timeStamp=4, messageID='c', payload='p-c')",),
    ]


# ---------------------------------------------------------------------------- rule 4


def test_rule4_duplicates_change_nothing() -> None:
    m = Merger("T", layers=2)
    batch = [d(0, 1, "a"), d(0, 1, "a"), d(1, 2, "b"), d(0, 3, "c")]
    assert released(m.handle_batch(batch)) == ["a", "b"]  # c waits for layer 1 (at 2)
    before = m.snapshot()
    out = m.handle_batch([d(0, 1, "a"), d(1, 2, "b"), w(1, 1), w(0, 3), d(0, 3, "c")])
    assert (released(out), ticks(out), m.rejected) == ([], [], ())
    after = m.snapshot()
    assert after.pop("stats") != before.pop("stats")
    assert after == before
    assert m.stats.duplicates == 1 + 5
    # Replayed after release: still nothing (the merger remembers accepted ids).
    assert released(m.handle_batch([d(1, 4, "e"), d(0, 1, "a"), d(1, 2, "b")])) == ["c"]
    assert m.stats.releases == 3
    assert m.rejected == ()


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (d(0, 4, "z"), RejectReason.BACKWARDS),  # below the last item (5, b)
        (d(0, 5, "a"), RejectReason.BACKWARDS),  # same ts, smaller id
        (d(0, 9, "b"), RejectReason.CONFLICTING_TIMESTAMP),  # b again, at another ts
        (d(1, 6, "x"), RejectReason.BELOW_WATERMARK),  # layer 1 promised 7
        (d(1, -1, "x"), RejectReason.BELOW_WATERMARK),  # timestamps are non-negative
        (d(2, 9, "x"), RejectReason.UNKNOWN_LAYER),
        (d(-1, 9, "x"), RejectReason.UNKNOWN_LAYER),
        (w(5, 9), RejectReason.UNKNOWN_LAYER),
        (LayerDelivery(0, "9", "x"), RejectReason.MALFORMED),  # type: ignore[arg-type]
        (LayerDelivery(0, 9, 7), RejectReason.MALFORMED),  # type: ignore[arg-type]
        (LayerDelivery(0, True, "x"), RejectReason.MALFORMED),
        (LayerWatermark(0, 2.5), RejectReason.MALFORMED),  # type: ignore[arg-type]
        ("not a record", RejectReason.MALFORMED),
    ],
)
def test_rule4_violations_are_rejected_counted_and_ignored(
    record: LayerRecord, reason: RejectReason
) -> None:
    m = Merger("T", layers=2)
    assert released(m.handle_batch([d(0, 5, "b"), w(1, 7)])) == ["b"]
    before = m.snapshot()
    out = m.handle_batch([record])
    assert out == []
    assert [(r.record, r.reason) for r in m.rejected] == [(record, reason)]
    assert m.stats.rejected == 1
    after = m.snapshot()
    after.pop("stats")
    before.pop("stats")
    assert after == before  # nothing applied
    # The merger goes on; the next batch reports only its own rejections.
    assert released(m.handle_batch([d(0, 8, "c"), w(1, 9)])) == ["c"]
    assert m.rejected == ()


def test_rule4_a_rejected_item_is_not_remembered_as_seen() -> None:
    m = Merger("T", layers=1)
    m.handle_batch([d(0, 5, "b")])
    m.handle_batch([d(0, 4, "z")])
    assert [r.reason for r in m.rejected] == [RejectReason.BACKWARDS]
    m.handle_batch([d(0, 4, "z")])  # dead-lettered again, not taken for a duplicate
    assert [r.reason for r in m.rejected] == [RejectReason.BACKWARDS]
    assert m.stats.rejected == 2
    assert m.stats.duplicates == 0


# ---------------------------------------------------------------------------- rule 6


STREAM: list[LayerRecord] = [
    d(0, 1, "a"),
    d(1, 1, "b"),
    d(2, 2, "c"),
    d(0, 3, "d"),
    w(1, 3),
    d(1, 3, "e"),
    d(2, 3, "f"),
    d(0, 8, "g"),
    w(2, 9),
    d(1, 9, "h"),
    w(0, 20),
    w(1, 20),
    w(2, 20),
]
STREAM_ORDER = ["a", "b", "c", "d", "e", "f", "g", "h"]


def test_rule6_straight_run_of_the_scripted_stream() -> None:
    assert released(Merger("T", layers=3).handle_batch(STREAM)) == STREAM_ORDER


@pytest.mark.parametrize("cut", range(len(STREAM_ORDER) + 1))
def test_rule6_resume_after_neither_loses_nor_repeats(cut: int) -> None:
    straight = [o for o in Merger("T", layers=3).handle_batch(STREAM) if isinstance(o, Release)]
    m = Merger("T", layers=3)
    if cut:
        m.resume_after(straight[cut - 1].key)
        assert m.last_released == straight[cut - 1].key
    out: list[str] = []
    for record in STREAM:  # the replay, one record a batch
        out.extend(released(m.handle_batch([record])))
    assert out == STREAM_ORDER[cut:]
    assert m.stats.suppressed == cut
    assert m.pending_count == 0


def test_rule6_resume_after_drops_what_is_buffered_already() -> None:
    m = Merger("T", layers=2)
    m.handle_batch([d(0, 1, "a"), d(0, 2, "b"), d(0, 3, "c")])
    m.resume_after((2, 0, "b"))
    assert m.pending_count == 1
    assert m.stats.suppressed == 2
    m.resume_after(MergeKey(1, 0, "a"))  # an older key changes nothing
    assert m.last_released == MergeKey(2, 0, "b")
    assert released(m.handle_batch([d(0, 1, "a"), d(0, 2, "b"), w(1, 5)])) == ["c"]


def test_rule6_resume_after_rejects_a_bad_key() -> None:
    with pytest.raises(ValueError, match="key"):
        Merger("T", layers=2).resume_after(("1", 0, "a"))  # type: ignore[arg-type]


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_rule6_snapshot_restore_mid_stream_equals_a_straight_run(cut: int) -> None:
    straight = Merger("T", layers=3)
    expected = straight.handle_batch(STREAM)
    first = Merger("T", layers=3)
    out = first.handle_batch(STREAM[:cut])
    second = round_trip(first)
    assert second.snapshot() == first.snapshot()
    out += second.handle_batch(STREAM[cut:])
    assert released(out) == released(expected)
    assert state(second) == state(straight)


def state(m: Merger) -> dict[str, object]:
    """The snapshot less what depends on batching: tick bookkeeping and counters."""
    snap = m.snapshot()
    del snap["ticked"], snap["stats"]
    return snap


def test_rule6_restore_refuses_an_unknown_version() -> None:
    snap = Merger("T", layers=1).snapshot() | {"version": 99}
    with pytest.raises(ValueError, match="version"):
        Merger.restore(snap)


# ---------------------------------------------------------------------------- API


def test_a_merger_needs_a_layer() -> None:
    with pytest.raises(ValueError, match="layer"):
        Merger("T", layers=0)


def test_the_module_docstring_example_runs() -> None:
    """The examples in the module's docstrings, read from its source: the compiled form
    (mypyc) keeps no class docstrings, so they run against what is imported, either
    form."""
    assert merger_module.__file__ is not None
    source = Path(merger_module.__file__).with_name("merger.py").read_text(encoding="utf-8")
    texts = [
        ast.get_docstring(n, clean=False)
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
    ]
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner()
    for index, text in enumerate(t for t in texts if t):
        test = parser.get_doctest(text, dict(vars(merger_module)), f"doc{index}", None, 0)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


# ---------------------------------------------------------------------------- random streams

GAPS = (0, 0, 1, 1, 1, 2, 3, 8, 40)  # 0: ties; 40: a long idle stretch in ts
LETTERS = "abcde"


def random_streams(
    rng: random.Random, layers: int, max_items: int, idle: float, close: bool
) -> list[list[LayerRecord]]:
    """Per layer: a strictly increasing (ts, id) stream with watermarks consistent with it.

    A watermark before an item is at most the item's ts (sometimes stale). With
    ``close``, every layer ends with a watermark above every timestamp.
    """
    streams: list[list[LayerRecord]] = []
    for layer in range(layers):
        n = rng.randint(0, 2) if rng.random() < idle else rng.randint(0, max_items)
        items: list[tuple[int, str]] = []
        ts = 0
        for k in range(n):
            ts += rng.choice(GAPS)
            items.append((ts, f"{rng.choice(LETTERS)}{layer}.{k}"))  # ids unique, unsorted
        items.sort()
        events: list[LayerRecord] = []
        last = 0
        for ts, mid in items:
            if rng.random() < 0.3:
                events.append(w(layer, rng.randint(max(0, last - 2), ts)))
            events.append(d(layer, ts, mid))
            last = ts
        if rng.random() < 0.5:
            events.append(w(layer, last + rng.randint(0, 10)))
        streams.append(events)
    if close:
        end = 1 + max((e.timeStamp for s in streams for e in s), default=0)
        for layer, events in enumerate(streams):
            events.append(w(layer, end + rng.randint(0, 3)))
    return streams


def deliveries(streams: Sequence[Sequence[LayerRecord]]) -> list[LayerDelivery]:
    return [e for s in streams for e in s if isinstance(e, LayerDelivery)]


def sorted_keys(items: Iterable[LayerDelivery]) -> list[MergeKey]:
    return sorted(i.key for i in items)


@dataclass
class Chaos:
    """How a schedule mixes the streams: batch sizes, duplicates, replays, sleepy layers."""

    max_batch: int = 4
    duplicate: float = 0.0
    replay: float = 0.0
    sleepy: float = 0.0
    bogus: float = 0.0  # inject items that break their layer's order or promise (rule 4)


def interleave(
    rng: random.Random, streams: Sequence[Sequence[LayerRecord]], chaos: Chaos
) -> tuple[list[list[LayerRecord]], set[tuple[LayerDelivery, RejectReason]]]:
    """A random schedule of the streams, in batches, and the bogus items it injected.

    Each layer's records keep their order. A sleepy layer is not scheduled before a
    random point (as long as another layer can go), so it looks idle for a long stretch.
    """
    total = sum(len(s) for s in streams)
    wake = [rng.randint(0, total) if rng.random() < chaos.sleepy else 0 for _ in streams]
    cursors = [0] * len(streams)
    last: list[LayerDelivery | None] = [None] * len(streams)
    promised = [0] * len(streams)
    feed: list[LayerRecord] = []
    taken: list[LayerRecord] = []  # stream records fed so far (bogus ones are not)
    bogus: set[tuple[LayerDelivery, RejectReason]] = set()
    fed = 0
    while fed < total:
        ready = [i for i, s in enumerate(streams) if cursors[i] < len(s)]
        awake = [i for i in ready if wake[i] <= fed] or ready
        layer = rng.choice(awake)
        record = streams[layer][cursors[layer]]
        cursors[layer] += 1
        fed += 1
        feed.append(record)
        taken.append(record)
        if isinstance(record, LayerDelivery):
            last[layer] = record
        promised[layer] = max(promised[layer], record.timeStamp)
        if rng.random() < chaos.duplicate:
            feed.append(rng.choice(taken))  # a bogus item fed again may fail differently
        if rng.random() < chaos.replay:
            again = rng.randrange(len(streams))
            feed.extend(streams[again][: rng.randint(0, cursors[again])])
        prev = last[layer]
        if prev is not None and rng.random() < chaos.bogus:
            if promised[layer] > prev.timeStamp and rng.random() < 0.5:
                # After the layer's last item but below its watermark ("~" sorts after
                # every generated id).
                item = d(layer, promised[layer] - 1, f"~bogus{len(bogus)}")
                bogus.add((item, RejectReason.BELOW_WATERMARK))
            else:
                # "!" sorts before every generated id: (ts, "!...") is below (ts, id).
                item = d(layer, prev.timeStamp - rng.randint(0, 1), f"!bogus{len(bogus)}")
                bogus.add((item, RejectReason.BACKWARDS))
            feed.append(item)
    batches: list[list[LayerRecord]] = []
    i = 0
    while i < len(feed):
        size = rng.randint(0, chaos.max_batch)  # empty batches too
        batches.append(feed[i : i + size])
        i += size
    return batches, bogus


@dataclass
class Run:
    releases: list[Release] = field(default_factory=list)
    tick_requests: list[TickRequest] = field(default_factory=list)
    rejected: list[tuple[object, RejectReason]] = field(default_factory=list)
    merger: Merger | None = None


def run(
    merger: Merger,
    batches: Sequence[Sequence[LayerRecord]],
    *,
    expected: Sequence[MergeKey] | None = None,
    restore_at: int | None = None,
) -> Run:
    """Feed ``batches``; check rules 1-3 after every batch (and the prefix of ``expected``)."""
    result = Run()
    ticked: dict[int, int] = {}
    for index, batch in enumerate(batches):
        if index == restore_at:
            merger = round_trip(merger)
        out = merger.handle_batch(batch)
        result.rejected.extend((r.record, r.reason) for r in merger.rejected)
        new = [o for o in out if isinstance(o, Release)]
        reqs = [o for o in out if isinstance(o, TickRequest)]
        assert out == [*new, *reqs]  # releases first
        result.releases.extend(new)
        keys = [r.key for r in result.releases]
        assert keys == sorted(set(keys)), "rule 1: strictly increasing"
        if expected is not None:
            assert keys == list(expected[: len(keys)]), "rule 2: released ahead of its turn"
        head = merger.head
        blockers = set(merger.blocked_by())
        highest = max((r.timeStamp for r in merger.buffered()), default=None)
        for req in reqs:  # rule 3: a blocking layer, to the highest buffered, above any before
            assert head is not None and highest is not None
            assert req.timeStamp == highest >= head.timeStamp
            assert req.layer in blockers
            assert req.timeStamp > ticked.get(req.layer, -1)
            ticked[req.layer] = req.timeStamp
        result.tick_requests.extend(reqs)
    result.merger = merger
    return result


chaos_settings = st.builds(
    Chaos,
    max_batch=st.integers(1, 8),
    duplicate=st.sampled_from([0.0, 0.1, 0.3]),
    replay=st.sampled_from([0.0, 0.03, 0.1]),
    sleepy=st.sampled_from([0.0, 0.3, 0.7]),
    bogus=st.sampled_from([0.0, 0.0, 0.1]),
)

# The draw of most stream properties: a seed for the streams and their schedules, how
# many layers, how long a layer's stream may be, and how the schedule mixes them.
given_streams = given(
    seed=st.integers(0, 2**32 - 1),
    layers=st.integers(1, 6),
    max_items=st.integers(0, 25),
    chaos=chaos_settings,
)


@examples(2.0)
@given(
    seed=st.integers(0, 2**32 - 1),
    layers=st.integers(1, 6),
    max_items=st.integers(0, 25),
    idle=st.sampled_from([0.0, 0.3, 0.6]),
    chaos=chaos_settings,
    restore=st.booleans(),
)
def test_rules_1_2_4_5_every_item_once_in_order_whatever_the_schedule(
    seed: int, layers: int, max_items: int, idle: float, chaos: Chaos, restore: bool
) -> None:
    rng = random.Random(seed)
    streams = random_streams(rng, layers, max_items, idle, close=True)
    items = deliveries(streams)
    expected = sorted_keys(items)
    outcomes: list[list[tuple[MergeKey, object]]] = []
    for _ in range(2):  # two schedules of the same streams (rule 5)
        batches, bogus = interleave(rng, streams, chaos)
        restore_at = rng.randint(0, len(batches)) if restore else None
        result = run(Merger("T", layers), batches, expected=expected, restore_at=restore_at)
        assert [r.key for r in result.releases] == expected  # each item exactly once
        assert set(result.rejected) == bogus  # rule 4: every violation, nothing else
        assert result.merger is not None and result.merger.pending_count == 0
        outcomes.append([(r.key, r.payload) for r in result.releases])
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == [(i.key, i.payload) for i in sorted(items, key=lambda i: i.key)]


@examples(1.0)
@given_streams
def test_rule5_unclosed_streams_release_the_same_prefix_whatever_the_schedule(
    seed: int, layers: int, max_items: int, chaos: Chaos
) -> None:
    """Without closing watermarks some items stay buffered; the same ones every time."""
    rng = random.Random(seed)
    streams = random_streams(rng, layers, max_items, 0.3, close=False)
    expected = sorted_keys(deliveries(streams))
    first = run(Merger("T", layers), interleave(rng, streams, chaos)[0], expected=expected)
    second = run(Merger("T", layers), interleave(rng, streams, chaos)[0], expected=expected)
    assert first.releases == second.releases
    assert first.merger is not None and second.merger is not None
    assert first.merger.snapshot()["buffers"] == second.merger.snapshot()["buffers"]
    assert first.merger.blocked_by() == second.merger.blocked_by()


@examples(1.0)
@given_streams
def test_rule6_resume_after_any_release_then_replay_from_the_start(
    seed: int, layers: int, max_items: int, chaos: Chaos
) -> None:
    rng = random.Random(seed)
    streams = random_streams(rng, layers, max_items, 0.3, close=True)
    expected = sorted_keys(deliveries(streams))
    cut = rng.randint(0, len(expected))
    # The run before the crash wrote expected[:cut]; the replay starts from the beginning.
    merger = Merger("T", layers)
    if cut:
        merger.resume_after(expected[cut - 1])
    result = run(merger, interleave(rng, streams, chaos)[0], expected=expected[cut:])
    assert [r.key for r in result.releases] == expected[cut:]


@examples(1.0)
@given_streams
def test_rule1_two_topics_order_their_common_messages_alike(
    seed: int, layers: int, max_items: int, chaos: Chaos
) -> None:
    """Each topic's merger sees its own subset of every layer; shared ids share keys."""
    rng = random.Random(seed)
    streams = random_streams(rng, layers, max_items, 0.3, close=True)
    destinations = {
        i.messageID: rng.choice([{"A"}, {"B"}, {"A", "B"}, {"A", "B"}]) for i in deliveries(streams)
    }
    orders: dict[str, list[str]] = {}
    for topic in ("A", "B"):
        # A layer's watermark is at most its next item's ts, so also its next item here.
        mine = [
            [e for e in s if isinstance(e, LayerWatermark) or topic in destinations[e.messageID]]
            for s in streams
        ]
        expected = sorted_keys(deliveries(mine))
        result = run(Merger(topic, layers), interleave(rng, mine, chaos)[0], expected=expected)
        assert [r.key for r in result.releases] == expected
        orders[topic] = [r.messageID for r in result.releases]
    common = {mid for mid, dest in destinations.items() if dest == {"A", "B"}}
    assert [m for m in orders["A"] if m in common] == [m for m in orders["B"] if m in common]
    assert {m for m in orders["A"] if m in common} == common


# ---------------------------------------------------------------------------- liveness


class LayerModel:
    """One layer's engine, as far as the merger sees it: it honours tick requests.

    Its items are drawn as gaps: the next item's ts is ``max(last, floor) + gap``, where
    ``floor`` is raised past every tick honoured and every watermark sent, so each
    promise holds. Ids increase within the layer, so a gap of 0 is a legal tie.
    """

    def __init__(self, layer: int, rng: random.Random, n_items: int, wake: int) -> None:
        self.layer = layer
        self.gaps = [rng.choice(GAPS) for _ in range(n_items)]
        self.wake = wake
        self.sent = 0
        self.last = 0
        self.floor = 0
        self.items: list[LayerDelivery] = []

    @property
    def exhausted(self) -> bool:
        return self.sent == len(self.gaps)

    @property
    def promise(self) -> int:
        return max(self.last, self.floor)

    def next_item(self) -> LayerDelivery:
        ts = self.promise + self.gaps[self.sent]
        item = d(self.layer, ts, f"{self.layer}.{self.sent:04d}")
        self.sent += 1
        self.last = ts
        self.items.append(item)
        return item

    def watermark(self, ts: int) -> LayerWatermark:
        self.floor = max(self.floor, ts)
        return w(self.layer, self.promise)

    def tick(self, ts: int) -> LayerWatermark:
        """The engine moved its clock to ``ts``: everything it decides from now is later."""
        return self.watermark(ts + 1)


@examples(2.0)
@given(
    seed=st.integers(0, 2**32 - 1),
    layers=st.integers(1, 6),
    max_items=st.integers(0, 25),
    max_batch=st.integers(1, 6),
    max_delay=st.integers(0, 6),
    sleepy=st.sampled_from([0.0, 0.4, 0.8]),
    chatty=st.sampled_from([0.0, 0.1, 0.4]),
)
def test_rule3_with_ticks_honoured_no_item_waits_forever(
    seed: int,
    layers: int,
    max_items: int,
    max_batch: int,
    max_delay: int,
    sleepy: float,
    chatty: float,
) -> None:
    """Layers send no closing watermark: only the ticks the merger asks for unblock it.

    Sleepy layers send nothing for a long stretch of steps; a tick is honoured after a
    random delay (the layer's log is busy). The loop is bounded: it fails if the merger
    would still hold an item with nothing left that could move it.
    """
    rng = random.Random(seed)
    models = [
        LayerModel(
            i,
            rng,
            rng.randint(0, max_items),
            rng.randint(0, 4 * max_items) if rng.random() < sleepy else 0,
        )
        for i in range(layers)
    ]
    merger = Merger("T", layers)
    total = sum(len(m.gaps) for m in models)
    bound = 10 + max(m.wake for m in models) + total * (max_delay + 3)
    due: list[tuple[int, TickRequest]] = []
    fed: list[LayerRecord] = []
    out: list[Release] = []
    ticked: dict[int, int] = {}
    for step in range(bound):
        batch: list[LayerRecord] = []
        for when, req in [x for x in due if x[0] <= step]:
            due.remove((when, req))
            batch.append(models[req.layer].tick(req.timeStamp))
        for _ in range(rng.randint(1, max_batch)):
            ready = [m for m in models if not m.exhausted and m.wake <= step]
            if ready:
                model = rng.choice(ready)
                if rng.random() < chatty:
                    batch.append(model.watermark(model.promise + rng.randint(0, 3)))
                batch.append(model.next_item())
            if fed and rng.random() < 0.1:
                batch.append(rng.choice(fed))  # a duplicate
        fed.extend(batch)
        result = merger.handle_batch(batch)
        assert merger.rejected == ()
        out.extend(o for o in result if isinstance(o, Release))
        for req in (o for o in result if isinstance(o, TickRequest)):
            assert req.timeStamp > ticked.get(req.layer, -1)  # rule 3: never asked twice
            ticked[req.layer] = req.timeStamp
            due.append((step + rng.randint(0, max_delay), req))
        if all(m.exhausted for m in models) and not due:
            # Nothing left to send and no tick on its way: the merger must be empty.
            assert merger.pending_count == 0, (merger.head, merger.blocked_by(), ticked)
            break
    else:
        pytest.fail(f"not finished after {bound} steps: head {merger.head}")
    expected = sorted_keys(i for m in models for i in m.items)
    assert [r.key for r in out] == expected  # each once, in order (rules 1 and 2)
