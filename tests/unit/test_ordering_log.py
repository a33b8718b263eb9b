"""Control logs (docs/DESIGN.md §7): the apply marker's codec
(core/marker.py) and the node layer over a control log and an input log
(node/batch.py, with a control log), on a small in-memory cluster of such nodes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core.compact import encode_compact_tick
from atomickafka.core.engine import ORIGIN_INDEX_BITS, Algorithm
from atomickafka.core.marker import (
    MAX_MARKER_RANGE,
    Marker,
    MarkerError,
    decode_marker,
    encode_marker,
)
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import PlainRecord
from atomickafka.core.reasons import Reason
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    MessageType,
    client_message,
    encode_client,
    encode_members,
)
from atomickafka.node.batch import NodeBatch, NodeSpec, OutKind, OutRecord, Ready
from atomickafka.node.snapshots import newest_snapshots

NOW_MS = 1_795_000_000_000
IN = "atomickafka-in."
CTL = "atomickafka-ctl."


# ---------------------------------------------------------------- the marker codec


def test_marker_round_trip() -> None:
    raw = encode_marker("node-A", "A", 10, 20)
    assert decode_marker(raw) == Marker("node-A", "A", 10, 20, None)
    assert decode_marker(encode_marker("n", "A", 0, 1, 3)) == Marker("n", "A", 0, 1, 3)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"not json ApplyMarker",
        encode_compact_tick("node-A", 0),
        encode_members("node-A", ["A"], "direct"),
        # a client record whose value merely mentions the marker's type
        encode_client(client_message("m1", ["A"], {"x": "ApplyMarker"}, sent_at=NOW_MS)),
        b'{"messageType": "TickMessage", "note": "ApplyMarker"}',
        b'["ApplyMarker"]',
    ],
)
def test_not_a_marker(raw: bytes | None) -> None:
    assert decode_marker(raw) is None


def _marker(**fields: Any) -> bytes:
    obj: dict[str, Any] = {
        "messageType": "ApplyMarker",
        "senderID": "node-A",
        "sentFromTopic": "A",
        "from": 1,
        "until": 2,
        "formatVersion": 1,
    }
    obj.update(fields)
    return orjson.dumps({k: v for k, v in obj.items() if v is not None})


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"from": -1}, "from"),
        ({"from": True}, "from"),
        ({"from": "1"}, "from"),
        ({"from": 1.5}, "from"),
        ({"until": 1}, "until"),
        ({"until": 0}, "until"),
        ({"until": 1 + MAX_MARKER_RANGE + 1}, "until"),
        ({"until": (1 << 63) + 5}, "until"),
        ({"senderID": ""}, "senderID"),
        ({"senderID": 3}, "senderID"),
        ({"sentFromTopic": "bad topic"}, "sentFromTopic"),
        ({"formatVersion": 99}, "formatVersion"),
        ({"formatVersion": None}, "formatVersion"),
        ({"partitionID": -1}, "partitionID"),
        ({"partitionID": False}, "partitionID"),
    ],
)
def test_malformed_marker(fields: dict[str, Any], field_name: str) -> None:
    with pytest.raises(MarkerError) as caught:
        decode_marker(_marker(**fields))
    assert caught.value.field == field_name


def test_huge_offset_is_malformed() -> None:
    raw = _marker().replace(b'"until":2', b'"until":18446744073709551616')
    with pytest.raises(MarkerError):
        decode_marker(raw)


def test_encode_refuses_empty_range() -> None:
    with pytest.raises(ValueError):
        encode_marker("n", "A", 3, 3)


# ---------------------------------------------------------------- a small cluster


def spec(topic: str, window_ms: int = 60_000) -> NodeSpec:
    return NodeSpec(
        topic=topic,
        node_id=f"node-{topic}",
        role=topic,
        algorithm=Algorithm.DIRECT,
        input_topic=IN + topic,
        input_partition=0,
        delivery_topic=topic,
        dead_letter_topic=f"atomickafka-dlq.{topic}",
        snapshot_topic=f"atomickafka-snap.{topic}",
        input_prefix=IN,
        control_prefix=CTL,
        control_topic=CTL + topic,
        window_ms=window_ms,
    )


def _is_marker(record: OutRecord) -> bool:
    return record.kind is OutKind.TICK and decode_marker(record.value) is not None


@dataclass
class Cluster:
    """Nodes of ``topics`` with an input log and a control log each; every output
    written at once (log append times one ms apart)."""

    topics: tuple[str, ...]
    window_ms: int = 60_000
    logs: dict[str, list[PlainRecord]] = field(default_factory=dict)
    nodes: dict[str, NodeBatch] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)  # per log name: the node's position
    outputs: dict[str, list[OutRecord]] = field(default_factory=dict)  # per node, no markers
    snapshots: dict[str, list[OutRecord]] = field(default_factory=dict)
    sent: dict[str, list[str]] = field(default_factory=dict)
    clock: int = NOW_MS
    wall: float = 0.0

    def __post_init__(self) -> None:
        for topic in self.topics:
            self.logs[IN + topic] = []
            self.logs[CTL + topic] = []
            self.read[IN + topic] = self.read[CTL + topic] = 0
            self.outputs[topic] = []
            self.snapshots[topic] = []
            node_spec = spec(topic, self.window_ms)
            node = NodeBatch(node_spec, NodeBatch.fresh_engine(node_spec))
            self.nodes[topic] = node
            for record in node.members(self.topics).records:  # the shell's, not a step's
                self.append(record.topic, record.value)

    def append(self, topic: str, value: bytes | None) -> None:
        log = self.logs[topic]
        self.clock += 1
        log.append(PlainRecord(value, topic=topic, offset=len(log), timestamp_ms=self.clock))

    def send(self, mid: str, destinations: list[str]) -> None:
        """A client's ClientMessage to every destination's input log (``direct``)."""
        value = encode_client(client_message(mid, destinations, {"m": mid}, sent_at=self.clock))
        self.sent[mid] = destinations
        for topic in destinations:
            self.append(IN + topic, value)

    def write(self, topic: str, ready: Ready) -> None:
        for record in ready.records:
            if record.kind is OutKind.SNAPSHOT:
                self.snapshots[topic].append(record)
                continue
            if record.kind in (OutKind.CONTROL, OutKind.TICK):
                self.append(record.topic, record.value)
            if not _is_marker(record):
                self.outputs[topic].append(record)

    def step(self, topic: str, which: str, count: int) -> bool:
        """``topic``'s node reads up to ``count`` records of its ``which`` log."""
        name = (IN if which == "in" else CTL) + topic
        start = self.read[name]
        records = self.logs[name][start : start + count]
        if not records:
            return False
        self.read[name] = start + len(records)
        node = self.nodes[topic]
        self.wall += 0.001
        if which == "in":
            ready = node.step_input(records, wall_s=self.wall)
        else:
            ready = node.step(records, wall_s=self.wall)
        self.write(topic, ready)
        return True

    def settle(self, rng: random.Random | None = None) -> None:
        """Step every node over both logs until nothing is left to read."""
        for _ in range(10_000):
            moves = [(t, w) for t in self.topics for w in ("in", "ctl")]
            if rng is not None:
                rng.shuffle(moves)
            if not any([self.step(t, w, rng.randint(1, 4) if rng else 100) for t, w in moves]):
                return
        raise AssertionError("the cluster did not settle")

    def delivered(self, topic: str) -> list[str]:
        out = []
        for record in self.outputs[topic]:
            if record.kind is OutKind.DELIVERY:
                (message,) = decode_any(record.value)
                out.append(message.messageID)
        return out


def messages(records: list[OutRecord]) -> dict[str, list[tuple[str, Any]]]:
    """What ``records`` say, message by message, per topic written to (bundling, and
    how records to different topics interleave, depend on the batches)."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for record in records:
        mine = out.setdefault(record.topic, [])
        if record.kind is OutKind.DEAD_LETTER:
            mine.append(("dead", record.reason))
            continue
        for m in decode_any(record.value, record.key, record.headers):
            mine.append((m.messageType.value, (m.messageID, m.timeStamp, m.seq)))
    return out


def test_control_goes_to_the_control_log_and_both_deliver() -> None:
    cluster = Cluster(("A", "B"))
    cluster.send("m1", ["A", "B"])
    cluster.send("m2", ["A", "B"])
    cluster.settle()
    assert cluster.delivered("A") == cluster.delivered("B") == ["m1", "m2"]
    # the Notifies went to the peers' control logs, never to their input logs
    for topic in ("A", "B"):
        kinds = [
            m.messageType
            for r in cluster.logs[IN + topic]
            for m in decode_any(r.value(), r.key(), r.headers())
        ]
        assert set(kinds) == {MessageType.CLIENT}
    control = [r.topic for r in cluster.outputs["A"] if r.kind is OutKind.CONTROL]
    assert control and set(control) == {CTL + "B"}
    # the members records and markers went to the nodes' own control logs
    own = [decode_marker(r.value()) for r in cluster.logs[CTL + "A"]]
    assert Marker("node-A", "A", 0, 2, None) in own or any(
        m is not None and m.sender == "node-A" for m in own
    )


def test_seq_is_the_markers_offset() -> None:
    """A control output caused by an input-log record is numbered by the control-log
    offset of the marker that applied it (§7), its index by the record's place in the
    marker's range and its own index: how many outputs one record has (which may
    depend on how the engine's steps were cut) never shifts another record's."""
    cluster = Cluster(("A", "B"))
    cluster.send("m1", ["A", "B"])
    cluster.send("m2", ["A", "B"])
    assert cluster.step("A", "in", 2)  # one marker for both
    marker_offset = len(cluster.logs[CTL + "A"]) - 1
    assert decode_marker(cluster.logs[CTL + "A"][marker_offset].value()) == Marker(
        "node-A", "A", 0, 2, None
    )
    assert cluster.step("A", "ctl", 100)
    sent = [m for r in cluster.outputs["A"] for m in decode_any(r.value) if r.topic == CTL + "B"]
    # one Notify per client record: the k-th record's outputs are numbered from k << 24
    assert [m.seq for m in sent] == [(marker_offset, 0), (marker_offset, 1 << ORIGIN_INDEX_BITS)]


def test_foreign_and_malformed_markers_are_set_aside() -> None:
    cluster = Cluster(("A", "B"))
    cluster.append(CTL + "A", encode_marker("node-B", "B", 0, 1))  # another sender's
    cluster.append(CTL + "A", encode_marker("intruder", "A", 0, 1))  # another id
    cluster.append(CTL + "A", _marker(until=0))  # malformed
    cluster.send("m1", ["A", "B"])
    cluster.settle()
    codes = [r.reason for r in cluster.outputs["A"] if r.kind is OutKind.DEAD_LETTER]
    assert codes == [Reason.STRAY, Reason.STRAY, Reason.INVALID_RECORD]
    assert cluster.nodes["A"].markers_refused == 3
    assert cluster.delivered("A") == cluster.delivered("B") == ["m1"]


def test_duplicate_and_zombie_markers_apply_nothing_more() -> None:
    """A second marker for a range, or one that does not start at the next unapplied
    offset (a zombie's, written from another read of the input log), applies nothing;
    a range left unapplied is marked again."""
    cluster = Cluster(("A", "B"))
    cluster.send("m1", ["A", "B"])
    cluster.send("m2", ["A", "B"])
    cluster.send("m3", ["A", "B"])
    # a zombie of A marked [0, 1) and [0, 3) before A's own markers
    cluster.append(CTL + "A", encode_marker("node-A", "A", 0, 1))
    cluster.append(CTL + "A", encode_marker("node-A", "A", 0, 3))
    cluster.append(CTL + "A", encode_marker("node-A", "A", 0, 1))
    cluster.settle()
    node = cluster.nodes["A"]
    assert node.applied == 3 and node.buffered == 0
    assert node.markers_void >= 2
    assert cluster.delivered("A") == cluster.delivered("B") == ["m1", "m2", "m3"]


def test_a_marker_waits_for_the_input_log() -> None:
    cluster = Cluster(("A", "B"))
    cluster.send("m1", ["A", "B"])
    cluster.append(CTL + "A", encode_marker("node-A", "A", 0, 1))  # a zombie's, say
    cluster.step("A", "ctl", 100)
    node = cluster.nodes["A"]
    assert node.waiting and node.applied == 0
    position = node.position
    cluster.step("A", "in", 100)
    assert not node.waiting and node.applied == 1 and node.position > position


def test_a_copy_that_waited_in_the_input_log_finds_its_id_remembered() -> None:
    """§4.13 with two logs (§7.1, "A copy is timed by its arrival"): a client copy that
    waited in the input log while the control log's time moved on is judged by when it
    reached the input log -- it is not late -- and finds its id still remembered, since
    settled ids are forgotten only once the input log's time has passed their window
    too. So it is a repeat: not taken up again (which would hold it at its node for
    good, or deliver it twice), nor set aside as late."""
    window = 2_000
    cluster = Cluster(("A", "B"), window_ms=window)
    cluster.send("m1", ["A", "B"])
    assert cluster.step("A", "in", 100)  # B does not read its input log yet
    for _ in range(4):
        for topic in cluster.topics:
            cluster.step(topic, "ctl", 100)
    assert cluster.delivered("A") == cluster.delivered("B") == ["m1"]
    cluster.clock += 2 * window  # B's control log moves on, its input log does not
    node = cluster.nodes["B"]
    for record in node.members(cluster.topics, again=True).records:
        cluster.append(record.topic, record.value)
    cluster.step("B", "ctl", 100)
    assert node.engine.state.memory.outcome_of("m1") is not None  # remembered
    duplicates = node.engine.stats.duplicates
    cluster.settle()  # now B reads its copy of m1, marks it and applies it
    assert cluster.delivered("B") == ["m1"]
    assert node.engine.pending_count == 0
    assert node.engine.stats.duplicates == duplicates + 1
    assert [r for r in cluster.outputs["B"] if r.kind is OutKind.DEAD_LETTER] == []


def test_settled_ids_are_forgotten_once_both_logs_have_moved_on() -> None:
    """The memory is bounded with two logs too: once the input log's time has passed a
    settled id's window (a record, or the node's own tick of its idle input log), the id
    is forgotten."""
    window = 2_000
    cluster = Cluster(("A", "B"), window_ms=window)
    cluster.send("m1", ["A", "B"])
    cluster.settle()
    assert cluster.delivered("A") == cluster.delivered("B") == ["m1"]
    node = cluster.nodes["B"]
    cluster.clock += 2 * window
    cluster.send("m2", ["A", "B"])  # its copies move both logs' times on
    cluster.settle()
    assert cluster.delivered("B") == ["m1", "m2"]
    assert node.engine.state.memory.outcome_of("m1") is None


# ---------------------------------------------------------------- rule 8


def _run(seed: int) -> Cluster:
    rng = random.Random(seed)
    cluster = Cluster(("A", "B", "C"))
    for i in range(12):
        destinations = rng.sample(["A", "B", "C"], rng.randint(1, 3))
        cluster.send(f"m{i}", destinations)
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 6)):
                topic = rng.choice(cluster.topics)
                cluster.step(topic, rng.choice(["in", "ctl"]), rng.randint(1, 3))
    cluster.settle(rng)
    return cluster


def _agree(cluster: Cluster) -> None:
    """Every message delivered once at each destination, in one order everywhere."""
    orders = {t: cluster.delivered(t) for t in cluster.topics}
    for topic, order in orders.items():
        assert set(order) == {m for m, d in cluster.sent.items() if topic in d}, topic
    for topic, order in orders.items():
        assert len(order) == len(set(order)), topic
    for a in cluster.topics:
        for b in cluster.topics:
            common = set(orders[a]) & set(orders[b])
            assert [m for m in orders[a] if m in common] == [m for m in orders[b] if m in common]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32))
def test_random_schedules_agree(seed: int) -> None:
    cluster = _run(seed)
    _agree(cluster)
    total = sum(len(cluster.delivered(t)) for t in cluster.topics)
    assert total > 0


def _replayed(
    cluster: Cluster, topic: str, rng: random.Random, *, start_from: Any = None
) -> list[OutRecord]:
    """A fresh node of ``topic`` (or one recovered from ``start_from``) fed the
    cluster's final logs of ``topic`` in random batches of each, interleaved at random;
    its own new markers are not written (the control log is fixed): its outputs."""
    node_spec = spec(topic)
    if start_from is None:
        node = NodeBatch(node_spec, NodeBatch.fresh_engine(node_spec))
        node.members(cluster.topics)  # (its record is already in the log)
    else:
        snapshot, committed = start_from
        node = NodeBatch.recover(node_spec, snapshot, committed)
    ctl, inp = cluster.logs[CTL + topic], cluster.logs[IN + topic]
    ci, ii = node.position, node.applied
    out: list[OutRecord] = []
    wall = 0.0
    # a step's budget, as the shell bounds its steps: where a step ends changes nothing
    node.step_budget = rng.choice([None, 1, 2, 5])
    while ci < len(ctl) or ii < len(inp) or (node.queued and not node.waiting):
        wall += 0.001
        take_ctl = ci < len(ctl) and (ii >= len(inp) or rng.random() < 0.5)
        n = rng.randint(1, 5)
        if ci >= len(ctl) and ii >= len(inp):  # only what past budgets left queued
            ready = node.step([], wall_s=wall)
        elif take_ctl:
            ready = node.step(ctl[ci : ci + n], wall_s=wall)
            ci += n
        else:
            ready = node.step_input(inp[ii : ii + n], wall_s=wall)
            ii += n
        out += [r for r in ready.records if r.kind is not OutKind.SNAPSHOT and not _is_marker(r)]
    assert not node.waiting and node.applied == len(inp)
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 2**32))
def test_replay_in_other_batches_gives_the_same_outputs(seed: int, replay_seed: int) -> None:
    """Rule 8 over two logs: the same control log (and the input log its markers name)
    replayed in other batches, with the input log read at other moments, gives the
    same outputs as the node wrote."""
    cluster = _run(seed)
    rng = random.Random(replay_seed)
    for topic in cluster.topics:
        assert messages(_replayed(cluster, topic, rng)) == messages(cluster.outputs[topic])


def test_recovery_from_a_snapshot_replays_the_control_log() -> None:
    """A node recovered from a snapshot taken mid-way (the control log's offset and the
    input log's next unapplied offset) writes, past its committed offset, what the
    uninterrupted node wrote."""
    cluster = _run(7)
    rng = random.Random(1)
    topic = "A"
    node_spec = spec(topic)
    # a node that ran over part of the logs, then took a snapshot
    first = NodeBatch(node_spec, NodeBatch.fresh_engine(node_spec))
    ctl, inp = cluster.logs[CTL + topic], cluster.logs[IN + topic]
    half = len(ctl) // 2
    first.step_input(inp, wall_s=0.0)
    first.step(ctl[:half], wall_s=0.0)
    assert first.position == half  # (nothing waits: the whole input log was read)
    rows = [(r.key, r.value) for r in first.snapshot_now(wall_s=1.0).records]
    (snapshot, *_) = newest_snapshots(rows, topic)
    assert snapshot.offsets == {0: half}
    assert snapshot.state is not None and snapshot.state["ordering"] == {"applied": first.applied}
    committed = half + (len(ctl) - half) // 2
    recovered = _replayed(cluster, topic, rng, start_from=(snapshot, committed))
    # what the uninterrupted run wrote for control records at or past ``committed``
    whole = messages(_replayed(cluster, topic, random.Random(2)))
    tail = messages(recovered)
    assert tail
    for target, written in tail.items():
        assert written and whole[target][-len(written) :] == written, target


def test_a_marker_in_the_input_log_is_set_aside() -> None:
    """Only the control log holds markers: one in the input log is an invalid record
    there (set aside, nothing applied, nothing stops)."""
    cluster = Cluster(("A", "B"))
    cluster.append(IN + "A", encode_marker("node-A", "A", 0, 5))
    cluster.send("m1", ["A", "B"])
    cluster.settle()
    codes = [r.reason for r in cluster.outputs["A"] if r.kind is OutKind.DEAD_LETTER]
    assert codes == [Reason.INVALID_RECORD]
    assert cluster.delivered("A") == cluster.delivered("B") == ["m1"]


def test_with_signing_a_forged_own_marker_is_set_aside() -> None:
    """Without a secret anyone can write a marker in the node's name, and one naming
    input offsets nobody wrote yet makes the node wait for them (a known limit of
    unsigned deployments, like the forged ``seq`` of §4.9); with signing it is set aside
    and the marker the node signed applies."""
    secret = b"0123456789abcdef0123456789abcdef"
    node_spec = replace(spec("A"), signer=Signer([secret]))
    node = NodeBatch(node_spec, NodeBatch.fresh_engine(node_spec))
    client = encode_client(client_message("m1", ["A"], {"m": 1}, sent_at=NOW_MS))
    signer = Signer([secret])
    headers = signer.signed_headers(IN + "A", None, client)
    ready = node.step_input(
        [PlainRecord(client, topic=IN + "A", offset=0, headers=headers, timestamp_ms=NOW_MS)],
        wall_s=0.0,
    )
    (own,) = [r for r in ready.records if _is_marker(r)]
    forged = encode_marker("node-A", "A", 0, 1000)
    records = [
        PlainRecord(forged, topic=CTL + "A", offset=0, timestamp_ms=NOW_MS + 1),
        PlainRecord(
            own.value, topic=CTL + "A", offset=1, headers=own.headers, timestamp_ms=NOW_MS + 2
        ),
    ]
    ready = node.step(records, wall_s=0.0)
    assert [r.reason for r in ready.records if r.kind is OutKind.DEAD_LETTER] == [Reason.UNSIGNED]
    assert node.applied == 1 and not node.waiting and node.markers_applied == 1
