"""Chained bare hops: the latency floor of a three-hop path on the same broker.

AtomicKafka's ``direct`` multicast takes three Kafka hops from send to delivery (the
client's write to each destination's input log, the nodes' Notifies to each other, the
Delivery); a single-destination message takes two. The floor for such a path is the
same number of bare produce->consume hops with nothing ordering them: a client writes
to topic A, a *relay* process consumes A and produces each record unchanged (value and
key) to B, a second relay B to C, and the measuring consumer reads C.

A relay uses the nodes' client settings (:mod:`atomickafka.kafka.settings`: the same
producer defaults, a ``read_committed`` consumer, the nodes' poll wait and batch size,
:func:`~atomickafka.kafka.consumer.consume_batch`), but no transaction: it is the floor
of the Kafka clients alone, not of exactly-once.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from atomickafka.errors import TimedOutError
from atomickafka.kafka.connection import Where
from atomickafka.kafka.consumer import assign_from, consume_batch, make_consumer, usable
from atomickafka.kafka.producer import RecordProducer
from atomickafka.node.config import DEFAULT_BATCH_SIZE, DEFAULT_POLL_TIMEOUT_S

__all__ = ["relay_process", "running_relays", "write_warm_up"]

#: A bare pipe's warm-up record: it names an id (so the pipe carries it) and no send
#: time (so the measuring consumer counts it as a warm-up, not a measured message).
WARM_UP_RECORD: Final = b'{"id": "warm-up"}'


def write_warm_up(producer: RecordProducer, topic: str, timeout_s: float = 30.0) -> None:
    """Write :data:`WARM_UP_RECORD` to ``topic`` and wait for its acknowledgement: a new
    idempotent producer's first write waited ~500 ms one time in two (librdkafka asks
    for its producer id on a 500 ms timer when no connection is up yet when it is
    made), which became the p99 of the floor's paced rows when it hit a measured send."""
    producer.send(topic, WARM_UP_RECORD)
    producer.flush(timeout_s)


def relay_process(
    where: Where,
    source: str,
    target: str,
    ready: Any,
    stop: Any,
    max_seconds: float,
) -> None:
    """Child process: copy every record of ``source`` (partition 0, from its start) to
    ``target`` until ``stop`` is set (or ``max_seconds`` pass)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: PLC0415

    consumer = make_consumer(where, None, **{"isolation.level": "read_committed"})
    producer = RecordProducer(where, **{"client.id": f"relay-{source}"})
    assign_from(consumer, [TopicPartition(source, 0, OFFSET_BEGINNING)])
    producer.warm_up([target])
    write_warm_up(producer, target)
    ready.set()
    deadline = time.monotonic() + max_seconds
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            for record in usable(
                consume_batch(consumer, DEFAULT_BATCH_SIZE, DEFAULT_POLL_TIMEOUT_S)
            ):
                raw_key = record.key()
                key = raw_key.encode() if isinstance(raw_key, str) else raw_key
                producer.send(target, record.value(), key=key)
            producer.poll(0)
    finally:
        producer.close(30)
        consumer.close()


@contextmanager
def running_relays(
    where: Where,
    topics: Sequence[str],
    *,
    max_seconds: float = 3600.0,
    start_timeout_s: float = 60.0,
) -> Iterator[list[int]]:
    """A relay from each of ``topics`` to the next for the block (the topics must exist);
    yields their pids."""
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    procs = []
    try:
        for source, target in itertools.pairwise(topics):
            ready = ctx.Event()
            proc = ctx.Process(
                target=relay_process,
                args=(where, source, target, ready, stop, max_seconds),
                name=f"atomickafka-relay-{source}",
                daemon=True,
            )
            proc.start()
            procs.append(proc)
            if not ready.wait(start_timeout_s):
                raise TimedOutError(f"a relay did not start within {start_timeout_s:.0f}s")
        yield [p.pid for p in procs if p.pid is not None]
    finally:
        stop.set()
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)
