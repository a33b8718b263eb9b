"""Issue 25, the mixed-version test on the real broker (docs/DESIGN.md §3.9): nodes
writing the JSON control form (as releases before the compact form do, or upgraded
nodes run with ``--control-format json`` during a rolling upgrade) and a node writing
the compact binary form order the same traffic together, checked by the order checker.
Each input log then holds control records of both forms, and no node set any aside.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.core.compact import is_compact
from atomickafka.core.reader import peek
from atomickafka.kafka.consumer import read_to_end
from atomickafka.kafka.status import wait_for_nodes
from atomickafka.kafka.topics import dead_letter_topic
from tests.integration.harness import (
    Workload,
    assert_order_checked,
    collect_deliveries,
    node_log_records,
    running_cluster,
    send_concurrently,
)

pytestmark = pytest.mark.integration


def control_forms(bootstrap: str, topic: str) -> Counter[str]:
    """The bundles in ``topic``'s input and control logs, by form and sending topic."""
    seen: Counter[str] = Counter()
    for record in node_log_records(bootstrap, topic):
        looked = peek(record)
        if looked.is_bundle:
            form = "binary" if is_compact(record.value()) else "json"
            seen[f"{form} from {looked.sent_from}"] += 1
    return seen


def test_json_and_binary_nodes_order_the_same_traffic(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Two nodes writing JSON control records (one ``cluster``), one writing binary
    (another): every multicast among them is ordered alike everywhere."""
    old, older, new = (topic_factory() for _ in range(3))
    topics = [old, older, new]
    with (
        running_cluster(
            kafka_bootstrap, [old, older], log_dir=tmp_path, name="json", control_format="json"
        ),
        running_cluster(kafka_bootstrap, [new], log_dir=tmp_path, name="binary"),
    ):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        workload = Workload(topics, messages=60, clients=2, single_share=0.2, multicast_min=2)
        sent = send_concurrently(kafka_bootstrap, workload, "split")
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        assert_order_checked(sent, deliveries)
        from_new = control_forms(kafka_bootstrap, old)
        from_old = control_forms(kafka_bootstrap, new)
    assert from_new[f"binary from {new}"] and from_new[f"json from {older}"], from_new
    assert from_old[f"json from {old}"] and from_old[f"json from {older}"], from_old
    assert not any(from_old[k] for k in from_old if k.startswith("binary")), from_old
    for topic in topics:
        assert read_to_end(kafka_bootstrap, dead_letter_topic(topic), [0], timeout_s=20) == []
