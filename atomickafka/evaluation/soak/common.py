"""What the soak's phases share: the load's shape, fresh topic names, the warm-up,
waiting until everything sent is delivered (from the nodes' statuses), the order
checker over every delivery, and the machine's load.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from atomickafka.client import AtomicKafkaClient
from atomickafka.core.reader import KafkaRecord, read_delivery
from atomickafka.evaluation.bench.command import BenchLoad
from atomickafka.evaluation.cost.topic_scan import RecordedTopic, Role, scan_topics
from atomickafka.evaluation.load.measuring import DeliveryCounter, warm_up
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.status import StatusWatch
from atomickafka.kafka.topics import delivery_topic
from atomickafka.verify.checker import UNSET, DeliveryRecord, check, sent_from_destinations

__all__ = [
    "LoadShape",
    "check_order",
    "load_average",
    "topic_names",
    "wait_delivered",
    "warm_cluster",
]


@dataclass(frozen=True, slots=True)
class LoadShape:
    """What every phase's messages look like: the topics (one node each), the share
    multicast, each multicast's destination count (``None``: every topic) and the
    value size in bytes."""

    topics: int = 5
    share: float = 0.5
    fanout: tuple[int, int] | None = (2, 2)
    record_size: int = 200

    def load(self, messages: int, rate: float | None = None, seed: int = 0) -> BenchLoad:
        """``messages`` of this shape at ``rate`` msg/s (``None``: unpaced)."""
        return BenchLoad(messages, self.share, self.record_size, rate, self.fanout, seed)

    def describe(self) -> str:
        """``5 topics, 50 % multicast to 2 topics, 200-byte values``."""
        if self.fanout is None:
            to = "every topic"
        elif self.fanout[0] == self.fanout[1]:
            to = f"{self.fanout[0]} topics"
        else:
            to = f"{self.fanout[0]}-{self.fanout[1]} topics"
        return (
            f"{self.topics} topics, {self.share:.0%} multicast to {to} (drawn at random), "
            f"{self.record_size}-byte values"
        )


def topic_names(phase: str, count: int) -> list[str]:
    """Fresh topic names for one run of ``phase``: ``soak-<tag>-<phase>-t1`` ..."""
    tag = uuid.uuid4().hex[:6]
    return [f"soak-{tag}-{phase}-t{i}" for i in range(1, count + 1)]


def warm_cluster(connection: Connection, topics: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """One unmeasured multicast to every topic through each topic, waited for
    (:func:`~atomickafka.evaluation.load.measuring.warm_up`); return their ids and
    destinations, for the checker."""
    read = {delivery_topic(t): t for t in topics}
    with (
        AtomicKafkaClient(connection) as client,
        contextlib.closing(DeliveryCounter(connection, read)) as counter,
    ):
        sent = warm_up(client, list(topics), counter)
    return {w.message_id: tuple(sorted(topics)) for w in sent}


def node_deliveries(watch: StatusWatch, topics: Sequence[str]) -> int:
    """Deliveries the nodes of ``topics`` say they made, summed (their latest status)."""
    statuses = watch.refresh()
    return sum(statuses[t].deliveries for t in topics if t in statuses)


def wait_delivered(
    watch: StatusWatch,
    topics: Sequence[str],
    expected: int,
    *,
    timeout_s: float,
    stall_s: float = 120.0,
    desc: str = "delivered",
) -> int:
    """Wait until the nodes' statuses count ``expected`` deliveries, with a progress
    bar; give up after ``timeout_s``, or ``stall_s`` without progress. Return the
    count reached."""
    started = last_change = time.monotonic()
    seen = node_deliveries(watch, topics)
    with tqdm(total=expected, initial=min(seen, expected), desc=desc, unit="dlv") as bar:
        while seen < expected:
            now = time.monotonic()
            if now - started > timeout_s or now - last_change > stall_s:
                break
            time.sleep(0.5)
            count = node_deliveries(watch, topics)
            if count != seen:
                bar.update(min(count, expected) - min(seen, expected))
                seen, last_change = count, time.monotonic()
    return seen


def read_delivery_logs(
    connection: Connection, topics: Sequence[str], timeout_s: float = 900.0
) -> dict[str, list[DeliveryRecord]]:
    """Every delivery of ``topics``, in order, as the checker's records (ids,
    destinations, final timestamps; values are not compared)."""
    logs: dict[str, list[DeliveryRecord]] = {t: [] for t in topics}
    scanned = [RecordedTopic(delivery_topic(t), t, Role.DELIVERY, True) for t in topics]

    def take(where: RecordedTopic, record: KafkaRecord) -> None:
        message = read_delivery(record, at=where.node)
        if message is not None:
            logs[where.node].append(
                DeliveryRecord(
                    message.messageID,
                    message.topic,
                    message.timeStamp,
                    UNSET,
                    where.node,
                    message.partitionID or 0,
                )
            )

    scan_topics(connection, scanned, take, timeout_s)
    return logs


def check_order(
    connection: Connection, topics: Sequence[str], sent: Mapping[str, tuple[str, ...]]
) -> dict[str, Any]:
    """The independent order checker over every delivery of ``topics`` against
    ``sent`` (id -> destinations): integrity, validity, total order, timestamps."""
    began = time.monotonic()
    logs = read_delivery_logs(connection, topics)
    report = check(sent_from_destinations(sent), logs)
    return {
        "ok": report.ok,
        "summary": report.summary(),
        "counts": {k.value: n for k, n in report.counts.items()},
        "sent": len(sent),
        "deliveries": sum(len(v) for v in logs.values()),
        "seconds": round(time.monotonic() - began, 1),
    }


def load_average() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes."""
    return [round(x, 2) for x in os.getloadavg()]
