"""Phases 2 and 3 of the soak: a node killed with SIGKILL, and how long until its topic
is served again.

Both phases keep a modest trickle of messages going (a sender process, the soak's
shape, sending to topics whose node is down too), kill the active node of one topic
(its pid from its status) and measure from the kill:

- ``live_s``: to the first status of another process of that topic that is live and
  not replaying (the status's own time, published every second, so up to a second
  late);
- ``delivery_s``: to the first delivery of that topic written after the kill, as a
  consumer of the topic reads it (``read_committed``).

*Recovery* (:func:`run_recovery`): no standby; the supervisor restarts the node, which
replays its input log from its newest snapshot (or, with snapshots off, from the
start), after a fill of N messages. *Takeover* (:func:`run_takeover`): ``--standby``;
the standby of the killed node takes the lease once the lease group's session times
out (``--takeover-after``), then recovers from the snapshot. The order checker reads
every delivery at the end of each run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, TopicPartition

from atomickafka.core.reader import read_delivery
from atomickafka.evaluation.cost.topic_scan import end_offset
from atomickafka.evaluation.soak.cluster import ClusterCommand, ClusterOptions
from atomickafka.evaluation.soak.common import (
    LoadShape,
    check_order,
    load_average,
    topic_names,
    wait_delivered,
    warm_cluster,
)
from atomickafka.evaluation.soak.figures import spread
from atomickafka.evaluation.soak.load import (
    Senders,
    expected_deliveries,
    make_jobs,
    running_senders,
    sent_destinations,
)
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable
from atomickafka.kafka.status import StatusWatch
from atomickafka.kafka.topics import Layout, delivery_topic, input_topic

__all__ = ["FaultSettings", "KillTimes", "run_recovery", "run_takeover"]


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """The trickle's rate, how long it runs before a kill, how long a kill is waited
    out, how the fill is sent, and the pause between two takeovers."""

    trickle_rate: float = 100.0
    steady_s: float = 5.0
    timeout_s: float = 600.0
    fill_senders: int = 2
    fill_timeout_s: float = 2400.0
    settle_s: float = 15.0
    check: bool = True


@dataclass(frozen=True, slots=True)
class KillTimes:
    """One kill: the topic, the pid killed, the pid that served the topic next (from
    its status), and the seconds from the kill to each event (``None``: not seen)."""

    topic: str
    killed_pid: int
    new_pid: int | None
    first_status_s: float | None
    live_s: float | None
    delivery_s: float | None
    replaying_seen: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        data = asdict(self)
        for key in ("first_status_s", "live_s", "delivery_s"):
            if data[key] is not None:
                data[key] = round(data[key], 3)
        return data


class DeliveryWatch:
    """Reads one topic's deliveries from their end now, for the first one written
    after a given time."""

    def __init__(self, connection: Connection, topic: str) -> None:
        self.topic = topic
        self._consumer = make_consumer(connection, None, **{"fetch.wait.max.ms": 10})
        assign_from(self._consumer, [TopicPartition(delivery_topic(topic), 0, OFFSET_END)])

    def first_after(self, since_s: float, timeout_s: float) -> float | None:
        """Read (up to ``timeout_s``); the wall time this read a delivery whose Kafka
        timestamp is at or after ``since_s``, if it read one."""
        records = usable(consume_batch(self._consumer, 1000, timeout_s))
        now = time.time()
        for record in records:
            if record.timestamp()[1] / 1000 >= since_s and read_delivery(record, at=self.topic):
                return now
        return None

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


def kill_and_time(
    connection: Connection, watch: StatusWatch, topic: str, *, steady_s: float, timeout_s: float
) -> KillTimes:
    """Watch ``topic``'s deliveries for ``steady_s``, SIGKILL its active node, and time
    the events (:class:`KillTimes`) for at most ``timeout_s``."""
    with contextlib.closing(DeliveryWatch(connection, topic)) as deliveries:
        ends = time.monotonic() + steady_s
        while time.monotonic() < ends:  # catch up, so that only new deliveries are read
            deliveries.first_after(time.time(), 0.2)
            watch.refresh()
        old = watch.refresh()[topic].pid
        os.kill(old, signal.SIGKILL)
        killed = time.time()
        first = live = delivered = None
        new_pid, replaying = None, False
        deadline = time.monotonic() + timeout_s
        while (live is None or delivered is None) and time.monotonic() < deadline:
            if delivered is None:
                at = deliveries.first_after(killed, 0.05)
                delivered = None if at is None else at - killed
            else:
                time.sleep(0.05)
            status = watch.refresh().get(topic)
            if status is None or status.pid == old or status.time < killed:
                continue
            new_pid = status.pid
            first = status.time - killed if first is None else first
            replaying = replaying or status.replaying
            if live is None and status.live() and not status.replaying:
                live = status.time - killed
    return KillTimes(topic, old, new_pid, first, live, delivered, replaying)


def _trickle_jobs(
    connection: Connection,
    topics: list[str],
    shape: LoadShape,
    settings: FaultSettings,
    runs_s: float,
) -> Any:
    count = int(settings.trickle_rate * runs_s)
    load = shape.load(count, settings.trickle_rate, seed=7)
    return make_jobs(
        connection, topics, load, 1, first_index=100, allow_offline=True, max_seconds=runs_s
    )


def _finish(
    connection: Connection,
    watch: StatusWatch,
    topics: list[str],
    sent: dict[str, tuple[str, ...]],
    settings: FaultSettings,
) -> dict[str, Any]:
    """Wait until everything sent is delivered; check the order."""
    expected = expected_deliveries(sent)
    reached = wait_delivered(watch, topics, expected, timeout_s=settings.timeout_s, desc="drain")
    out: dict[str, Any] = {"expected_deliveries": expected, "node_deliveries": reached}
    if settings.check:
        out["check"] = check_order(connection, topics, sent)
    return out


def _stop_trickle(trickle: Senders) -> dict[str, tuple[str, ...]]:
    trickle.stop()
    return sent_destinations(trickle.jobs, trickle.results())


def run_recovery(
    connection: Connection,
    shape: LoadShape,
    messages: int,
    snapshots: bool,
    settings: FaultSettings,
    out: Path,
) -> dict[str, Any]:
    """Fill ``messages``, then kill the first topic's node while the trickle goes on;
    return the times and what the restarted node replayed."""
    tag = f"rec{messages // 1000}k{'s' if snapshots else 'n'}"
    topics = topic_names(tag, shape.topics)
    victim = topics[0]
    options = ClusterOptions(snapshots=snapshots)
    result: dict[str, Any] = {
        "messages": messages,
        "snapshots": snapshots,
        "cluster": options.describe(),
        "topics": topics,
        "load_before": load_average(),
    }
    with (
        ClusterCommand(connection, topics, options, out / f"{tag}-cluster.log") as cluster,
        contextlib.closing(StatusWatch(connection)) as watch,
    ):
        sent = warm_cluster(connection, topics)
        fill = make_jobs(connection, topics, shape.load(messages), settings.fill_senders)
        began = time.monotonic()
        with running_senders(fill) as senders:
            senders.go()
            sent.update(sent_destinations(fill, senders.results(settings.fill_timeout_s)))
        wait_delivered(
            watch, topics, expected_deliveries(sent), timeout_s=settings.fill_timeout_s, desc="fill"
        )
        result["fill_s"] = round(time.monotonic() - began, 1)
        result["victim_input_records"] = end_offset(connection, input_topic(victim, Layout.SPLIT))
        trickle = _trickle_jobs(connection, topics, shape, settings, settings.timeout_s + 120)
        with running_senders(trickle) as senders:
            senders.go()
            times = kill_and_time(
                connection, watch, victim, steady_s=settings.steady_s, timeout_s=settings.timeout_s
            )
            result["kill"] = times.to_dict()
            result["recovery_seconds_metric"] = cluster.metric(
                "atomickafka_node_recovery_seconds", topic=victim
            )
            result["records_replayed"] = cluster.metric(
                "atomickafka_node_records_replayed_total", topic=victim
            )
            sent.update(_stop_trickle(senders))
        result.update(_finish(connection, watch, topics, sent, settings))
        result["restarts"] = cluster.metric("atomickafka_cluster_restarts_total")
    result["load_after"] = load_average()
    return result


def run_takeover(
    connection: Connection,
    shape: LoadShape,
    takeover_after_s: float,
    repeats: int,
    settings: FaultSettings,
    out: Path,
) -> dict[str, Any]:
    """With a standby per node, kill the active node of a topic ``repeats`` times (a
    different topic each time, round-robin); return every kill's times and their
    median and largest."""
    tag = f"takeover{takeover_after_s:g}s".replace(".", "_")
    topics = topic_names(tag, shape.topics)
    options = ClusterOptions(standby=True, takeover_after_s=takeover_after_s)
    result: dict[str, Any] = {
        "takeover_after_s": takeover_after_s,
        "cluster": options.describe(),
        "topics": topics,
        "load_before": load_average(),
    }
    kills: list[dict[str, Any]] = []
    with (
        ClusterCommand(connection, topics, options, out / f"{tag}-cluster.log") as cluster,
        contextlib.closing(StatusWatch(connection)) as watch,
    ):
        sent = warm_cluster(connection, topics)
        runs_s = repeats * (settings.settle_s + settings.steady_s + settings.timeout_s) + 120
        with running_senders(_trickle_jobs(connection, topics, shape, settings, runs_s)) as senders:
            senders.go()
            for rep in range(repeats):
                victim = topics[rep % len(topics)]
                ready = cluster.wait_for_processes(2, settings.timeout_s)
                time.sleep(settings.settle_s)  # the restarted standby joins its lease group
                before = cluster.node_processes().get(victim, [])
                times = kill_and_time(
                    connection,
                    watch,
                    victim,
                    steady_s=settings.steady_s,
                    timeout_s=settings.timeout_s,
                )
                row = times.to_dict()
                row["standby_ready"] = ready
                row["standby_took_over"] = times.new_pid in before
                kills.append(row)
            sent.update(_stop_trickle(senders))
        result.update(_finish(connection, watch, topics, sent, settings))
        result["restarts"] = cluster.metric("atomickafka_cluster_restarts_total")
    result["kills"] = kills
    result["live_s"] = spread(k["live_s"] for k in kills).to_dict()
    result["delivery_s"] = spread(k["delivery_s"] for k in kills).to_dict()
    result["load_after"] = load_average()
    return result
