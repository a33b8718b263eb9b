"""The records a run wrote in its measured window, by type: how many, how many
messages they carry, and how many bytes of value.

A record's type is its ``messageType`` as the recording names it
(:func:`~atomickafka.evaluation.cost.topic_scan.classify`: ``Bundle`` for a bundle, whose
messages are its inner ones; ``NodeStatus`` for a status). A record counts when its
Kafka timestamp falls in the window. :class:`TrafficTally` does the counting;
:func:`scan_traffic` feeds it from Kafka (the bench), the evaluation from its recording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from atomickafka.core.reader import KafkaRecord
from atomickafka.evaluation.cost.topic_scan import RecordedTopic, classify, scan_topics
from atomickafka.jsonnames import camel_keys
from atomickafka.kafka.connection import Where

__all__ = ["TrafficTally", "TypeTraffic", "scan_traffic"]


@dataclass(frozen=True, slots=True)
class TypeTraffic:
    """Records of one type: how many, the messages in them, their value bytes."""

    records: int
    messages: int
    value_bytes: int

    def to_dict(self) -> dict[str, int]:
        """Plain data for JSON."""
        return {"records": self.records, "messages": self.messages, "valueBytes": self.value_bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TypeTraffic:
        """Inverse of :meth:`to_dict`, also of the snake_case names of earlier files."""
        data = camel_keys(data)
        return cls(int(data["records"]), int(data["messages"]), int(data["valueBytes"]))


class TrafficTally:
    """Counts records by type whose Kafka timestamp is in ``[start_ms, end_ms]``."""

    def __init__(self, start_ms: int, end_ms: int) -> None:
        self.start_ms, self.end_ms = start_ms, end_ms
        self._counts: dict[str, list[int]] = {}

    def add(self, kind: str, messages: int, value_bytes: int, timestamp_ms: int) -> None:
        """One record of type ``kind``, carrying ``messages``, written at ``timestamp_ms``."""
        if not self.start_ms <= timestamp_ms <= self.end_ms:
            return
        counts = self._counts.setdefault(kind, [0, 0, 0])
        counts[0] += 1
        counts[1] += messages
        counts[2] += value_bytes

    def add_record(self, where: RecordedTopic, record: KafkaRecord) -> None:
        """One Kafka record of the run's topic ``where``."""
        found = classify(where, record)
        seen = found.seen
        messages = len(seen.inner) if seen.is_bundle else 1
        self.add(found.kind, messages, seen.size, record.timestamp()[1])

    def result(self) -> dict[str, TypeTraffic]:
        """Every type seen, sorted by name."""
        return {kind: TypeTraffic(*self._counts[kind]) for kind in sorted(self._counts)}


def scan_traffic(
    where: Where,
    topics: Sequence[RecordedTopic],
    start_ms: int,
    end_ms: int,
    *,
    timeout_s: float = 300.0,
) -> dict[str, TypeTraffic]:
    """The records of ``topics`` written between ``start_ms`` and ``end_ms``, by type."""
    tally = TrafficTally(start_ms, end_ms)
    scan_topics(where, topics, tally.add_record, timeout_s)
    return tally.result()
