"""``atomickafka bench``: AtomicKafka against a bare Kafka pipe, measured in one run.

Every scenario uses the same broker, record size and measuring process:

- ``kafka``: a producer writes N records to one topic and a consumer reads them back
  (the baseline: what Kafka alone moves on this machine).
- ``amcast-P``: N messages through five AtomicKafka nodes, P % multicast to all five
  topics, the rest single-topic (round-robin over the topics).
- ``kafka@half`` and ``amcast-P@half``: the bare pipe and the 50 % multicast scenario
  again, both paced at half the rate the unpaced multicast run reached, to show latency
  below saturation (an unpaced run's latency is mostly queueing in the burst).

A message's latency is the time from its send to its delivery at the last of its
destinations, read by a separate consumer process (the evaluation's
:class:`~atomickafka.evaluation.measuring.DeliveryCounter`, which the evaluation suite
counts its deliveries with too); throughput counts messages fully delivered over the
time from the first send to the last delivery. Each AtomicKafka scenario starts with
the suite's warm-up (:func:`~atomickafka.evaluation.measuring.warm_up`); with
partition layers, it also reports the merge delay measured on Kafka
(:func:`~atomickafka.evaluation.merge_delay.kafka_merge_delays`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from atomickafka.client import AtomicKafkaClient
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.reader import KafkaRecord
from atomickafka.evaluation.measuring import (
    MULTICAST_FIELD,
    SEND_TIME_FIELD,
    Arrival,
    DeliveryCounter,
    delivery_arrival,
    percentile,
    warm_up,
)
from atomickafka.evaluation.merge_delay import kafka_merge_delays
from atomickafka.kafka.admin import admin_client, ensure_topics, partition_count
from atomickafka.kafka.consumer import make_consumer, watermarks
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.topics import Layout, delivery_topic, input_topic, layers_topic
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.node.launch import running_cluster

__all__ = ["BenchResult", "BenchSetup", "run_bench"]


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One scenario's figures."""

    name: str
    messages: int
    seconds: float
    messages_per_s: float
    records_per_s: float
    p50_ms: float
    p99_ms: float
    multicast_p99_ms: float | None
    delivered_ok: bool
    #: Partitioned runs: time from a layer's decision to the merged delivery (p50, p99).
    merge_p50_ms: float | None = None
    merge_p99_ms: float | None = None


def _plain_arrival(record: KafkaRecord, owner: str) -> Arrival | None:
    """A record of the bare pipe: its value is the probe itself, with its id."""
    raw = record.value()
    try:
        data = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        return None
    message_id = data.get("id") if isinstance(data, dict) else None
    return Arrival(message_id, owner, 1, raw) if isinstance(message_id, str) else None


def _measure(
    bootstrap: str,
    topics: dict[str, str],
    plain: bool,
    expected: int,
    timeout_s: float,
    ready: Any,
    results: Any,
) -> None:
    """Child process: read ``topics`` until ``expected`` measured messages were
    delivered at every destination (``plain``: the bare pipe's records)."""
    read = _plain_arrival if plain else delivery_arrival
    counter = DeliveryCounter(bootstrap, topics, read=read, fetch_wait_ms=5)
    with contextlib.closing(counter):
        ready.set()
        deadline = time.time() + timeout_s
        while len(counter.completed) < expected and time.time() < deadline:
            counter.poll(0.1)
    results.put(
        {
            "latencies": [(c.latency_ms, c.multicast) for c in counter.completed],
            "first_send": counter.first_send_s or 0.0,
            "last_delivery": counter.last_completion_s,
            "missing": expected - len(counter.completed),
        }
    )


def _payload(mid: str, multicast: bool, size: int) -> dict[str, Any]:
    """A probe padded to about ``size`` bytes; it names its id for the bare pipe."""
    body: dict[str, Any] = {
        "id": mid,
        SEND_TIME_FIELD: time.time_ns() // 1000,
        MULTICAST_FIELD: multicast,
    }
    pad = size - len(orjson.dumps(body)) - 10
    body["pad"] = "x" * max(0, pad)
    return body


def _watermark_total(bootstrap: str, names: Sequence[str]) -> int:
    """Records in every partition of ``names`` (that exist)."""
    admin = admin_client(bootstrap)
    consumer: Consumer = make_consumer(bootstrap)
    try:
        total = 0
        for name in set(names):
            for partition in range(partition_count(admin, name) or 0):
                low, high = watermarks(consumer, TopicPartition(name, partition))
                total += high - low
        return total
    finally:
        consumer.close()


def _run_measured(
    name: str,
    bootstrap: str,
    read_topics: dict[str, str],
    plain: bool,
    expected: int,
    send: Callable[[], None],
    written_topics: list[str],
    timeout_s: float,
) -> BenchResult:
    """Start the measuring process on ``read_topics``, ``send``, and sum up what it saw."""
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    results = ctx.Queue()
    reader = ctx.Process(
        target=_measure,
        args=(bootstrap, read_topics, plain, expected, timeout_s, ready, results),
        daemon=True,  # a failed send must not leave the command waiting for it
    )
    reader.start()
    ready.wait(60)
    time.sleep(0.5)  # let the reader's first fetch settle
    records_before = _watermark_total(bootstrap, written_topics)
    send()
    outcome = results.get(timeout=timeout_s + 30)
    reader.join(30)
    lat = sorted(ms for ms, _ in outcome["latencies"])
    multicast = sorted(ms for ms, m in outcome["latencies"] if m)
    seconds = max(outcome["last_delivery"] - outcome["first_send"], 1e-6)
    delivered = len(outcome["latencies"])
    records = _watermark_total(bootstrap, written_topics) - records_before
    return BenchResult(
        name=name,
        messages=delivered,
        seconds=round(seconds, 3),
        messages_per_s=round(delivered / seconds, 1),
        records_per_s=round(records / seconds, 1),
        p50_ms=round(percentile(lat, 0.50), 2),
        p99_ms=round(percentile(lat, 0.99), 2),
        multicast_p99_ms=round(percentile(multicast, 0.99), 2) if multicast else None,
        delivered_ok=outcome["missing"] == 0,
    )


def _bare_kafka(
    bootstrap: str, messages: int, size: int, timeout_s: float, rate: float | None = None
) -> BenchResult:
    topic = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    ensure_topics(admin_client(bootstrap), [topic])

    def send() -> None:
        producer = RecordProducer(bootstrap)
        producer.warm_up([topic])  # metadata first: not part of a latency
        start = time.monotonic()
        for i in range(messages):
            if rate:
                _pace(start, i, rate)
            producer.send(topic, orjson.dumps(_payload(f"k-{i}", False, size)))
            producer.poll(0)
        producer.flush(60)

    name = "kafka@half" if rate else "kafka"
    return _run_measured(name, bootstrap, {topic: topic}, True, messages, send, [topic], timeout_s)


def _pace(start: float, index: int, rate: float) -> None:
    """Sleep until message ``index`` is due at ``rate`` messages/s."""
    delay = start + index / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)


@dataclass(frozen=True, slots=True)
class BenchSetup:
    """How the nodes run: protocol, topic layout and partition layers."""

    algorithm: Algorithm = DEFAULT_ALGORITHM
    layout: Layout = Layout.SPLIT
    partitions: int = 1
    #: librdkafka settings (``-X``) for the nodes and the sending client.
    overrides: Mapping[str, str] = field(default_factory=dict)

    def cluster(self, bootstrap: str, topics: list[str]) -> Any:
        """The nodes of ``topics`` for a block of code."""
        node = NodeConfig(
            bootstrap,
            topics[0],
            algorithm=self.algorithm,
            layout=self.layout,
            partitions=self.partitions,
            overrides=self.overrides,
            log_level="warning",
        )
        return running_cluster(ClusterConfig(tuple(topics), node))

    def written(self, topics: list[str]) -> list[str]:
        """Every Kafka topic the nodes write."""
        out = [input_topic(t, self.layout) for t in topics]
        out += [delivery_topic(t) for t in topics]
        if self.partitions > 1:
            out += [layers_topic(t) for t in topics]
        return out


def _amcast(
    bootstrap: str,
    topics: list[str],
    setup: BenchSetup,
    messages: int,
    share: float,
    size: int,
    rate: float | None,
    timeout_s: float,
) -> BenchResult:
    read = {delivery_topic(t): t for t in topics}
    with (
        AtomicKafkaClient(bootstrap, layout=setup.layout, config=setup.overrides) as warming,
        contextlib.closing(DeliveryCounter(bootstrap, read, setup.overrides)) as counter,
    ):
        warm_up(warming, topics, counter)
    client = AtomicKafkaClient(bootstrap, layout=setup.layout, config=setup.overrides)
    stride = round(1 / share) if share > 0 else 0
    plan: list[tuple[str, tuple[str, ...]]] = []
    client.warm_up(topics)
    prefix = client.id_prefix
    for i in range(messages):
        multicast = stride > 0 and i % stride == 0
        dests = tuple(topics) if multicast else (topics[i % len(topics)],)
        plan.append((f"{prefix}-{i}", dests))

    def send() -> None:
        start = time.monotonic()
        for i, (mid, dests) in enumerate(plan):
            if rate:
                _pace(start, i, rate)
            sent_id = client.send(_payload(mid, len(dests) > 1, size), dests)
            assert sent_id == mid
        client.flush(60)

    name = f"amcast-{round(share * 100)}%" + ("@half" if rate else "")
    written = setup.written(topics)
    result = _run_measured(name, bootstrap, read, False, messages, send, written, timeout_s)
    if setup.partitions > 1:
        delays = sorted(kafka_merge_delays(bootstrap, topics, setup.partitions))
        result = dataclasses.replace(
            result,
            merge_p50_ms=round(percentile(delays, 0.50), 2),
            merge_p99_ms=round(percentile(delays, 0.99), 2),
        )
    return result


def run_bench(
    bootstrap: str,
    *,
    messages: int = 20_000,
    record_size: int = 200,
    shares: Sequence[float] = (0.0, 0.1, 0.5),
    setup: BenchSetup | None = None,
    timeout_s: float = 300.0,
    warmup: bool = True,
    paced_rate: float | None = None,
    on_result: Any = None,
) -> list[BenchResult]:
    """Run every scenario; return their figures (also passed to ``on_result`` as they come)."""
    setup = setup or BenchSetup()
    results: list[BenchResult] = []

    def record(result: BenchResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    run_id = uuid.uuid4().hex[:6]
    if warmup:
        # A fresh broker JIT-compiles its hot paths for a while; measured runs start
        # after one unmeasured pass through both kinds of traffic.
        _bare_kafka(bootstrap, 5000, record_size, timeout_s)
        topics = [f"bench-{run_id}-warm-t{i}" for i in range(1, 6)]
        with setup.cluster(bootstrap, topics):
            _amcast(bootstrap, topics, setup, 5000, 0.1, record_size, None, timeout_s)
    # Bare Kafka moves a burst of N records in a fraction of a second; five times as
    # many make its rate less a matter of scheduling luck.
    record(_bare_kafka(bootstrap, 5 * messages, record_size, timeout_s))
    for share in shares:
        topics = [f"bench-{run_id}-{round(share * 100)}-t{i}" for i in range(1, 6)]
        with setup.cluster(bootstrap, topics):
            record(_amcast(bootstrap, topics, setup, messages, share, record_size, None, timeout_s))
    worst = max(shares)
    saturated = next(r for r in results if r.name == f"amcast-{round(worst * 100)}%")
    topics = [f"bench-{run_id}-half-t{i}" for i in range(1, 6)]
    half = paced_rate or saturated.messages_per_s / 2
    count = max(1000, min(messages, int(half * 10)))
    record(_bare_kafka(bootstrap, count, record_size, timeout_s, rate=half))
    with setup.cluster(bootstrap, topics):
        record(_amcast(bootstrap, topics, setup, count, worst, record_size, half, timeout_s))
    return results
