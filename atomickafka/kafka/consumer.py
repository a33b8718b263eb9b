"""Small Kafka I/O helpers shared by the node, the client and the tools."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

__all__ = ["consume_batch", "retry_transient", "watermarks"]

T = TypeVar("T")
log = logging.getLogger(__name__)


def consume_batch(consumer: Consumer, max_records: int, timeout_s: float) -> list[KafkaMessage]:
    """Wait up to ``timeout_s`` for one record, then take whatever else is already fetched.

    ``Consumer.consume(n, timeout)`` waits until it has ``n`` records or the timeout
    passes, which adds the whole timeout to every hop under light load; this returns as
    soon as anything is there and still batches under heavy load.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if max_records <= 1:
        return [first]
    return [first, *consumer.consume(num_messages=max_records - 1, timeout=0)]


#: Errors a freshly created topic or a starting broker answers with for a while.
_TRANSIENT_CODES: Final = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    }
)


def retry_transient(call: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """Run ``call``, retrying while Kafka answers with a transient error (a new topic's
    leader not elected yet, a coordinator still loading) until ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            transient = err is not None and (err.retriable() or err.code() in _TRANSIENT_CODES)
            if not transient or time.monotonic() + delay > deadline:
                raise
            log.debug("%s: %s; retrying", what, err)
            time.sleep(delay)
            delay = min(1.0, delay * 2)


def watermarks(
    consumer: Consumer, part: TopicPartition, timeout_s: float = 60.0
) -> tuple[int, int]:
    """``(low, high)`` offsets of ``part``, waiting out a new topic's leader election."""
    return retry_transient(
        lambda: consumer.get_watermark_offsets(part, timeout=10),
        f"watermarks of {part.topic}",
        timeout_s,
    )
