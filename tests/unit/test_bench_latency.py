"""The bench's latency statistics: p50/p99/p99.9 by nearest rank, and the split of a
run's latencies into hop classes (no Kafka here)."""

from __future__ import annotations

import math

from atomickafka.evaluation.bench.command import BARE_1, BARE_3, HOP_CLASSES, hop_classes
from atomickafka.evaluation.load.measuring import LatencyStats, latency_stats, percentile


def test_latency_stats_of_one_to_a_thousand() -> None:
    values = [float(v) for v in range(1000, 0, -1)]  # any order
    stats = latency_stats(values)
    # nearest rank over 1,000 values: index round(q * 999)
    assert stats == LatencyStats(1000, 501.0, 990.0, 999.0, 1000.0)


def test_p999_separates_the_last_thousandth_only_with_enough_values() -> None:
    ten_thousand = [1.0] * 9989 + [50.0] * 10 + [900.0]
    stats = latency_stats(ten_thousand)
    assert stats is not None
    assert (stats.p50_ms, stats.p99_ms, stats.p999_ms, stats.max_ms) == (1.0, 1.0, 50.0, 900.0)
    few = latency_stats([3.0, 1.0, 2.0])
    assert few is not None and few.p999_ms == few.max_ms == 3.0


def test_latency_stats_rounds_and_is_none_when_empty() -> None:
    assert latency_stats([]) is None
    stats = latency_stats([1.23456], digits=1)
    assert stats is not None and stats.p50_ms == 1.2 and stats.count == 1
    assert stats.to_dict() == {
        "count": 1,
        "p50Ms": 1.2,
        "p99Ms": 1.2,
        "p999Ms": 1.2,
        "maxMs": 1.2,
    }
    assert math.isnan(percentile([], 0.999))


def test_hop_classes_split_single_and_multicast() -> None:
    latencies = [(float(i), i % 2 == 0) for i in range(1, 2001)]  # even ones multicast
    classes = hop_classes("atomickafka", latencies)
    assert list(classes) == list(HOP_CLASSES[2:])
    single = classes["AtomicKafka single-destination"]
    multicast = classes["AtomicKafka multicast"]
    assert single.count == multicast.count == 1000
    assert single.max_ms == 1999.0 and multicast.max_ms == 2000.0
    assert multicast.p50_ms == latency_stats(range(2, 2001, 2)).p50_ms  # type: ignore[union-attr]


def test_hop_classes_of_a_bare_pipe_and_of_the_sequencer() -> None:
    latencies = [(2.0, False), (4.0, False), (9.0, True)]
    assert list(hop_classes("kafka", latencies, BARE_3)) == [BARE_3]
    assert hop_classes("kafka", latencies, BARE_1)[BARE_1].count == 3
    seq = hop_classes("seq-eos", [(1.0, False)])
    assert list(seq) == ["seq-eos single-destination"]  # no multicast: left out
