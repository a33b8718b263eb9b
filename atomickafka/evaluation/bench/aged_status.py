"""An aged status topic, for measuring start-up: many old heartbeats, written now.

A cluster that has run for hours leaves tens of thousands of status records in the
status topic (compaction only cleans closed segments). :func:`fill_old_statuses`
writes ``count`` such records, each with a Kafka timestamp ``age_s`` in the past (the
producer sets it explicitly), under keys of made-up nodes, so that a reader that takes
the whole topic pays for them and a reader of the live window does not see them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

import orjson
from confluent_kafka import KafkaError

from atomickafka.core.engine import DEFAULT_ALGORITHM
from atomickafka.errors import QueueFullError, TimedOutError
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.connection import Where
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.status import Role, Status, status_topic_spec
from atomickafka.kafka.topics import STATUS_TOPIC, Layout

__all__ = ["FILLER_PREFIX", "fill_old_statuses"]

#: Every made-up key starts so (``aged-<run>-<n>``): they never name a real topic.
FILLER_PREFIX = "aged-"


def fill_old_statuses(
    where: Where,
    count: int,
    *,
    age_s: float = 3600.0,
    keys: int = 1000,
    names: Sequence[str] | None = None,
    timeout_s: float = 120.0,
) -> list[str]:
    """Write ``count`` statuses of ``keys`` made-up nodes (or of the nodes of topics
    ``names``, long gone), each taken and timestamped ``age_s`` seconds ago (spread
    over one more second), to the status topic; return their keys. Raises
    :class:`~atomickafka.errors.TimedOutError` when the broker has not acknowledged
    them all within ``timeout_s``."""
    ensure_topics(admin_client(where), {STATUS_TOPIC: status_topic_spec()})
    run = uuid.uuid4().hex[:8]
    names = list(names or [f"{FILLER_PREFIX}{run}-{i}" for i in range(keys)])
    then = time.time() - age_s
    template = Status(
        key=names[0],
        topic=names[0],
        role=Role.NODE,
        node_id=f"node-{names[0]}",
        algorithm=DEFAULT_ALGORITHM,
        layout=Layout.SPLIT,
        time=then,
    )
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    deadline = time.monotonic() + timeout_s
    producer = RecordProducer(where, **{"linger.ms": 50})
    producer.queue_wait_s = timeout_s  # how long one send may wait for room in the queue
    try:
        _send_aged(producer, template, names, count, then, report)
        left = producer.flush(max(1.0, deadline - time.monotonic()))
    finally:
        producer.close(0)  # what the flush left unacknowledged is reported below
    if left or errors:
        raise TimedOutError(
            f"filling the status topic: {left} records unacknowledged, {len(errors)} refused"
            + (f" (first: {errors[0]})" if errors else "")
        )
    return names


def _send_aged(
    producer: RecordProducer,
    template: Status,
    names: Sequence[str],
    count: int,
    then: float,
    report: Callable[[KafkaError | None, object], None],
) -> None:
    """Queue the ``count`` statuses, the names in turn, spread over a second from ``then``."""
    for i in range(count):
        name = names[i % len(names)]
        taken = then + i / max(count, 1)
        status = replace(
            template, key=name, topic=name, node_id=f"node-{name}", time=taken, records_in=i
        )
        try:
            producer.send(
                STATUS_TOPIC,
                orjson.dumps(status.to_dict()),
                key=name.encode(),
                on_delivery=report,
                timestamp_ms=int(taken * 1000),
            )
        except QueueFullError:
            raise TimedOutError(f"filling the status topic: queue full after {i}") from None
        producer.poll(0)
