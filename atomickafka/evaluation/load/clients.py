"""The load: one process per client, sending its plan and noting every send time.

Clients run as separate processes (multiprocessing ``spawn``: a fresh interpreter, Kafka
clients created after the start) so that they do not share a GIL with the measuring
consumer in the suite's process. Each sends its messages to its own topic (the thesis's
clients wrote to topics 1 and 3; the node there coordinates a multicast), puts the send
time into the value and also returns it, so both the recording and a reader of the
topics alone know it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from atomickafka.errors import TimedOutError
from atomickafka.evaluation.load.measuring import (
    MULTICAST_FIELD,
    SEND_TIME_FIELD,
    WARMUP_VALUE,
    Sender,
)
from atomickafka.evaluation.load.scenarios import ClientPlan
from atomickafka.evaluation.load.variants import System
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.topics import Layout

__all__ = ["ClientJob", "ClientResult", "client_process", "make_sender", "payload"]


def payload(
    client_index: int, seq: int, multicast: bool, send_us: int, size: int = 0
) -> dict[str, Any]:
    """The value of a measured message: client, sequence number, multicast flag and the
    send time in microseconds since the epoch (a probe, see
    :mod:`~atomickafka.evaluation.load.measuring`; warm-up values have no send time), padded
    to ``size`` bytes of JSON when that is more than the probe alone."""
    value: dict[str, Any] = {
        "c": client_index,
        "i": seq,
        MULTICAST_FIELD: multicast,
        SEND_TIME_FIELD: send_us,
    }
    if size > 0:
        pad = size - len(orjson.dumps(value)) - len(',"pad":""')
        if pad > 0:
            value["pad"] = "x" * pad
    return value


@dataclass(frozen=True, slots=True)
class ClientJob:
    """Everything a client process needs (picklable), and how it reaches Kafka."""

    connection: Connection
    plan: ClientPlan
    system: System
    layout: Layout
    pace_ms: float = 0.0
    #: Bytes of each measured value as JSON (0: the probe alone, about 60 bytes).
    record_size: int = 0
    sequencer_topic: str | None = None
    flush_timeout_s: float = 300.0
    start_timeout_s: float = 300.0
    #: Signing secrets (§4.14): the AtomicKafka client signs what it writes.
    secret_file: str | None = None


@dataclass(frozen=True, slots=True)
class ClientResult:
    """What a client sent, in order: ids and send times (µs since the epoch), and its
    warm-up message (sent and acknowledged before the start signal)."""

    client_id: str
    index: int
    home_topic: str
    message_ids: list[str]
    send_us: list[int]
    warmup_id: str = ""
    warmup_us: int = 0
    error: str | None = None


def make_sender(job: ClientJob) -> Sender:
    """The sender of ``job``'s system (imports Kafka clients only in the child)."""
    if job.system is System.KAFKA:
        from atomickafka.evaluation.load.bare import BarePipeSender  # noqa: PLC0415

        return BarePipeSender(job.connection, job.plan.client_id)
    if job.system.baseline is not None:  # every sequencer's clients write to its topic
        from atomickafka.evaluation.load.sequencer import SequencerSender  # noqa: PLC0415

        assert job.sequencer_topic is not None
        return SequencerSender(job.connection, job.sequencer_topic, job.plan.client_id)
    from atomickafka.client import AtomicKafkaClient  # noqa: PLC0415

    return AtomicKafkaClient(
        job.connection,
        layout=job.layout,
        client_id=job.plan.client_id,
        secret_file=job.secret_file,
    )


def _send_plan(sender: Sender, job: ClientJob) -> tuple[list[str], list[int]]:
    plan = job.plan
    ids: list[str] = []
    times: list[int] = []
    pace_s = job.pace_ms / 1000
    start = time.monotonic()
    for seq, dests in enumerate(plan.destinations):
        if pace_s > 0:
            delay = start + seq * pace_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        sent = time.time_ns() // 1000
        value = payload(plan.index, seq, len(dests) > 1, sent, job.record_size)
        # a client writes through its own topic when it is a destination (else the
        # message would be relayed: the many-topic workload's sets may leave it out)
        via = plan.home_topic if plan.home_topic in dests else None
        ids.append(sender.send(value, dests, via=via))
        times.append(sent)
    sender.flush(job.flush_timeout_s)
    return ids, times


def client_process(job: ClientJob, ready: Any, go: Any, results: Any, done: Any) -> None:
    """Child process body: warm up, signal ``ready``, wait for ``go``, send, report,
    then wait for ``done`` (so that its CPU time is read while it still runs).

    The outcome (or the error) goes to ``results`` as a :class:`ClientResult`.
    """
    plan = job.plan
    try:
        sender = make_sender(job)
        topics: Sequence[str] = sorted({t for dests in plan.destinations for t in dests})
        sender.warm_up([*topics, plan.home_topic])
        # A new producer needs a few hundred ms (connections, an idempotent producer id)
        # before it sends: one acknowledged message keeps that out of the measurement.
        warmup_us = time.time_ns() // 1000
        warmup_id = sender.send(WARMUP_VALUE, (plan.home_topic,), via=plan.home_topic)
        sender.flush(job.flush_timeout_s)
        ready.set()
        if not go.wait(job.start_timeout_s):
            raise TimedOutError(f"no start signal within {job.start_timeout_s:.0f}s")
        ids, times = _send_plan(sender, job)
        result = ClientResult(
            plan.client_id, plan.index, plan.home_topic, ids, times, warmup_id, warmup_us
        )
        results.put(result)
    except Exception:
        results.put(
            ClientResult(
                plan.client_id,
                plan.index,
                plan.home_topic,
                [],
                [],
                error=traceback.format_exc(),
            )
        )
    done.wait(job.start_timeout_s)
