"""``send_batch`` end to end (issue 25 item 3): two clients send batches to overlapping
destination sets of partitioned topics (each message of a keyless batch in its own
layer), relayed ones and single sends among them; every message is delivered once at
each destination and the order checker passes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.client import AtomicKafkaClient
from tests.integration.harness import (
    Sent,
    assert_order_checked,
    collect_deliveries,
    in_threads,
    running_cluster,
)

pytestmark = pytest.mark.integration

ROUNDS = 4
BATCH = 25
LAYERS = 2


def test_batches_keep_one_total_order(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b, c = topic_factory(), topic_factory(), topic_factory()
    plan: list[tuple[list[str], str | None, str | None]] = [
        ([a, b], None, None),
        ([b, c], None, "k1"),  # one key: the whole batch in one layer
        ([a, b, c], None, None),
        ([a], c, None),  # relayed by c
    ]
    sent: list[list[Sent]] = [[], []]

    def run(index: int) -> None:
        with AtomicKafkaClient(kafka_bootstrap) as client:
            for r in range(ROUNDS):
                for n, (dests, via, key) in enumerate(plan):
                    values = [{"client": index, "r": r, "n": n, "i": i} for i in range(BATCH)]
                    ids = client.send_batch(values, dests, via=via, key=key)
                    sent[index] += [
                        Sent(m, tuple(sorted(dests)), v, via or "")
                        for m, v in zip(ids, values, strict=True)
                    ]
                single = {"client": index, "r": r, "single": True}
                mid = client.send(single, [a, c])
                sent[index].append(Sent(mid, tuple(sorted((a, c))), single, ""))

    with running_cluster(kafka_bootstrap, [a, b, c], partitions=LAYERS, log_dir=tmp_path):
        in_threads(2, run)
        everything = sent[0] + sent[1]
        expected = Counter(t for s in everything for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, [a, b, c], dict(expected), "split")
    assert len(everything) == 2 * ROUNDS * (len(plan) * BATCH + 1)
    assert {t: len(got) for t, got in deliveries.items()} == expected
    assert {d.layer for d in deliveries[a]} == set(range(LAYERS))  # keyless: spread
    assert_order_checked(everything, deliveries)
