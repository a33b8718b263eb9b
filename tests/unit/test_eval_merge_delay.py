"""The merge-delay benchmark in the simulator (atomickafka/evaluation/bench/merge_delay.py):
every release is measured, and every measured run is itself correct."""

from __future__ import annotations

from atomickafka.evaluation.bench.merge_delay import (
    DELAY_SCENARIOS,
    delay_profile,
    measure_merge_delay,
)
from tests.unit.test_layered import assert_merged_correct
from tests.unit.test_properties import topic_names


def test_merge_delay_is_measured_for_every_release() -> None:
    """The measurement used in reports; this test asserts correctness only."""
    measured = measure_merge_delay(range(2), topics=topic_names(3), layers=3, messages=25)
    assert set(measured) == set(DELAY_SCENARIOS)
    for name, (profile, results) in measured.items():
        for result in results:
            assert_merged_correct(result)
            assert len(result.delays) == sum(len(m) for m in result.merged.values())
            for d in result.delays:
                assert d.written <= d.arrived <= d.released, (name, d)
        assert profile.releases == sum(len(r.delays) for r in results)
        assert 0 <= profile.median <= profile.p90 <= profile.p99 <= profile.max
        assert profile.ticks == sum(sum(r.ticks.values()) for r in results)
    silent = measured["silent layer"][1]
    assert all(r.events["send"] for r in silent)
    assert all(not any(r.layer_results[0].deliveries.values()) for r in silent)
    assert delay_profile([]).releases == 0


def test_merge_delay_with_one_layer_is_zero() -> None:
    """One layer: the merger releases what it reads (and no layer can be silent)."""
    measured = measure_merge_delay(range(2), topics=topic_names(3), layers=1, messages=15)
    assert set(measured) == set(DELAY_SCENARIOS) - {"silent layer"}
    for profile, results in measured.values():
        assert profile.max == 0 and profile.ticks == 0
        for result in results:
            assert_merged_correct(result)
