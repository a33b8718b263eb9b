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
destinations, read by a separate consumer process; throughput counts messages fully
delivered over the time from the first send to the last delivery.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from atomickafka.core.engine import DEFAULT_ALGORITHM
from atomickafka.kafka.admin import ensure_topics, partition_count
from atomickafka.kafka.consumer import consume_batch, make_consumer, read_partitions, watermarks
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.settings import admin_config
from atomickafka.kafka.topics import Layout, delivery_topic, input_topic, layers_topic
from atomickafka.node.launch import running_cluster
from client import AtomicKafkaClient

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


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _measure(
    bootstrap: str,
    topics: list[str],
    expected: dict[str, int],
    timeout_s: float,
    ready: Any,
    results: Any,
) -> None:
    """Child process: read ``topics`` until ``expected`` deliveries per message arrived."""
    consumer = make_consumer(bootstrap, None, None, **{"fetch.wait.max.ms": 5})
    consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
    ready.set()
    remaining = dict(expected)  # messageID -> deliveries still to come
    sent_at: dict[str, float] = {}
    latencies: list[tuple[float, bool]] = []
    first_send = None
    last_delivery = 0.0
    deadline = time.time() + timeout_s
    while remaining and time.time() < deadline:
        for record in consume_batch(consumer, 5000, 0.1):
            if record.error() is not None or record.value() is None:
                continue
            now = time.time()
            data = orjson.loads(record.value() or b"{}")
            if data.get("messageType", "DeliveryMessage") != "DeliveryMessage":
                continue
            value = data.get("value", data)
            mid = data.get("messageID") or value.get("id")
            if mid not in remaining:
                continue
            sent = value["t"] / 1e6
            sent_at[mid] = sent
            first_send = sent if first_send is None else min(first_send, sent)
            remaining[mid] -= 1
            if remaining[mid] == 0:
                del remaining[mid]
                latencies.append(((now - sent) * 1000, bool(value.get("m"))))
                last_delivery = max(last_delivery, now)
    consumer.close()
    results.put(
        {
            "latencies": latencies,
            "first_send": first_send or 0.0,
            "last_delivery": last_delivery,
            "missing": len(remaining),
        }
    )


def _payload(mid: str, multicast: bool, size: int) -> dict[str, Any]:
    body: dict[str, Any] = {"id": mid, "t": time.time_ns() // 1000, "m": multicast}
    pad = size - len(orjson.dumps(body)) - 10
    body["pad"] = "x" * max(0, pad)
    return body


def _watermark_total(bootstrap: str, names: Sequence[str]) -> int:
    """Records in every partition of ``names`` (that exist)."""
    admin = AdminClient(admin_config(bootstrap))
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
    read_topics: list[str],
    expected: dict[str, int],
    send: Any,
    written_topics: list[str],
    timeout_s: float,
) -> BenchResult:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    results = ctx.Queue()
    reader = ctx.Process(
        target=_measure, args=(bootstrap, read_topics, expected, timeout_s, ready, results)
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
        p50_ms=round(_percentile(lat, 0.50), 2),
        p99_ms=round(_percentile(lat, 0.99), 2),
        multicast_p99_ms=round(_percentile(multicast, 0.99), 2) if multicast else None,
        delivered_ok=outcome["missing"] == 0,
    )


def _bare_kafka(
    bootstrap: str, messages: int, size: int, timeout_s: float, rate: float | None = None
) -> BenchResult:
    topic = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    ensure_topics(AdminClient(admin_config(bootstrap)), [topic])
    expected = {f"k-{i}": 1 for i in range(messages)}

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
    return _run_measured(name, bootstrap, [topic], expected, send, [topic], timeout_s)


def _pace(start: float, index: int, rate: float) -> None:
    """Sleep until message ``index`` is due at ``rate`` messages/s."""
    delay = start + index / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)


@dataclass(frozen=True, slots=True)
class BenchSetup:
    """How the nodes run: protocol, topic layout and partition layers."""

    algorithm: str = DEFAULT_ALGORITHM.value
    layout: Layout = Layout.SPLIT
    partitions: int = 1
    #: librdkafka settings (``-X``) for the nodes and the sending client.
    overrides: Mapping[str, str] = field(default_factory=dict)

    def cluster(self, bootstrap: str, topics: list[str]) -> Any:
        """The nodes of ``topics`` for a block of code."""
        return running_cluster(
            bootstrap,
            topics,
            algorithm=self.algorithm,
            layout=self.layout.value,
            partitions=self.partitions,
            overrides=self.overrides,
        )

    def written(self, topics: list[str]) -> list[str]:
        """Every Kafka topic the nodes write."""
        out = [input_topic(t, self.layout) for t in topics]
        out += [delivery_topic(t, self.layout) for t in topics]
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
    _warm_up_path(bootstrap, topics, setup.layout)
    stride = round(1 / share) if share > 0 else 0
    plan: list[tuple[str, tuple[str, ...]]] = []
    client = AtomicKafkaClient(bootstrap, layout=setup.layout, config=setup.overrides)
    client.warm_up(topics)
    prefix = client.id_prefix
    for i in range(messages):
        multicast = stride > 0 and i % stride == 0
        dests = tuple(topics) if multicast else (topics[i % len(topics)],)
        plan.append((f"{prefix}-{i}", dests))
    expected = {mid: len(dests) for mid, dests in plan}

    def send() -> None:
        start = time.monotonic()
        for i, (mid, dests) in enumerate(plan):
            if rate:
                _pace(start, i, rate)
            sent_id = client.send(_payload(mid, len(dests) > 1, size), dests)
            assert sent_id == mid
        client.flush(60)

    name = f"amcast-{round(share * 100)}%" + ("@half" if rate else "")
    read = [delivery_topic(t, setup.layout) for t in topics]
    result = _run_measured(name, bootstrap, read, expected, send, setup.written(topics), timeout_s)
    if setup.partitions > 1:
        delays = sorted(_merge_delays(bootstrap, topics, setup.partitions))
        result = dataclasses.replace(
            result,
            merge_p50_ms=round(_percentile(delays, 0.50), 2),
            merge_p99_ms=round(_percentile(delays, 0.99), 2),
        )
    return result


def _merge_delays(bootstrap: str, topics: list[str], partitions: int) -> list[float]:
    """Per delivered message and topic, ms from its layer's PartitionDelivery record to
    the merger's Delivery record (both Kafka timestamps, written on this machine)."""
    delays: list[float] = []
    consumer = make_consumer(bootstrap)
    try:
        for topic in topics:
            layers = read_partitions(consumer, layers_topic(topic), range(partitions))
            decided = _timestamps(layers)
            merged = _timestamps(read_partitions(consumer, topic, [0]))
            delays += [float(ts - decided[mid]) for mid, ts in merged.items() if mid in decided]
    finally:
        consumer.close()
    return delays


def _timestamps(records: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for record in records:
        data = orjson.loads(record.value() or b"{}")
        if data.get("messageType") in ("DeliveryMessage", "PartitionDeliveryMessage"):
            out.setdefault(data["messageID"], record.timestamp()[1])
    return out


def _warm_up_path(bootstrap: str, topics: list[str], layout: Layout) -> None:
    """Every node coordinates one multicast to all topics, unmeasured, so that no node
    is still fetching metadata for a peer's topic when the measured run starts."""
    with AtomicKafkaClient(bootstrap, layout=layout) as client:
        for via in topics:
            client.send({"warm-up": True}, topics, via=via)
    for topic in topics:
        got = list(client.deliveries(topic, timeout_s=30, max_messages=len(topics)))
        if len(got) < len(topics):
            raise RuntimeError(f"warm-up: {topic} delivered {len(got)} of {len(topics)}")


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
