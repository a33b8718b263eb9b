"""The node's batch layer (node/batch.py), its hot standby (node/standby.py), the
snapshot records and the choice of snapshot at start (node/snapshots.py) and signed
records (core/signing.py): pure, so tested with plain records and no broker."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.compact import COMPACT_VERSION, MAGIC
from atomickafka.core.engine import Algorithm
from atomickafka.core.raw import decode_any, encode_raw_client
from atomickafka.core.reader import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_ERROR_HEADER,
    DEAD_LETTER_OFFSET_HEADER,
    PlainRecord,
    header_value,
    read_delivery,
)
from atomickafka.core.reasons import Reason
from atomickafka.core.signing import SIGNATURE_HEADER, SecretError, Signer, parse_secrets
from atomickafka.core.timebounds import CLOCK_LEAD_US
from atomickafka.core.wire import (
    Message,
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_members,
    value_bytes,
)
from atomickafka.metrics.records import sent_at_ms
from atomickafka.node.batch import NodeBatch, NodeSpec, OutKind, OutRecord, Ready
from atomickafka.node.snapshots import (
    LoadedSnapshot,
    SnapshotFollower,
    choose_snapshot,
    encode_snapshot,
    newest_snapshots,
)
from atomickafka.node.standby import NodeStandby

SECRET = b"0123456789abcdef0123456789abcdef"
NOW_MS = 1_795_000_000_000


def spec(topic: str = "A", **kw: object) -> NodeSpec:
    settings: dict[str, object] = {
        "topic": topic,
        "node_id": f"node-{topic}",
        "role": topic,
        "algorithm": Algorithm.DIRECT,
        "input_topic": f"atomickafka-in.{topic}",
        "input_partition": 0,
        "delivery_topic": topic,
        "dead_letter_topic": f"atomickafka-dlq.{topic}",
        "snapshot_topic": f"atomickafka-snap.{topic}",
        "input_prefix": "atomickafka-in.",
    }
    settings.update(kw)
    return NodeSpec(**settings)  # type: ignore[arg-type]


def knowing(*members: str, control_format: str | None = None) -> NodeBatch:
    """A node's batch layer whose engine knows ``members`` have nodes (§4.9.5), as one
    restarted from a snapshot does: no members record needed first; writing control
    records in ``control_format`` (the default when ``None``)."""
    node_spec = spec() if control_format is None else spec(control_format=control_format)
    engine = NodeBatch.fresh_engine(node_spec)
    engine.know_members(members)
    return NodeBatch(node_spec, engine)


def log(topic: str, values: list[bytes], start: int = 0) -> list[PlainRecord]:
    """Input records at offsets ``start``..., appended one millisecond apart."""
    return [
        PlainRecord(v, topic=f"atomickafka-in.{topic}", offset=start + i, timestamp_ms=NOW_MS + i)
        for i, v in enumerate(values)
    ]


def single(mid: str, topic: str = "A", value: object = "v") -> bytes:
    return encode_client(client_message(mid, [topic], value, "c", sent_at=NOW_MS))


def delivered(ready: Ready) -> list[str]:
    out = []
    for r in ready.records:
        if r.kind is OutKind.DELIVERY:
            message = read_delivery(PlainRecord(r.value, key=r.key, headers=list(r.headers)))
            assert message is not None
            out.append(message.messageID)
    return out


# ---------------------------------------------------------------------------- steps


def test_a_step_delivers_and_commits_past_the_batch() -> None:
    batch = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    ready = batch.step(log("A", [single("m1"), single("m2")]), wall_s=0)
    assert delivered(ready) == ["m1", "m2"]
    assert ready.commit == 2 and batch.position == 2


@pytest.mark.parametrize("delivery_format", ["json", "raw"])
def test_deliveries_are_written_in_the_topics_format(delivery_format: str) -> None:
    """§3.8: the JSON envelope (the default, as the node's) or the value as sent with
    the metadata in headers; either reads back as the same delivery."""
    node_spec = spec(delivery_format=delivery_format)
    batch = NodeBatch(node_spec, NodeBatch.fresh_engine(node_spec))
    ready = batch.step(log("A", [single("m1", value={"k": [1, 2]})]), wall_s=0)
    (record,) = [r for r in ready.records if r.kind is OutKind.DELIVERY]
    if delivery_format == "json":
        assert record.value is not None and record.value.startswith(b'{"messageID":"m1"')
    else:
        assert record.value == b'{"k":[1,2]}' and dict(record.headers)["atomickafka-id"] == b"m1"
    message = read_delivery(PlainRecord(record.value, key=record.key, headers=list(record.headers)))
    assert message is not None
    assert (message.messageID, message.timeStamp, orjson.loads(message.value or b"")) == (
        "m1",
        1,
        {"k": [1, 2]},
    )
    assert spec().delivery_format == "json"  # the default, production's
    # the send time rides on the record for the metrics, as its bytes say it
    assert record.sent_at == NOW_MS == sent_at_ms(record.value, record.headers)


@pytest.mark.parametrize(
    ("control_format", "start"),
    [
        (None, bytes([MAGIC, COMPACT_VERSION])),
        ("binary", bytes([MAGIC])),
        ("json", b'{"messageType":"Bundle"'),
    ],
)
def test_a_multicast_becomes_one_bundle_per_destination(
    control_format: str | None, start: bytes
) -> None:
    """In the node's control format (§3.9): binary by default, or JSON. The value goes to
    the carrier C only (§4.16); B's Notify is lean."""
    batch = knowing("B", "C", control_format=control_format)
    multicast = encode_client(client_message("m", ["A", "B", "C"], 1, "c", sent_at=NOW_MS))
    ready = batch.step(log("A", [multicast]), wall_s=0)
    control = [r for r in ready.records if r.kind is OutKind.CONTROL]
    assert sorted(r.topic for r in control) == ["atomickafka-in.B", "atomickafka-in.C"]
    assert all(r.value is not None and r.value.startswith(start) for r in control)
    values = {}
    for record in control:
        (notify,) = decode_any(record.value)
        assert (notify.messageType, notify.messageID) == (MessageType.NOTIFY, "m")
        values[record.topic] = notify.value
    assert values == {"atomickafka-in.B": None, "atomickafka-in.C": b"1"}


def test_replayed_records_rebuild_state_and_write_nothing() -> None:
    """§6.1: records below the committed offset were processed before the restart."""
    records = log("A", [single(f"m{i}") for i in range(5)])
    batch = NodeBatch.recover(spec(), None, committed=3)
    ready = batch.step(records, wall_s=0)
    assert ready.replayed == 3
    assert delivered(ready) == ["m3", "m4"] and ready.commit == 5


def test_a_replay_is_cut_at_the_committed_offset_whatever_the_batching() -> None:
    records = log("A", [single(f"m{i}") for i in range(6)])
    batch = NodeBatch.recover(spec(), None, committed=4)
    first = batch.step(records[:3], wall_s=0)
    assert first.records == [] and first.commit is None and batch.replaying
    second = batch.step(records[3:], wall_s=0)
    assert delivered(second) == ["m4", "m5"]


def test_an_unreadable_record_is_set_aside_with_its_reason_and_origin() -> None:
    batch = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    ready = batch.step(log("A", [b"\xff{not json", single("m")]), wall_s=0)
    (letter,) = [r for r in ready.records if r.kind is OutKind.DEAD_LETTER]
    record = PlainRecord(letter.value, headers=list(letter.headers))
    assert b"not valid JSON" in (header_value(record, DEAD_LETTER_ERROR_HEADER) or b"")
    assert header_value(record, DEAD_LETTER_CODE_HEADER) == b"invalid-record"
    assert letter.reason is Reason.INVALID_RECORD  # what the metrics label it by
    assert header_value(record, DEAD_LETTER_OFFSET_HEADER) == b"0"
    assert delivered(ready) == ["m"] and letter.topic == "atomickafka-dlq.A"


@pytest.mark.parametrize("b_starts", [True, False], ids=["then-too-big", "no-node"])
def test_a_record_refused_after_it_waited_is_set_aside_verbatim(b_starts: bool) -> None:
    """§4.9.5: a multicast to a destination not yet known to have a node waits; if a
    later batch refuses it (too big once B is known, or B never starts), the dead letter
    is still the input record itself, with its offset."""
    batch = NodeBatch(spec(max_value_bytes=100), NodeBatch.fresh_engine(spec(max_value_bytes=100)))
    big = encode_client(client_message("z", ["A", "B"], "x" * 500, "c", sent_at=NOW_MS))
    first = batch.step(log("A", [encode_members("node-A", ["A"]), big]), wall_s=0)
    assert not [r for r in first.records if r.kind is OutKind.DEAD_LETTER]
    # B starts within the grace, or a members record after it still does not name B
    later = encode_members("node-A", ["A", "B"] if b_starts else ["A"])
    at = NOW_MS + (5 if b_starts else 20_000)  # within the grace period, or after it
    record = PlainRecord(later, topic="atomickafka-in.A", offset=2, timestamp_ms=at)
    ready = batch.step([record], wall_s=1)
    (letter,) = [r for r in ready.records if r.kind is OutKind.DEAD_LETTER]
    assert letter.value == big
    read = PlainRecord(letter.value, headers=list(letter.headers))
    assert header_value(read, DEAD_LETTER_OFFSET_HEADER) == b"1"
    reason = header_value(read, DEAD_LETTER_ERROR_HEADER) or b""
    assert (b"limit" if b_starts else b"has no node") in reason
    assert batch._deferred.pop(1) is None  # nothing kept any longer


def _raw_record(mid: str, value: bytes, offset: int = 0) -> PlainRecord:
    """A raw-form client record to A and B (as the client writes it), with a key and a
    header of the sender's own."""
    message = client_message(
        mid, ["A", "B"], value, "c", sent_at=NOW_MS, key=b"k-1", headers=(("trace", b"t-9"),)
    )
    key, raw, headers = encode_raw_client(message)
    return PlainRecord(
        raw, topic="atomickafka-in.A", offset=offset, key=key, headers=headers,
        timestamp_ms=NOW_MS,
    )  # fmt: skip


@pytest.mark.parametrize("why", ["too large", "unsigned"])
def test_a_dead_letter_keeps_the_records_own_headers_after_its_reason(why: str) -> None:
    """Issue 26, item 8: a raw record's metadata (``atomickafka-id``, ``-to``,
    ``-sender``) and the sender's headers say which message was refused; the dead
    letter's reason comes first, so a forged ``atomickafka-error`` never wins."""
    node = spec(max_value_bytes=10) if why == "too large" else spec(signer=Signer([SECRET]))
    batch = NodeBatch(node, NodeBatch.fresh_engine(node))
    record = _raw_record("m-7", b"x" * 40, offset=1)
    record._headers = [(DEAD_LETTER_ERROR_HEADER, b"forged reason"), *(record.headers() or [])]
    members = encode_members_record()
    if why == "unsigned":  # the node's own members record is signed
        signer = Signer([SECRET])
        members._headers = [signer.signature(members.topic(), None, members.value())]
    ready = batch.step([members, record], wall_s=0)
    (letter,) = [
        r for r in ready.records if r.kind is OutKind.DEAD_LETTER and r.value == record.value()
    ]
    assert letter.key == b"k-1"
    read = PlainRecord(letter.value, headers=list(letter.headers))
    reason = header_value(read, DEAD_LETTER_ERROR_HEADER) or b""
    assert (b"is over the 10-byte limit" if why == "too large" else b"unsigned") in reason
    names = [name for name, _ in letter.headers]
    assert names.index(DEAD_LETTER_ERROR_HEADER) < names.index("atomickafka-id")
    assert header_value(read, "atomickafka-id") == b"m-7"
    assert header_value(read, "atomickafka-to") == b"A,B"
    assert header_value(read, "atomickafka-sender") == b"c"
    assert header_value(read, "trace") == b"t-9"
    assert header_value(read, DEAD_LETTER_OFFSET_HEADER) == b"1"
    signatures = [name for name in names if name == SIGNATURE_HEADER]
    assert len(signatures) == (0 if why == "too large" else 1)  # only the dead letter's own


def encode_members_record() -> PlainRecord:
    """A members record naming A and B at offset 0 (B has a node)."""
    members = encode_members("node-A", ["A", "B"])
    return PlainRecord(members, topic="atomickafka-in.A", offset=0, timestamp_ms=NOW_MS)


def test_an_output_too_large_to_write_is_set_aside() -> None:
    small = spec(max_record_bytes=2000)
    batch = NodeBatch(small, NodeBatch.fresh_engine(small))
    ready = batch.step(log("A", [single("m", value="x" * 1500)]), wall_s=0)
    assert [r.kind for r in ready.records] == [OutKind.DEAD_LETTER]


# ---------------------------------------------------------------------------- snapshots


def test_a_snapshot_is_due_after_enough_records() -> None:
    few = spec(snapshot_every_records=3)
    batch = NodeBatch(few, NodeBatch.fresh_engine(few))
    assert batch.step(log("A", [single("a"), single("b")]), wall_s=0).snapshot_offset is None
    ready = batch.step(log("A", [single("c")], start=2), wall_s=0)
    assert ready.snapshot_offset == 3
    assert {r.topic for r in ready.snapshot_records()} == {"atomickafka-snap.A"}


def test_a_snapshot_is_due_after_enough_time_when_something_happened() -> None:
    timed = spec(snapshot_every_s=10.0)
    batch = NodeBatch(timed, NodeBatch.fresh_engine(timed))
    batch.step(log("A", [single("a")]), wall_s=0)
    assert batch.idle(wall_s=5).snapshot_offset is None
    assert batch.idle(wall_s=11).snapshot_offset == 1
    assert batch.idle(wall_s=30).snapshot_offset is None  # nothing new since


def _snapshot_rows(ready: Ready) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in ready.snapshot_records()]


@given(st.integers(1, 11), st.integers(0, 11), st.integers(1, 4))
def test_recovery_from_a_snapshot_gives_what_a_run_that_never_stopped_gives(
    snap_at: int, extra: int, batch_size: int
) -> None:
    """§6: newest snapshot + replay from its offset + dropping outputs below the commit
    = the uninterrupted run's outputs, for any snapshot point and any batching."""
    values = []
    for i in range(12):
        dests = ["A", "B"] if i % 3 else ["A"]
        values.append(encode_client(client_message(f"m{i}", dests, i, "c", sent_at=NOW_MS)))
    records = log("A", values)
    straight = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    expected = [r for r in straight.step(records, wall_s=0).outputs()]

    first = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    written = first.step(records[:snap_at], wall_s=0).outputs()
    rows = _snapshot_rows(first.snapshot_now(wall_s=1))
    committed = min(len(records), snap_at + extra)
    written += first.step(records[snap_at:committed], wall_s=1).outputs()
    (loaded, *_) = newest_snapshots(rows, "A")
    assert loaded.problem is None and loaded.offsets == {0: snap_at}
    second = NodeBatch.recover(spec(), loaded, committed=committed)
    for start in range(snap_at, len(records), batch_size):
        written += second.step(records[start : start + batch_size], wall_s=2).outputs()
    assert _comparable(written) == _comparable(expected)


def _comparable(records: list[OutRecord]) -> dict[str, list[tuple[object, ...]]]:
    """The messages written to each topic, in order: bundling depends on batching, the
    messages do not (rule 8)."""
    out: dict[str, list[tuple[object, ...]]] = {}
    for r in records:
        if r.kind is OutKind.WATERMARK or r.value is None:
            continue
        for m in decode_any(r.value, r.key, list(r.headers)):
            out.setdefault(r.topic, []).append(
                (m.messageID, m.messageType, m.timeStamp, m.seq, m.value)
            )
    return out


def test_the_newest_readable_snapshot_is_used_and_a_damaged_one_reported() -> None:
    good = encode_snapshot("A", 1, {0: 5}, {"engine": {"x": 1}})
    newer = encode_snapshot("A", 2, {0: 9}, {"engine": {"x": 2}})
    damaged = [*newer[:-2], type(newer[-2])(newer[-2].key, newer[-2].value[:-3]), newer[-1]]
    rows = [(r.key, r.value) for r in [*good, *damaged]]
    found = newest_snapshots(rows, "A")
    assert [(s.seq, s.problem is None) for s in found] == [(2, False), (1, True)]
    assert "damaged" in (found[0].problem or "") or "chunk" in (found[0].problem or "")
    assert found[1].state == {"engine": {"x": 1}} and found[1].offsets == {0: 5}


def test_snapshots_alternate_slots_so_compaction_keeps_two() -> None:
    keys = {r.key for seq in (1, 2, 3) for r in encode_snapshot("A/1", seq, {1: seq}, {})}
    assert keys == {b"A/1|1|0", b"A/1|1|m", b"A/1|0|0", b"A/1|0|m"}


def test_a_large_snapshot_is_split_into_chunks_and_read_back() -> None:
    state = {"engine": {"blob": [str(i) * 20 for i in range(20_000)]}}
    records = encode_snapshot("A", 7, {0: 1}, state, chunk_bytes=10_000)
    assert len(records) > 3
    (found,) = newest_snapshots([(r.key, r.value) for r in records], "A")
    assert found.state == state


@given(st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=50)), max_size=20))
def test_reading_snapshots_never_raises(rows: list[tuple[bytes, bytes]]) -> None:
    newest_snapshots([(b"A|0|" + k, v) for k, v in rows] + [(b"A|0|m", b"{}")], "A")


def test_the_snapshot_follower_reads_rows_as_they_come_like_a_whole_read() -> None:
    rows = [
        (r.key, r.value)
        for seq in (1, 2, 3)
        for r in encode_snapshot("A", seq, {0: 10 * seq}, {"engine": {"n": seq}})
    ]
    rows += [(b"B|1|m", b"{}")]  # another role's
    follower = SnapshotFollower("A")
    assert follower.newest_seq == -1 and not follower.changed
    follower.add(rows[:2])
    assert follower.newest_seq == 1 and follower.changed
    follower.add(rows[2:])
    assert follower.newest_seq == 3
    assert follower.snapshots() == newest_snapshots(rows, "A") and not follower.changed
    assert [s.seq for s in follower.snapshots()] == [3, 2]


def _loaded(seq: int, offset: int, *, readable: bool = True) -> LoadedSnapshot:
    return LoadedSnapshot(
        "A", seq, {0: offset}, {"engine": {}} if readable else None, None if readable else "bad"
    )


@pytest.mark.parametrize(
    ("found", "low", "high", "chosen", "cut"),
    [
        ([], 0, 50, None, {}),  # no snapshot, whole log: replay from 0
        ([_loaded(2, 40), _loaded(1, 20)], 0, 50, 2, {}),  # the newest
        ([_loaded(2, 40, readable=False), _loaded(1, 20)], 0, 50, 1, {}),  # damaged: older
        ([_loaded(2, 40), _loaded(1, 20)], 30, 50, 2, {}),  # retention cut below both
        ([_loaded(2, 60), _loaded(1, 20)], 0, 50, 1, {}),  # past the end (re-created)
        ([_loaded(2, 40), _loaded(1, 20)], 45, 50, None, {0: 45}),  # cut above both
        ([_loaded(2, 40, readable=False)], 10, 50, None, {0: 10}),  # only a damaged one
        ([], 10, 50, None, {0: 10}),  # records deleted, nothing covers them
    ],
)
def test_a_role_starts_from_the_newest_snapshot_its_log_still_holds(
    found: list[LoadedSnapshot], low: int, high: int, chosen: int | None, cut: dict[int, int]
) -> None:
    """§6.5: a node refuses to start (``cut``) when its log was cut below every readable
    snapshot; otherwise it starts from the newest one the log still covers."""
    choice = choose_snapshot(found, {0: (low, high)})
    assert (None if choice.snapshot is None else choice.snapshot.seq) == chosen
    assert dict(choice.cut) == cut
    assert len(choice.skipped) == sum(1 for s in found if chosen is None or s.seq > chosen)


def test_a_merger_needs_one_snapshot_that_every_layer_log_still_holds() -> None:
    both = LoadedSnapshot("T/merger", 3, {0: 30, 1: 5}, {"merger": {}})
    choice = choose_snapshot([both], {0: (0, 40), 1: (8, 40)})
    assert choice.snapshot is None and dict(choice.cut) == {1: 8}
    assert choose_snapshot([both], {0: (20, 40), 1: (5, 40)}).snapshot == both


# ---------------------------------------------------------------------------- standby


def _traffic(n: int) -> list[PlainRecord]:
    values = []
    for i in range(n):
        dests = ["A", "B"] if i % 3 else ["A"]
        values.append(encode_client(client_message(f"m{i}", dests, i, "c", sent_at=NOW_MS)))
    return log("A", values)


def _stepped(batch: NodeBatch, records: list[PlainRecord], size: int) -> list[OutRecord]:
    out: list[OutRecord] = []
    for start in range(0, len(records), size):
        out += batch.step(records[start : start + size], wall_s=3).outputs()
    return out


@given(
    snap_at=st.integers(0, 14),
    committed=st.integers(0, 20),
    views=st.lists(st.integers(0, 20), max_size=6),
    fetch=st.integers(1, 5),
    active=st.integers(1, 5),
    after=st.integers(1, 5),
)
def test_a_standby_that_takes_over_writes_what_an_uninterrupted_run_writes(
    snap_at: int, committed: int, views: list[int], fetch: int, active: int, after: int
) -> None:
    """§6.4: the standby starts from a snapshot, fetches the log in any batches, sees
    the committed offset at any (growing) moments and applies only what is below it;
    at takeover it continues from the committed offset: the outputs after it and the
    active instance's before it are those of a run that never stopped (rule 8)."""
    records = _traffic(20)
    snap_at = min(snap_at, committed)
    straight = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    expected = straight.step(records, wall_s=0).outputs()

    first = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    written = _stepped(first, records[:snap_at], active)
    rows = _snapshot_rows(first.snapshot_now(wall_s=1))
    written += _stepped(first, records[snap_at:committed], active)
    (loaded, *_) = newest_snapshots(rows, "A")

    start = max(snap_at, min(views[0] if views else snap_at, committed))
    standby = NodeStandby(spec(), loaded, committed=start, max_pending=7)
    seen = iter(sorted(v for v in views if v <= committed))
    fetched = standby.position
    while fetched < len(records):
        take = min(fetch, standby.room)
        if take <= 0:  # the buffer past the committed offset is full: no more fetching
            if standby.commit_seen(next(seen, committed)) == 0 and not standby.room:
                break
            continue
        standby.take(records[fetched : fetched + take])
        fetched += take
        standby.commit_seen(next(seen, standby.committed))
        assert standby.position <= max(standby.committed, snap_at)
    batch = standby.take_over(committed, newest_seq=5)
    assert batch is not None and batch.snapshot_seq == 5
    assert batch.position <= committed == batch.replay_until
    written += _stepped(batch, records[batch.position :], after)
    assert _comparable(written) == _comparable(expected)


def test_a_standby_never_applies_a_record_at_or_past_the_committed_offset() -> None:
    records = _traffic(10)
    standby = NodeStandby(spec(), None, committed=3, max_pending=4)
    assert standby.take(records[:6]) == 3 and standby.position == 3
    assert standby.pending == 3 and standby.room == 1 and standby.fetch_from == 6
    assert standby.commit_seen(2) == 0 and standby.committed == 3  # stale: ignored
    assert standby.commit_seen(5) == 2 and standby.position == 5
    assert standby.batch.engine.stats.records_in == 5  # applied, nothing written


def test_a_standby_far_behind_a_committed_snapshot_jumps_to_it() -> None:
    records = _traffic(12)
    active = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    active.step(records[:9], wall_s=0)
    (snapshot, *_) = newest_snapshots(_snapshot_rows(active.snapshot_now(wall_s=1)), "A")
    standby = NodeStandby(spec(), None, committed=2, jump_records=5)
    standby.take(records[:4])
    assert standby.position == 2 and not standby.wants(snapshot)  # not committed yet
    standby.commit_seen(9)
    assert standby.position == 4 and standby.wants(snapshot)
    assert standby.jump(snapshot) == 9 and standby.position == 9 and standby.jumps == 1
    standby.take(records[4:11])  # the consumer's older records are dropped
    assert standby.position == 9 and standby.pending == 2
    near = NodeStandby(spec(), None, committed=9, jump_records=5)
    near.take(records[:6])
    assert not near.wants(snapshot)  # 3 records behind: applying them is cheaper


def test_a_standby_whose_committed_offset_went_back_recovers_as_a_restart() -> None:
    standby = NodeStandby(spec(), None, committed=4)
    standby.take(_traffic(6))
    assert standby.position == 4
    assert standby.take_over(3, newest_seq=0) is None  # the group's offsets were reset


# ---------------------------------------------------------------------------- signing


def test_every_record_written_is_signed_and_verifies() -> None:
    signer = Signer([SECRET])
    signed = spec(signer=signer)
    batch = NodeBatch(signed, NodeBatch.fresh_engine(signed))
    value = single("m")
    header = signer.signature("atomickafka-in.A", None, value)
    record = PlainRecord(value, topic="atomickafka-in.A", timestamp_ms=NOW_MS, headers=[header])
    ready = batch.step([record], wall_s=0)
    assert delivered(ready) == ["m"]
    for out in ready.records:
        assert signer.problem(out.topic, out.key, out.value, list(out.headers)) is None


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ([], "unsigned"),
        ([(SIGNATURE_HEADER, b"v1:" + b"0" * 64)], "wrong signature"),
    ],
)
def test_an_unsigned_or_forged_record_is_set_aside(
    headers: list[tuple[str, bytes]], reason: str
) -> None:
    signed = spec(signer=Signer([SECRET]))
    batch = NodeBatch(signed, NodeBatch.fresh_engine(signed))
    record = PlainRecord(single("m"), topic="atomickafka-in.A", headers=headers)
    ready = batch.step([record], wall_s=0)
    assert delivered(ready) == [] and batch.unsigned == 1
    (letter,) = ready.records
    assert (
        reason
        in (
            header_value(PlainRecord(b"", headers=list(letter.headers)), DEAD_LETTER_ERROR_HEADER)
            or b""
        ).decode()
    )


def test_a_signature_covers_topic_key_value_and_headers() -> None:
    signer = Signer([SECRET])
    headers = signer.signed_headers("T", b"k", b"v", [("h", b"1")])
    assert signer.problem("T", b"k", b"v", headers) is None
    assert signer.problem("U", b"k", b"v", headers) is not None  # moved to another topic
    assert signer.problem("T", b"K", b"v", headers) is not None
    assert signer.problem("T", b"k", b"w", headers) is not None
    assert signer.problem("T", b"k", b"v", [("h", b"2"), headers[-1]]) is not None
    assert signer.problem("T", None, b"v", headers) is not None  # no key is not an empty key


def test_rotation_accepts_every_listed_secret_and_signs_with_the_first() -> None:
    old, new = b"o" * 32, b"n" * 32
    headers = Signer([old]).signed_headers("T", None, b"v")
    assert Signer([new, old]).problem("T", None, b"v", headers) is None
    assert Signer([new]).problem("T", None, b"v", headers) is not None
    assert Signer([old, new]).signed_headers("T", None, b"v") == headers


def test_secret_files_are_checked() -> None:
    assert parse_secrets("# rotated 2026-11\n" + "a" * 20 + "\n\n" + "b" * 16 + "\n") == [
        b"a" * 20,
        b"b" * 16,
    ]
    with pytest.raises(SecretError, match="no secret"):
        parse_secrets("\n# nothing\n")
    with pytest.raises(SecretError, match="shorter"):
        parse_secrets("short\n")
    assert "a" * 20 not in repr(Signer([b"a" * 20]))


# ---------------------------------------------------------------------------- held clocks


def test_a_node_holding_messages_ticks_its_own_log() -> None:
    """§4.11: a held message waits for the log's time; the node's own ticks move it."""
    batch = knowing("B", "C")
    ahead = NOW_MS * 1000 + CLOCK_LEAD_US + 50_000
    notify = Message(
        "m", MessageType.NOTIFY, ("A", "B", "C"), value_bytes("v"), "node-B", "B", ahead,
        digest=client_message("m", ["A"], "v", "c").digest, protocol="direct",
    )  # fmt: skip
    bundle = encode_bundle([notify], sender_id="node-B", sent_from="B", protocol="direct")
    ready = batch.step(log("A", [bundle]), wall_s=0)
    ticks = [r for r in ready.records if r.kind is OutKind.TICK]
    assert batch.engine.held_count == 1 and [t.topic for t in ticks] == ["atomickafka-in.A"]
    assert batch.idle(wall_s=0.05).records == []  # not yet: paced
    assert [r.kind for r in batch.idle(wall_s=0.2).records] == [OutKind.TICK]
    tick = PlainRecord(ticks[0].value, topic="atomickafka-in.A", offset=1, timestamp_ms=NOW_MS + 51)
    batch.step([tick], wall_s=0.3)
    assert batch.engine.held_count == 0 and batch.engine.is_pending("m")
    assert decode_any(ticks[0].value)[0].senderID == "node-A"


def test_the_members_record_is_written_again_on_request_while_messages_wait() -> None:
    """§4.9.5: only a members record refuses a message that waits for members, so while
    messages wait the shell asks for one again (every second) even when nothing grew."""
    batch = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    assert len(batch.members(["A", "B"]).records) == 1
    assert not batch.members(["B"]).records  # nothing new
    (again,) = batch.members(["B"], again=True).records
    assert again.kind is OutKind.TICK and b"MembersMessage" in (again.value or b"")
    assert b'"A"' in (again.value or b"") and b'"B"' in (again.value or b"")  # all known


def test_a_node_writing_again_skips_the_deliveries_its_topic_holds() -> None:
    """Issue 26, item 1: a node whose last process ran with another secret writes again
    what followed its newest snapshot signed with its own; the deliveries at or below
    the last one its topic holds were written, and are skipped -- the rest are not."""
    batch = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    batch.delivered_up_to = (2, 0, "m2")  # m1@1 and m2@2 are in the topic already
    ready = batch.step(log("A", [single("m1"), single("m2"), single("m3")]), wall_s=0)
    assert delivered(ready) == ["m3"] and batch.delivered_up_to is None


def test_records_of_a_newer_format_and_with_another_secret_are_counted_by_sender() -> None:
    """Issue 26, item 1: what a node cannot read of a member -- a newer format, another
    secret -- is counted by whom it comes from, for status and doctor to name."""
    batch = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    newer = b'{"messageType":"Bundle","senderID":"node-B","sentFromTopic":"B","formatVersion":9}'
    batch.step(log("A", [newer + b"\n"]), wall_s=0)
    assert batch.newer_formats == {"B": 1}
    signed_batch = NodeBatch(spec(signer=Signer([SECRET])), NodeBatch.fresh_engine(spec()))
    bundle = encode_bundle(
        [Message("m", MessageType.NOTIFY, ("A", "B"), value_bytes("v"), "node-B", "B", 1,
                 digest=client_message("m", ["A"], "v", "c").digest, protocol="direct",
                 seq=(0, 0))],
        sender_id="node-B", sent_from="B", protocol="direct",
    )  # fmt: skip
    signed_batch.step(log("A", [bundle]), wall_s=0)  # unsigned: B holds no secret
    assert signed_batch.bad_signatures == {"B": 1}
