"""What a bench scenario sends: multicast share, fan-out drawn with its seed; how the bare
pipe reaches Kafka (no Kafka)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from atomickafka.cli.options import parse_fanout
from atomickafka.evaluation.bench import command as bench
from atomickafka.evaluation.bench.command import BenchLoad
from atomickafka.kafka.connection import Connection

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


def test_the_bare_pipe_reaches_kafka_through_the_benchs_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its topics are created, relayed and measured with the ``-X`` settings (a SASL
    cluster refused the bare pipe's admin client and measuring consumer when they took
    the bootstrap string alone)."""
    where = Connection("b:1", {"security.protocol": "SASL_PLAINTEXT"})
    seen: dict[str, Any] = {}

    def admin(reached: Any) -> str:
        seen["admin"] = reached
        return "admin"

    @contextlib.contextmanager
    def relays(reached: Any, topics: list[str]) -> Iterator[list[int]]:
        seen["relays"] = reached
        yield []

    def measured(reached: Any, how: Any, *_: Any) -> str:
        seen["measured"] = reached
        return "result"

    monkeypatch.setattr(bench, "admin_client", admin)
    monkeypatch.setattr(bench, "ensure_topics", lambda client, topics: None)
    monkeypatch.setattr(bench, "running_relays", relays)
    monkeypatch.setattr(bench, "_run_measured", measured)
    result: object = bench._bare_kafka(where, 10, 100, 5.0, hops=3)
    assert result == "result"
    assert seen == {"admin": where, "relays": where, "measured": where}
