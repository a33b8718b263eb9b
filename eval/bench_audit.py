"""Benchmark of the live audit (``atomickafka audit``, in-process): throughput, CPU and
memory, fed from Kafka topics filled with synthetic deliveries.

1. **Fill**: ``--deliveries`` delivery records over ``--topics`` topics, as nodes write
   them (``--format raw``, the default, as ``atomickafka.core.raw.encode_raw_delivery``
   writes them; ``json``: the JSON envelope): messages in key order, a share
   ``--multicast`` of them to every topic and the rest to one topic (round-robin), like
   ``atomickafka bench``; their Kafka timestamps as if delivered at ``--rate`` deliveries
   per second (the audit's event time, which decides how much it holds in memory).
2. **Drain**: ``atomickafka audit`` in its own process reads the whole backlog; every
   second this samples its checked count (from its Prometheus endpoint), its CPU time
   and its resident memory (``/proc``). Prints the rate, the CPU used (in cores) and
   the memory after every tenth of the deliveries: flat once the bound's worth of
   messages is held.
3. **Live** (``--live-seconds``): new deliveries written at ``--live-rate`` per second
   while the audit runs: the CPU it takes to keep up, and its lag at the end.

Prints figures; asserts nothing about time. Loopback only. Usage::

    .venv/bin/python eval/bench_audit.py [--bootstrap-server B] [--deliveries 1000000]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from confluent_kafka import Producer

from atomickafka.core.raw import encode_raw_delivery
from atomickafka.core.wire import Message, MessageType, encode_delivery, value_digest
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER
from atomickafka.localkafka import ensure_broker, free_port_block

VALUE = b'{"client":1,"i":0,"pad":"' + b"x" * 150 + b'"}'  # about 200 bytes, as the bench
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the audit process."""

    wall_s: float
    checked: int
    cpu_s: float
    rss_mb: float


#: A record to write: (topic, key, value, headers).
Record = tuple[str, bytes | None, bytes, list[tuple[str, str | bytes | None]]]


def deliveries(
    topics: Sequence[str], count: int, multicast: float, start: int, *, raw: bool = True
) -> Iterator[Record]:
    """``count`` delivery records in key order, from message number ``start`` on."""
    made = 0
    n = start
    digest = value_digest(VALUE)
    every = max(1, round(1 / multicast)) if multicast > 0 else 0
    while made < count:
        to_all = every and n % every == 0
        dests = tuple(topics) if to_all else (topics[n % len(topics)],)
        for topic in dests:
            if made == count:
                return
            message = Message(
                f"bench-{n}",
                MessageType.DELIVERY,
                dests,
                VALUE,
                f"node-{topic}",
                topic,
                n + 1,
                None,
                digest,
                "direct",
            )
            if raw:
                key, value, headers = encode_raw_delivery(message)
                yield topic, key, value, list(headers)
            else:
                yield topic, None, encode_delivery(message), []
            made += 1
        n += 1


def fill(
    bootstrap: str,
    topics: Sequence[str],
    count: int,
    multicast: float,
    rate: float,
    *,
    start: int = 0,
    t0_ms: int | None = None,
    paced: bool = False,
    raw: bool = True,
) -> int:
    """Write ``count`` deliveries stamped at ``rate`` per second; return the next message
    number. ``paced``: also write them at that rate."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000},
        logger=LIBRDKAFKA_LOGGER,
    )
    t0 = int(time.time() * 1000) if t0_ms is None else t0_ms
    began = time.monotonic()
    records = deliveries(topics, count, multicast, start, raw=raw)
    for i, (topic, key, value, headers) in enumerate(records):
        if paced and i % 1000 == 0:
            ahead = i / rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
        stamp = int(time.time() * 1000) if paced else t0 + int(i * 1000 / rate)
        while True:
            try:
                producer.produce(topic, value, key, headers=headers or None, timestamp=stamp)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)
    return start + count  # more than the message numbers used: a fresh start


def read_sample(pid: int, metrics_url: str, began: float) -> Sample:
    """The audit's checked count, CPU seconds and resident memory now."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        rss_mb = int(statm.read().split()[1]) * PAGE_BYTES / 2**20
    try:
        text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    except OSError:
        text = ""
    checked = sum(
        int(float(v))
        for v in re.findall(r"^atomickafka_audit_checked_total\{[^}]*\} (\S+)", text, re.M)
    )
    return Sample(time.monotonic() - began, checked, cpu_s, rss_mb)


def lag_seconds(metrics_url: str) -> float:
    """The largest ``atomickafka_audit_lag_seconds`` the audit reports."""
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    found = re.findall(r"^atomickafka_audit_lag_seconds\{[^}]*\} (\S+)", text, re.M)
    return max((float(v) for v in found), default=0.0)


def main(argv: Sequence[str] | None = None) -> int:
    """Fill, drain, go live; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default=None, help="default: the embedded broker")
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--deliveries", type=int, default=1_000_000)
    parser.add_argument("--multicast", type=float, default=0.5, help="share to every topic")
    parser.add_argument("--rate", type=float, default=30_000, help="deliveries/s (event time)")
    parser.add_argument("--bound", type=float, default=10.0)
    parser.add_argument("--live-seconds", type=float, default=30.0)
    parser.add_argument("--live-rate", type=float, default=30_000)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--format", choices=["raw", "json"], default="raw", help="the delivery records' form"
    )
    args = parser.parse_args(argv)
    bootstrap = args.bootstrap_server or ensure_broker()
    tag = uuid.uuid4().hex[:8]
    topics = [f"bench-audit-{tag}-{i}" for i in range(1, args.topics + 1)]
    ensure_topics(admin_client(bootstrap), topics)

    began = time.monotonic()
    raw = args.format == "raw"
    next_message = fill(bootstrap, topics, args.deliveries, args.multicast, args.rate, raw=raw)
    print(
        f"filled {args.deliveries:,} deliveries in {time.monotonic() - began:.1f} s "
        f"({len(topics)} topics, {args.multicast:.0%} multicast, stamped at "
        f"{args.rate:,.0f}/s)"
    )

    port = free_port_block(1)
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    argv_audit = [sys.executable, "-m", "atomickafka", "audit", "--bootstrap-server", bootstrap]
    argv_audit += ["--topics", ",".join(topics), "--bound", str(args.bound)]
    argv_audit += ["--group", f"bench-audit-{tag}", "--audit-topic", ""]
    argv_audit += ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
    argv_audit += ["--log-level", "error"]
    proc = subprocess.Popen(argv_audit)
    try:
        return _measure(proc, metrics_url, bootstrap, topics, args, next_message)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def _measure(
    proc: subprocess.Popen[bytes],
    metrics_url: str,
    bootstrap: str,
    topics: Sequence[str],
    args: argparse.Namespace,
    next_message: int,
) -> int:
    began = time.monotonic()
    samples: list[Sample] = []
    deadline = began + args.timeout
    while time.monotonic() < deadline:
        time.sleep(1.0)
        sample = read_sample(proc.pid, metrics_url, began)
        samples.append(sample)
        if sample.checked >= args.deliveries:
            break
    first = next((s for s in samples if s.checked > 0), samples[0])
    last = samples[-1]
    if last.checked < args.deliveries:
        done = f"{last.checked:,} of {args.deliveries:,}"
        print(f"the audit checked only {done} in {args.timeout:.0f} s")
        return 1
    rate = (last.checked - first.checked) / max(last.wall_s - first.wall_s, 1e-9)
    cores = (last.cpu_s - first.cpu_s) / max(last.wall_s - first.wall_s, 1e-9)
    print(
        f"drain: {args.deliveries:,} deliveries checked; {rate:,.0f} deliveries/s "
        f"using {cores:.2f} cores (process CPU time / wall time, librdkafka's threads "
        f"included); startup {first.wall_s:.1f} s"
    )
    per_delivery_us = (last.cpu_s - first.cpu_s) / (last.checked - first.checked) * 1e6
    print(
        f"CPU per delivery: {per_delivery_us:.1f} us, so one core checks "
        f"{1e6 / per_delivery_us:,.0f} deliveries/s; at {args.live_rate:,.0f}/s the audit "
        f"needs {args.live_rate * per_delivery_us / 1e6:.2f} cores"
    )
    print("memory (RSS) as the backlog was read:")
    for tenth in range(1, 11):
        mark = args.deliveries * tenth // 10
        at = next(s for s in samples if s.checked >= mark)
        print(f"  {at.checked:>9,} checked: {at.rss_mb:7.1f} MiB")
    if args.live_seconds <= 0:
        return 0
    count = int(args.live_rate * args.live_seconds)
    before = read_sample(proc.pid, metrics_url, began)
    fill(
        bootstrap, topics, count, args.multicast, args.live_rate, start=next_message, paced=True,
        raw=args.format == "raw",
    )  # fmt: skip
    written = read_sample(proc.pid, metrics_url, began)
    time.sleep(2.0)
    after = read_sample(proc.pid, metrics_url, began)
    span = written.wall_s - before.wall_s
    print(
        f"live: {count:,} deliveries written at {count / span:,.0f}/s for {span:.1f} s; "
        f"the audit used {(written.cpu_s - before.cpu_s) / span:.2f} cores meanwhile, "
        f"checked {written.checked - before.checked:,} of them by the end of writing "
        f"and {after.checked - before.checked:,} 2 s later (lag then "
        f"{lag_seconds(metrics_url):.1f} s); RSS {after.rss_mb:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
