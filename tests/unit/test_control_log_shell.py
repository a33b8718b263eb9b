"""The Kafka shell's parts for nodes with a control log (docs/DESIGN.md §7), without a
broker: the topics and spec a ``--control-log`` node gets, how one consumer's batch is
split and the input log paced (node/log_reader.py), which snapshots a node of each mode
takes up, and what ``doctor`` says of such deployments. The shell itself runs against
the broker in tests/integration/test_faults.py and test_control_log.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from confluent_kafka import TopicPartition

from atomickafka.cli import build_parser
from atomickafka.core.engine import Algorithm
from atomickafka.core.marker import encode_marker
from atomickafka.core.reader import PlainRecord
from atomickafka.doctor.deployment import TopicKind, committed_log
from atomickafka.doctor.findings import Severity
from atomickafka.doctor.node_checks import check_nodes
from atomickafka.doctor.topic_checks import input_log_view
from atomickafka.kafka.status import Role, Status
from atomickafka.kafka.topics import Layout
from atomickafka.node.batch import NodeBatch, Ordering
from atomickafka.node.config import NodeConfig
from atomickafka.node.log_reader import INPUT_BUFFER_MAX, LogReader, unapplied
from atomickafka.node.runtime import node_spec, node_topic_specs
from atomickafka.node.snapshots import LoadedSnapshot, snapshots_of_mode
from tests.unit.test_doctor import DEPLOYMENT, B, facts_with, status
from tests.unit.test_ordering_log import spec


def test_a_control_log_node_gets_its_control_topic_and_routes_to_peers_control_logs() -> None:
    plain = NodeConfig("b:9092", "orders", control_log=False)
    assert "atomickafka-ctl.orders" not in node_topic_specs(plain)
    assert node_spec(plain, None).control_topic is None
    config = NodeConfig("b:9092", "orders", partitions=3, layer=1, control_log=True)
    specs = node_topic_specs(config)
    ctl = specs["atomickafka-ctl.orders"]
    assert ctl.partitions == 3  # one per layer, as the input log
    assert ctl.configs["message.timestamp.type"] == "LogAppendTime"
    assert ctl.configs["retention.ms"] == "-1"
    made = node_spec(config, None)
    assert made.control_topic == "atomickafka-ctl.orders"
    assert made.control_prefix == "atomickafka-ctl."
    assert made.input_topic == "atomickafka-in.orders"


def test_control_logs_are_the_default_and_every_command_can_turn_them_off() -> None:
    parser = build_parser()
    where = ["--bootstrap-server", "b:1"]
    for argv in (
        ["node", "--topic", "a", "--control-log"],
        ["cluster", "--topics", "a,b", "--control-log"],
        ["bench", "--control-log"],
        ["eval", "--control-log"],
        ["doctor", "--control-log"],
        ["topics", "create", "--topics", "a", "--control-log"],
    ):
        args = parser.parse_args([*argv, *where])
        assert args.control_log is True, argv
        assert parser.parse_args([*argv[:-1], *where]).control_log is True, argv  # the default
        off = parser.parse_args([*argv[:-1], "--no-control-log", *where])
        assert off.control_log is False, argv
    assert NodeConfig("b", "a").control_log  # the default in code too
    assert not NodeConfig.from_dict(NodeConfig("b", "a", control_log=False).to_dict()).control_log
    restored = NodeConfig.from_dict(NodeConfig("b", "a", control_log=True).to_dict())
    assert restored.control_log  # handed to the cluster's children


class FakeConsumer:
    """What LogReader asks of a confluent-kafka Consumer: assignments, pauses,
    resumes and cached watermarks (no broker: the shell runs on one in test_faults)."""

    def __init__(self, marks: dict[str, tuple[int, int]] | None = None) -> None:
        self.assigned: list[TopicPartition] = []
        self.calls: list[tuple[str, str]] = []
        self.marks = marks or {}
        self.positions: dict[str, int] = {}  # none: nothing consumed yet (-1001)

    def assign(self, parts: list[TopicPartition]) -> None:
        self.assigned = parts

    def pause(self, parts: list[TopicPartition]) -> None:
        self.calls += [("pause", p.topic) for p in parts]

    def resume(self, parts: list[TopicPartition]) -> None:
        self.calls += [("resume", p.topic) for p in parts]

    def get_watermark_offsets(self, part: TopicPartition, cached: bool = False) -> Any:
        return self.marks.get(part.topic)

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, self.positions.get(p.topic, -1001))
                for p in parts]  # fmt: skip


def _batch() -> NodeBatch:
    node = spec("A")
    return NodeBatch(node, NodeBatch.fresh_engine(node))


def _records(topic: str, start: int, count: int) -> list[PlainRecord]:
    return [
        PlainRecord(b"x", topic=topic, offset=o, timestamp_ms=1)
        for o in range(start, start + count)
    ]


def test_the_reader_assigns_both_logs_and_splits_a_batch() -> None:
    consumer = FakeConsumer()
    reader = LogReader(consumer, Ordering("atomickafka-ctl.A", "atomickafka-in.A"), 0)  # type: ignore[arg-type]
    batch = _batch()
    batch.position, batch.read_until = 7, 40
    reader.assign(batch)
    assert [(p.topic, p.offset) for p in consumer.assigned] == [
        ("atomickafka-ctl.A", 7),
        ("atomickafka-in.A", 40),
    ]
    mixed = [*_records("atomickafka-in.A", 0, 2), *_records("atomickafka-ctl.A", 0, 1)]
    mixed.append(_records("atomickafka-in.A", 2, 1)[0])
    control, inputs = reader.split(mixed)  # type: ignore[arg-type]
    assert [r.offset() for r in control] == [0]
    assert [r.offset() for r in inputs] == [0, 1, 2]


def test_the_input_log_is_paused_past_the_bound_and_resumed_below_half() -> None:
    consumer = FakeConsumer()
    reader = LogReader(consumer, Ordering("atomickafka-ctl.A", "atomickafka-in.A"), 0)  # type: ignore[arg-type]
    batch = _batch()
    batch.writing = False  # no markers: the records stay buffered
    batch.step_input(_records("atomickafka-in.A", 0, INPUT_BUFFER_MAX), wall_s=0.0)
    assert batch.buffered == INPUT_BUFFER_MAX
    reader.pace(batch)
    reader.pace(batch)  # once
    assert consumer.calls == [("pause", "atomickafka-in.A")] and reader.paused
    batch._buffer.clear()  # applied (what a marker coming back does)
    reader.pace(batch)
    assert consumer.calls[-1] == ("resume", "atomickafka-in.A") and not reader.paused
    assert reader.pauses == 1


def test_lag_counts_both_logs() -> None:
    consumer = FakeConsumer({"atomickafka-ctl.A": (0, 10), "atomickafka-in.A": (0, 100)})
    reader = LogReader(consumer, Ordering("atomickafka-ctl.A", "atomickafka-in.A"), 0)  # type: ignore[arg-type]
    batch = _batch()
    batch.position, batch.applied = 4, 60
    assert reader.lag(batch) == 6 + 40
    consumer.marks = {}
    assert reader.lag(batch) is None


def test_lag_leaves_out_what_the_consumer_stepped_over() -> None:
    """The shared layout's input log is ``T``, where the node's own transactions write:
    the commit marker ending the last one is no record, and the consumer steps over it.
    Counted, the idle node said it was one offset behind, its status turned that into
    waiting that grew while it idled, and clients were held back until QueueFullError
    (the first send of the eval's shared run, in CI)."""
    consumer = FakeConsumer({"atomickafka-ctl.A": (0, 10), "A": (0, 8)})
    reader = LogReader(consumer, Ordering("atomickafka-ctl.A", "A"), 0)  # type: ignore[arg-type]
    batch = _batch()
    batch.position = 10
    batch.applied = batch.read_until = 7  # read and applied offsets 0..6; 7: the marker
    assert reader.lag(batch) == 1  # not consumed past it yet
    consumer.positions = {"atomickafka-ctl.A": 10, "A": 8}
    assert reader.lag(batch) == 0
    batch.read_until = 8  # offset 7 was a record read and not yet applied: it counts
    assert reader.lag(batch) == 1
    assert [unapplied(8, 7, 7, p) for p in (-1001, 7, 8)] == [1, 1, 0]
    assert unapplied(20, 5, 12, 15) == 12  # 5..11 read or not, 12..14 stepped over


def _snapshot(seq: int, ordered: bool | None) -> LoadedSnapshot:
    if ordered is None:
        return LoadedSnapshot("A", seq, {0: 5}, None, "unreadable")
    state: dict[str, Any] = {"engine": {}}
    if ordered:
        state["ordering"] = {"applied": 123}
    return LoadedSnapshot("A", seq, {0: 5}, state)


def test_each_mode_takes_up_only_its_own_snapshots() -> None:
    found = [_snapshot(3, True), _snapshot(2, None), _snapshot(1, False)]
    assert [s.seq for s in snapshots_of_mode(found, marked=True)] == [3, 2]
    assert [s.seq for s in snapshots_of_mode(found, marked=False)] == [2, 1]
    # the doctor reads an ordered snapshot's input-log offset from its state
    assert input_log_view(found[0]).offsets == {0: 123}
    assert input_log_view(found[1]) is found[1]


def test_doctor_knows_control_logs() -> None:
    deployment = dataclasses.replace(DEPLOYMENT, control_log=True)
    topics = deployment.kafka_topics()
    name = DEPLOYMENT.topics[0]
    assert topics[f"atomickafka-ctl.{name}"].kind is TopicKind.INPUT
    one_log = dataclasses.replace(DEPLOYMENT, control_log=False)
    assert f"atomickafka-ctl.{name}" not in one_log.kafka_topics()
    assert f"atomickafka-ctl.{name}" in deployment.specs()
    one = status("orders")
    assert committed_log(one) == "atomickafka-in.orders"
    assert committed_log(dataclasses.replace(one, control_log=True)) == "atomickafka-ctl.orders"
    mixed = {
        "orders": status("orders", control_log=True),
        "audit": status("audit"),
    }
    findings = check_nodes(DEPLOYMENT, facts_with(mixed), B)
    failing = [f for f in findings if f.severity is Severity.FAIL]
    assert [(f.code, f.subject) for f in failing] == [("control-log", "nodes")]
    assert "orders" in failing[0].message and "audit" in failing[0].message
    same = {k: dataclasses.replace(s, control_log=True) for k, s in mixed.items()}
    assert not [
        f for f in check_nodes(DEPLOYMENT, facts_with(same), B) if f.severity is Severity.FAIL
    ]


def test_the_status_says_whether_a_node_reads_a_control_log() -> None:
    base = Status("A", "A", Role.NODE, "n", Algorithm.DIRECT, Layout.SPLIT, 1.0)
    full = dataclasses.replace(base, control_log=True, input_buffered=12)
    data = full.to_dict()
    assert data["controlLog"] is True and data["inputBuffered"] == 12
    assert Status.from_dict(data) == full
    assert Status.from_dict(base.to_dict()).control_log is False  # older records


def test_the_oldest_unapplied_record_of_either_log_times_the_lag() -> None:
    """With a control log, how long the node's input has waited is the age of the
    oldest record read and not applied, of either log (the status's inputLagSeconds,
    which holds clients back): client records waiting for markers, and peers'
    proposals queued in the control log, which their own queues wait for."""
    batch = _batch()
    batch.writing = False
    assert batch.oldest_unapplied_ms is None
    records = [
        PlainRecord(b"x", topic="atomickafka-in.A", offset=o, timestamp_ms=1000 + o)
        for o in range(3)
    ]
    batch.step_input(records, wall_s=0.0)
    assert batch.oldest_unapplied_ms == 1000
    # a marker for offsets not read yet waits at the head of the control log's queue
    waiting = encode_marker("node-A", "A", 0, 5, None)
    batch.step(
        [PlainRecord(waiting, topic="atomickafka-ctl.A", offset=0, timestamp_ms=400)], wall_s=0.0
    )
    assert batch.waiting and batch.oldest_unapplied_ms == 400
