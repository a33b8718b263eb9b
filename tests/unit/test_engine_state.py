"""The engine's state as one value (:class:`~atomickafka.core.engine_state.EngineState`)
and its snapshot format, held to a snapshot kept as test data.

``testdata/engine-snapshot-v3.json`` was written by the engine before its state became
one object (issue 27, item 5), from :func:`rich_log`'s input: a node of ``A`` (poc,
members ``A`` and ``B``) with a delivered message (settled memory), pending messages of
its own and of a peer, an Ack before its Notify (an orphan), a Notify held for its
timestamp (§4.11), a message waiting for members (§4.9.5), a refused version (a
conflict) and a raw message's key and headers. Snapshots of that version written by
nodes in the field must keep loading, and this one must load to the same state.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import orjson

import atomickafka.core.engine as engine_module
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.engine_state import SNAPSHOT_VERSION, EngineState
from atomickafka.core.wire import Message, MessageType, client_message
from tests.unit.records import ack, client, notify

KEPT = Path(__file__).parent / "testdata" / "engine-snapshot-v3.json"
#: The log time of the kept snapshot's input (ms since the epoch).
NOW = 1_700_000_000_000


def kept() -> dict[str, Any]:
    """The kept snapshot, as a node reads it back."""
    data: dict[str, Any] = orjson.loads(KEPT.read_bytes())
    return data


def written_today() -> dict[str, Any]:
    """The kept snapshot as today's engine writes it from the same input: the same but
    for when ``m0`` settled. The kept one's engine delivered at the end of the batch
    (log time ``NOW + 8``), today's as each record is applied (``m0``'s own, ``NOW``:
    rule 8, what an engine does may not depend on where its batches end)."""
    data = kept()
    (settled,) = data["memory"]["settled"]
    assert settled[0] == "m0" and settled[4] == NOW + 8 + 60_000
    settled[4] = NOW + 60_000
    return data


def at(message: Message, log_time: int, origin: int) -> Message:
    """``message`` as read from the input log at ``log_time``, offset ``origin``."""
    return message._replace(logTime=log_time, origin=origin)


def rich_log() -> list[Message]:
    """The input the kept snapshot was written from (see the module's docstring)."""
    members = Message(
        "mem", MessageType.MEMBERS, ("A", "B"), None, senderID="node-A", protocol="poc"
    )
    raw = client_message("m7", ("A", "B"), "x", "c")._replace(key=b"k", headers=(("h", b"\1"),))
    return [
        at(members, NOW, 0),
        at(client("m0", "A")._replace(sentAt=NOW), NOW, 0),
        at(client("m1", "A", "B")._replace(sentAt=NOW), NOW + 1, 1),
        at(client("m2", "A")._replace(sentAt=NOW), NOW + 2, 2),
        at(notify("m3", "AB", "B", 5, alg="poc")._replace(seq=(7, 1), sentAt=NOW), NOW + 3, 3),
        at(ack("m4", "AB", "B", 6, alg="poc")._replace(seq=(7, 2)), NOW + 4, 4),
        at(
            notify("m5", "AB", "B", (NOW + 300_000) * 1000, alg="poc")._replace(
                seq=(7, 3), sentAt=NOW
            ),
            NOW + 5,
            5,
        ),
        at(client("m6", "A", "C")._replace(sentAt=NOW), NOW + 6, 6),
        at(notify("m1", "AB", "B", 9, alg="poc", value="other")._replace(seq=(7, 4)), NOW + 7, 7),
        at(raw, NOW + 8, 8),
    ]


def rich_engine() -> Engine:
    """A node of ``A`` that has read :func:`rich_log`."""
    engine = Engine("A", algorithm=Algorithm.POC, members=frozenset({"A", "B"}))
    engine.step(rich_log())
    return engine


def test_a_kept_snapshot_loads_to_the_same_state() -> None:
    data = kept()
    assert data["version"] == SNAPSHOT_VERSION
    restored = Engine.restore(data)
    assert restored.snapshot() == data  # nothing lost, nothing added, the same format
    assert restored.pending_count == 5 and restored.is_delivered("m0")


def test_todays_engine_writes_the_kept_snapshot() -> None:
    """The format is unchanged: the same input gives the same snapshot, field by field."""
    assert orjson.loads(orjson.dumps(rich_engine().snapshot())) == written_today()


def test_a_restored_engine_goes_on_as_one_that_never_stopped() -> None:
    straight = rich_engine()
    restored = Engine.restore(kept())
    later = [
        at(ack("m1", "AB", "B", 11, alg="poc")._replace(seq=(7, 5)), NOW + 9, 9),
        at(notify("m4", "AB", "B", 6, alg="poc")._replace(seq=(7, 6)), NOW + 10, 10),
        at(client("m8", "A")._replace(sentAt=NOW + 400_000), NOW + 400_000, 11),
    ]
    first, second = straight.step(later), restored.step(later)
    assert first == second
    assert [o.message.messageID for o in first.outputs if o.topic == "A"]  # deliveries
    assert restored.snapshot() == straight.snapshot()


def test_the_state_is_one_value_and_back() -> None:
    """:class:`EngineState` is what a snapshot holds: read from its data, written back
    to the same data; the engine built from it writes it again."""
    data = kept()
    state = EngineState.from_data(data)
    assert state.to_data() == data
    assert Engine.from_state(state).snapshot() == data
    assert rich_engine().state.to_data() == written_today()


#: What an engine keeps beside its state: what its settings imply, the delivery queue
#: (an index of ``state.pending``, rebuilt by ``from_state``) and one step's scratch.
BESIDE_THE_STATE = frozenset(
    {
        "algorithm",
        "_rules",
        "_protocol",
        "window",
        "_delivery_type",
        "_handlers",
        "_queue",
        "_check_due",
        "_aborts",
        "_members_changed",
        "origin_shift",  # how the node's batch layer numbers origins (§7, control logs)
        "lean_notifies",  # what the node's Notifies carry (§4.16): a setting, not state
    }
)


def test_the_engine_is_the_rules_over_its_state() -> None:
    """Every attribute the engine's code assigns is ``state`` or one of the few kept
    beside it; the rules read and write the rest through ``self.state``. (Read from the
    source, so it holds for the compiled form too.)"""
    source = (Path(engine_module.__file__ or "").parent / "engine.py").read_text()
    (engine_class,) = [
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "Engine"
    ]
    assigned: set[str] = set()
    for node in ast.walk(engine_class):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.value, ast.Name)
                    and item.value.id == "self"
                ):
                    assigned.add(item.attr)
    assert assigned - {"state"} <= BESIDE_THE_STATE, sorted(assigned - BESIDE_THE_STATE)
    assert "state" in assigned
