"""Host processes' configuration (``cluster --topics-per-process``, docs/DESIGN.md
§6.7): how the nodes are grouped, what is refused, and what the supervisor starts."""

from __future__ import annotations

import pytest

from atomickafka.errors import ConfigError
from atomickafka.node.config import ClusterConfig, HostConfig, NodeConfig
from atomickafka.node.supervisor import Supervisor
from atomickafka.node.writers import transactional_id

NODE = NodeConfig("127.0.0.1:9092", "A")


def test_topics_are_grouped_in_their_order_and_the_last_group_takes_the_rest() -> None:
    cluster = ClusterConfig(("A", "B", "C", "D", "E"), NODE, topics_per_process=2)
    hosts = cluster.host_configs()
    assert [h.key for h in hosts] == ["A+B", "C+D", "E"]
    assert [n.topic for n in hosts[0].nodes] == ["A", "B"]
    assert all(n.metrics_port is None for h in hosts for n in h.nodes)


def test_one_topic_per_process_is_a_process_per_node() -> None:
    assert ClusterConfig(("A", "B"), NODE).host_configs() == []


def test_a_host_config_travels_to_its_process_whole() -> None:
    (host,) = ClusterConfig(("A", "B"), NODE, topics_per_process=4).host_configs()
    assert HostConfig.from_dict(host.to_dict()) == host
    cluster = ClusterConfig(("A", "B"), NODE, topics_per_process=2, standby=True)
    assert ClusterConfig.from_dict(cluster.to_dict()) == cluster


def test_the_group_names_its_lease_and_transactional_id_apart_from_its_nodes() -> None:
    """The group's transactional id is none of its nodes' (a host fences each node's
    own id once when it opens, so a node that ran alone before is fenced too)."""
    (host,) = ClusterConfig(("A", "B"), NODE, topics_per_process=2).host_configs()
    assert transactional_id(host.key) not in {transactional_id(n.key) for n in host.nodes}


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"exactly_once": False}, "exactly-once"),
        ({"partitions": 2}, "partitioned"),
    ],
)
def test_hosting_is_refused_where_one_transaction_cannot_hold_the_nodes(
    settings: dict[str, object], why: str
) -> None:
    node = NodeConfig("127.0.0.1:9092", "A", **settings)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=why):
        ClusterConfig(("A", "B"), node, topics_per_process=2)
    with pytest.raises(ConfigError, match="at least 1"):
        ClusterConfig(("A", "B"), NODE, topics_per_process=0)


def test_the_supervisor_starts_a_process_per_group_and_a_standby_for_each() -> None:
    cluster = ClusterConfig(("A", "B", "C"), NODE, topics_per_process=2, standby=True)
    children = Supervisor(cluster).children
    assert [(c.role, c.name) for c in children] == [
        ("host", "A+B"),
        ("host", "A+B"),
        ("host", "C"),
        ("host", "C"),
    ]
