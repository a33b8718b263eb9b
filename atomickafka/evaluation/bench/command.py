"""``atomickafka bench``: AtomicKafka against a bare Kafka pipe and the sequencer
baselines, measured in one run.

Every scenario uses the same broker, record size and measuring process:

- ``kafka``: a producer writes N records to one topic and a consumer reads them back
  (the baseline: what Kafka alone moves on this machine).
- ``amcast-P%``: N messages through one AtomicKafka node per topic (5 topics unless
  ``--topics``), P % multicast, the rest single-topic (round-robin over the topics). A
  multicast goes to every topic, or, with ``fanout=(lo, hi)``, to ``lo``..``hi`` topics
  drawn at random (seeded).
- ``seq-eos-P%``, ``streams-P%``: the same messages through the exactly-once sequencer
  baselines, the promise of AtomicKafka's default (``seq-alo-P%``, the plain
  at-least-once sequencer with no recovery, when the nodes run ``--at-least-once``;
  :mod:`~atomickafka.evaluation.load.baselines`): one partition, one fan-out process.
  Their measuring consumer reads ``read_committed``, as their readers must.
- ``amcast-many-N``, ``seq-eos-many-N``, ``streams-many-N`` (:func:`run_many_topics`):
  the many-topic workload on N topics, each message's destinations drawn from a stated
  distribution (:mod:`~atomickafka.evaluation.load.destinations`), the same messages
  through each; ``-hot-N`` its skewed variant.
- ``kafka-x3``: three chained bare hops, the latency floor of AtomicKafka's three-hop
  path: the client writes to topic A, a relaying consumer-producer copies A to B and
  another B to C (:mod:`~atomickafka.evaluation.bench.relay`, the nodes' client settings, no
  transaction), and the measuring consumer reads C.
- ``@1000`` and ``@half``: the bare hop, the three bare hops and the largest multicast
  share again, paced at 1,000 msg/s and at half the rate the unpaced multicast run
  reached, to show latency below saturation (an unpaced run's latency is mostly
  queueing in the burst). Each paced run reports p50, p99 and p99.9 per *hop class*:
  ``bare x1``, ``bare x3``, ``AtomicKafka single-destination`` (two hops) and
  ``AtomicKafka multicast`` (three hops).
- with ``formats`` (``--delivery-format raw,json``), every unpaced multicast scenario
  runs once per delivery format (``amcast-P%[json]``), the nodes' CPU per delivery
  and the capacity of each side by side.

A message's latency is the time from its send to its delivery at the last of its
destinations, read by a separate consumer process (the evaluation's
:class:`~atomickafka.evaluation.load.measuring.DeliveryCounter`, which the evaluation suite
counts its deliveries with too); throughput counts messages fully delivered over the
time from the first send to the last delivery. Each multicast scenario starts with the
suite's warm-up (:func:`~atomickafka.evaluation.load.measuring.warm_up`); with partition
layers, it also reports the merge delay measured on Kafka
(:func:`~atomickafka.evaluation.bench.merge_delay.kafka_merge_delays`).

Every scenario also reports its **cost** (:class:`~atomickafka.evaluation.cost.accounting.RunCost`):
the CPU time of every process over the measured window (from the first send to the
measuring consumer's last delivery) from the OS, by role, per delivered message, and the
records and bytes written in that window by type.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from atomickafka.client import AtomicKafkaClient
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.protocols import CARRIER
from atomickafka.core.reader import KafkaRecord
from atomickafka.evaluation.bench.merge_delay import kafka_merge_delays
from atomickafka.evaluation.bench.relay import running_relays, write_warm_up
from atomickafka.evaluation.cost.accounting import RunCost
from atomickafka.evaluation.cost.processes import (
    CpuMeter,
    CpuWindow,
    ProcessRole,
    track_broker,
    track_cluster,
)
from atomickafka.evaluation.cost.topic_scan import (
    RecordedTopic,
    Role,
    cluster_topics,
    end_offset,
    sequencer_topics,
)
from atomickafka.evaluation.cost.traffic import TypeTraffic, scan_traffic
from atomickafka.evaluation.load.baselines import Baseline, running_baseline
from atomickafka.evaluation.load.destinations import HOT, MANY, DestinationMix
from atomickafka.evaluation.load.measuring import (
    MULTICAST_FIELD,
    SEND_TIME_FIELD,
    WARMUP_VALUE,
    Arrival,
    DeliveryCounter,
    LatencyStats,
    Sender,
    delivery_arrival,
    latency_stats,
    percentile,
    warm_up,
)
from atomickafka.evaluation.load.sequencer import SequencerSender
from atomickafka.jsonnames import json_name
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.status import STATUS_READ_WINDOW_S, read_statuses
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    delivery_topic,
)
from atomickafka.node.config import DEFAULT_COMMIT_INTERVAL_S, ClusterConfig, NodeConfig
from atomickafka.node.launch import cluster_keys, running_cluster

__all__ = [
    "BARE_1",
    "BARE_3",
    "HOP_CLASSES",
    "BenchLoad",
    "BenchResult",
    "BenchSetup",
    "hop_classes",
    "run_bench",
    "run_many_topics",
]

#: What the bare pipe's records are called in the cost's traffic (they have no type).
_PLAIN_KIND = "plain record"
#: The hop classes whose latencies a paced run reports (p50/p99/p99.9).
BARE_1 = "bare x1"
BARE_3 = "bare x3"
HOP_CLASSES = (BARE_1, BARE_3, "AtomicKafka single-destination", "AtomicKafka multicast")


def hop_classes(
    system: str, latencies: Sequence[tuple[float, bool]], bare_class: str | None = None
) -> dict[str, LatencyStats]:
    """A run's latencies (ms, multicast?) by hop class: all of them as ``bare_class``
    for a bare pipe, else single-destination and multicast messages apart, named after
    the ``system`` (``atomickafka``: AtomicKafka). Classes without a message are left out."""
    if bare_class is not None:
        groups = {bare_class: [ms for ms, _ in latencies]}
    else:
        name = "AtomicKafka" if system == "atomickafka" else system
        groups = {
            f"{name} single-destination": [ms for ms, m in latencies if not m],
            f"{name} multicast": [ms for ms, m in latencies if m],
        }
    out = {}
    for label, values in groups.items():
        stats = latency_stats(values)
        if stats is not None:
            out[label] = stats
    return out


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
    #: CPU by process, records and bytes by type, over the measured window.
    cost: RunCost | None = None
    #: p99.9 of every message, and p50/p99/p99.9 by hop class (:func:`hop_classes`).
    p999_ms: float | None = None
    classes: Mapping[str, LatencyStats] = field(default_factory=dict)
    #: The offered rate of a paced run (msg/s; ``None``: as fast as possible).
    rate: float | None = None
    #: The nodes' delivery format (AtomicKafka runs).
    delivery_format: str | None = None
    #: The machine's load average (1, 5, 15 min) when the run ended.
    load_avg: tuple[float, float, float] | None = None
    #: AtomicKafka runs: how long the sender was held back by back-pressure (s).
    held_back_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``, under the fields' JSON names (``messagesPerSecond``)."""
        data = {json_name(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}
        data["cost"] = None if self.cost is None else self.cost.to_dict()
        data["classes"] = {k: v.to_dict() for k, v in self.classes.items()}
        return data


@dataclass(frozen=True, slots=True)
class BenchLoad:
    """What a multicast scenario sends: how many messages, the multicast share, the
    value size, the pace (``None``: as fast as possible), and each multicast's
    destination count (``None``: every topic; ``(lo, hi)``: drawn from ``lo``..``hi``
    with ``seed``)."""

    messages: int
    share: float
    record_size: int = 200
    rate: float | None = None
    fanout: tuple[int, int] | None = None
    seed: int = 0
    #: The many-topic workload: destinations drawn from this mix (``share`` unused).
    mix: DestinationMix | None = None

    def tag(self, topics: int) -> str:
        """What a row of this load is named after: ``10%``, or ``many-20``."""
        return f"{round(self.share * 100)}%" if self.mix is None else f"{self.mix.name}-{topics}"

    def plan(self, prefix: str, topics: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """Each message's id and destinations: every ``round(1/share)``-th a multicast,
        or drawn from the mix."""
        if self.mix is not None:
            drawn = self.mix.plan(topics, self.messages, self.seed)
            return [(f"{prefix}-{i}", dests) for i, dests in enumerate(drawn)]
        rng = random.Random(self.seed)
        stride = round(1 / self.share) if self.share > 0 else 0
        out = []
        for i in range(self.messages):
            if stride > 0 and i % stride == 0:
                dests = _multicast_destinations(topics, self.fanout, rng)
            else:
                dests = (topics[i % len(topics)],)
            out.append((f"{prefix}-{i}", dests))
        return out


def _multicast_destinations(
    topics: Sequence[str], fanout: tuple[int, int] | None, rng: random.Random
) -> tuple[str, ...]:
    if fanout is None:
        return tuple(topics)
    low, high = fanout
    count = rng.randint(min(low, len(topics)), min(high, len(topics)))
    return tuple(sorted(rng.sample(list(topics), count)))


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
    connection: Connection,
    topics: dict[str, str],
    plain: bool,
    committed: bool,
    expected: int,
    timeout_s: float,
    ready: Any,
    results: Any,
    done: Any,
) -> None:
    """Child process: read ``topics`` until ``expected`` measured messages were
    delivered at every destination (``plain``: the bare pipe's records; ``committed``:
    read ``read_committed``); then wait for ``done``, so that its CPU time is read
    while it still runs."""
    read = _plain_arrival if plain else delivery_arrival
    isolation = "read_committed" if committed else "read_uncommitted"
    counter = DeliveryCounter(
        connection, topics, read=read, fetch_wait_ms=5, isolation_level=isolation
    )
    with contextlib.closing(counter):
        counter.wait_until_fetching()  # what is sent before its first fetch would wait
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
    done.wait(60)


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


@dataclass(frozen=True, slots=True)
class _Measured:
    """How one scenario is measured: what the measuring consumer reads, what the cost
    scans, which system it is, and which processes are that system's."""

    name: str
    read_topics: dict[str, str]
    scanned: list[RecordedTopic]
    system: str
    plain: bool = False
    track: Callable[[CpuMeter], None] = lambda _meter: None
    #: The hop class of a bare pipe's latencies (``None``: split by destinations).
    bare_class: str | None = None
    rate: float | None = None
    delivery_format: str | None = None
    #: Read ``read_committed`` (the exactly-once baselines' readers must).
    committed: bool = False


def _run_measured(
    connection: Connection,
    how: _Measured,
    expected: int,
    send: Callable[[], None],
    timeout_s: float,
) -> BenchResult:
    """Start the measuring process on ``how.read_topics``, ``send``, and sum up what it
    saw and what every process spent meanwhile (the records counted through
    ``connection``, with its ``-X`` settings)."""
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    results = ctx.Queue()
    reader = ctx.Process(
        target=_measure,
        args=(
            connection,
            how.read_topics,
            how.plain,
            how.committed,
            expected,
            timeout_s,
            ready,
            results,
            done,
        ),
        daemon=True,  # a failed send must not leave the command waiting for it
    )
    reader.start()
    try:
        ready.wait(60)
        meter = CpuMeter()
        track_broker(meter, connection)
        meter.track(os.getpid(), ProcessRole.CLIENT, "client (the bench's process)")
        if reader.pid is not None:
            meter.track(reader.pid, ProcessRole.MEASURER, "measuring consumer")
        how.track(meter)
        time.sleep(0.5)  # let the reader's first fetch settle
        meter.start()
        send()
        outcome = results.get(timeout=timeout_s + 30)
        window = meter.stop()
    finally:
        done.set()
        reader.join(30)
    return _summed_up(connection, how, outcome, window)


def _summed_up(
    connection: Connection, how: _Measured, outcome: dict[str, Any], window: CpuWindow
) -> BenchResult:
    """The result of one measured run: what the reader saw, the traffic, the CPU spent."""
    pairs = [(ms, bool(m)) for ms, m in outcome["latencies"]]
    lat = sorted(ms for ms, _ in pairs)
    multicast = sorted(ms for ms, m in pairs if m)
    seconds = max(outcome["last_delivery"] - outcome["first_send"], 1e-6)
    delivered = len(outcome["latencies"])
    traffic = scan_traffic(connection, how.scanned, window.start_ms, window.end_ms)
    if how.plain:
        traffic = {_PLAIN_KIND: TypeTraffic(*_sum_traffic(traffic.values()))}
    cost = RunCost(how.system, delivered, window.seconds, window.processes, traffic)
    return BenchResult(
        name=how.name,
        messages=delivered,
        seconds=round(seconds, 3),
        messages_per_s=round(delivered / seconds, 1),
        records_per_s=round(cost.records / seconds, 1),
        p50_ms=round(percentile(lat, 0.50), 2),
        p99_ms=round(percentile(lat, 0.99), 2),
        multicast_p99_ms=round(percentile(multicast, 0.99), 2) if multicast else None,
        delivered_ok=outcome["missing"] == 0,
        cost=cost,
        p999_ms=round(percentile(lat, 0.999), 2) if lat else None,
        classes=hop_classes(how.system, pairs, how.bare_class),
        rate=how.rate,
        delivery_format=how.delivery_format,
        load_avg=os.getloadavg(),
    )


def _sum_traffic(counts: Any) -> tuple[int, int, int]:
    items = list(counts)
    return (
        sum(t.records for t in items),
        sum(t.messages for t in items),
        sum(t.value_bytes for t in items),
    )


def _bare_kafka(
    connection: Connection,
    messages: int,
    size: int,
    timeout_s: float,
    rate: float | None = None,
    *,
    hops: int = 1,
    suffix: str = "",
) -> BenchResult:
    """``hops`` = 1: the bare pipe; 3: three bare hops through two relays. Its topics'
    creation, clients, relays and measuring consumer all reach Kafka through
    ``connection`` (the nodes' ``-X`` settings included)."""
    run = uuid.uuid4().hex[:8]
    topics = [f"bench-kafka-{run}" + (f"-h{i}" if hops > 1 else "") for i in range(hops)]
    ensure_topics(admin_client(connection), topics)
    topic, last = topics[0], topics[-1]

    def send() -> None:
        producer = RecordProducer(connection)
        producer.warm_up([topic])  # metadata first: not part of a latency
        write_warm_up(producer, topic)  # and its producer id
        start = time.monotonic()
        for i in range(messages):
            if rate:
                _pace(start, i, rate)
            producer.send(topic, orjson.dumps(_payload(f"k-{i}", False, size)))
            producer.poll(0)
        producer.flush(60)

    with running_relays(connection, topics) as relays:
        how = _Measured(
            name=("kafka" if hops == 1 else f"kafka-x{hops}") + suffix,
            read_topics={last: last},
            scanned=[RecordedTopic(t, t, Role.DELIVERY) for t in topics],
            system="kafka",
            plain=True,
            track=lambda meter: _track_relays(meter, relays),
            bare_class=BARE_1 if hops == 1 else f"bare x{hops}",
            rate=rate,
        )
        return _run_measured(connection, how, messages, send, timeout_s)


def _track_relays(meter: CpuMeter, pids: Sequence[int]) -> None:
    for i, pid in enumerate(pids, 1):
        meter.track(pid, ProcessRole.RELAY, f"relay {i}")


def _pace(start: float, index: int, rate: float) -> None:
    """Sleep until message ``index`` is due at ``rate`` messages/s."""
    delay = start + index / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)


@dataclass(frozen=True, slots=True)
class BenchSetup:
    """Where the bench runs and how the nodes run: the connection, protocol, topic
    layout and partition layers."""

    #: How the nodes, the clients, the relays and the measuring consumer reach Kafka
    #: (the bootstrap servers and the ``-X`` settings).
    connection: Connection
    algorithm: Algorithm = DEFAULT_ALGORITHM
    layout: Layout = Layout.SPLIT
    partitions: int = 1
    #: The nodes' delivery mode: one Kafka transaction per batch (the default), or
    #: outputs acknowledged, then committed (``--at-least-once``).
    exactly_once: bool = True
    #: How the nodes write deliveries (``json``, the nodes' default, or ``raw``,
    #: docs/DESIGN.md §3.8).
    delivery_format: str = "json"
    #: The nodes read proposals from control logs of their own (``--control-log``, §7).
    control_log: bool = True
    #: What the nodes' ``direct`` Notifies carry (``--notify-values``, §4.16).
    notify_values: str = CARRIER
    #: How often the nodes commit while records arrive (``--commit-interval``, §6.3).
    commit_interval_s: float = DEFAULT_COMMIT_INTERVAL_S
    #: Topics whose nodes share a process and its Kafka clients (``--topics-per-process``,
    #: §6.7; 1: a process per node).
    topics_per_process: int = 1

    def node_config(self, topics: list[str]) -> NodeConfig:
        """The configuration the cluster's nodes share (the first topic's)."""
        return NodeConfig(
            self.connection.bootstrap,
            topics[0],
            algorithm=self.algorithm,
            layout=self.layout,
            partitions=self.partitions,
            overrides=self.connection.settings,
            log_level="warning",
            exactly_once=self.exactly_once,
            delivery_format=self.delivery_format,
            control_log=self.control_log,
            notify_values=self.notify_values,
            commit_interval_s=self.commit_interval_s,
        )

    def cluster(self, topics: list[str]) -> Any:
        """The nodes of ``topics`` for a block of code (it gets the supervisor's
        ``Popen``)."""
        config = ClusterConfig(
            tuple(topics), self.node_config(topics), topics_per_process=self.topics_per_process
        )
        return running_cluster(config)

    def scanned(self, topics: list[str]) -> list[RecordedTopic]:
        """Every Kafka topic the nodes write, as the cost counts their records (the
        status topic from its end now, the cluster's keys only)."""
        start = end_offset(self.connection, STATUS_TOPIC)
        return cluster_topics(
            topics, self.layout, self.partitions, start, control_log=self.control_log
        )


def _send_plan(
    sender: Sender, plan: Sequence[tuple[str, tuple[str, ...]]], load: BenchLoad
) -> Callable[[], None]:
    def send() -> None:
        start = time.monotonic()
        for i, (mid, dests) in enumerate(plan):
            if load.rate:
                _pace(start, i, load.rate)
            sent_id = sender.send(_payload(mid, len(dests) > 1, load.record_size), dests)
            assert sent_id == mid
        sender.flush(60)

    return send


def _name(prefix: str, load: BenchLoad, topics: Sequence[str], suffix: str = "") -> str:
    return f"{prefix}-{load.tag(len(topics))}{suffix}"


def _amcast(
    topics: list[str],
    setup: BenchSetup,
    load: BenchLoad,
    timeout_s: float,
    suffix: str = "",
) -> BenchResult:
    read = {delivery_topic(t): t for t in topics}
    where = setup.connection
    with setup.cluster(topics) as cluster:
        with (
            AtomicKafkaClient(where, layout=setup.layout) as warming,
            contextlib.closing(DeliveryCounter(where, read)) as counter,
        ):
            warm_up(warming, topics, counter)
        keys = set(cluster_keys(topics, setup.partitions))
        statuses = read_statuses(where, window_s=STATUS_READ_WINDOW_S)
        ours = [s for key, s in statuses.items() if key in keys]
        how = _Measured(
            name=_name("amcast", load, topics, suffix),
            read_topics=read,
            scanned=setup.scanned(topics),
            system="atomickafka",
            track=lambda meter: track_cluster(meter, cluster.pid, ours),
            rate=load.rate,
            delivery_format=setup.delivery_format,
        )
        with AtomicKafkaClient(where, layout=setup.layout) as client:
            client.warm_up(topics)
            send = _send_plan(client, load.plan(client.id_prefix, topics), load)
            result = _run_measured(where, how, load.messages, send, timeout_s)
            result = dataclasses.replace(result, held_back_s=round(client.held_back_s, 2))
    if setup.partitions > 1:
        delays = sorted(kafka_merge_delays(where, topics, setup.partitions))
        result = dataclasses.replace(
            result,
            merge_p50_ms=round(percentile(delays, 0.50), 2),
            merge_p99_ms=round(percentile(delays, 0.99), 2),
        )
    return result


@contextlib.contextmanager
def _sequencer(
    connection: Connection, topics: list[str], baseline: Baseline
) -> Iterator[tuple[str, int]]:
    """A sequencer baseline over ``topics`` for a block: its topic and its fan-out
    process's pid."""
    seq_topic = f"{topics[0].rsplit('-', 1)[0]}-seq"
    ensure_topics(admin_client(connection), [seq_topic, *topics])
    with running_baseline(baseline, connection, seq_topic) as proc:
        assert proc.pid is not None
        yield seq_topic, proc.pid


#: Unmeasured messages through a JVM baseline before it is measured: a fresh JVM
#: interprets its code until the JIT compiles the hot paths (as the broker does, which
#: the bench's warm-up pass warms up).
JVM_WARM_UP_MESSAGES = 5000


def _warm_jvm(sender: SequencerSender, topics: list[str], counter: DeliveryCounter) -> None:
    """Pass :data:`JVM_WARM_UP_MESSAGES` warm-up messages through the baseline, one
    destination each, and wait (bounded) until they are all delivered."""
    want = counter.warmup + JVM_WARM_UP_MESSAGES
    for i in range(JVM_WARM_UP_MESSAGES):
        sender.send(WARMUP_VALUE, (topics[i % len(topics)],))
    sender.flush(60)
    deadline = time.monotonic() + 120
    while counter.warmup < want and time.monotonic() < deadline:
        counter.poll(0.2)


def _sequenced(
    topics: list[str],
    setup: BenchSetup,
    load: BenchLoad,
    timeout_s: float,
    baseline: Baseline,
    suffix: str = "",
    *,
    jvm_warm_up: bool = True,
) -> BenchResult:
    read = {t: t for t in topics}
    where = setup.connection
    role = ProcessRole.STREAMS if baseline.jvm else ProcessRole.SEQUENCER
    with _sequencer(where, topics, baseline) as (seq_topic, pid):
        with (
            contextlib.closing(DeliveryCounter(where, read)) as counter,
            contextlib.closing(SequencerSender(where, seq_topic, "bench-warmup")) as warming,
        ):
            warm_up(warming, topics, counter)
            if baseline.jvm and jvm_warm_up:
                _warm_jvm(warming, topics, counter)
        how = _Measured(
            name=_name(baseline.value, load, topics, suffix),
            read_topics=read,
            scanned=sequencer_topics(seq_topic, baseline.sender_id, topics),
            system=baseline.value,
            track=lambda meter: meter.track(pid, role, baseline.value),
            rate=load.rate,
            committed=baseline.exactly_once,
        )
        sender = SequencerSender(where, seq_topic, "bench")
        with contextlib.closing(sender):
            sender.warm_up(topics)
            send = _send_plan(sender, load.plan(sender.id_prefix, topics), load)
            return _run_measured(where, how, load.messages, send, timeout_s)


class _BenchRun(NamedTuple):
    """What every scenario of one :func:`run_bench` shares: where, how long, its
    baselines, its topics' names, its loads and where its results go."""

    setup: BenchSetup
    timeout_s: float
    warmup: bool
    baselines: Sequence[Baseline]
    names: Callable[[str], list[str]]
    load: Callable[..., BenchLoad]
    record: Callable[[BenchResult], None]


#: The fixed rate of the first paced runs (msg/s): issue 19's latency target.
LOW_RATE = 1000.0


def run_bench(
    setup: BenchSetup,
    *,
    messages: int = 20_000,
    record_size: int = 200,
    shares: Sequence[float] = (0.0, 0.1, 0.5),
    timeout_s: float = 300.0,
    warmup: bool = True,
    paced_rate: float | None = None,
    low_rate: float | None = LOW_RATE,
    formats: Sequence[str] = (),
    topics: int = 5,
    fanout: tuple[int, int] | None = None,
    seed: int = 0,
    baselines: Sequence[Baseline] = (),
    on_result: Any = None,
    overload: bool = True,
) -> list[BenchResult]:
    """Run every scenario on ``setup.connection``'s Kafka; return their figures (also
    passed to ``on_result`` as they come). The paced runs go at ``low_rate`` (``None``:
    skipped) and at ``paced_rate`` (default: half the unpaced capacity of the largest
    multicast share); ``formats`` adds unpaced multicast runs with the nodes writing
    deliveries in those formats; ``overload`` a run offered twice the largest multicast
    share's capacity (``@2x``), which reports how long back-pressure held the sender
    back; ``baselines`` run beside AtomicKafka at every share, and at ``low_rate`` at
    the largest one."""
    others = [f for f in formats if f != setup.delivery_format]
    results: list[BenchResult] = []

    def record(result: BenchResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    run_id = uuid.uuid4().hex[:6]

    def names(tag: str) -> list[str]:
        return [f"bench-{run_id}-{tag}-t{i}" for i in range(1, topics + 1)]

    def load(count: int, share: float, rate: float | None = None) -> BenchLoad:
        return BenchLoad(count, share, record_size, rate, fanout, seed)

    if warmup:
        # A fresh broker JIT-compiles its hot paths for a while; measured runs start
        # after one unmeasured pass through both kinds of traffic.
        _bare_kafka(setup.connection, 5000, record_size, timeout_s)
        _amcast(names("warm"), setup, load(5000, 0.1), timeout_s)
    # Bare Kafka moves a burst of N records in a fraction of a second; five times as
    # many make its rate less a matter of scheduling luck.
    record(_bare_kafka(setup.connection, 5 * messages, record_size, timeout_s))
    run = _BenchRun(setup, timeout_s, warmup, baselines, names, load, record)
    _unpaced_runs(run, shares, others, messages)
    _paced_runs(run, results, shares, messages, record_size, paced_rate, low_rate, overload)
    return results


def _unpaced_runs(
    run: _BenchRun, shares: Sequence[float], others: Sequence[str], messages: int
) -> None:
    """Every share as fast as it goes: AtomicKafka, its other formats, each baseline."""
    setup, timeout_s, warmup, baselines, names, load, record = run
    for share in shares:
        tag = str(round(share * 100))
        record(_amcast(names(tag), setup, load(messages, share), timeout_s))
        for fmt in others:
            other = dataclasses.replace(setup, delivery_format=fmt)
            scenario = load(messages, share)
            record(_amcast(names(f"{fmt}{tag}"), other, scenario, timeout_s, f"[{fmt}]"))
        for baseline in baselines:
            scenario = load(messages, share)
            topics_of = names(f"{baseline}{tag}")
            record(_sequenced(topics_of, setup, scenario, timeout_s, baseline, jvm_warm_up=warmup))


def _paced_runs(
    run: _BenchRun,
    results: Sequence[BenchResult],
    shares: Sequence[float],
    messages: int,
    record_size: int,
    paced_rate: float | None,
    low_rate: float | None,
    overload: bool,
) -> None:
    """The paced runs at ``low_rate`` and half the capacity, then the ``@2x`` overload."""
    setup, timeout_s, warmup, baselines, names, load, record = run
    worst = max(shares)
    saturated = next(r for r in results if r.name == f"amcast-{round(worst * 100)}%")
    half = paced_rate or saturated.messages_per_s / 2
    rates = [(low_rate, f"@{low_rate:g}")] if low_rate else []
    for rate, suffix in [*rates, (half, "@half")]:
        count = max(1000, min(messages, int(rate * 10)))
        for hops in (1, 3):
            bare = _bare_kafka(
                setup.connection,
                count,
                record_size,
                timeout_s,
                rate=rate,
                hops=hops,
                suffix=suffix,
            )
            record(bare)
        tag = suffix.strip("@")
        paced = load(count, worst, rate)
        record(_amcast(names(tag), setup, paced, timeout_s, suffix))
        if rate == low_rate:
            for baseline in baselines:
                topics_of = names(f"{baseline}{tag}")
                record(
                    _sequenced(
                        topics_of, setup, paced, timeout_s, baseline, suffix, jvm_warm_up=warmup
                    )
                )
    if overload:
        # offered twice the capacity: the client's back-pressure holds the sender back
        # (DESIGN §5.3), and latency stays bounded instead of growing with the queue
        rate = 2 * saturated.messages_per_s
        count = max(1000, min(messages, int(rate * 10)))
        record(_amcast(names("2x"), setup, load(count, worst, rate), timeout_s, "@2x"))


def run_many_topics(
    setup: BenchSetup,
    *,
    topic_counts: Sequence[int] = (5, 10, 20),
    messages: int = 20_000,
    record_size: int = 200,
    timeout_s: float = 300.0,
    low_rate: float | None = LOW_RATE,
    seed: int = 0,
    baselines: Sequence[Baseline] = (),
    on_result: Any = None,
    warmup: bool = True,
) -> list[BenchResult]:
    """The many-topic workload on ``setup.connection``'s Kafka: for every topic count,
    the :data:`~atomickafka.evaluation.load.destinations.MANY` mix unpaced through
    AtomicKafka and each of ``baselines`` (the same messages through each); at the
    largest count also the skewed :data:`~atomickafka.evaluation.load.destinations.HOT`
    mix, and the ``MANY`` mix paced at ``low_rate`` (``None``: skipped). Rows are named
    ``amcast-many-20``, ``seq-eos-many-20``, ``streams-hot-20``, ``amcast-many-20@1000``.
    ``warmup``: a JVM baseline is warmed up before it is measured."""
    results: list[BenchResult] = []
    run_id = uuid.uuid4().hex[:6]
    largest = max(topic_counts)
    runs: list[tuple[DestinationMix, int, float | None]] = [
        (MANY, count, None) for count in topic_counts
    ]
    runs.append((HOT, largest, None))
    if low_rate:
        runs.append((MANY, largest, low_rate))
    for mix, count, rate in runs:
        tag = f"{mix.name}{count}" + ("" if rate is None else f"r{rate:g}")
        suffix = "" if rate is None else f"@{rate:g}"
        sent = messages if rate is None else max(1000, min(messages, int(rate * 10)))
        load = BenchLoad(sent, 0.0, record_size, rate, None, seed, mix)
        systems: list[Baseline | None] = [None, *baselines]
        for system in systems:
            name = "amcast" if system is None else system.value
            topics = [f"bench-{run_id}-{name}{tag}-t{i}" for i in range(1, count + 1)]
            if system is None:
                result = _amcast(topics, setup, load, timeout_s, suffix)
            else:
                result = _sequenced(
                    topics, setup, load, timeout_s, system, suffix, jvm_warm_up=warmup
                )
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results
