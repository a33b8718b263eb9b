"""Micro-benchmark of the send path: a client's CPU per message (issue 25, item 3).

One :class:`~atomickafka.client.AtomicKafkaClient` sends ``--messages`` messages of
``--record-size`` bytes, as the bench's clients do: each to its home topic, a share
(``--multicast``) to all ``--topics`` topics through the home topic (``direct``: one
record per destination). No node runs: the client sends with ``allow_offline`` and the
``direct`` protocol to input logs this script creates, so the figure is the client's
alone. The same messages go out once with ``send`` per message and once with
``send_batch``, in batches of ``--batch`` messages of one destination set. Then
``atomickafka send`` reads the same number of lines from stdin (and, with
``--cli-before PYTHON``, the command of another checkout, e.g. the base commit's
``.venv/bin/python``, run with ``-P`` so that it imports its own sources).

Every figure is CPU time, read from the OS: the client process's (its Python thread
and librdkafka's threads) from the first send until every record is acknowledged, per
message; the Python thread's own share beside it, and its time inside ``send`` (or
``send_batch``). Runs unpaced (as fast as it can), and ``send`` paced at
``--paced-rate`` messages a second (each send waits for its time, as the bench's paced
clients do). For ``atomickafka send``: the command's CPU for N lines minus its CPU for
one line (start-up), per line. ``--rounds`` repeats every run, interleaved, and prints
the lowest of each. ``--produce-records N`` first compares confluent-kafka's
``produce`` with and without headers and ``produce_batch`` (which takes no headers).
It prints figures and asserts nothing.

Usage::

    .venv/bin/python eval/bench_send.py                     # the embedded broker
    .venv/bin/python eval/bench_send.py --bootstrap-server 127.0.0.1:9092 --messages 50000
    .venv/bin/python eval/bench_send.py --rounds 3 --cli-before ../main/.venv/bin/python
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

from confluent_kafka import Producer

from atomickafka.client import AtomicKafkaClient
from atomickafka.core import core_form
from atomickafka.evaluation.load.clients import payload
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER
from atomickafka.kafka.topics import Layout, input_topic
from atomickafka.localkafka import ensure_broker


def _plan(topics: list[str], messages: int, multicast: float) -> list[tuple[str, ...]]:
    """Each message's destinations: every ``1/multicast``-th to all topics, else home."""
    every = round(1 / multicast) if multicast > 0 else 0
    home = (topics[0],)
    return [tuple(topics) if every and i % every == 0 else home for i in range(messages)]


def _batches(plan: list[tuple[str, ...]], size: int) -> list[tuple[tuple[str, ...], list[int]]]:
    """The plan's messages in batches of ``size`` messages of one destination set (each
    set's last batch may be smaller): (destinations, the messages' sequence numbers)."""
    out: list[tuple[tuple[str, ...], list[int]]] = []
    filling: dict[tuple[str, ...], list[int]] = {}
    for seq, destinations in enumerate(plan):
        batch = filling.setdefault(destinations, [])
        batch.append(seq)
        if len(batch) == size:
            out.append((destinations, filling.pop(destinations)))
    out.extend(filling.items())
    return out


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, all threads; this thread's)."""
    return time.process_time(), time.thread_time()


#: CPU µs per message: the process, its Python thread, of that inside send/send_batch.
Figures = tuple[float, float, float]


def run_client(
    bootstrap: str,
    topics: list[str],
    plan: list[tuple[str, ...]],
    size: int,
    rate: float,
    batch: int = 0,
) -> tuple[Figures, float]:
    """Send ``plan`` (paced at ``rate`` msg/s when positive; with ``send_batch`` in
    batches of ``batch`` when positive); return CPU µs per message (process, Python
    thread, the Python thread inside ``send``/``send_batch``) and the wall seconds of
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
        if batch > 0:
            for destinations, seqs in _batches(plan, batch):
                multicast = len(destinations) > 1
                now_us = time.time_ns() // 1000
                values = [payload(0, seq, multicast, now_us, size) for seq in seqs]
                before = time.thread_time()
                client.send_batch(values, destinations, via=topics[0])
                in_send += time.thread_time() - before
        for seq, destinations in enumerate(plan if batch <= 0 else ()):
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
    per = ((process1 - process0) / n * 1e6, (thread1 - thread0) / n * 1e6, in_send / n * 1e6)
    return per, wall


def _cli_cpu(
    bootstrap: str, topics: list[str], lines: int, size: int, python: str = sys.executable
) -> float:
    """CPU seconds (user + system) of ``atomickafka send`` of ``lines`` stdin lines to
    every topic, run by ``python`` (``-P``: its own install's sources, not this
    directory's)."""
    text = "".join(f"{i:0{size}d}\n" for i in range(lines)).encode()
    argv = [python, "-P", "-m", "atomickafka", "send", "--bootstrap-server", bootstrap]
    argv += ["--allow-offline", "--to", ",".join(topics)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, input=text, capture_output=True, timeout=600, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"atomickafka send failed: {done.stderr.decode()[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cli_per_line(bootstrap: str, topics: list[str], lines: int, size: int, python: str) -> float:
    """``atomickafka send``'s CPU µs per stdin line: N lines less one (its start-up)."""
    one = min(_cli_cpu(bootstrap, topics, 1, size, python) for _ in range(2))
    many = _cli_cpu(bootstrap, topics, lines, size, python)
    return (many - one) / lines * 1e6


def compare_produce(bootstrap: str, records: int, size: int = 300) -> dict[str, float]:
    """Process CPU µs per record of confluent-kafka's ``produce`` with AtomicKafka's
    four fixed headers (a client record's format, type, id, destinations), ``produce``
    without headers, and ``produce_batch`` of 100-record lists (it takes no headers):
    ``records`` records of ``size`` bytes to a one-partition topic, idempotent producer,
    ``linger.ms`` 1, from the first call until all are acknowledged."""
    topic = f"produce-{uuid.uuid4().hex[:6]}"
    ensure_topics(admin_client(bootstrap), [topic])
    value = b"x" * size
    out: dict[str, float] = {}
    for mode in ("produce, 4 headers", "produce, no headers", "produce_batch"):
        # a queue with room for every record: no call waits, none is retried
        config = {"queue.buffering.max.messages": 2 * records + 10, "linger.ms": 1}
        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, **config},
            logger=LIBRDKAFKA_LOGGER,
        )
        producer.produce(topic, b"warm-up")
        producer.flush(30)
        started = time.process_time()
        if mode == "produce_batch":
            for first in range(0, records, 100):
                batch = [{"value": value} for _ in range(min(100, records - first))]
                producer.produce_batch(topic, batch)
                producer.poll(0)
        else:
            headers = mode == "produce, 4 headers"
            for n in range(records):
                record_headers: list[tuple[str, str | bytes | None]] | None = (
                    [
                        ("atomickafka-format", b"3"),
                        ("atomickafka-type", b"ClientMessage"),
                        ("atomickafka-id", f"c-{n}".encode()),
                        ("atomickafka-to", b"t1,t2"),
                    ]
                    if headers
                    else None
                )
                producer.produce(topic, value, headers=record_headers)
                if n % 100 == 0:
                    producer.poll(0)
        producer.flush(60)
        out[mode] = (time.process_time() - started) / records * 1e6
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Create the topics, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default=None, help="default: the embedded broker")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--multicast", type=float, default=0.5, help="share sent to all topics")
    parser.add_argument("--record-size", type=int, default=200, help="bytes per value")
    parser.add_argument("--batch", type=int, default=100, help="send_batch's size; 0: no run")
    parser.add_argument("--paced-rate", type=float, default=1000.0, help="0: no paced run")
    parser.add_argument("--cli-lines", type=int, default=20_000, help="0: no CLI run")
    parser.add_argument(
        "--cli-before",
        default=None,
        metavar="PYTHON",
        help="also run atomickafka send with this interpreter (another checkout's venv)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved; the lowest is kept")
    parser.add_argument(
        "--produce-records", type=int, default=0, help="compare produce and produce_batch first"
    )
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
    if args.produce_records > 0:
        produced = compare_produce(bootstrap, args.produce_records)
        for mode, per in produced.items():
            print(f"  confluent-kafka {mode:<20} {per:5.2f} CPU-µs per record (process)")
    # (label, send_batch size or 0, rate): every client run of a round
    runs = [("client.send, unpaced", 0, 0.0)]
    if args.batch > 0:
        runs.append((f"client.send_batch({args.batch}), unpaced", args.batch, 0.0))
    if args.paced_rate > 0:
        runs.append((f"client.send, paced at {args.paced_rate:,.0f} msg/s", 0, args.paced_rate))
    clis = [("atomickafka send", sys.executable)]
    if args.cli_before:
        clis.insert(0, ("atomickafka send, --cli-before", args.cli_before))
    lowest: dict[str, list[float]] = {}
    for round_no in range(1, args.rounds + 1):
        print(f"round {round_no} (load {os.getloadavg()[0]:.1f})")
        for label, batch, rate in runs:
            n = args.messages if rate == 0 else min(args.messages, int(rate * 10))
            (process, thread, in_send), wall = run_client(
                bootstrap, topics, plan[:n], args.record_size, rate, batch
            )
            inside = "send_batch()" if batch else "send()"
            print(
                f"  {label:<38} {process:7.1f} CPU-µs per message (Python thread "
                f"{thread:5.1f}, of it in {inside} {in_send:5.1f}; librdkafka's threads "
                f"{process - thread:5.1f}); {n:,} messages in {wall:.2f} s"
            )
            _keep_lowest(lowest, label, [process, thread, in_send])
        for label, python in clis if args.cli_lines > 0 else []:
            per_line = _cli_per_line(bootstrap, topics, args.cli_lines, args.record_size, python)
            print(
                f"  {label}, {args.cli_lines:,} stdin lines to all {args.topics} topics: "
                f"{per_line:7.1f} CPU-µs per line"
            )
            _keep_lowest(lowest, label, [per_line])
    if args.rounds > 1:
        print(f"lowest of {args.rounds} rounds (CPU-µs per message or line):")
        for label, figures in lowest.items():
            print(f"  {label:<38} " + " / ".join(f"{f:6.1f}" for f in figures))
    return 0


def _keep_lowest(lowest: dict[str, list[float]], label: str, figures: list[float]) -> None:
    """Keep, figure by figure, the lowest seen of ``label``."""
    known = lowest.setdefault(label, figures)
    lowest[label] = [min(a, b) for a, b in zip(known, figures, strict=True)]


if __name__ == "__main__":
    sys.exit(main())
