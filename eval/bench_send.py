"""Micro-benchmark of the send path: a client's CPU per message (issue 25, item 3).

One :class:`~atomickafka.client.AtomicKafkaClient` sends ``--messages`` messages of
``--record-size`` bytes, as the bench's clients do: each to its home topic, a share
(``--multicast``) to all ``--topics`` topics through the home topic (``direct``: one
record per destination). No node runs: the client sends with ``allow_offline`` and the
``direct`` protocol to input logs this script creates, so the figure is the client's
alone. Then ``atomickafka send`` reads the same number of lines from stdin.

Every figure is CPU time, read from the OS: the client process's (its Python thread
and librdkafka's threads) from the first send until every record is acknowledged, per
message; the Python thread's own share beside it. Runs unpaced (as fast as it can), and
paced at ``--paced-rate`` messages a second (each send waits for its time, as the
bench's paced clients do). For ``atomickafka send``: the command's CPU for N lines minus
its CPU for one line (start-up), per line. It prints figures and asserts nothing.

Usage::

    .venv/bin/python eval/bench_send.py                     # the embedded broker
    .venv/bin/python eval/bench_send.py --bootstrap-server 127.0.0.1:9092 --messages 50000
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atomickafka.client import AtomicKafkaClient
from atomickafka.core import core_form
from atomickafka.evaluation.load.clients import payload
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.topics import Layout, input_topic
from atomickafka.localkafka import ensure_broker


def _plan(topics: list[str], messages: int, multicast: float) -> list[tuple[str, ...]]:
    """Each message's destinations: every ``1/multicast``-th to all topics, else home."""
    every = round(1 / multicast) if multicast > 0 else 0
    home = (topics[0],)
    return [tuple(topics) if every and i % every == 0 else home for i in range(messages)]


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, all threads; this thread's)."""
    return time.process_time(), time.thread_time()


def run_client(
    bootstrap: str, topics: list[str], plan: list[tuple[str, ...]], size: int, rate: float
) -> tuple[float, float, float, float]:
    """Send ``plan`` (paced at ``rate`` msg/s when positive); return CPU µs per message
    (process, Python thread, the Python thread inside ``send``) and the wall seconds of
    the sends and the flush."""
    client = AtomicKafkaClient(bootstrap, allow_offline=True, algorithm="direct")
    try:
        client.warm_up(topics)
        client.send(payload(0, 0, False, 0, size), topics[:1], via=topics[0])  # producer id
        client.flush(30)
        pace = 1 / rate if rate > 0 else 0.0
        in_send = 0.0
        process0, thread0 = _cpu()
        started = time.monotonic()
        for seq, destinations in enumerate(plan):
            if pace:
                delay = started + seq * pace - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            value = payload(0, seq, len(destinations) > 1, time.time_ns() // 1000, size)
            before = time.thread_time()
            client.send(value, destinations, via=topics[0])
            in_send += time.thread_time() - before
        client.flush(60)
        wall = time.monotonic() - started
        process1, thread1 = _cpu()
    finally:
        client.close()
    n = len(plan)
    return (process1 - process0) / n * 1e6, (thread1 - thread0) / n * 1e6, in_send / n * 1e6, wall


def _cli_cpu(bootstrap: str, topics: list[str], lines: int, size: int) -> float:
    """CPU seconds (user + system) of ``atomickafka send`` of ``lines`` stdin lines to
    every topic."""
    text = "".join(f"{i:0{size}d}\n" for i in range(lines)).encode()
    argv = [sys.executable, "-m", "atomickafka", "send", "--bootstrap-server", bootstrap]
    argv += ["--allow-offline", "--to", ",".join(topics)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, input=text, capture_output=True, timeout=600, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"atomickafka send failed: {done.stderr.decode()[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: Sequence[str] | None = None) -> int:
    """Create the topics, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default=None, help="default: the embedded broker")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--multicast", type=float, default=0.5, help="share sent to all topics")
    parser.add_argument("--record-size", type=int, default=200, help="bytes per value")
    parser.add_argument("--paced-rate", type=float, default=1000.0, help="0: no paced run")
    parser.add_argument("--cli-lines", type=int, default=20_000, help="0: no CLI run")
    args = parser.parse_args(argv)

    bootstrap = args.bootstrap_server or ensure_broker()
    run = uuid.uuid4().hex[:6]
    topics = [f"send-{run}-t{i}" for i in range(1, args.topics + 1)]
    admin = admin_client(bootstrap)
    names = [input_topic(t, Layout.SPLIT) for t in topics]
    ensure_topics(admin, names)
    plan = _plan(topics, args.messages, args.multicast)
    records = sum(len(d) for d in plan)
    print(
        f"{args.messages:,} messages of {args.record_size} B, {args.multicast:.0%} to all "
        f"{args.topics} topics ({records / args.messages:.2f} records per message); "
        f"Python {sys.version.split()[0]}, core: {core_form()}, load {os.getloadavg()[0]:.1f}"
    )
    rates = [0.0] + ([args.paced_rate] if args.paced_rate > 0 else [])
    for rate in rates:
        n = args.messages if rate == 0 else min(args.messages, int(rate * 10))
        process, thread, in_send, wall = run_client(
            bootstrap, topics, plan[:n], args.record_size, rate
        )
        what = "unpaced" if rate == 0 else f"paced at {rate:,.0f} msg/s"
        print(
            f"  client.send, {what:<22} {process:7.1f} CPU-µs per message "
            f"(Python thread {thread:5.1f}, of it in send() {in_send:5.1f}; librdkafka's "
            f"threads {process - thread:5.1f}); {n:,} messages in {wall:.2f} s"
        )
    if args.cli_lines > 0:
        one = min(_cli_cpu(bootstrap, topics, 1, args.record_size) for _ in range(2))
        many = _cli_cpu(bootstrap, topics, args.cli_lines, args.record_size)
        print(
            f"  atomickafka send, {args.cli_lines:,} stdin lines to all {args.topics} topics: "
            f"{(many - one) / args.cli_lines * 1e6:7.1f} CPU-µs per line "
            f"(start-up {one * 1000:.0f} ms CPU)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
