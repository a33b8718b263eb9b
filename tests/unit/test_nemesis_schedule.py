"""The nemesis's schedule (issue 39): reproducible from its seed, every fault kind in a
short run, one fault at a time within the run; and the fault proxy's request framing,
by which it holds a transaction's commit."""

from __future__ import annotations

import json
import struct

from hypothesis import given
from hypothesis import strategies as st

from atomickafka.evaluation.nemesis.checks import check_fences, check_takeovers
from atomickafka.evaluation.nemesis.faults import Applied
from atomickafka.evaluation.nemesis.observe import Active, Takeover
from atomickafka.evaluation.nemesis.schedule import (
    Fault,
    FaultKind,
    ScheduleSettings,
    draw_schedule,
    schedule_seconds,
)
from atomickafka.netlab.proxy import LinkFaults, _Frames
from atomickafka.node.role_shell import LEASE_AT_ONCE, LEASE_TAKEN_OVER

TOPICS = ("a", "b", "c")


@given(st.integers(0, 10_000), st.floats(10, 3_000))
def test_a_schedule_is_a_function_of_its_seed_and_fits_its_run(seed: int, seconds: float) -> None:
    settings = ScheduleSettings(seconds, TOPICS)
    schedule = draw_schedule(settings, seed)
    assert schedule == draw_schedule(settings, seed)
    ends = [settings.lead_s - settings.gap_s] + [f.end_s for f in schedule]
    for fault, previous_end in zip(schedule, ends, strict=False):
        assert fault.start_s >= previous_end + settings.gap_s - 0.11  # one at a time
        assert fault.end_s <= seconds
        if fault.kind in (FaultKind.NODE_HOST_CUT, FaultKind.NODE_PAUSED):
            assert fault.duration_s > settings.lease_s  # long enough for a takeover


@given(st.integers(0, 10_000))
def test_the_shortest_run_sees_every_kind_once(seed: int) -> None:
    base = ScheduleSettings(1, TOPICS)
    schedule = draw_schedule(ScheduleSettings(schedule_seconds(base, seed), TOPICS), seed)
    assert sorted(f.kind for f in schedule) == sorted(FaultKind)


def test_another_seed_draws_another_schedule() -> None:
    settings = ScheduleSettings(600, TOPICS)
    assert draw_schedule(settings, 1) != draw_schedule(settings, 2)


def _request(api_key: int, body: bytes = b"xyz") -> bytes:
    payload = struct.pack(">hhi", api_key, 3, 7) + body
    return struct.pack(">i", len(payload)) + payload


def test_the_proxy_cuts_a_stream_into_requests_however_it_arrives() -> None:
    stream = _request(0, b"p" * 100) + _request(26) + _request(25, b"")
    for cut in (1, 3, 7, 50, len(stream)):
        frames, got = _Frames(), []
        for i in range(0, len(stream), cut):
            got += frames.feed(stream[i : i + cut])
        assert [k for k, _ in got] == [0, 26, 25]
        assert b"".join(f for _, f in got) == stream


def test_a_loss_stalls_for_a_retransmission_timeout() -> None:
    import random  # noqa: PLC0415

    rng = random.Random(1)
    assert LinkFaults(delay_ms=50).lag_s(rng) == 0.05
    lags = [LinkFaults(loss=1.0).lag_s(rng) for _ in range(100)]
    assert all(0.2 <= lag <= 1.0 for lag in lags)


def test_a_pause_owes_a_fence_unless_the_instance_got_its_lease_back() -> None:
    """CI, 2026-11-29: a 6.8 s pause; the standby took the lease but had not opened when
    the paused instance came back, which found its lease back and went on -- nothing was
    fenced, and the check must not ask for a fenced stop there."""
    pause = Fault(FaultKind.NODE_PAUSED, 35.6, 6.8, {"topic": "nema"})
    applied = [Applied(pause, "n2", 1000.0, detail={"topic": "nema", "pid": 7})]
    kept = '{"ts":1010.5,"level":"info","msg":"node nema: the lease is back; going on"}\n'
    assert check_fences(applied, {"n2": kept}, {}).ok
    earlier = kept.replace("1010.5", "990.0")  # before this pause: no proof for it
    missed = check_fences(applied, {"n2": earlier}, {})
    assert not missed.ok and "n2: 0 fenced stops logged" in missed.detail
    fenced = '{"ts":1011,"msg":"node nema stops: fenced while committing: ..."}\n'
    metric = 'atomickafka_node_fenced_total{topic="nema"} 1.0\n'
    assert check_fences(applied, {"n2": fenced}, {"n2": metric}).ok


def _taking(ts: float, topic: str, text: str) -> str:
    return json.dumps({"ts": ts, "level": "info", "node": topic, "msg": f"node {topic}: {text}"})


def test_a_takeover_is_timed_by_the_taking_of_its_own_cut() -> None:
    """The 20-minute nemesis run (seed 7): an instance restarted on the other host took
    the lease as it started and logged no "taking over" line, so the check timed the
    takeover by a later fault's line, 51-159 s after the cut. A taking at once counts
    too, and only one up to the cut's heal plus the bound belongs to that cut."""
    cut = Fault(FaultKind.NODE_HOST_CUT, 10.0, 8.0, {})
    applied = [Applied(cut, "n1", 1000.0, 1008.0, detail={"active": ["nema"]})]
    moved = [Takeover("nema", 1005.0, Active(1, "n1", 900.0), Active(2, "n2", 1005.0))]
    metrics = {"n2": 'atomickafka_node_takeovers_total{topic="nema"} 1.0\n'}
    later = _taking(1300.0, "nema", LEASE_TAKEN_OVER)
    at_once = _taking(1004.0, "nema", LEASE_AT_ONCE)
    timed = check_takeovers(applied, moved, {"n2": f"{at_once}\n{later}\n"}, metrics, 3.0, 3.0)
    assert timed.ok and timed.figures["lease_taken_s"] == [4.0], timed.detail
    missing = check_takeovers(applied, moved, {"n2": later + "\n"}, metrics, 3.0, 3.0)
    assert not missing.ok and "no instance on another host took over" in missing.detail
    # the second 20-minute run: the lease, lost on n1 to an earlier fault, went to n2
    # 0.3 s before n1 was cut (n1's last status still said active): taken at 0 s
    before = _taking(999.7, "nema", LEASE_TAKEN_OVER)
    early = check_takeovers(applied, moved, {"n2": before + "\n"}, metrics, 3.0, 3.0)
    assert early.ok and early.figures["lease_taken_s"] == [0.0], early.detail
    # ... but not when the cut host took the role back after that
    back = _taking(999.8, "nema", LEASE_AT_ONCE)
    moved_back = check_takeovers(
        applied, moved, {"n2": before + "\n", "n1": back + "\n"}, metrics, 3.0, 3.0
    )
    assert not moved_back.ok
