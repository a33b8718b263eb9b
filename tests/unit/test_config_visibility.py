"""``topics create`` returns only once every broker shows the configs it set: a broker
applies a change from the metadata log a moment after Kafka accepted it, and a describe
it serves until then reads the old value (:func:`~atomickafka.kafka.admin.wait_visible`,
without a broker: the brokers' views are given)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from atomickafka.errors import TimedOutError
from atomickafka.kafka.admin import BrokerView, ConfigLag, config_lag, wait_visible

WANTED = {
    "t-1": {"min.insync.replicas": "2"},
    "atomickafka-in.t-1": {"unclean.leader.election.enable": "false", "retention.ms": "-1"},
}
NEW = {
    "t-1": {"min.insync.replicas": "2", "cleanup.policy": "delete"},
    "atomickafka-in.t-1": {"unclean.leader.election.enable": "false", "retention.ms": "-1"},
}
OLD = {
    "t-1": {"min.insync.replicas": "1"},
    "atomickafka-in.t-1": {"unclean.leader.election.enable": "true", "retention.ms": "-1"},
}


class Clock:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_every_broker_showing_every_value_set_is_no_lag() -> None:
    assert config_lag(WANTED, {1: NEW, 2: NEW, 3: NEW}) == []
    # Kafka answers a value's canonical form: case and spaces do not count
    assert config_lag({"s": {"cleanup.policy": "compact, delete"}},
                      {1: {"s": {"cleanup.policy": "compact,delete"}}}) == []  # fmt: skip
    # a topic with nothing to set is not read
    assert config_lag({"u": {}}, {1: {}}) == []


def test_a_broker_showing_the_old_values_lags_on_each_of_them() -> None:
    lag = config_lag(WANTED, {1: NEW, 2: OLD, 3: NEW})
    assert lag == [
        ConfigLag(2, "t-1", "min.insync.replicas=1 (set: 2)", stale=True),
        ConfigLag(
            2, "atomickafka-in.t-1", "unclean.leader.election.enable=true (set: false)", True
        ),
    ]
    assert str(lag[0]) == "broker 2: t-1 min.insync.replicas=1 (set: 2)"
    unset = config_lag({"t-1": {"retention.ms": "-1"}}, {1: NEW})
    assert unset == [ConfigLag(1, "t-1", "retention.ms=(unset) (set: -1)", stale=True)]


def test_a_topic_a_broker_could_not_describe_is_unreadable_not_stale() -> None:
    views: dict[int, BrokerView] = {1: NEW, 2: {"t-1": "Broker: Unknown topic or partition"}}
    assert config_lag({"t-1": WANTED["t-1"]}, views) == [
        ConfigLag(2, "t-1", "unreadable (Broker: Unknown topic or partition)", stale=False)
    ]
    assert config_lag({"t-1": WANTED["t-1"]}, {3: {}}) == [
        ConfigLag(3, "t-1", "unreadable (not described)", stale=False)
    ]


def test_waits_until_the_lagging_broker_catches_up() -> None:
    clock = Clock()
    reads: list[Mapping[int, BrokerView]] = [
        {1: NEW, 2: OLD, 3: NEW},
        {1: NEW, 2: OLD, 3: NEW},
        {1: NEW, 2: NEW, 3: NEW},
    ]
    calls = iter(reads)
    assert wait_visible(lambda: next(calls), WANTED, 30.0, clock=clock, sleep=clock.sleep) == []
    assert clock.slept == [0.05, 0.1]  # read three times, the last one agreed


def test_returns_at_once_when_every_broker_shows_it_already() -> None:
    clock = Clock()
    assert wait_visible(lambda: {1: NEW}, WANTED, clock=clock, sleep=clock.sleep) == []
    assert clock.slept == []


def test_a_broker_that_keeps_the_old_value_is_an_error_naming_it() -> None:
    clock = Clock()
    with pytest.raises(TimedOutError) as caught:
        wait_visible(lambda: {1: NEW, 2: OLD}, WANTED, 30.0, clock=clock, sleep=clock.sleep)
    assert "after 30 s not every broker shows them" in str(caught.value)
    assert "broker 2: t-1 min.insync.replicas=1 (set: 2)" in str(caught.value)
    assert "broker 1" not in str(caught.value)
    assert 29.0 <= clock.now <= 30.0  # bounded, backing off to one read a second
    assert max(clock.slept) == 1.0


def test_a_broker_that_cannot_be_read_is_returned_not_raised() -> None:
    clock = Clock()
    views: dict[int, BrokerView] = {1: NEW, 2: {"t-1": "timed out", "atomickafka-in.t-1": "x"}}
    left = wait_visible(lambda: views, WANTED, 5.0, clock=clock, sleep=clock.sleep)
    assert [(x.broker, x.stale) for x in left] == [(2, False), (2, False)]
    assert clock.now <= 5.0
