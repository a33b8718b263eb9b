"""The status topic: what nodes and mergers say about themselves, and who reads it.

Every node and merger publishes a :class:`Status` to the compacted topic
``atomickafka-status`` about once a second, keyed by :func:`~atomickafka.kafka.topics.
node_key` (``T``, ``T/p`` for layer ``p``, ``T/merger``). It is the nodes' heartbeat:
clients refuse destinations whose node has not published within :data:`LIVE_WINDOW_S`
(§5.3), learn from it which protocol a topic's node runs, and ``atomickafka status``
prints it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from atomickafka.errors import TimedOutError
from atomickafka.kafka.consumer import consume_batch, make_consumer, usable, watermarks
from atomickafka.kafka.topics import STATUS_TOPIC

__all__ = [
    "LIVE_WINDOW_S",
    "Status",
    "StatusWatch",
    "read_statuses",
    "wait_for_nodes",
]

log = logging.getLogger(__name__)

#: A node whose last status is older than this is not live (statuses come each second).
LIVE_WINDOW_S: Final = 15.0


@dataclass(slots=True)
class Status:
    """One node's (or merger's) published status: the value of its status record."""

    key: str
    topic: str
    role: str  # "node" or "merger"
    node_id: str
    algorithm: str
    layout: str
    time: float  # wall-clock seconds when it was taken: the heartbeat
    pid: int = 0
    layer: int | None = None
    partitions: int = 1
    format_version: int = 2
    clock: int = 0
    watermark: int | None = None
    pending: int = 0
    oldest_pending_id: str | None = None
    oldest_pending_age_s: float | None = None
    #: The head of the queue and what each entry waits for (stuck messages first).
    waiting: list[dict[str, Any]] = field(default_factory=list)
    records_in: int = 0
    records_out: int = 0
    deliveries: int = 0
    dead_letters: int = 0
    rejected: int = 0
    protocol_mismatches: int = 0
    aborted: int = 0
    records_in_per_s: float = 0.0
    records_out_per_s: float = 0.0
    deliveries_per_s: float = 0.0
    replaying: bool = False
    #: Merger only: the watermark of each layer, and the layers the head waits for.
    layer_watermarks: list[int] = field(default_factory=list)
    blocked_by: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        """Inverse of :meth:`to_dict`; unknown fields are ignored, missing ones defaulted."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the status was taken."""
        return (time.time() if now is None else now) - self.time

    def live(self, now: float | None = None) -> bool:
        """Published recently enough to count as running."""
        return self.age_s(now) <= LIVE_WINDOW_S


def _parse(raw: bytes | None) -> Status | None:
    if raw is None:
        return None
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or "key" not in data:
            return None
        return Status.from_dict(data)
    except (orjson.JSONDecodeError, TypeError):
        return None  # a tombstone, or a record that is not a status


class StatusWatch:
    """Follows the status topic with one consumer and keeps each key's latest status.

    :meth:`refresh` reads what is new without blocking for long; the first call reads
    the topic up to its current end.
    """

    def __init__(
        self, bootstrap: str, overrides: Mapping[str, str] | None = None, timeout_s: float = 10.0
    ) -> None:
        self._consumer: Consumer = make_consumer(bootstrap, None, overrides)
        self._timeout_s = timeout_s
        self._assigned = False
        self.statuses: dict[str, Status] = {}

    def refresh(self) -> dict[str, Status]:
        """Read what was published since the last call; return every key's latest."""
        consumer = self._consumer
        if not self._assigned:
            meta = consumer.list_topics(STATUS_TOPIC, timeout=self._timeout_s).topics.get(
                STATUS_TOPIC
            )
            if meta is None or meta.error is not None:
                return self.statuses  # nobody has published yet
            parts = [TopicPartition(STATUS_TOPIC, p, OFFSET_BEGINNING) for p in meta.partitions]
            ends = {p.partition: watermarks(consumer, p, self._timeout_s)[1] for p in parts}
            consumer.assign(parts)
            self._assigned = True
            self._catch_up(ends)
        else:
            self._take(consume_batch(consumer, 10_000, 0.0))
        return self.statuses

    def _catch_up(self, ends: dict[int, int]) -> None:
        todo = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + self._timeout_s
        while todo and time.monotonic() < deadline:
            for record in self._take(consume_batch(self._consumer, 10_000, 0.2)):
                part, offset = record.partition(), record.offset()
                if part in todo and offset is not None and offset + 1 >= ends[part]:
                    todo.discard(part)

    def _take(self, batch: list[Any]) -> list[Any]:
        records = usable(batch)
        for record in records:
            status = _parse(record.value())
            if status is not None:
                self.statuses[status.key] = status
        return records

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


def read_statuses(
    bootstrap: str, overrides: Mapping[str, str] | None = None, timeout_s: float = 5.0
) -> dict[str, Status]:
    """The latest status each node and merger published, keyed by its status key."""
    watch = StatusWatch(bootstrap, overrides, timeout_s)
    try:
        return dict(watch.refresh())
    finally:
        watch.close()


def wait_for_nodes(
    bootstrap: str,
    keys: Iterable[str],
    *,
    timeout_s: float = 60.0,
    since: float | None = None,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, Status]:
    """Wait until every key's node (or merger) has published a live, not-replaying
    status taken after ``since`` (default: now)."""
    wanted = set(keys)
    since = time.time() if since is None else since
    deadline = time.monotonic() + timeout_s
    watch = StatusWatch(bootstrap, overrides, timeout_s=5.0)
    try:
        while True:
            try:
                statuses = watch.refresh()
            except KafkaException as exc:  # e.g. the status topic's leader not elected yet
                log.debug("status topic not readable yet: %s", exc)
                statuses = {}
            live = {
                k: s
                for k, s in statuses.items()
                if k in wanted and s.time >= since and not s.replaying
            }
            if len(live) == len(wanted):
                return live
            if time.monotonic() >= deadline:
                missing = ", ".join(sorted(wanted - set(live)))
                raise TimedOutError(f"nodes not up after {timeout_s:.0f}s: {missing}")
            time.sleep(0.3)
    finally:
        watch.close()
