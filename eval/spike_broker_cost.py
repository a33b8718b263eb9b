"""Spike for issue 38, item 2: what two structural changes would cost the broker and the
clients, measured on bare Kafka (no AtomicKafka node runs).

k = 5 "nodes", each with one transactional producer (exactly-once as a node uses it: a
transaction opens at the first write or read, commits 0.1 s later with the consumed
offsets through ``send_offsets_to_transaction``) and one ``read_committed`` consumer
(assigned, never subscribed). Each node writes one *round* of control records at the
times of one shared Poisson schedule (a multicast reaches every destination at about
the same time, so all nodes write in the same round). Variants:

- ``per-peer`` (today): each round, a node appends one bundle record to each of its 4
  peers' control logs ``ctl.j`` (20 appends per round, 1 reader each); a node reads its
  own ``ctl.i``.
- ``outbox`` (issue 38 item 2a): each round, a node appends one record to its own
  ``out.i``, which its 4 peers read (5 appends per round, 4 readers each).
- ``outbox+markers``: ``outbox`` plus what rule 8 needs (docs/performance.md, the plan's
  stage 4): after each read batch holding peers' outbox records, a node writes one apply
  marker per peer log in the batch into its own control log ``ctl.i`` (in the same
  transaction) and reads ``ctl.i`` back.
- ``host`` (item 2b, KIP-447's reason): ``per-peer``'s records, but written by one
  transactional producer (one transaction per 0.1 s) and read by one consumer covering
  the 5 control logs, as one process hosting the 5 topics' nodes would.
- ``idle``: nothing runs; the broker's own CPU over the same window.

The rates come from docs/performance.md's issue-38 section (``direct``, k = 5, 50 %
multicast, 200-byte values): at 150 msg/s nothing batches, each multicast gives every
node one round with one Notify per peer (75 rounds/s per node, bundles of about 240 B);
at 1,000 msg/s 8.04 - 6 = 2.04 bundle records per message, i.e. about 102 rounds/s per
node, each bundle about 4.9 Notifies and 1,180 B. An outbox record holds the same
entries as one bundle (the same Notify goes to every peer), plus an addressee byte.

Figures, per logical message (the rate times the measured window): the broker's CPU
(its JVM's user + system time from ``/proc``, through psutil, as ``atomickafka bench``
measures it), this process's CPU (every client's librdkafka threads and the Python
threads driving them), records appended, and requests the clients sent (librdkafka's
statistics, by request type). Variants run alternated, each rate in turn, ``--repeats``
times; run it under the benchmarks' lock::

    flock /tmp/atomickafka-heavy.lock .venv/bin/python eval/spike_broker_cost.py

It creates its topics (``spike38-<run>-ctl.i``, ``-out.i``) on the local broker
(``atomickafka broker``'s, started if needed, or ``--bootstrap-server``) and deletes them
at the end. Every loop is bounded in time. It prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from atomickafka.evaluation.cost.processes import ProcessInfo, bootstrap_port, find_broker
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.settings import CONSUMER_DEFAULTS, LIBRDKAFKA_LOGGER, PRODUCER_DEFAULTS
from atomickafka.localkafka import ensure_broker

K: Final = 5
COMMIT_INTERVAL_S: Final = 0.1
VARIANTS: Final = ("per-peer", "outbox", "outbox+markers", "host", "idle")
#: (logical msg/s) -> (rounds per second per node, bytes of one bundle record), from
#: docs/performance.md's issue-38 section (see the module docstring).
RATES: Final[dict[int, tuple[float, int]]] = {150: (75.0, 240), 1000: (102.0, 1180)}
MARKER_BYTES: Final = 110  # an ApplyMarker's JSON (core/marker.py), about


@dataclass
class Tally:
    """What the clients did, counted as they go (read at both ends of the window)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)


@dataclass
class Stats:
    """The latest librdkafka statistics of every client: requests sent, by type."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latest: dict[str, tuple[float, Counter[str]]] = field(default_factory=dict)

    def callback(self, name: str) -> Callable[[str], None]:
        def on_stats(raw: str) -> None:
            data = json.loads(raw)
            requests: Counter[str] = Counter()
            for broker in data.get("brokers", {}).values():
                for kind, n in broker.get("req", {}).items():
                    requests[kind] += int(n)
            with self.lock:
                self.latest[name] = (time.monotonic(), requests)

        return on_stats

    def snapshot(self) -> dict[str, tuple[float, Counter[str]]]:
        with self.lock:
            return dict(self.latest)


def _requests_per_s(
    before: dict[str, tuple[float, Counter[str]]], after: dict[str, tuple[float, Counter[str]]]
) -> dict[str, float]:
    """Requests per second of each type, summed over the clients, each client's from its
    two statistics snapshots."""
    out: dict[str, float] = {}
    for name, (t1, req1) in after.items():
        if name not in before:
            continue
        t0, req0 = before[name]
        if t1 - t0 < 0.5:
            continue
        for kind, n in req1.items():
            rate = (n - req0.get(kind, 0)) / (t1 - t0)
            if rate > 0:
                out[kind] = out.get(kind, 0.0) + rate
    return out


@dataclass(frozen=True)
class Node:
    """One driving thread's part: the logs it writes each round (with each record's
    size), what its consumer reads, and whether it marks peers' outbox records."""

    name: str
    writes: tuple[str, ...]
    reads: tuple[str, ...]
    marks_into: str | None = None


def _nodes(variant: str, prefix: str) -> list[Node]:
    ctl = [f"{prefix}-ctl.{i}" for i in range(K)]
    out = [f"{prefix}-out.{i}" for i in range(K)]
    peers = [[j for j in range(K) if j != i] for i in range(K)]
    if variant == "per-peer":
        return [Node(f"n{i}", tuple(ctl[j] for j in peers[i]), (ctl[i],)) for i in range(K)]
    if variant == "outbox":
        return [Node(f"n{i}", (out[i],), tuple(out[j] for j in peers[i])) for i in range(K)]
    if variant == "outbox+markers":
        return [
            Node(f"n{i}", (out[i],), (*(out[j] for j in peers[i]), ctl[i]), marks_into=ctl[i])
            for i in range(K)
        ]
    if variant == "host":
        writes = tuple(ctl[j] for i in range(K) for j in peers[i])
        return [Node("host", writes, tuple(ctl))]
    return []


def _schedule(rounds_per_s: float, seconds: float, seed: int) -> list[float]:
    """Poisson round times in ``[0, seconds)``, the same for every node."""
    rng = random.Random(seed)
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rounds_per_s)
        if t >= seconds:
            return out
        out.append(t)


class Driver(threading.Thread):
    """One node (or the host of all five): writes its rounds at the schedule's times,
    reads, commits a transaction 0.1 s after it opened. Stops at ``end`` (monotonic)."""

    def __init__(
        self,
        node: Node,
        bootstrap: str,
        run: str,
        schedule: Sequence[float],
        start: float,
        end: float,
        record_bytes: int,
        tally: Tally,
        stats: Stats,
    ) -> None:
        super().__init__(name=node.name, daemon=True)
        self.node, self.schedule, self.start_at, self.end = node, schedule, start, end
        outbox = any("-out." in topic for topic in node.writes)  # + an addressee byte
        self.payload = os.urandom(record_bytes + (1 if outbox else 0))
        self.tally, self.error = tally, ""
        common = {"bootstrap.servers": bootstrap, "statistics.interval.ms": 1000}
        self.producer = Producer(
            {
                **PRODUCER_DEFAULTS,
                **common,
                "transactional.id": f"spike38-{run}-{node.name}",
                "transaction.timeout.ms": 60000,
                "retry.backoff.ms": 5,
                "retry.backoff.max.ms": 10,
                "stats_cb": stats.callback(f"{node.name}/producer"),
            },
            logger=LIBRDKAFKA_LOGGER,
        )
        self.consumer = Consumer(
            {
                **CONSUMER_DEFAULTS,
                **common,
                "group.id": f"spike38-{run}-{node.name}",
                "isolation.level": "read_committed",
                "stats_cb": stats.callback(f"{node.name}/consumer"),
            },
            logger=LIBRDKAFKA_LOGGER,
        )
        self.consumer.assign([TopicPartition(t, 0, OFFSET_END) for t in node.reads])
        self.group = self.consumer.consumer_group_metadata()

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # reported by the caller
            self.error = repr(exc)
        finally:
            self.consumer.close()
            self.producer.flush(5)

    def _loop(self) -> None:
        producer, node = self.producer, self.node
        producer.init_transactions(30)
        positions: dict[str, int] = {}
        began: float | None = None
        due = 0
        while (now := time.monotonic()) < self.end:
            while due < len(self.schedule) and self.start_at + self.schedule[due] <= now:
                began = self._open(began, now)
                for topic in node.writes:
                    producer.produce(topic, self.payload)
                self.tally.add("records", len(node.writes))
                self.tally.add("rounds")
                due += 1
            if began is not None and now - began >= COMMIT_INTERVAL_S:
                if positions:
                    offsets = [TopicPartition(t, 0, o) for t, o in positions.items()]
                    producer.send_offsets_to_transaction(offsets, self.group, 10)
                producer.commit_transaction(10)
                self.tally.add("transactions")
                began, positions = None, {}
            wake = [self.end]
            if due < len(self.schedule):
                wake.append(self.start_at + self.schedule[due])
            if began is not None:
                wake.append(began + COMMIT_INTERVAL_S)
            timeout = max(0.0, min(min(wake) - time.monotonic(), 0.1))
            batch = self.consumer.consume(num_messages=1000, timeout=timeout)
            producer.poll(0)
            if batch:
                began = self._read(batch, positions, began)
        if began is not None:  # left open, it would hold readers back for its timeout
            producer.abort_transaction(10)

    def _open(self, began: float | None, now: float) -> float:
        if began is None:
            self.producer.begin_transaction()
            return now
        return began

    def _read(self, batch: list[Any], positions: dict[str, int], began: float | None) -> float:
        began = self._open(began, time.monotonic())
        peer_logs: set[str] = set()
        for message in batch:
            if message.error() is not None:
                continue
            topic = message.topic()
            positions[topic] = message.offset() + 1
            self.tally.add("read")
            if topic != self.node.marks_into:
                peer_logs.add(topic)
        if self.node.marks_into is not None and peer_logs:
            # rule 8: one apply marker per peer log this batch read (core/marker.py names
            # one log), in the node's own control log, which it reads back
            for _ in peer_logs:
                self.producer.produce(self.node.marks_into, b"m" * MARKER_BYTES)
            self.tally.add("markers", len(peer_logs))
            self.tally.add("records", len(peer_logs))
            self.tally.add("marking batches")
        return began


def _cpu(proc: ProcessInfo | None) -> float:
    if proc is None:
        return 0.0
    times = proc.cpu_times()
    return float(times.user) + float(times.system)


@dataclass(frozen=True)
class Result:
    variant: str
    rate: int
    broker_us: float
    client_us: float
    counts: dict[str, float]
    requests: dict[str, float]
    rounds_per_s: float
    error: str


def measure(
    variant: str,
    rate: int,
    bootstrap: str,
    prefix: str,
    broker: ProcessInfo | None,
    warm_s: float,
    window_s: float,
    seed: int,
) -> Result:
    """One run of ``variant`` at ``rate`` logical msg/s: figures per message over the window."""
    rounds_per_s, record_bytes = RATES[rate]
    run = uuid.uuid4().hex[:8]
    tally, stats = Tally(), Stats()
    this = psutil.Process()
    start = time.monotonic() + 3.0  # time for init_transactions
    end = start + warm_s + window_s + 1.5
    schedule = _schedule(rounds_per_s, end - start, seed)
    drivers = [
        Driver(n, bootstrap, run, schedule, start, end, record_bytes, tally, stats)
        for n in _nodes(variant, prefix)
    ]
    for driver in drivers:
        driver.start()
    time.sleep(max(0.0, start + warm_s - time.monotonic()))
    counts0, stats0 = tally.snapshot(), stats.snapshot()
    cpu0, client0, t0 = _cpu(broker), _cpu(this), time.monotonic()
    time.sleep(window_s)
    cpu1, client1, t1 = _cpu(broker), _cpu(this), time.monotonic()
    counts1 = tally.snapshot()
    time.sleep(1.2)  # one more statistics interval
    stats1 = stats.snapshot()
    for driver in drivers:
        driver.join(timeout=max(1.0, end - time.monotonic() + 20))
    messages = rate * (t1 - t0)
    per_msg = {k: (counts1[k] - counts0.get(k, 0)) / messages for k in counts1}
    requests = {k: v / rate for k, v in _requests_per_s(stats0, stats1).items()}
    rounds = (counts1["rounds"] - counts0.get("rounds", 0)) / (t1 - t0) / max(1, len(drivers))
    errors = "; ".join(f"{d.name}: {d.error}" for d in drivers if d.error or d.is_alive())
    return Result(
        variant,
        rate,
        (cpu1 - cpu0) / messages * 1e6,
        (client1 - client0) / messages * 1e6,
        per_msg,
        requests,
        rounds,
        errors,
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _table(results: list[Result]) -> str:
    kinds = (
        "Produce",
        "Fetch",
        "AddPartitionsToTxn",
        "EndTxn",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
    )
    head = (
        "| msg/s | variant | runs | broker CPU-µs/msg | clients' CPU-µs/msg | records/msg "
        "| reads/msg | markers/msg | txns/msg | requests/msg | "
        + " | ".join(kinds)
        + " | rounds/s/node |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for rate in RATES:
        idle = [r.broker_us for r in results if r.rate == rate and r.variant == "idle"]
        for variant in VARIANTS:
            runs = [r for r in results if r.rate == rate and r.variant == variant]
            if not runs:
                continue
            broker = " / ".join(f"{r.broker_us:.0f}" for r in runs)
            client = " / ".join(f"{r.client_us:.0f}" for r in runs)

            def med(key: str, source: str = "counts", runs: list[Result] = runs) -> str:
                return f"{_median([getattr(r, source).get(key, 0.0) for r in runs]):.2f}"

            total = _median([sum(r.requests.values()) for r in runs])
            lines.append(
                f"| {rate} | {variant} | {len(runs)} | {broker} | {client} | {med('records')} "
                f"| {med('read')} | {med('markers')} | {med('transactions')} | {total:.1f} | "
                + " | ".join(med(k, "requests") for k in kinds)
                + f" | {_median([r.rounds_per_s for r in runs]):.0f} |"
            )
        if idle:
            lines.append(f"| {rate} | (idle broker, same window: {_median(idle):.0f} µs/msg) |")
    return "\n".join(lines)


def _delete(admin: AdminClient, topics: list[str]) -> None:
    try:
        for future in admin.delete_topics(topics).values():
            future.result(timeout=30)
    except KafkaException as exc:
        print(f"warning: topics not deleted: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        epilog="See the module docstring for the variants and the rates.",
    )
    parser.add_argument("--bootstrap-server", default=None, help="default: the local broker")
    parser.add_argument("--repeats", type=int, default=3, help="alternated runs of each (1-5)")
    parser.add_argument("--window", type=float, default=12.0, help="measured seconds (2-60)")
    parser.add_argument("--warm", type=float, default=3.0, help="seconds before the window")
    parser.add_argument(
        "--rates", default="150,1000", help="logical msg/s, of " + ",".join(map(str, RATES))
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    parser.add_argument("--json", type=Path, default=None, help="also write every run here")
    args = parser.parse_args(argv)
    repeats = max(1, min(5, args.repeats))
    window = max(2.0, min(60.0, args.window))
    warm = max(0.5, min(30.0, args.warm))
    rates = [int(r) for r in args.rates.split(",") if int(r) in RATES]
    variants = [v for v in args.variants.split(",") if v in VARIANTS]
    bootstrap = args.bootstrap_server or ensure_broker()
    port = bootstrap_port(bootstrap)
    broker = None if port is None else find_broker(port, psutil.process_iter())
    if broker is None:
        print("warning: the broker is not on this machine; its CPU is not measured")
    admin = admin_client(bootstrap)
    print(f"load average before: {os.getloadavg()}", flush=True)
    results: list[Result] = []
    for repeat in range(repeats):
        for rate in rates:
            for variant in variants:
                # fresh topics for each run: nothing a run left (an open transaction
                # holds read_committed readers back) reaches the next
                prefix = f"spike38-{uuid.uuid4().hex[:8]}"
                topics = [f"{prefix}-{kind}.{i}" for kind in ("ctl", "out") for i in range(K)]
                ensure_topics(admin, topics)
                try:
                    result = measure(
                        variant, rate, bootstrap, prefix, broker, warm, window, seed=repeat
                    )
                finally:
                    _delete(admin, topics)
                results.append(result)
                print(
                    f"[{repeat + 1}/{repeats}] {rate} msg/s {variant}: broker "
                    f"{result.broker_us:.0f} µs/msg, clients {result.client_us:.0f} µs/msg, "
                    f"records {result.counts.get('records', 0):.2f}/msg, "
                    f"reads {result.counts.get('read', 0):.2f}/msg, "
                    f"markers {result.counts.get('markers', 0):.2f}/msg, "
                    f"requests {sum(result.requests.values()):.1f}/msg, "
                    f"load {os.getloadavg()[0]:.2f}"
                    + (f", ERROR {result.error}" if result.error else ""),
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()}")
    print(_table(results))
    if args.json is not None:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
