"""The node's commit bookkeeping (docs/DESIGN.md §6), crash cases included; no Kafka."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.node.offsets import UNWRITABLE, OffsetsTracker


@dataclass
class Err:
    """A delivery report's error, as confluent-kafka's KafkaError shapes it."""

    number: int

    def code(self) -> int:
        return self.number

    def __str__(self) -> str:
        return f"error {self.number}"


@dataclass
class Msg:
    name: str = "out"
    data: bytes = b"x"

    def topic(self) -> str:
        return self.name

    def value(self) -> bytes:
        return self.data


def test_a_fresh_node_replays_nothing_and_commits_after_acks() -> None:
    tracker = OffsetsTracker(0)
    assert not tracker.replaying()
    ticket = tracker.processed(9)  # records 0..9
    assert ticket is not None
    ticket.sent(3)
    assert tracker.target() is None  # nothing acknowledged yet
    ticket.on_delivery(None, Msg())
    ticket.on_delivery(None, Msg())
    assert tracker.target() is None
    ticket.on_delivery(None, Msg())
    assert tracker.target() == 10
    tracker.committed_at(10)
    assert tracker.target() is None  # nothing new


def test_rule1_a_restart_drops_the_outputs_of_records_below_the_committed_offset() -> None:
    tracker = OffsetsTracker(25)  # the crash came after committing 25
    assert tracker.replaying()
    assert tracker.processed(9) is None
    assert tracker.processed(24) is None  # still replay: outputs were written before
    assert not tracker.replaying()
    ticket = tracker.processed(30)
    assert ticket is not None and ticket.next_offset == 31


def test_rule1_a_batch_straddling_the_boundary_is_cut_there() -> None:
    tracker = OffsetsTracker(25)
    assert tracker.split([20, 21, 22]) == 3  # all replay: no cut
    assert tracker.split([23, 24, 25, 26]) == 2  # 25 and 26 are new
    assert tracker.split([25, 26]) == 0
    assert OffsetsTracker(0).split([0, 1]) == 0


def test_rule2_commits_follow_the_slowest_earlier_batch() -> None:
    tracker = OffsetsTracker(0)
    first, second = tracker.processed(4), tracker.processed(9)
    assert first is not None and second is not None
    first.sent(1)
    second.sent(1)
    second.on_delivery(None, Msg())  # the later batch is acknowledged first
    assert tracker.target() is None  # cannot commit past the first, still open
    first.on_delivery(None, Msg())
    assert tracker.target() == 10
    assert tracker.open_batches == 0


def test_rule2_a_batch_without_outputs_commits_at_once() -> None:
    tracker = OffsetsTracker(0)
    tracker.processed(4)
    assert tracker.target() == 5


def test_rule3_a_failed_output_stops_commits_for_good() -> None:
    tracker = OffsetsTracker(0)
    first, second = tracker.processed(4), tracker.processed(9)
    assert first is not None and second is not None
    first.sent(1)
    second.sent(1)
    first.on_delivery(Err(-192), Msg())  # _MSG_TIMED_OUT: worth a retry by replay
    second.on_delivery(None, Msg())
    assert tracker.target() is None
    assert tracker.failed is not None and "offset 4" in tracker.failed
    assert tracker.target() is None  # and never again


@pytest.mark.parametrize("code", sorted(UNWRITABLE))
def test_rule3_an_output_the_broker_never_takes_is_set_aside(code: int) -> None:
    tracker = OffsetsTracker(0)
    ticket = tracker.processed(4)
    assert ticket is not None
    ticket.sent(2)
    ticket.on_delivery(Err(code), Msg("big", b"too big"))
    ticket.on_delivery(None, Msg())
    assert tracker.target() is None  # not before the refused output is set aside
    (aside,) = tracker.unwritable()
    assert aside[0] is ticket and aside[1].value() == b"too big"
    ticket.sent(1)  # the shell's dead letter, charged to the same batch
    assert tracker.target() is None
    ticket.on_delivery(None, Msg())
    assert tracker.target() == 5 and tracker.failed is None


def test_a_committed_offset_is_never_negative() -> None:
    with pytest.raises(ValueError):
        OffsetsTracker(-1)


@given(
    committed=st.integers(0, 50),
    batches=st.lists(st.integers(1, 10), min_size=1, max_size=12),
    rng=st.randoms(use_true_random=False),
)
def test_crash_anywhere_then_replay_loses_and_repeats_nothing_committed(
    committed: int, batches: list[int], rng: random.Random
) -> None:
    """A run from ``committed`` with batches acknowledged in a random order: the commit
    target only moves forward, never past an unacknowledged output, and a restart from
    any target drops exactly the outputs of the records below it."""
    tracker = OffsetsTracker(committed)
    position = 0
    tickets = []
    for size in batches:
        last = position + size - 1
        ticket = tracker.processed(last)
        assert (ticket is None) == (last < committed)
        if ticket is not None:
            ticket.sent(1)
            tickets.append(ticket)
        position = last + 1
    rng.shuffle(tickets)
    acked: set[int] = set()
    target = committed
    for ticket in tickets:
        ticket.on_delivery(None, Msg())
        acked.add(ticket.next_offset)
        moved = tracker.target()
        if moved is not None:
            assert moved > target
            # every batch ending before the target is acknowledged
            assert all(t.next_offset in acked for t in tickets if t.next_offset <= moved)
            target = moved
            tracker.committed_at(moved)
    assert target == max(committed, position)
    restarted = OffsetsTracker(target)
    assert restarted.replaying() == (target > 0)
    assert restarted.split(list(range(position))) == min(target, position)
