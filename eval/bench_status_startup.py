"""Benchmark: a client's start-up on an aged status topic (issue 19's start-up target).

Fills the status topic with ``--records`` old statuses (Kafka timestamps an hour in
the past, as a cluster that has run for hours leaves them), starts a small cluster,
then measures, on that broker:

- reading the whole status topic right after the fill, what every client and every
  ``send`` paid before they read only the live window (``read_statuses(window_s=None)``;
  the log cleaner compacts it within minutes with the topic's settings);
- a client's construction to its first ``send`` returned (the status read, the
  producer's creation, the write queued), and to that message acknowledged;
- ``atomickafka send`` of one message, wall time of the whole command (with compiled
  bytecode, as an installed package has it; one unmeasured run first).

It prints figures and asserts nothing (targets: first send <= 100 ms, ``send`` <= 0.5 s
wall; a timed assertion would fail on a busy shared machine). Usage::

    .venv/bin/python eval/bench_status_startup.py                    # the embedded broker
    .venv/bin/python eval/bench_status_startup.py --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import TopicPartition

from atomickafka.client import AtomicKafkaClient
from atomickafka.evaluation.bench.aged_status import fill_old_statuses
from atomickafka.kafka.consumer import make_consumer, watermarks
from atomickafka.kafka.status import STATUS_READ_WINDOW_S, read_statuses
from atomickafka.kafka.topics import STATUS_TOPIC
from atomickafka.localkafka import ensure_broker
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.node.launch import running_cluster


def _timed(what: Callable[[], object]) -> float:
    started = time.perf_counter()
    what()
    return time.perf_counter() - started


def _first_send(bootstrap: str, topics: list[str]) -> tuple[float, float]:
    """Seconds from a client's construction to its first send returned, and to that
    message acknowledged."""
    started = time.perf_counter()
    client = AtomicKafkaClient(bootstrap)
    try:
        client.send({"bench": "startup"}, topics)
        sent = time.perf_counter() - started
        client.flush(30)
        return sent, time.perf_counter() - started
    finally:
        client.close()


def _send_cli(bootstrap: str, topics: list[str]) -> float:
    argv = [sys.executable, "-m", "atomickafka", "send", "--bootstrap-server", bootstrap]
    argv += ["--to", ",".join(topics), "startup"]
    # as installed: with compiled bytecode (an unmeasured first run writes it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"atomickafka send failed: {done.stderr.strip()}")
    return wall


def _records_in_status_topic(bootstrap: str) -> int:
    consumer = make_consumer(bootstrap)
    try:
        low, high = watermarks(consumer, TopicPartition(STATUS_TOPIC, 0))
        return high - low
    finally:
        consumer.close()


def _line(label: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"{label:<46} median {statistics.median(ms):8.1f} ms   "
        f"min {min(ms):8.1f}   max {max(ms):8.1f}   (n={len(ms)})"
    )


def main(argv: list[str] | None = None) -> int:
    """Fill, start, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default=None, help="default: the embedded broker")
    parser.add_argument("--records", type=int, default=100_000, help="old statuses to write")
    parser.add_argument("--age-s", type=float, default=3600.0, help="their age")
    parser.add_argument("--repeat", type=int, default=5, help="measurements of each kind")
    args = parser.parse_args(argv)
    bootstrap = args.bootstrap_server or ensure_broker()
    run = uuid.uuid4().hex[:6]
    topics = [f"startup-{run}-t{i}" for i in (1, 2)]

    started = time.perf_counter()
    filling_from = time.time()
    fill_old_statuses(bootstrap, args.records, age_s=args.age_s)
    print(f"filled the status topic with {args.records:,} statuses {args.age_s:.0f} s old "
          f"in {time.perf_counter() - started:.1f} s")  # fmt: skip
    # right away, before the log cleaner compacts them (segments roll every minute)
    span = _records_in_status_topic(bootstrap)
    whole = [_timed(lambda: read_statuses(bootstrap, timeout_s=60.0)) for _ in range(args.repeat)]
    node = NodeConfig(bootstrap, topics[0], log_level="warning")
    with (
        tempfile.TemporaryDirectory() as logs,
        running_cluster(ClusterConfig(tuple(topics), node), log_path=Path(logs, "nodes.log")),
    ):
        # The old records were appended now: a status published just before them (a
        # cluster that ran a moment ago) would put them inside the read window, which
        # a cluster that aged in order never does. Measure once the window is past it.
        time.sleep(max(0.0, filling_from + STATUS_READ_WINDOW_S - time.time()))
        firsts = [_first_send(bootstrap, topics) for _ in range(args.repeat)]
        cli = [_send_cli(bootstrap, topics) for _ in range(args.repeat + 1)][1:]
    print(_line(f"whole status topic ({span:,} offsets) read", whole))
    print("  (what every client and every send did before reading the live window only)")
    print(_line("construction -> first send returned", [s for s, _ in firsts]))
    print(_line("construction -> first send acknowledged", [a for _, a in firsts]))
    print(_line("`atomickafka send` of one message, wall", cli))
    print("targets: first send <= 100 ms after construction; send <= 500 ms wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
