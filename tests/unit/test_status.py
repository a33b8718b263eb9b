"""The typed status: its JSON form, records of older versions, and reading a status
without changing anything."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import orjson

from atomickafka.core.engine import Algorithm
from atomickafka.core.reader import PlainRecord
from atomickafka.core.wire import client_message
from atomickafka.jsonnames import JSON_NAME, json_name
from atomickafka.kafka.status import (
    LIVE_WINDOW_S,
    STATUS_FORMAT_VERSION,
    LayerState,
    NodeState,
    Role,
    Status,
    WaitingHead,
    newest_statuses,
    odd_signers,
    parse_status,
)
from atomickafka.kafka.topics import Layout
from atomickafka.node.config import NodeConfig
from atomickafka.node.merger_runtime import MergerRuntime
from atomickafka.node.runtime import NodeRuntime

#: A node's and a merger's status as the previous version wrote them.
OLD_NODE = {
    "key": "A", "topic": "A", "role": "node", "node_id": "node-A", "algorithm": "direct",
    "layout": "split", "time": 100.0, "pid": 7, "layer": None, "partitions": 1,
    "format_version": 2, "clock": 12, "watermark": None, "pending": 1,
    "oldest_pending_id": "c-1", "oldest_pending_age_s": 3.5,
    "waiting": [{"messageID": "c-1", "timeStamp": 12, "decided": False, "waiting_for": ["B"]}],
    "records_in": 5, "records_out": 4, "deliveries": 3, "dead_letters": 0, "rejected": 0,
    "protocol_mismatches": 0, "aborted": 0, "records_in_per_s": 1.5,
    "records_out_per_s": 1.0, "deliveries_per_s": 0.5, "replaying": False,
    "layer_watermarks": [], "blocked_by": [],
}  # fmt: skip
OLD_MERGER = OLD_NODE | {
    "key": "A/merger", "role": "merger", "node_id": "merger-A", "partitions": 2,
    "watermark": 9, "oldest_pending_age_s": None,
    "waiting": [
        {"messageID": "c-1", "timeStamp": 12, "layer": 0, "waiting_for": ["layer 1"],
         "watermark_lag": 3}
    ],
    "layer_watermarks": [15, 9], "blocked_by": [1],
}  # fmt: skip


def test_a_record_of_the_previous_version_parses_into_typed_fields() -> None:
    node = parse_status(orjson.dumps(OLD_NODE))
    assert node is not None
    assert node.role is Role.NODE and node.algorithm is Algorithm.DIRECT
    assert node.layout is Layout.SPLIT
    assert node.head == WaitingHead("c-1", 12, decided=False, waiting_for=("B",))
    merger = parse_status(orjson.dumps(OLD_MERGER))
    assert merger is not None and merger.role is Role.MERGER
    assert merger.layers == (LayerState(0, 15, holds_head=False), LayerState(1, 9, holds_head=True))
    assert merger.blocked_by == (1,)
    assert merger.head is not None and merger.head.waiting_for == ("layer 1",)


def test_the_json_form_is_camel_case_and_reads_back() -> None:
    merger = parse_status(orjson.dumps(OLD_MERGER))
    assert merger is not None
    data = merger.to_dict()
    # "state" came with clean stops, "duplicates" with the fuzz test's accounting,
    # "signingKeys" with the clients' check of signing (issue 26, item 7)
    # and "inputLag", "inputLagSeconds" with the clients' back-pressure (issue 24, item 4)
    added = {"state", "duplicates", "signingKeys", "inputLag", "inputLagSeconds"}
    added |= {"badSignatures", "newerFormats"}  # members it cannot read (issue 26, item 1)
    added |= {"controlLog", "inputBuffered"}  # control logs (issue 24, item 3)
    added |= {"notifyValues"}  # what direct Notifies carry (issue 38, item 1; §4.16)
    added |= {"inputDrainSeconds"}  # back-pressure that hears of a flood at once (issue 24)
    assert {json_name(k) for k in OLD_NODE} | added == set(data)
    assert data["signingKeys"] == []  # what a record without the field means: no signing
    assert all(JSON_NAME.fullmatch(k) for k in data), sorted(data)
    assert data["nodeID"] == "merger-A" and data["oldestPendingAgeSeconds"] is None
    assert data["duplicates"] == 0  # what a record without the field means
    assert data["role"] == "merger" and data["algorithm"] == "direct"
    assert data["state"] == "running"  # what a record without the field means
    assert data["layerWatermarks"] == [15, 9] and data["blockedBy"] == [1]
    assert data["waiting"] == [
        {"messageID": "c-1", "timeStamp": 12, "decided": False, "waitingFor": ["layer 1"]}
    ]
    assert Status.from_dict(orjson.loads(orjson.dumps(data))) == merger


def test_a_new_record_is_format_3_and_still_readable_by_format_2_readers() -> None:
    node = NodeRuntime(NodeConfig(bootstrap="127.0.0.1:9", topic="A")).status(5.0)
    record = orjson.loads(orjson.dumps(node.to_record()))
    assert record["formatVersion"] == STATUS_FORMAT_VERSION == 3
    assert record["node_id"] == record["nodeID"] == node.node_id
    # what a reader of format 2 requires (it defaults every other field)
    assert {"key", "topic", "role", "node_id", "algorithm", "layout", "time"} <= set(record)
    assert parse_status(orjson.dumps(record)) == node


def test_a_cleanly_stopped_node_is_not_live_at_once_and_says_so_in_json() -> None:
    node = parse_status(orjson.dumps(OLD_NODE))
    assert node is not None and node.state is NodeState.RUNNING
    assert node.live(now=node.time + 1)
    last = node.stopped(now=node.time + 2)
    assert last.is_stopped and last.time == node.time + 2
    assert not last.live(now=last.time)  # not live although just published
    assert last.pending == node.pending and last.key == node.key  # the rest is kept
    data = orjson.loads(orjson.dumps(last.to_dict()))
    assert data["state"] == "stopped"
    assert Status.from_dict(data) == last
    assert not node.live(now=node.time + LIVE_WINDOW_S + 1)  # stale as before


def test_what_is_not_a_status_is_skipped() -> None:
    assert parse_status(None) is None
    assert parse_status(b"not json") is None
    assert parse_status(b'{"key": "A"}') is None  # no role, protocol, ...
    assert parse_status(orjson.dumps(OLD_NODE | {"algorithm": "gossip"})) is None
    assert parse_status(orjson.dumps(OLD_NODE | {"waiting": ["c-1"]})) is None
    assert parse_status(orjson.dumps(OLD_NODE | {"state": "sleeping"})) is None


def test_reading_a_node_status_resets_no_rate() -> None:
    node = NodeRuntime(NodeConfig(bootstrap="127.0.0.1:9", topic="A"))
    node.batch.engine.know_members(["A", "B"])  # B has a node (§4.9.5)
    node.batch.engine.step([client_message("c-1", ["A", "B"], "v")])  # waits for B's proposal
    node.measure(10.0)
    node.records_read += 40
    node.measure(20.0)
    first, again = node.status(25.0), node.status(26.0)
    assert first.records_in_per_s == again.records_in_per_s == 4.0
    assert first.head is not None and first.head.waiting_for == ("B",)
    assert first.oldest_pending_age_s == 15.0 and again.oldest_pending_age_s == 16.0
    node.measure(30.0)  # the publisher's next step starts a new interval
    assert node.status(30.0).records_in_per_s == 0.0


def test_reading_a_merger_status_resets_no_rate() -> None:
    merger = MergerRuntime(NodeConfig(bootstrap="127.0.0.1:9", topic="A", partitions=2))
    merger.measure(0.0)
    merger.measure(2.0)
    first, again = merger.status(), merger.status()
    assert first.deliveries_per_s == again.deliveries_per_s == 0.0
    assert first.role is Role.MERGER and len(first.layers) == 2
    assert first.to_dict() | {"time": 0} == again.to_dict() | {"time": 0}


def test_only_the_newest_status_of_each_key_counts_and_a_tombstone_falls_back() -> None:
    def record(key: str, **changes: object) -> PlainRecord:
        return PlainRecord(orjson.dumps(OLD_NODE | {"key": key} | changes), key=key.encode())

    records = [
        record("A", clock=1),
        record("B", clock=1),
        record("A", clock=2),
        record("B", clock=2),
        PlainRecord(None, key=b"B"),  # a tombstone: B is forgotten for good
        PlainRecord(orjson.dumps(OLD_NODE | {"key": "C", "clock": 5})),  # no Kafka key
        PlainRecord(b"not a status", key=b"D"),
    ]
    newest = newest_statuses(records)
    assert newest.pop("B") is None
    assert {k: s.clock for k, s in newest.items() if s is not None} == {"A": 2, "C": 5}


class _Writes:
    """A writer that takes what it is given (no broker)."""

    reports_written = False

    def write(self, *_: object, **__: object) -> None:
        pass

    def settle(self, **_: object) -> None:
        pass


def test_a_status_counts_the_dead_letters_written_not_those_of_a_replay(tmp_path: Path) -> None:
    """Issue 26, item 13: a node restarted with another secret than its log was signed
    with replays records that all fail the signature; their dead letters are dropped
    with the replay's outputs, but its status said "DLQ 214" while its DLQ held 0."""
    from atomickafka.core.wire import encode_client  # noqa: PLC0415
    from atomickafka.node.batch import NodeBatch  # noqa: PLC0415

    secret = tmp_path / "secret"
    secret.write_text("status-test-secret-0123456789abcdef\n")
    config = NodeConfig(bootstrap="127.0.0.1:9", topic="A", secret_file=str(secret),
                        exactly_once=False)  # fmt: skip
    runtime = NodeRuntime(config)
    runtime.batch = NodeBatch.recover(runtime.spec, None, committed=3)
    unsigned = [
        PlainRecord(
            encode_client(client_message(f"m{i}", ["A"], 1, "c")),
            topic="atomickafka-in.A",
            offset=i,
        )
        for i in range(5)
    ]
    ready = runtime.batch.step(unsigned, wall_s=0)
    runtime._writer = _Writes()  # type: ignore[assignment]
    runtime._write(ready, len(unsigned))
    assert runtime.batch.dead_letters == 5  # three of them replayed, never written
    assert runtime.status().dead_letters == 2


def test_the_node_that_signs_with_another_secret_is_singled_out() -> None:
    """Issue 26, item 1: a node started with a wrong --secret-file is named (by the key id
    it signs with, which its status carries); a tie names nobody."""
    now = time.time()

    def node(topic: str, keys: tuple[str, ...]) -> Status:
        base = Status.from_dict(OLD_NODE | {"key": topic, "topic": topic, "time": now})
        return replace(base, signing_keys=keys)

    good, odd = ("aaaaaaaaaaaa",), ("bbbbbbbbbbbb",)
    found = odd_signers([node("a", good), node("b", good), node("c", odd)])
    assert found == {"c": (odd[0], good[0])}
    assert odd_signers([node("a", good), node("b", odd)]) == {}  # a tie: nobody
    rotating = ("bbbbbbbbbbbb", "aaaaaaaaaaaa")  # the new secret first, the old accepted
    assert odd_signers([node("a", good), node("b", good), node("c", rotating)]) == {}
    assert odd_signers([node("a", ()), node("b", ())]) == {}  # signing off
