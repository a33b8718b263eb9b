"""Per-node counters and the status record a node publishes about itself."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from atomickafka.core.engine import Engine

__all__ = ["NodeMetrics", "NodeStatus"]


@dataclass(slots=True)
class NodeStatus:
    """One node's published status (the value of its record in the status topic)."""

    topic: str
    node_id: str
    algorithm: str
    layout: str
    pid: int
    time: float  # wall-clock seconds when the status was taken
    clock: int
    pending: int
    oldest_pending_id: str | None
    oldest_pending_age_s: float | None
    records_in: int
    records_out: int
    deliveries: int
    dead_letters: int
    records_in_per_s: float
    records_out_per_s: float
    deliveries_per_s: float
    replaying: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeStatus:
        """Inverse of :meth:`to_dict`, ignoring unknown fields."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


@dataclass(slots=True)
class NodeMetrics:
    """Counters kept by the Kafka shell of one node, with rates over the last interval.

    ``first_seen`` remembers when the node first read a record of each message it still
    holds, so that the age of the oldest pending message can be reported.
    """

    dead_letters: int = 0
    first_seen: dict[str, float] = field(default_factory=dict)
    _last_time: float = field(default_factory=time.monotonic)
    _last_in: int = 0
    _last_out: int = 0
    _last_deliveries: int = 0

    def snapshot(
        self, engine: Engine, *, layout: str, replaying: bool, now: float | None = None
    ) -> NodeStatus:
        """Take a status and start a new rate interval."""
        mono = time.monotonic() if now is None else now
        stats = engine.stats
        elapsed = max(mono - self._last_time, 1e-9)
        head = engine.oldest_pending()
        age = None
        if head is not None and head.messageID in self.first_seen:
            age = round(mono - self.first_seen[head.messageID], 3)
        status = NodeStatus(
            topic=engine.topic,
            node_id=engine.node_id,
            algorithm=engine.algorithm.value,
            layout=layout,
            pid=os.getpid(),
            time=time.time(),
            clock=engine.clock,
            pending=engine.pending_count,
            oldest_pending_id=head.messageID if head else None,
            oldest_pending_age_s=age,
            records_in=stats.records_in,
            records_out=stats.records_out,
            deliveries=stats.deliveries,
            dead_letters=self.dead_letters,
            records_in_per_s=round((stats.records_in - self._last_in) / elapsed, 1),
            records_out_per_s=round((stats.records_out - self._last_out) / elapsed, 1),
            deliveries_per_s=round((stats.deliveries - self._last_deliveries) / elapsed, 1),
            replaying=replaying,
        )
        self._last_time = mono
        self._last_in = stats.records_in
        self._last_out = stats.records_out
        self._last_deliveries = stats.deliveries
        self._forget_settled(engine)
        return status

    def _forget_settled(self, engine: Engine) -> None:
        settled = [mid for mid in self.first_seen if not engine.is_pending(mid)]
        for mid in settled:
            del self.first_seen[mid]
