"""One stray record, or one operator mistake, never splits a delivery or holds a queue
head for good (docs/DESIGN.md §4.9, §6.6; issue 23).

Each test drives the production batch layer (``NodeBatch``) -- through the simulator,
which routes every output into the peers' logs as the shell does, or by hand with
records carrying offsets and log-append times -- and each failed before the fix it
names. The scripts count one log's records step by step, so they run on one log
(``control_logs=False``); on the default path the same strays are drawn into either log
by the hostile runs of test_control_logs.py and test_default_path_hazards.py.

1. a Notify or Ack naming another protocol, a format-1 record (which names none), or an
   Abort about a version a destination has proposed for, read there after another
   destination delivered it: the version was dropped there (delivered at one
   destination, never at the other);
2. under ``optimized``, a stray Abort read by the coordinator between two Acks (or an
   honest Abort from a destination whose view of the members lags): the coordinator
   dropped the message without telling the destination that had acked, which held it
   at its queue head for ever;
3. a ClientMessage naming a topic with no node, read before the node's first members
   record: it was taken on trust, proposed for, and held everything behind it;
4. a node restarted with another ``--algorithm``: it ran its snapshot's protocol while
   labelling its records with the new one.
"""

from __future__ import annotations

import pytest

from atomickafka.core.engine import MEMBERS_GRACE_MS, Algorithm, Engine
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import PlainRecord
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    Message,
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_members,
)
from atomickafka.node.batch import NodeBatch, NodeSpec, OutKind, SettingsChangedError
from atomickafka.node.snapshots import newest_snapshots
from atomickafka.verify.hostile import stray_in_flight
from atomickafka.verify.simulator import Send, SimulationResult, Simulator
from tests.unit.test_batch import spec as batch_spec

NOW_MS = 1_795_000_000_000
SECRET = b"stray-records-secret-0123456789ab"

#: (kind, protocol named, answers) of the strays of defect 1; ``None``: format 1.
STRAYS = {
    "notify-other-protocol": (MessageType.NOTIFY, "other", None),
    "ack-other-protocol": (MessageType.ACK, "other", None),
    "format-1-notify": (MessageType.NOTIFY, None, None),
    "abort": (MessageType.ABORT, "same", None),
    "abort-answering-a-guess": (MessageType.ABORT, "same", (7, 3)),
}


def client_record(sim: Simulator, topic: str, offset: int = 0) -> Message:
    """The ClientMessage at ``offset`` of ``topic``'s log, as its node decodes it."""
    record = sim.inputs[topic].records[offset]
    (message,) = decode_any(record.value(), record.key(), record.headers())
    return message


def other_protocol(ours: Algorithm) -> str:
    return next(a for a in Algorithm if a is not ours).value


def inject(
    sim: Simulator, topic: str, name: str, about: Message, sender: str, algorithm: Algorithm
) -> None:
    """Append the stray ``name`` about ``about``, from ``sender``'s node, to ``topic``'s
    log (unsigned, with a high ``seq``: a stray with a plausible one)."""
    kind, protocol, answers = STRAYS[name]
    named = {"other": other_protocol(algorithm), "same": algorithm.value, None: None}[protocol]
    value = stray_in_flight(
        kind, about, sender, 1, protocol=named, layer=None, seq=(10**6, 0), answers=answers
    )
    sim.append_input(topic, value, signed=False)


def assert_agreed(result: SimulationResult, delivered_at: set[str], mid: str = "m") -> None:
    """Quiescent, checked, nothing stuck; ``mid`` delivered exactly at ``delivered_at``."""
    assert result.quiescent and result.stuck() == {}, result.describe()
    report = result.check(all_or_none={mid})
    assert report.ok, report.summary()
    where = {t for t in result.topics if mid in result.delivered_ids(t)}
    assert where == delivered_at, (where, result.describe())


# ---------------------------------------------------------------------------- defect 1


@pytest.mark.parametrize("algorithm", [Algorithm.DIRECT, Algorithm.POC])
@pytest.mark.parametrize("stray", list(STRAYS))
def test_1_a_stray_about_a_proposed_version_never_splits_its_delivery(
    algorithm: Algorithm, stray: str
) -> None:
    """A proposes m; B proposes and delivers it with A's proposal; then a stray about m
    "from B" reaches A before B's own proposal does. A sets it aside (at most answering
    it, which B ignores: it answers nothing B wrote) and delivers m with B's proposal."""
    sim = Simulator(["A", "B"], algorithm=algorithm, members_known=True, control_logs=False)
    sim.send(Send("c", "m", ("A", "B"), "v", "A"))
    if algorithm is Algorithm.POC:
        sim.send(Send("c", "m", ("A", "B"), "v", "B"))  # both coordinate: each proposes
    about = client_record(sim, "A")
    assert sim.step_node("A", 1) == 1  # A proposes, its proposal goes to B
    inject(sim, "A", stray, about, "B", algorithm)  # ...read by A before B's
    sim.step_node("B", 10)  # B proposes and, with A's proposal, delivers m
    assert sim.result().delivered_ids("B") == ["m"]
    assert_agreed(sim.drain(), {"A", "B"})


@pytest.mark.parametrize("stray", ["abort", "abort-answering-a-guess"])
def test_1_a_stray_abort_at_a_non_coordinator_never_splits_an_optimized_delivery(
    stray: str,
) -> None:
    """optimized: B acked A's Notify; a stray Abort "from C" reaches B while A collects
    the Acks and decides. B goes on and delivers m when A's Decided comes."""
    sim = Simulator(["A", "B", "C"], algorithm="optimized", members_known=True, control_logs=False)
    sim.send(Send("c", "m", ("A", "B", "C"), "v", "A"))
    about = client_record(sim, "A")
    sim.step_node("A", 1)  # Notify to B and C
    sim.step_node("B", 1)  # B proposes, acks A
    inject(sim, "B", stray, about, "C", Algorithm.OPTIMIZED)
    sim.step_node("B", 1)
    assert_agreed(sim.drain(), {"A", "B", "C"})


# ---------------------------------------------------------------------------- defect 2


def test_2_a_stray_abort_between_two_acks_never_stops_an_optimized_topic() -> None:
    """The coordinator A reads B's Ack, then a stray Abort "from C", then C's Ack: it
    goes on (the stray answers nothing A wrote) and delivers m everywhere."""
    sim = Simulator(["A", "B", "C"], algorithm="optimized", members_known=True, control_logs=False)
    sim.send(Send("c", "m", ("A", "B", "C"), "v", "A"))
    about = client_record(sim, "A")
    sim.step_node("A", 1)  # Notify to B and C
    sim.step_node("B", 1)  # B acks
    sim.step_node("A", 1)  # A takes B's Ack
    inject(sim, "A", "abort", about, "C", Algorithm.OPTIMIZED)
    sim.step_node("A", 1)
    assert_agreed(sim.drain(), {"A", "B", "C"})


def test_2_a_destination_whose_view_lags_aborts_the_message_everywhere() -> None:
    """optimized, no stray: C's view of the live nodes lacks B for longer than the
    members grace, so C refuses A's Notify and answers A with an Abort. A drops m and
    forwards the Abort to B, which had acked and would otherwise wait for ever."""
    sim = Simulator(
        ["A", "B", "C"],
        algorithm="optimized",
        views={"C": ("A", "C")},
        members_known=True,
        control_logs=False,
    )
    sim.send(Send("c", "m", ("A", "B", "C"), "v", "A"))
    sim.send(Send("c", "s", ("B",), "w", "B"))  # queued behind m at B
    sim.step_node("A", 1)  # Notify to B and C
    sim.step_node("B", 1)  # B acks A; s waits behind m
    result = sim.drain()
    assert result.aborted["A"] == ["m"] and result.aborted["B"] == ["m"]
    assert_agreed(result, set())
    assert result.delivered_ids("B") == ["s"]
    assert any("has no node" in r for r in result.rejected_reasons()["C"])


# ---------------------------------------------------------------------------- defect 3


def spec(algorithm: Algorithm = Algorithm.DIRECT, **kw: object) -> NodeSpec:
    """Node A's spec, with JSON deliveries (the default in production)."""
    settings: dict[str, object] = {"algorithm": algorithm, "delivery_format": "json", **kw}
    return batch_spec("A", **settings)


def record(value: bytes, offset: int, at_ms: int, topic: str = "A") -> PlainRecord:
    return PlainRecord(value, topic=f"atomickafka-in.{topic}", offset=offset, timestamp_ms=at_ms)


def client(mid: str, *destinations: str, at_ms: int = NOW_MS) -> bytes:
    return encode_client(client_message(mid, destinations, mid, "c", sent_at=at_ms))


def delivered(records: list[object]) -> list[str]:
    out = []
    for r in records:
        if getattr(r, "kind", None) is OutKind.DELIVERY:
            (message,) = decode_any(r.value, r.key, list(r.headers))  # type: ignore[attr-defined]
            out.append(message.messageID)
    return out


def test_3_an_absent_topic_named_before_the_first_members_record_holds_nothing() -> None:
    """A fresh node reads m to {A, X} -- X has no node -- before its first members record.
    m waits for members (it is not proposed for), s behind it is delivered, and the
    members record written 10 s of log time later refuses m (§4.9.5)."""
    node = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    ready = node.step(
        [record(client("m", "A", "X"), 0, NOW_MS), record(client("s", "A"), 1, NOW_MS + 1)],
        wall_s=0,
    )
    assert delivered(list(ready.records)) == ["s"]
    assert node.engine.awaiting_members == ("X",) and not node.engine.is_pending("m")
    members = encode_members("node-A", ["A", "B"], "direct")
    early = node.step([record(members, 2, NOW_MS + 2)], wall_s=1)
    assert not [r for r in early.records if r.kind is OutKind.DEAD_LETTER]  # X may start
    later = node.step([record(members, 3, NOW_MS + MEMBERS_GRACE_MS)], wall_s=11)
    letters = [r for r in later.records if r.kind is OutKind.DEAD_LETTER]
    assert letters and b"has no node" in dict(letters[0].headers)["atomickafka-error"]
    assert node.engine.held_count == 0 and node.engine.pending_count == 0


def test_3_nothing_naming_another_topic_is_taken_up_before_the_first_members_record() -> None:
    """Not even a message whose other destination's node already wrote here: before the
    record that names the node's protocol, nothing protocol-specific happens (§6.6)."""
    node = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    peer = Engine("B", "node-B", Algorithm.DIRECT)
    peer.know_members(["A"])
    (notify,) = peer.step([client_message("m", ["A", "B"], "v", "c", sent_at=NOW_MS)]).outputs
    bundle = encode_bundle(
        [notify.message._replace(seq=(0, 0))],
        sender_id="node-B",
        sent_from="B",
        protocol="direct",
    )
    ready = node.step([record(bundle, 0, NOW_MS)], wall_s=0)
    assert not [r for r in ready.records if r.kind is OutKind.CONTROL]
    assert node.engine.awaiting_members == ("B",) and not node.engine.is_pending("m")
    members = encode_members("node-A", ["A", "B"], "direct")
    ready = node.step([record(members, 1, NOW_MS + 1)], wall_s=1)
    assert delivered(list(ready.records)) == ["m"]  # proposed, decided with B's


# ---------------------------------------------------------------------------- defect 4


def run_and_snapshot(node_spec: NodeSpec) -> tuple[NodeBatch, list[PlainRecord]]:
    """A node that handled a members record and a message, and took a snapshot."""
    batch = NodeBatch(node_spec, NodeBatch.fresh_engine(node_spec))
    members = encode_members(node_spec.node_id, ["A", "B"], node_spec.algorithm.value)
    log = [record(members, 0, NOW_MS), record(client("m", "A"), 1, NOW_MS + 1)]
    batch.step(log, wall_s=0)
    snap = batch.snapshot_now(wall_s=1)
    return batch, [
        PlainRecord(r.value, key=r.key, topic=r.topic) for r in snap.records if r.value is not None
    ]


def snapshot_of(rows: list[PlainRecord], role: str = "A") -> object:
    (found, *_) = newest_snapshots([(r.key(), r.value()) for r in rows], role)
    return found


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"algorithm": Algorithm.POC}, "protocol direct -> poc"),
        ({"delivery_format": "raw"}, "delivery format json -> raw"),
        ({"signer": Signer([SECRET])}, "signing off -> on"),
    ],
)
def test_4_a_restart_with_other_settings_is_refused_in_one_line(
    change: dict[str, object], expected: str
) -> None:
    """§6.6: the snapshot says what its state was built with; a node configured
    otherwise refuses to start, in one line naming how to change it safely."""
    _, rows = run_and_snapshot(spec())
    with pytest.raises(SettingsChangedError) as refused:
        NodeBatch.recover(spec(**change), snapshot_of(rows), committed=2)  # type: ignore[arg-type]
    text = str(refused.value)
    assert expected in text and "--reconfigure" in text and "\n" not in text


def test_4_a_restart_with_another_protocol_and_no_snapshot_is_refused_during_replay() -> None:
    """Without a snapshot the node's own members record in its log names the protocol
    it ran: the replay stops there, before anything is written."""
    log = [
        record(encode_members("node-A", ["A", "B"], "direct"), 0, NOW_MS),
        record(client("m", "A", "B"), 1, NOW_MS + 1),
    ]
    batch = NodeBatch.recover(spec(algorithm=Algorithm.POC), None, committed=2)
    with pytest.raises(SettingsChangedError, match="running protocol direct"):
        batch.step(log, wall_s=0)


def test_4_reconfigure_takes_up_a_new_protocol_only_when_drained() -> None:
    """--reconfigure: a drained node's snapshot at its committed offset is taken up
    under the new protocol (and a snapshot is taken at once); one with messages in
    flight, or behind its committed offset, is still refused."""
    _, rows = run_and_snapshot(spec())
    poc = spec(algorithm=Algorithm.POC, reconfigure=True)
    batch = NodeBatch.recover(poc, snapshot_of(rows), committed=2)  # type: ignore[arg-type]
    assert batch.engine.algorithm is Algorithm.POC
    ready = batch.step([record(client("n", "A"), 2, NOW_MS + 5)], wall_s=2)
    assert [r.kind for r in ready.records].count(OutKind.SNAPSHOT) > 0
    assert b'"protocol":"poc"' in (batch.members(["A", "B"], again=True).records[0].value or b"")
    with pytest.raises(SettingsChangedError, match="committed offset"):
        NodeBatch.recover(poc, snapshot_of(rows), committed=5)  # type: ignore[arg-type]
    busy = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    busy.engine.know_members(["A", "B"])
    busy.step([record(client("m", "A", "B"), 0, NOW_MS)], wall_s=0)  # waits for B
    rows = [
        PlainRecord(r.value, key=r.key)
        for r in busy.snapshot_now(wall_s=1).records
        if r.value is not None
    ]
    with pytest.raises(SettingsChangedError, match="1 pending"):
        NodeBatch.recover(poc, snapshot_of(rows), committed=1)  # type: ignore[arg-type]


def test_4_bundles_name_the_protocol_the_engine_runs() -> None:
    """What a node's bundles name is what its engine runs (they were the spec's)."""
    engine = Engine("A", "node-A", Algorithm.POC)
    engine.know_members(["B"])
    batch = NodeBatch(spec(), engine)  # a spec saying direct: the engine decides
    ready = batch.step([record(client("m", "A", "B"), 0, NOW_MS)], wall_s=0)
    (bundle,) = [r for r in ready.records if r.kind is OutKind.CONTROL]
    assert {m.protocol for m in decode_any(bundle.value)} == {"poc"}
