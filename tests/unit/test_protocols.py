"""The protocols as data (core/protocols.py, docs/DESIGN.md §4): the engine reads one
table per protocol and branches on no protocol name, and one routing rule says where a
client's record goes, for the client, the engine's relay and the simulators alike."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import atomickafka.core.engine as engine_module
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.protocols import PROTOCOLS, Reply, route, routed_by_id
from atomickafka.core.wire import MessageType, client_message

TOPICS = ["A", "B", "C", "D"]


def test_every_protocol_has_a_table_and_the_tables_differ() -> None:
    assert set(PROTOCOLS) == set(Algorithm)
    rows = {(r.client_writes_every_destination, r.reply_to_notify, r.coordinator_decides)
            for r in PROTOCOLS.values()}  # fmt: skip
    assert len(rows) == len(Algorithm)
    assert all(rules.algorithm is algorithm for algorithm, rules in PROTOCOLS.items())
    direct = PROTOCOLS[Algorithm.DIRECT]
    assert direct.notifies_are_proposals and not direct.entry_coordinates
    assert PROTOCOLS[Algorithm.OPTIMIZED].reply_to_notify is Reply.ACK_THE_SENDER


def test_the_engine_branches_on_no_protocol_name() -> None:
    """Every difference between the protocols is read from the table: the engine's
    code names no member of Algorithm (a new branch would bypass the table)."""
    source = Path(inspect.getfile(engine_module)).parent / "engine.py"  # beside a compiled one
    tree = ast.parse(source.read_text())
    named = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Algorithm"
    ]
    assert named == []


@given(
    destinations=st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True),
    via=st.none() | st.sampled_from([*TOPICS, "R"]),
    algorithm=st.sampled_from(list(Algorithm)),
    message_id=st.text(min_size=1, max_size=12),
)
def test_the_route_follows_the_table(
    destinations: list[str], via: str | None, algorithm: Algorithm, message_id: str
) -> None:
    targets, by_id = route(destinations, via, algorithm)
    every = PROTOCOLS[algorithm].client_writes_every_destination
    if via is not None and not (every and via in destinations):
        assert (targets, by_id) == ((via,), False)  # via: that topic's log only
    elif every:
        assert (targets, by_id) == (tuple(destinations), False)
    else:
        assert targets == tuple(destinations) and by_id
        assert routed_by_id(targets, message_id) in destinations
        assert routed_by_id(targets, message_id) == routed_by_id(targets, message_id)


@pytest.mark.parametrize("algorithm", list(Algorithm))
def test_a_relay_forwards_where_a_client_would_have_written(algorithm: Algorithm) -> None:
    """Rule 7: a relay's copies go where the routing rule sends a client's record."""
    relay = Engine("R", algorithm=algorithm)
    for n in range(20):
        mid = f"m-{n}"
        record = client_message(mid, ["A", "B", "C"], n, "c1")
        out = relay.step([record]).outputs
        targets, by_id = route(["A", "B", "C"], None, algorithm)
        expected = [routed_by_id(targets, mid)] if by_id else list(targets)
        assert [o.topic for o in out] == expected
        assert all(o.message.messageType is MessageType.CLIENT for o in out)
