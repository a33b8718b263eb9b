"""The back-pressure loop's timing (issue 24, items 3 and 4; docs/DESIGN.md §5.3): a node
says how long its unread input would take (``inputDrainSeconds``), not only how long the
oldest of it has waited, so a client hears of a flood before the flood has waited;
a node whose input waits publishes every quarter second, and at once when it begins to
wait; a client reads the statuses every quarter second. Measured on the overloaded
eval with control logs: p99 from 5.6 s to 2.2-3.4 s, and no end burst left
(docs/performance.md, "Back-pressure that keeps up with a flood")."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from atomickafka.client import QueueFullError
from atomickafka.kafka.status import Status, parse_status
from atomickafka.node.config import NodeConfig
from atomickafka.node.lifecycle import LAGGING_STATUS_INTERVAL_S, LAGGING_STATUS_S, Stoppable
from atomickafka.node.metrics import Progress
from atomickafka.node.runtime import NodeRuntime
from tests.unit.test_client_statuses import Watch, client, status


def test_progress_is_a_rate_over_a_window_of_samples() -> None:
    progress = Progress(window_s=2.0)
    assert progress.take(100, 10.0) == 0.0  # one sample: no rate yet
    assert progress.take(1_100, 10.5) == pytest.approx(2_000.0)
    # a step that spanned a whole quarter second moves nothing in it: the window keeps
    # the rate (a single interval would say 0 and hold every client back, or let go)
    assert progress.take(1_100, 10.75) == pytest.approx(1_000 / 0.75)
    for i in range(1, 20):
        progress.take(1_100 + 1_000 * i, 10.75 + 0.25 * i)
    assert progress.rate == pytest.approx(4_000.0)  # old samples left the window
    assert progress.drain_s(8_000, cap_s=60.0) == pytest.approx(2.0)
    assert progress.drain_s(10**9, cap_s=60.0) == 60.0
    assert progress.drain_s(0, cap_s=60.0) == 0.0
    # fewer than two read batches: the rate may be an idle node's trickle, not its pace
    assert progress.drain_s(3_999, cap_s=60.0, at_least=4_000) == 0.0
    assert progress.drain_s(4_000, cap_s=60.0, at_least=4_000) == pytest.approx(1.0)


def test_the_first_records_after_idling_are_no_backlog() -> None:
    """Measured in the bench at 1,000 msg/s: a node that had read 6 records a second
    said 5 s for its first 5 records of traffic, and a client waited half a second."""
    idle = Progress()
    idle.take(0, 0.0)
    idle.take(6, 1.0)
    assert idle.drain_s(165, cap_s=60.0, at_least=4_000) == 0.0


def test_a_burst_after_idling_is_judged_at_the_pace_the_node_last_showed() -> None:
    """Measured in the bench's capacity run with control logs: the rate over a window
    that spanned the idle seconds before the burst was a trickle, the first 20,000
    records looked like a minute of work, and the clients were held back 3.2 s of a
    5 s run. Only intervals that begin with a backlog count."""
    progress = Progress()
    for i in range(4):  # a busy second: 10,000 offsets a second
        progress.take(2_500 * i, 0.25 * i, backlog=True)
    progress.take(10_000, 1.0, backlog=False)  # caught up
    assert progress.rate == pytest.approx(10_000.0)
    for i in range(1, 6):  # five idle seconds: 6 offsets a second
        progress.take(10_000 + 6 * i, 1.0 + i, backlog=False)
    assert progress.rate == pytest.approx(10_000.0)  # the pace, not the trickle
    assert progress.drain_s(20_000, cap_s=60.0, at_least=4_000) == pytest.approx(2.0)
    # the burst: the window restarts where the node was last idle
    progress.take(10_030, 6.25, backlog=True)
    assert progress.rate == pytest.approx(10_000.0)  # a quarter second: too short to say
    progress.take(13_030, 6.5, backlog=True)
    progress.take(16_030, 6.75, backlog=True)
    assert progress.rate == pytest.approx(12_000.0)  # 6,000 in half a second


def test_a_node_that_never_had_a_backlog_has_no_pace() -> None:
    progress = Progress()
    for i in range(8):
        progress.take(6 * i, float(i), backlog=False)
    assert progress.rate == 0.0
    assert progress.drain_s(20_000, cap_s=60.0, at_least=4_000) == 0.0  # inputLagSeconds says


def test_a_node_that_moved_nothing_says_nothing_about_draining() -> None:
    """A transaction's commit marker can leave an idle node one offset behind for good:
    with no progress, the drain estimate is 0 (a stalled node shows in inputLagSeconds)."""
    progress = Progress()
    progress.take(7, 1.0)
    progress.take(7, 3.0)
    assert progress.drain_s(1, cap_s=60.0) == 0.0


def test_behind_is_the_longer_of_waited_and_left_to_read() -> None:
    assert status("A", 1, input_lag_s=0.2, input_drain_s=3.0).behind_s == 3.0
    assert status("A", 1, input_lag_s=2.5, input_drain_s=0.1).behind_s == 2.5


def test_the_drain_field_is_camel_case_and_defaults_for_older_nodes() -> None:
    lagging = status("A", 1, input_lag=9_000, input_lag_s=0.3, input_drain_s=2.25)
    data = lagging.to_dict()
    assert data["inputDrainSeconds"] == 2.25
    assert Status.from_dict(orjson.loads(orjson.dumps(data))) == lagging
    del data["inputDrainSeconds"]  # a node of an earlier release
    older = parse_status(orjson.dumps(data))
    assert older is not None and older.input_drain_s == 0.0 and older.behind_s == 0.3


def test_a_flood_not_yet_waited_for_holds_the_sender_back() -> None:
    """The oldest record has waited only 0.3 s, but the 9,000 unread would take 2.25 s
    at the node's rate: the client waits, and goes on once the node has caught up."""
    flooded = status("A", 0, input_lag=9_000, input_lag_s=0.3, input_drain_s=2.25)
    watch = Watch([flooded], [flooded], [status("A", 1)])
    judge = client(watch, max_lag_s=1.0, max_block_s=30.0)
    assert judge._route(("A",), None, time.monotonic()).lagging
    judge._hold_back(["A"])
    assert judge.held_back_s > 0 and watch.reads >= 3
    with pytest.raises(QueueFullError, match=r"[12]\.\d s behind its input"):
        client(Watch([flooded]), max_lag_s=1.0, max_block_s=0.3)._hold_back(["A"])


def test_a_status_says_how_far_behind_the_node_was_when_it_was_taken() -> None:
    """Measured in the bench's capacity burst: clients waiting for a status that says
    "caught up" left the node waiting for input 45 % of the time. A status taken 1.5 s
    ago that said 2 s behind means about 0.5 s now; a stalled node's next status says
    more (its oldest record's age grows), so the client waits again."""
    old = status("A", 1.5, input_lag=9_000, input_lag_s=0.2, input_drain_s=2.0)
    judge = client(Watch([old]), max_lag_s=1.0)
    assert judge._lagging(["A"], {"A": old}) is None
    fresh = status("A", 0, input_lag=9_000, input_lag_s=2.0)
    found = judge._lagging(["A"], {"A": fresh})
    assert found is not None and found[0] == "A" and found[1] == pytest.approx(2.0, abs=0.1)


def test_the_client_reads_the_statuses_every_quarter_second() -> None:
    watch = Watch([status("A", 1)])
    judge = client(watch, max_lag_s=1.0)
    start = time.monotonic()
    judge._route(("A",), None, start)
    reads = watch.reads
    judge._route(("A",), None, start + 0.1)  # not yet: the route judged is kept
    judge._watched_at -= 0.3  # a third of a second later
    judge._route(("A",), None, time.monotonic())
    assert watch.reads == reads + 1


class _Shell(Stoppable):
    def __init__(self, behind: list[float]) -> None:
        super().__init__()
        self.behind = behind
        self.published: list[float] = []

    def _publish_status(self, now: float) -> None:
        self.published.append(now)
        self._lagging = self._behind_s() > LAGGING_STATUS_S

    def _behind_s(self) -> float:
        return self.behind[0]


def test_a_node_publishes_at_once_when_its_input_begins_to_wait_then_every_quarter() -> None:
    shell = _Shell([0.0])
    shell._start_clock(1.0, None)
    shell._next_status = 100.0  # the clock started at 100.0
    shell._tick(100.0)  # the first status, at once
    shell._tick(100.3)
    assert shell.published == [100.0]  # caught up: the next one a second later
    shell.behind[0] = 2.0  # a flood arrives
    shell._tick(100.6)
    assert shell.published == [100.0, 100.6]  # at once, not at 101.0
    shell._tick(100.6 + LAGGING_STATUS_INTERVAL_S)
    assert len(shell.published) == 3  # and every quarter second while it lasts
    shell.behind[0] = 0.0
    shell._tick(101.2)
    shell._tick(101.5)
    assert len(shell.published) == 4  # caught up: back to the interval
    shell._tick(102.2)
    assert len(shell.published) == 5


def test_a_node_status_carries_the_drain_estimate(monkeypatch: Any) -> None:
    node = NodeRuntime(NodeConfig(bootstrap="127.0.0.1:9", topic="A"))
    monkeypatch.setattr(node, "_input_lag", lambda: 6_000)  # above two read batches
    node.progress.take(0, 10.0)
    node.progress.take(3_000, 11.0)  # 3,000 offsets a second
    made = node.status(11.0)
    assert made.input_lag == 6_000 and made.input_drain_s == pytest.approx(2.0)
    assert node._behind_s() >= 2.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("inputDrainSeconds", "x"), ("inputLagSeconds", [1]), ("inputDrainSeconds", True),
     ("inputLag", None), ("pid", 1.5)],
)  # fmt: skip
def test_a_status_record_with_a_field_of_the_wrong_type_is_no_status(
    field: str, value: object
) -> None:
    """One forged record on the status topic must not fail every client's send: a
    client computes with a node's lag, so a record whose numbers are not numbers is
    ignored as not a status (the client goes on with the node's last good one)."""
    good = status("A", 1, input_lag=9_000, input_lag_s=0.3, input_drain_s=2.25).to_dict()
    assert parse_status(orjson.dumps(good)) is not None
    assert parse_status(orjson.dumps({**good, field: value})) is None
    assert parse_status(orjson.dumps({**good, "oldestPendingAgeSeconds": None})) is not None
    assert parse_status(orjson.dumps({**good, "time": 1763913600})) is not None  # an int
