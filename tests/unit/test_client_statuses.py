"""How the client judges a destination from its nodes' statuses (no broker: the status
watch is a stand-in): live, gone, stopped, and -- issue 26, item 3 -- late, which it
waits for, bounded, since Kafka may be failing over; and signing (item 7)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from atomickafka.client import (
    AtomicKafkaClient,
    OfflineDestinationError,
    QueueFullError,
    SigningError,
)
from atomickafka.core.engine import Algorithm
from atomickafka.core.signing import Signer, parse_secrets
from atomickafka.kafka.status import FAILOVER_GRACE_S, LIVE_WINDOW_S, Role, Status
from atomickafka.kafka.topics import Layout

NOWHERE = "127.0.0.1:9"
SECRET = "client-statuses-secret-0123456789ab"


def status(topic: str, age_s: float, **changes: Any) -> Status:
    base = Status(topic, topic, Role.NODE, f"node-{topic}", Algorithm.DIRECT, Layout.SPLIT, 0.0)
    return replace(base, time=time.time() - age_s, **changes)


class Watch:
    """A StatusWatch whose reads return the statuses of ``steps`` in turn (the last one
    for ever); a step that is an exception is raised, as a status topic that cannot be
    read makes the real one raise."""

    def __init__(self, *steps: list[Status] | Exception) -> None:
        self.steps = list(steps)
        self.statuses: dict[str, Status] = {}
        self.reads = 0

    def refresh(self) -> dict[str, Status]:
        self.reads += 1
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        self.statuses = {s.key: s for s in step}
        return self.statuses

    def close(self) -> None:
        pass


def client(watch: Watch, **options: Any) -> AtomicKafkaClient:
    made = AtomicKafkaClient(NOWHERE, **options)
    made._watch = watch  # type: ignore[assignment]
    return made


def serving(judge: AtomicKafkaClient, topics: list[str]) -> tuple[Algorithm, int]:
    """The protocol and layers ``judge`` sends to ``topics`` with (or its refusal)."""
    route = judge._route(tuple(topics), None, time.monotonic())
    return route.algorithm, route.partitions


def test_live_destinations_are_served_and_gone_or_stopped_ones_refused_at_once() -> None:
    live = client(Watch([status("A", 1), status("B", 2)]))
    assert serving(live, ["A", "B"]) == (Algorithm.DIRECT, 1)
    gone = client(Watch([status("A", 1), status("B", LIVE_WINDOW_S + FAILOVER_GRACE_S + 5)]))
    started = time.monotonic()
    with pytest.raises(OfflineDestinationError, match="'B' \\(last status"):
        serving(gone, ["A", "B"])
    stopped = client(Watch([status("A", 1), status("B", 1).stopped()]))
    with pytest.raises(OfflineDestinationError, match="its node stopped"):
        serving(stopped, ["A", "B"])
    assert time.monotonic() - started < 5  # no wait for what is gone (a bound, not a timing)


def test_a_late_status_is_waited_for_and_a_fresh_one_serves() -> None:
    """A node's status 20 s old: Kafka may be failing over (its status partition
    without a leader, its writes waiting out a coordinator's move). The client waits
    and reads the statuses again; once the node publishes, the message goes."""
    late = status("B", LIVE_WINDOW_S + 5)
    watch = Watch([status("A", 1), late], [status("A", 1), late], [status("A", 1), status("B", 0)])
    assert serving(client(watch, failover_wait_s=30), ["A", "B"]) == (Algorithm.DIRECT, 1)
    assert watch.reads == 3


def test_a_status_topic_that_cannot_be_read_is_waited_for_too() -> None:
    unreadable = KafkaException(KafkaError(KafkaError._TRANSPORT, "leader not available"))
    watch = Watch(unreadable, unreadable, [status("A", 1)])
    assert serving(client(watch, failover_wait_s=30), ["A"]) == (Algorithm.DIRECT, 1)


def test_the_wait_is_bounded_then_refused_at_once_until_the_node_publishes_again() -> None:
    late = status("B", LIVE_WINDOW_S + 5)
    watch = Watch([status("A", 1), late])
    waiting = client(watch, failover_wait_s=1.0)
    with pytest.raises(OfflineDestinationError, match="waited 1 s for it"):
        serving(waiting, ["A", "B"])
    reads = watch.reads
    waiting._watched_at = 0.0  # the next read of the statuses is due
    with pytest.raises(OfflineDestinationError):
        serving(waiting, ["A", "B"])
    assert watch.reads == reads + 1  # refused on the one read: no second wait
    with pytest.raises(OfflineDestinationError):  # waiting can be turned off
        serving(client(Watch([late]), failover_wait_s=0), ["B"])


def test_signing_nodes_refuse_a_client_that_cannot_sign_what_they_accept() -> None:
    keys = Signer(parse_secrets(SECRET)).key_ids()
    signing = [status("A", 1, signing_keys=keys)]
    with pytest.raises(SigningError, match="check signatures"):
        serving(client(Watch(signing)), ["A"])
    other = "another-secret-0123456789abcdef0123"
    with pytest.raises(SigningError, match="accept none"):
        serving(client(Watch(signing), secret=other), ["A"])
    assert serving(client(Watch(signing), secret=SECRET), ["A"]) == (Algorithm.DIRECT, 1)
    assert serving(client(Watch([status("A", 1)]), secret=SECRET), ["A"])  # unsigned nodes


def test_a_lagging_node_holds_the_sender_back_until_it_catches_up() -> None:
    """Issue 24 item 4: a destination whose node's status says it has left its input
    unread for longer than ``max_lag_s`` holds ``send`` back, reading the statuses
    again, and lets it go once the node caught up; the time waited is reported."""
    lagging = status("A", 1, input_lag=5_000, input_lag_s=4.0)
    watch = Watch([lagging], [lagging], [status("A", 1)])
    judge = client(watch, max_lag_s=1.0, max_block_s=30.0)
    route = judge._route(("A",), None, time.monotonic())
    assert route.lagging
    judge._hold_back(["A"])  # returns: the third read shows the node caught up
    assert judge.held_back_s > 0 and watch.reads >= 3
    assert not judge._route(("A",), None, time.monotonic()).lagging  # judged again


def test_a_node_that_stays_behind_fails_the_send_once_the_block_bound_passes() -> None:
    lagging = status("A", 1, input_lag=5_000, input_lag_s=4.0)
    judge = client(Watch([lagging]), max_lag_s=1.0, max_block_s=0.6)
    started = time.monotonic()
    with pytest.raises(QueueFullError, match="cannot keep up"):
        judge._hold_back(["A"])
    assert 0.6 <= time.monotonic() - started < 10  # bounded: it does not hang
    assert judge.held_back_s >= 0.6


def test_back_pressure_can_be_turned_off_and_spares_live_nodes() -> None:
    lagging = status("A", 1, input_lag=5_000, input_lag_s=4.0)
    assert (
        not client(Watch([lagging]), max_lag_s=None)._route(("A",), None, time.monotonic()).lagging
    )
    assert (
        not client(Watch([status("A", 1)]), max_lag_s=1.0)
        ._route(("A",), None, time.monotonic())
        .lagging
    )
    stopped = status("A", LIVE_WINDOW_S + FAILOVER_GRACE_S + 60, input_lag_s=4.0)
    judge = client(Watch([stopped, status("A", 1)]), max_lag_s=1.0, failover_wait_s=0)
    judge._hold_back(["A"])  # a dead node's stale lag holds nobody back
    assert judge.held_back_s < 1


def test_a_node_behind_its_target_paces_the_sender_before_it_holds_it_back() -> None:
    """Issue 38 item 5: a destination whose node is behind more than the pace's target
    (half of ``max_lag_s``) but not ``max_lag_s`` is not held back; the client's rate to
    it is cut to what it sent, and sends wait for the pace (counted as held back)."""
    behind = status("A", 0, input_lag=5_000, input_drain_s=0.8)
    watch = Watch([status("A", 0)], [behind])
    judge = client(watch, max_lag_s=1.0)
    assert not judge._route(("A",), None, time.monotonic()).lagging
    judge._paced(["A"], 2_000)  # unpaced: no wait
    assert judge.paced_s == 0.0
    time.sleep(0.1)
    judge._statuses(force=True)  # 0.8 s behind, over the target of 0.5 s: paced
    assert judge._pace is not None
    rate = judge._pace.rate("A")
    assert rate is not None and rate < 2_000 / 0.1
    assert not judge._route(("A",), None, time.monotonic()).lagging  # not held back
    judge._paced(["A"], 2_000)
    assert judge.paced_s > 0 and judge.held_back_s >= judge.paced_s
    assert client(Watch([behind]), max_lag_s=None)._pace is None  # back-pressure off
