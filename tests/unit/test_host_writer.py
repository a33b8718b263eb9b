"""A host process's shared writer (docs/DESIGN.md §6.7), without Kafka: one
transaction commits every hosted node's input offset to that node's own group (one
``send_offsets_to_transaction`` per group), a failed transaction's outcome is told by
every group's committed offset, and the shared transaction waits for each node's control
records below its offset. The producers are the stand-ins of test_writers.py."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from atomickafka.node.offsets import OffsetsTracker
from atomickafka.node.writers import FencedError, InputSlot, SplitWriter, TransactionalWriter
from tests.unit.test_writers import (
    RECORD,
    TIMED_OUT,
    FlakyProducer,
    GroupConsumer,
    _quick,
    _replaced_by,
)


class OffsetsRecorder(FlakyProducer):
    """Records each ``send_offsets_to_transaction``'s offsets and group."""

    def __init__(self, **failures: Any) -> None:
        super().__init__(**failures)
        self.sent: list[tuple[object, list[tuple[str, int, int]]]] = []

    def send_offsets_to_transaction(self, offsets: Any, group: object, *_: Any) -> None:
        self.sent.append((group, [(tp.topic, tp.partition, tp.offset) for tp in offsets]))
        self._maybe_fail("send_offsets")


def _slots(committed: tuple[int, int]) -> dict[int, InputSlot]:
    return {
        0: InputSlot("ctl.A", 0, "node-A", "group A", GroupConsumer(committed[0])),  # type: ignore[arg-type]
        1: InputSlot("ctl.B", 0, "node-B", "group B", GroupConsumer(committed[1])),  # type: ignore[arg-type]
    }


def _host_writer(
    producer: FlakyProducer, monkeypatch: pytest.MonkeyPatch, committed: tuple[int, int]
) -> TransactionalWriter:
    writer, _ = _quick(producer, monkeypatch)
    writer._slots = _slots(committed)
    return writer


def test_each_node_s_offset_commits_to_its_own_group_in_the_one_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    producer = OffsetsRecorder()
    writer = _host_writer(producer, monkeypatch, (0, 0))
    writer.write([RECORD], {0: 7, 1: 12})
    assert producer.sent == [("group A", [("ctl.A", 0, 7)]), ("group B", [("ctl.B", 0, 12)])]
    assert producer.calls == ["begin", "produce out", "send_offsets", "send_offsets", "commit"]


def test_a_timed_out_commit_is_judged_by_every_group_s_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Landed when every group holds the failed transaction's offsets: not written twice."""
    old, fresh = OffsetsRecorder(commit=[TIMED_OUT]), OffsetsRecorder()
    writer = _host_writer(old, monkeypatch, (7, 12))
    _replaced_by(writer, fresh)
    writer.write([RECORD], {0: 7, 1: 12})
    assert fresh.calls == [] and writer.unknown_outcomes == 1


def test_a_group_moved_by_another_writer_is_a_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    """One node's group committed past both this transaction and the last one: another
    instance wrote as that node (a lone node started for a hosted topic, say)."""
    old = OffsetsRecorder(commit=[TIMED_OUT])
    writer = _host_writer(old, monkeypatch, (3, 40))
    writer.committed_before = {0: 3, 1: 5}
    _replaced_by(writer, OffsetsRecorder())
    with pytest.raises(FencedError, match="another instance wrote as this role"):
        writer.write([RECORD], {0: 7, 1: 12})


def test_the_single_node_path_reads_its_partition_of_its_input() -> None:
    writer = object.__new__(TransactionalWriter)
    writer._consumer = GroupConsumer(9)  # type: ignore[assignment]
    writer._group = "group"
    writer._input = "in"
    assert writer._offsets_by_group({0: 4}) == [("group", [TopicPartition("in", 0, 4)])]
    assert writer._committed_offsets({0: 4}, 0.0) == {0: 9}


def _split(acked: dict[int, int]) -> SplitWriter:
    split = object.__new__(SplitWriter)  # without the broker its init needs
    split._acked = acked
    split._trackers = {slot: OffsetsTracker(at) for slot, at in acked.items()}
    split._targets = {}
    split._began = split._last_commit = 0.0
    split._interval_s = split._idle_gap_s = 0.0
    return split


def test_the_shared_transaction_waits_for_every_node_s_control_records() -> None:
    """Due only once each slot's control records below its offset are acknowledged:
    one node's unacknowledged bundle holds the whole transaction back (a restart from
    that node's offset must not lose it)."""
    split = _split({0: 10, 1: 4})
    split._targets = {0: 10, 1: 6}
    assert not split._due(idle=True)
    split._acked[1] = 6
    assert split._due(idle=True)


def test_a_slot_starts_at_its_node_s_committed_offset() -> None:
    split = _split({})
    split._unwritable_by_slot = {}
    split._txn = object.__new__(TransactionalWriter)
    split.start_slot(0, 5)
    split.start_slot(1, 9)
    assert split._acked == {0: 5, 1: 9}
    assert split._txn.committed_before == {0: 5, 1: 9}
