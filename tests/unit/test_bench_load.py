"""What a bench scenario sends: multicast share, fan-out drawn with its seed (no Kafka)."""

from __future__ import annotations

from atomickafka.cli.options import parse_fanout
from atomickafka.evaluation.bench.command import BenchLoad

TOPICS = [f"t{i}" for i in range(1, 16)]


def test_every_multicast_goes_everywhere_without_a_fanout() -> None:
    plan = BenchLoad(100, 0.1).plan("c", TOPICS)
    assert [mid for mid, _ in plan[:2]] == ["c-0", "c-1"]
    multicasts = [d for _, d in plan if len(d) > 1]
    assert len(multicasts) == 10 and all(d == tuple(TOPICS) for d in multicasts)
    singles = [d for _, d in plan if len(d) == 1]
    assert {d[0] for d in singles} == set(TOPICS)  # round-robin over the topics


def test_a_fanout_draws_each_multicasts_destinations_with_the_seed() -> None:
    load = BenchLoad(1000, 0.5, fanout=parse_fanout("2-5"), seed=3)
    plan = load.plan("c", TOPICS)
    multicasts = [d for _, d in plan if len(d) > 1]
    assert len(multicasts) == 500
    assert {len(d) for d in multicasts} == {2, 3, 4, 5}
    assert all(list(d) == sorted(set(d)) for d in multicasts)
    assert load.plan("c", TOPICS) == plan
    assert BenchLoad(1000, 0.5, fanout=(2, 5), seed=4).plan("c", TOPICS) != plan
    assert parse_fanout("3") == (3, 3)
