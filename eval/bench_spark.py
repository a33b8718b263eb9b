"""Rows per second through the Spark data source (``atomickafka.spark``) against Spark's
own Kafka sink and source, on the same data, on this machine, in one run.

One local SparkSession (``local[2]``, Spark's Kafka connector on its class path) and
nodes for one topic ``T``. The same DataFrame of ``--rows`` JSON values
(``{"n": i, "pad": "x..."}``, ``--value-size`` bytes of padding), cached:

- **sink**: written with ``format("atomickafka")`` to ``T`` (each row one message, a
  single destination; the call returns once the broker has every client record), and
  with ``format("kafka")`` to a plain topic of one partition;
- **source**: ``T``'s deliveries (the nodes' JSON envelopes, once all are delivered)
  read to the end into Spark's ``noop`` sink with ``format("atomickafka")`` (decoded,
  filtered, one row per delivery) and with ``format("kafka")`` (the same records, raw),
  each with one Spark partition and with ``minPartitions=2``.

Each figure is the best of ``--rounds`` runs (round 1 after a small warm-up write and
read, so neither side pays for Spark's start-up or its Python workers' in the figures).
Rows per second are rows over the wall-clock time of the Spark action. Prints a table
and asserts nothing.

It runs the installed package (and so do the nodes it starts and Spark's Python
workers): ``.venv/bin/python`` the checkout's pure-Python core, the compiled wheel's
interpreter (``deploy/compiled.sh``, ``.venv-compiled``) with ``PYTHONSAFEPATH=1`` the
compiled one, as ``pip install`` gives it. The first line says which.

Usage (under the heavy-run lock, with the embedded broker or any Kafka)::

    flock /tmp/atomickafka-heavy.lock env PYTHONSAFEPATH=1 .venv-compiled/bin/python \\
        eval/bench_spark.py --bootstrap-server 127.0.0.1:19092 --rows 30000 --rounds 2
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the usual spelling)

from atomickafka.client import DeliveryReader
from atomickafka.core import core_form
from atomickafka.evaluation.suite.spark import session
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.node import launch
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.spark import register


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _frame(spark: SparkSession, rows: int, size: int, start: int = 0) -> DataFrame:
    frame = spark.range(start, start + rows).select(
        F.to_json(F.struct(F.col("id").alias("n"), F.repeat(F.lit("x"), size).alias("pad"))).alias(
            "value"
        )
    )
    frame = frame.cache()
    frame.count()
    return frame


def _wait_delivered(bootstrap: str, topic: str, count: int, timeout_s: float = 600) -> None:
    """Until ``topic`` holds ``count`` deliveries (committed ones)."""
    deadline = time.monotonic() + timeout_s
    seen = 0
    with DeliveryReader(bootstrap, topic, committed_only=True) as reader:
        while seen < count and time.monotonic() < deadline:
            seen += sum(1 for _ in reader.deliveries(timeout_s=1, max_messages=count - seen))
    if seen < count:
        raise SystemExit(f"{topic}: {seen} of {count} deliveries after {timeout_s:.0f} s")


def _noop(frame: DataFrame) -> None:
    frame.write.format("noop").mode("overwrite").save()


def bench(bootstrap: str, rows: int, size: int, rounds: int, log_dir: Path) -> list[str]:
    """Run every round; the table's lines."""
    run = uuid.uuid4().hex[:6]
    topic, plain = f"bench-spark-{run}", f"bench-spark-plain-{run}"
    ensure_topics(admin_client(bootstrap), [plain])
    config = ClusterConfig((topic,), NodeConfig(bootstrap, topic, log_level="warning"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import atomickafka
    spark = session("local[2]", kafka_source=True, app_name="atomickafka-bench-spark")
    register(spark)
    ours = spark.read.format("atomickafka").option("kafka.bootstrap.servers", bootstrap)
    theirs = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    best: dict[str, float] = {}

    def note(name: str, seconds: float, count: int) -> None:
        best[name] = max(best.get(name, 0.0), count / seconds)
        print(f"  {name:<44} {count:>8} rows {seconds:>8.2f} s {count / seconds:>10,.0f} rows/s")

    with launch.running_cluster(config, log_path=log_dir / "nodes.log"):
        warm = _frame(spark, 200, size, start=-200)
        written = 0
        for _ in range(2):  # start-up: Spark's, its Python workers', the client's
            warm.write.format("atomickafka").option("kafka.bootstrap.servers", bootstrap).option(
                "destinations", topic
            ).mode("append").save()
            warm.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
                "topic", plain
            ).save()
            written += 200
        _wait_delivered(bootstrap, topic, written)
        _noop(ours.option("subscribe", topic).load())  # the source's start-up too
        _noop(theirs.option("subscribe", topic).option("startingOffsets", "earliest").load())
        frame = _frame(spark, rows, size)
        for round_ in range(1, rounds + 1):
            print(f"round {round_} of {rounds}")
            note(
                "sink: format(atomickafka), 1 destination",
                _timed(
                    lambda: (
                        frame.write.format("atomickafka")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("destinations", topic)
                        .mode("append")
                        .save()
                    )
                ),
                rows,
            )
            note(
                "sink: format(kafka)",
                _timed(
                    lambda: (
                        frame.write.format("kafka")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("topic", plain)
                        .save()
                    )
                ),
                rows,
            )
            written += rows
            _wait_delivered(bootstrap, topic, written)
            for parts in ("1", "2"):
                source = ours.option("subscribe", topic).option("minPartitions", parts).load()
                note(
                    f"source: format(atomickafka), {parts} partition(s)",
                    _timed(functools.partial(_noop, source)),
                    written,
                )
                raw = (
                    theirs.option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .option("minPartitions", parts)
                    .load()
                )
                count = raw.count()  # the records, transaction markers not included
                note(
                    f"source: format(kafka), {parts} partition(s)",
                    _timed(functools.partial(_noop, raw)),
                    count,
                )
    spark.stop()
    return [f"{name:<44} {rate:>10,.0f} rows/s" for name, rate in best.items()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if not args.bootstrap_server:
        parser.error("--bootstrap-server (or KAFKA_BOOTSTRAP_SERVERS) is required")
    print(
        f"atomickafka bench_spark: {args.rows} rows of ~{args.value_size + 20} bytes, core: "
        f"{core_form()}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as logs:
        lines = bench(args.bootstrap_server, args.rows, args.value_size, args.rounds, Path(logs))
    print(f"best of {args.rounds} round(s), load now {os.getloadavg()[0]:.1f}:")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
