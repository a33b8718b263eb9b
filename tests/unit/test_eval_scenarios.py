"""The evaluation's scenarios, client plans and compared variants (no Kafka)."""

from __future__ import annotations

import orjson
import pytest

from atomickafka.core.engine import Algorithm
from atomickafka.evaluation.load.baselines import Baseline
from atomickafka.evaluation.load.clients import payload
from atomickafka.evaluation.load.measuring import Probe, read_probe
from atomickafka.evaluation.load.scenarios import (
    THESIS_SCENARIOS,
    home_topics,
    parse_scenarios,
    plan_clients,
    scenario,
)
from atomickafka.evaluation.load.variants import (
    Comparison,
    System,
    Variant,
    parse_comparisons,
    variants_for,
)
from atomickafka.kafka.topics import Layout

TOPICS = ("t1", "t2", "t3", "t4", "t5")


def test_the_thesis_scenarios_multicast_0_to_50_percent() -> None:
    assert [scenario(n).multicast_percent for n in THESIS_SCENARIOS] == [0, 10, 20, 30, 40, 50]
    assert scenario("75-25").share == 0.25


@pytest.mark.parametrize("bad", ["", "90-20", "ninety-ten", "100", "0-101", "baseline2"])
def test_a_name_that_is_no_mix_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="scenario"):
        scenario(bad)


def test_scenario_lists_keep_their_order_and_refuse_repeats() -> None:
    assert [s.name for s in parse_scenarios("50-50, baseline,90-10")] == [
        "50-50",
        "baseline",
        "90-10",
    ]
    with pytest.raises(ValueError, match="twice"):
        parse_scenarios("90-10,baseline,90-10")
    with pytest.raises(ValueError, match="no scenario"):
        parse_scenarios(" , ")


def test_the_thesis_clients_write_to_topics_1_and_3() -> None:
    assert home_topics(TOPICS, 2) == ["t1", "t3"]
    assert home_topics(TOPICS, 6) == ["t1", "t3", "t5", "t2", "t4", "t1"]


@pytest.mark.parametrize("name", [*THESIS_SCENARIOS, "67-33", "1-99"])
def test_a_plan_multicasts_the_scenario_share_to_every_topic(name: str) -> None:
    chosen = scenario(name)
    plans = plan_clients(chosen, TOPICS, 2, 1000)
    assert [p.client_id for p in plans] == ["client-1", "client-2"]
    for plan in plans:
        assert len(plan.destinations) == 1000
        assert plan.multicasts == 1000 * chosen.multicast_percent // 100
        for dests in plan.destinations:
            assert dests in (TOPICS, (plan.home_topic,))


def test_multicasts_are_spread_evenly_through_a_run() -> None:
    (plan, *_) = plan_clients(scenario("90-10"), TOPICS, 2, 100)
    positions = [i for i, d in enumerate(plan.destinations) if len(d) > 1]
    assert positions == list(range(9, 100, 10))


def test_a_plan_needs_topics_clients_and_messages() -> None:
    with pytest.raises(ValueError):
        plan_clients(scenario("baseline"), (), 2, 10)
    with pytest.raises(ValueError):
        plan_clients(scenario("baseline"), TOPICS, 0, 10)


def test_comparing_algorithms_runs_every_protocol_the_engine_has() -> None:
    primary = Variant.atomickafka("optimized", "split")
    algorithms = list(Algorithm)
    got = variants_for(primary, [Comparison.ALGORITHMS], algorithms)
    assert got[0] == primary
    assert {v.algorithm for v in got} == set(algorithms)
    assert {v.layout for v in got} == {"split"}
    assert len(got) == len(set(got))


def test_layouts_and_the_plain_sequencer_join_once_each() -> None:
    primary = Variant.atomickafka("poc", "shared")
    got = variants_for(
        primary,
        parse_comparisons("layouts,seq-alo,layouts"),
        [Algorithm.POC, Algorithm.OPTIMIZED],
    )
    assert [v.label for v in got] == ["poc/shared", "poc/split", "seq-alo"]
    assert got[-1].algorithm is None and got[1].layout is Layout.SPLIT
    assert got[-1].system is System.SEQ_ALO and got[-1].system.baseline is Baseline.SEQ_ALO
    assert got[-1].slug == "seq-alo" and got[0].slug == "poc-shared"


def test_the_baselines_are_the_exactly_once_sequencers_and_join_once() -> None:
    primary = Variant.atomickafka("direct", "split")
    got = variants_for(primary, parse_comparisons("baselines,streams,many-topics"))
    assert [v.label for v in got] == ["direct/split", "seq-eos", "streams"]
    assert all(v.system.baseline and v.system.baseline.exactly_once for v in got[1:])
    assert primary.system.baseline is None  # many-topics is a workload, not a variant


def test_the_bare_pipe_joins_after_the_sequencer() -> None:
    primary = Variant.atomickafka("direct", "split")
    got = variants_for(primary, parse_comparisons("kafka,seq-alo,kafka"))
    assert [v.label for v in got] == ["direct/split", "kafka", "seq-alo"]
    assert got[1] == Variant.bare_pipe() and got[1].system is System.KAFKA
    assert got[1].algorithm is None and got[1].system.baseline is None


def test_a_variant_is_named_by_the_engines_and_the_layouts_enums() -> None:
    variant = Variant.atomickafka("direct", "shared")
    assert (variant.algorithm, variant.layout) == (Algorithm.DIRECT, Layout.SHARED)
    assert variant.label == "direct/shared"
    with pytest.raises(ValueError):
        Variant.atomickafka("paxos", "split")


def test_an_unknown_comparison_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="algorithms, layouts, baselines, seq-alo"):
        parse_comparisons("protocols")
    with pytest.raises(ValueError, match="the plain sequencer is now seq-alo"):
        parse_comparisons("sequencer")  # its old name
    assert parse_comparisons("") == []


def test_a_fanout_multicasts_to_the_home_topic_and_others_drawn_with_the_seed() -> None:
    topics = [f"t{i}" for i in range(1, 21)]
    plans = plan_clients(scenario("50-50"), topics, 2, 400, fanout=(2, 5), seed=7)
    for plan in plans:
        multicasts = [d for d in plan.destinations if len(d) > 1]
        assert len(multicasts) == 200
        assert all(plan.home_topic in d and 2 <= len(d) <= 5 for d in multicasts)
        assert all(list(d) == sorted(set(d)) for d in multicasts)
        assert {len(d) for d in multicasts} == {2, 3, 4, 5}
        assert len({t for d in multicasts for t in d}) > 10  # spread over the topics
    again = plan_clients(scenario("50-50"), topics, 2, 400, fanout=(2, 5), seed=7)
    other = plan_clients(scenario("50-50"), topics, 2, 400, fanout=(2, 5), seed=8)
    assert again == plans and other != plans
    with pytest.raises(ValueError, match="fan-out"):
        plan_clients(scenario("50-50"), topics, 2, 10, fanout=(1, 3))


@pytest.mark.parametrize("size", [0, 1000, 10_000])
def test_a_measured_value_is_padded_to_the_record_size(size: int) -> None:
    value = payload(1, 7, True, 1_700_000_000_000_000, size)
    assert read_probe(orjson.dumps(value)) == Probe(1_700_000_000_000_000, True)
    if size:
        assert len(orjson.dumps(value)) == size
    else:
        assert "pad" not in value
