"""Phase 1 of the soak: a long paced load through one node per topic, each node's
resident memory sampled against the messages delivered.

The cluster runs as an operator runs it (``atomickafka cluster``, exactly-once,
default snapshots). Sender processes send the load at a steady rate below capacity, so
that the input logs' time (the nodes' memory window is in log time, docs/DESIGN.md
§4.13) passes as on a live system; a :class:`~atomickafka.evaluation.load.measuring.
DeliveryCounter` counts the messages delivered at every destination (and their
latency), and every few seconds each node's RSS is read from ``/proc`` (the pid from
its status). At the end the order checker reads every delivery.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from atomickafka.evaluation.cost.rss import MemorySample, read_rss_mib, summarise_memory
from atomickafka.evaluation.errors import RunError
from atomickafka.evaluation.load.measuring import DeliveryCounter, percentile
from atomickafka.evaluation.soak.cluster import ClusterCommand, ClusterOptions
from atomickafka.evaluation.soak.common import (
    LoadShape,
    check_order,
    load_average,
    topic_names,
    warm_cluster,
)
from atomickafka.evaluation.soak.load import Senders, make_jobs, running_senders
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.status import StatusWatch
from atomickafka.kafka.topics import delivery_topic

__all__ = ["SoakSettings", "run_soak"]


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """The soak's size and pace, how often memory is sampled, and how long the
    warm-up is (the memory window of 60 s of log time, filled, and a margin)."""

    messages: int = 1_000_000
    rate: float | None = 1000.0
    senders: int = 2
    sample_s: float = 2.0
    warmup_s: float = 90.0
    timeout_s: float = 3600.0
    stall_s: float = 180.0
    check: bool = True


def _sample(
    watch: StatusWatch, topics: Sequence[str], delivered: int, elapsed_s: float
) -> MemorySample:
    statuses = watch.refresh()
    rss: dict[str, float] = {}
    for topic in topics:
        status = statuses.get(topic)
        mib = None if status is None else read_rss_mib(status.pid)
        if mib is not None:
            rss[topic] = mib
    return MemorySample(elapsed_s, delivered, rss, os.getloadavg()[0])


def _sampled_load(
    counter: DeliveryCounter,
    watch: StatusWatch,
    senders: Senders,
    topics: Sequence[str],
    settings: SoakSettings,
) -> list[MemorySample]:
    """Let the senders go; count deliveries and sample memory until every message is
    delivered (or the time is up, or nothing moved for ``stall_s``)."""
    expected = settings.messages
    samples = [_sample(watch, topics, 0, 0.0)]  # idle, after the warm-up multicasts
    began = last_progress = time.monotonic()
    next_sample = began + settings.sample_s
    senders.go()
    with tqdm(total=expected, desc="soak", unit="msg", mininterval=2.0) as bar:
        while len(counter.completed) < expected:
            now = time.monotonic()
            if now - began > settings.timeout_s or now - last_progress > settings.stall_s:
                break
            errors = senders.errors()
            if errors:
                raise RunError(f"a sender failed:\n{errors[0]}")
            before = len(counter.completed)
            counter.poll(0.2)
            done = len(counter.completed)
            if done > before:
                bar.update(done - before)
                last_progress = time.monotonic()
            if now >= next_sample:
                samples.append(_sample(watch, topics, done, now - began))
                next_sample += settings.sample_s
    samples.append(_sample(watch, topics, len(counter.completed), time.monotonic() - began))
    return samples


def _latency(counter: DeliveryCounter) -> dict[str, Any]:
    done = counter.completed
    lat = sorted(c.latency_ms for c in done)
    multicast = sorted(c.latency_ms for c in done if c.multicast)
    seconds = max(counter.last_completion_s - (counter.first_send_s or 0.0), 1e-6)
    return {
        "delivered": len(done),
        "seconds": round(seconds, 1),
        "messages_per_s": round(len(done) / seconds, 1),
        "p50_ms": round(percentile(lat, 0.5), 1),
        "p99_ms": round(percentile(lat, 0.99), 1),
        "multicast_p99_ms": round(percentile(multicast, 0.99), 1) if multicast else None,
    }


def run_soak(
    connection: Connection, shape: LoadShape, settings: SoakSettings, out: Path
) -> dict[str, Any]:
    """Run the soak; return its figures (plain data), with every memory sample."""
    topics = topic_names("soak", shape.topics)
    options = ClusterOptions()
    load = shape.load(settings.messages, settings.rate)
    jobs = make_jobs(connection, topics, load, settings.senders)
    result: dict[str, Any] = {
        "settings": asdict(settings),
        "shape": shape.describe(),
        "cluster": options.describe(),
        "topics": topics,
        "load_before": load_average(),
    }
    with ClusterCommand(connection, topics, options, out / "soak-cluster.log") as cluster:
        warm = warm_cluster(connection, topics)
        read = {delivery_topic(t): t for t in topics}
        with (
            contextlib.closing(DeliveryCounter(connection, read)) as counter,
            contextlib.closing(StatusWatch(connection)) as watch,
            running_senders(jobs) as senders,
        ):
            samples = _sampled_load(counter, watch, senders, topics, settings)
            complete = len(counter.completed) >= settings.messages
            results = senders.results()
            sent = {**warm, **senders.sent()}
            result["latency"] = _latency(counter)
        result["send_seconds"] = [round(r.seconds, 1) for r in results]
        result["complete"] = complete
        result["restarts"] = cluster.metric("atomickafka_cluster_restarts_total")
        result["load_after"] = load_average()
        if settings.check:
            result["check"] = check_order(connection, topics, sent)
    result["memory"] = [m.to_dict() for m in summarise_memory(samples, settings.warmup_s)]
    result["samples"] = [s.to_dict() for s in samples]
    return result
