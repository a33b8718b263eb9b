"""An idle node is not behind (docs/DESIGN.md §5.3): after its traffic is delivered, every
node's status says nothing is left to apply, so a client's next send is not held back.

In the shared layout the input log is the topic ``T`` itself, where the node's own
exactly-once transactions write their deliveries: the commit marker ending the last
one is no record, and a node with a control log counted it as one offset left to
apply. Its status turned that into waiting that grew for as long as it idled, and the
eval's shared run failed in CI with ``QueueFullError`` on a client's first send
(``the node of T is 30.4 s behind its input``). Both layouts, under exactly-once
(the default), each checked by the order checker.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.client import AtomicKafkaClient
from atomickafka.kafka.status import Role, Status, read_statuses
from tests.integration.harness import (
    Sent,
    assert_order_checked,
    collect_deliveries,
    running_cluster,
)

pytestmark = pytest.mark.integration

ROUNDS = 2
PER_ROUND = 30
#: How long the nodes idle before their statuses are read: a node that counted a commit
#: marker as unapplied would say it has waited at least this long.
IDLE_S = 4.0


@pytest.mark.parametrize("layout", ["split", "shared"])
def test_an_idle_node_says_it_is_not_behind_and_clients_are_not_held(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path, layout: str
) -> None:
    topics = [topic_factory() for _ in range(3)]
    sent: list[Sent] = []
    with running_cluster(
        kafka_bootstrap, topics, layout=layout, log_dir=tmp_path, exactly_once=True
    ):
        for round_ in range(ROUNDS):
            # at most 5 s held back: an idle node that says it is behind fails the send
            with AtomicKafkaClient(kafka_bootstrap, layout=layout, max_block_s=5.0) as client:
                for i in range(PER_ROUND):
                    dests = (topics[i % 3], topics[(i + 1) % 3])
                    value = f"r{round_}-{i}"
                    sent.append(Sent(client.send(value, dests), dests, value, ""))
                held_back_s = client.held_back_s
            assert held_back_s < 5.0, held_back_s
            settled_at = _settled(kafka_bootstrap, topics, 2 * PER_ROUND * (round_ + 1))
            time.sleep(max(0.0, settled_at + IDLE_S - time.monotonic()))
            for status in _nodes(kafka_bootstrap, topics):
                assert status.control_log
                assert status.input_lag == 0, (round_, status.topic, status.input_lag)
                assert status.behind_s < IDLE_S, (round_, status.topic, status.behind_s)
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), layout)
    assert_order_checked(sent, deliveries)


def _nodes(bootstrap: str, topics: list[str]) -> list[Status]:
    """The statuses of the nodes of ``topics``."""
    statuses = read_statuses(bootstrap).values()
    return [s for s in statuses if s.topic in topics and s.role is Role.NODE]


def _settled(bootstrap: str, topics: list[str], deliveries: int, timeout_s: float = 90) -> float:
    """When (monotonic) the nodes of ``topics`` had made ``deliveries`` between them and
    held nothing pending (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = _nodes(bootstrap, topics)
        made = sum(s.deliveries for s in nodes)
        if len(nodes) == len(topics) and made >= deliveries and all(not s.pending for s in nodes):
            return time.monotonic()
        time.sleep(0.25)
    raise AssertionError(f"not settled within {timeout_s:g} s: {_nodes(bootstrap, topics)}")
