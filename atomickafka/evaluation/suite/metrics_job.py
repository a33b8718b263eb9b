"""PySpark metrics of AtomicKafka evaluation runs (thesis chapter 5 and more).

A plain PySpark application: it needs only pyspark, so ``spark-submit`` runs it on any
cluster, and ``atomickafka eval`` runs it in local mode in its own process. Per run it
computes

- per node: incoming messages (records in the node's input log; a bundle counts its
  inner messages, and Kafka records are counted too) and outgoing messages (records the
  node wrote, to any topic), per second over the run and per 5-second window, as the
  thesis's tables and figures do;
- per topic: deliveries per second;
- the run time (first measured send to last measured delivery), messages/s;
- send-to-delivery latency (at the last of a message's destinations): p50, p90, p99,
  max, mean and 101 quantiles, for all, single-topic and multicast messages;
- every record type's count, and rate series per node in buckets fine enough to plot.

It reads either the Parquet files ``atomickafka eval`` records (``records.parquet`` and
``messages.parquet`` per run, schema in ``atomickafka/evaluation/suite/recording.py``) or a
run straight from its Kafka topics through Spark's Kafka source
(``org.apache.spark:spark-sql-kafka-0-10_2.13``; ``--jars-dir`` adds the fetched
connector jars, or pass ``--jars``/``--packages`` to spark-submit). Writes one JSON
file per run, ``<out>/<run>.json``.

It ships inside the package (``atomickafka/evaluation/suite/metrics_job.py``) and imports
nothing from it but ``atomickafka/spark_raw.py`` (the raw record form, shared with the
audit's Spark job, and the compact control form; pyspark only): where the package is not
installed, pass that file to ``spark-submit --py-files``, and the job runs wherever
pyspark does. It reads AtomicKafka's
wire format with its own parser (Spark's ``from_json`` over :data:`RECORD_SCHEMA`), on
purpose: a contract test holds it to the records ``atomickafka.core.wire`` writes.
``atomickafka eval --print-job`` prints this file's path. Usage::

    JOB=$(atomickafka eval --print-job)
    spark-submit $JOB --runs OUT/runs --out OUT/metrics [--master local[2]]
    LIB=~/.cache/atomickafka/spark-kafka-4.0.0/lib   # deploy/bootstrap.sh eval fetches it
    spark-submit --jars "$(python $JOB --print-jars $LIB)" $JOB \\
        --source kafka --bootstrap-server B --topics T1,T2,T3,T4,T5 [--layout split] \\
        --run NAME --out DIR
    python $JOB --source kafka --jars-dir $LIB ...   # local mode, same result

(Run spark-submit with the virtualenv's ``bin`` first on ``PATH``: it finds pyspark
through ``python3``.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the usual spelling)
from pyspark.sql import types as T  # noqa: N812

try:  # the installed package
    from atomickafka.spark_raw import compact_as_json, raw_as_json
except ImportError:  # this file alone under spark-submit, with --py-files .../spark_raw.py
    from spark_raw import (  # type: ignore[import-not-found,no-redef]
        compact_as_json,
        raw_as_json,
    )


#: Topic names of an AtomicKafka topic ``T`` (``atomickafka.kafka.topics``): the input
#: log is ``atomickafka-in.T`` in the split layout and ``T`` itself in the shared one.
INPUT_PREFIX: Final = "atomickafka-in."
CONTROL_PREFIX: Final = "atomickafka-ctl."
DEAD_LETTER_PREFIX: Final = "atomickafka-dlq."
#: The wire format as this job reads it (``atomickafka.core.wire``): record types, and
#: a bundle's JSON header line, which ends at the first newline (its values follow).
CLIENT_TYPE: Final = "ClientMessage"
DELIVERY_TYPE: Final = "DeliveryMessage"
BUNDLE_TYPE: Final = "Bundle"
BUNDLE_HEADER_END: Final = "\n"
#: ``message_type`` of a JSON object without a type, and of anything else.
NO_TYPE: Final = "<none>"
UNDECODABLE: Final = "<undecodable>"
#: The thesis's window for rates over time.
WINDOW_S: Final = 5.0
#: Plot bucket widths to choose from, and the most points a series should have.
BUCKETS_MS: Final = (100, 200, 250, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000)
MAX_POINTS: Final = 120
QUANTILES: Final = [i / 100 for i in range(101)]
KINDS: Final = ("incoming", "outgoing", "deliveries")
#: The connector's own jars; the rest of its Maven runtime ships with pyspark.
CONNECTOR_ARTIFACTS: Final = (
    "spark-sql-kafka-0-10",
    "spark-token-provider-kafka-0-10",
    "kafka-clients",
    "commons-pool2",
)

#: The ``senderID`` of each sequencer baseline's deliveries (``seq-alo`` writes as
#: ``sequencer``); the node name of its metrics.
_SEQUENCERS: Final = ("sequencer", "seq-eos", "streams")

# ----------------------------------------------------------------------------- session


def connector_jars(folder: str | Path) -> list[str]:
    """The Kafka connector's jars in ``folder`` (a Maven copy of its runtime), leaving
    out what pyspark already ships (Scala, Hadoop client, logging, compression)."""
    prefixes = tuple(f"{a}{sep}" for a in CONNECTOR_ARTIFACTS for sep in "-_")
    return [str(jar) for jar in sorted(Path(folder).glob("*.jar")) if jar.name.startswith(prefixes)]


def build_session(
    master: str | None = None, jars: Sequence[str] = (), app_name: str = "atomickafka-metrics"
) -> SparkSession:
    """A SparkSession (the running one if there is one). In local mode, few shuffle
    partitions: the data is small and every partition costs a task."""
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if master is None or master.startswith("local"):
        # Local mode stays on loopback (before the JVM starts, the variable decides).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


# ----------------------------------------------------------------------------- sources


def load_parquet(spark: SparkSession, runs: str) -> tuple[DataFrame, DataFrame]:
    """``records`` and ``messages`` of every run under ``runs`` (a folder of run
    folders, or one run folder)."""

    def paths(name: str) -> list[str]:
        if "://" in runs:  # a cluster file system: let Spark expand the pattern
            return [f"{runs.rstrip('/')}/*/{name}"]
        folder = Path(runs)
        found = [folder / name] if (folder / name).exists() else sorted(folder.glob(f"*/{name}"))
        if not found:
            raise FileNotFoundError(f"no {name} in {runs} or its sub-folders")
        return [str(path) for path in found]

    return spark.read.parquet(*paths("records.parquet")), spark.read.parquet(
        *paths("messages.parquet")
    )


_VALUE = T.StructType(
    [
        T.StructField("t", T.LongType()),
        T.StructField("c", T.LongType()),
        T.StructField("i", T.LongType()),
        T.StructField("m", T.BooleanType()),
    ]
)
_MESSAGE_FIELDS = [
    T.StructField("messageID", T.StringType()),
    T.StructField("messageType", T.StringType()),
    T.StructField("senderID", T.StringType()),
    T.StructField("sentFromTopic", T.StringType()),
    T.StructField("topic", T.ArrayType(T.StringType())),
    T.StructField("timeStamp", T.LongType()),
    T.StructField("value", _VALUE),
]
_MESSAGE = T.StructType(_MESSAGE_FIELDS)
#: What the job reads of a record's JSON (a bundle's header line): a message's fields,
#: and a bundle's inner messages.
RECORD_SCHEMA: Final = T.StructType(
    [*_MESSAGE_FIELDS, T.StructField("messages", T.ArrayType(_MESSAGE))]
)


def kafka_topics(
    topics: Iterable[str], layout: str, control_log: bool = True
) -> list[tuple[str, str, str, bool]]:
    """``(kafka_topic, node, role, holds_deliveries)`` of every Kafka topic of a run
    (``control_log``: each node's control log counts as its input too)."""
    out = []
    for topic in topics:
        if layout == "shared":
            out.append((topic, topic, "input", True))
        else:
            out.append((INPUT_PREFIX + topic, topic, "input", False))
            out.append((topic, topic, "delivery", True))
        if control_log:  # its peers' bundles, its markers (--control-log, §7)
            out.append((CONTROL_PREFIX + topic, topic, "input", False))
        out.append((DEAD_LETTER_PREFIX + topic, topic, "dead-letter", False))
    return out


def parse_values(raw: DataFrame) -> DataFrame:
    """Kafka source rows (``topic``, ``partition``, ``offset``, ``timestamp``, ``value``)
    parsed: ``kafka_topic``, ``partition``, ``offset``, ``kafka_ts_ms``, ``json`` (the
    record's JSON text; a bundle's header line), ``value_bytes``, ``p`` (the parsed
    :data:`RECORD_SCHEMA`), ``message_type`` and ``bundle``."""
    parsed = raw.select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset"),
        F.unix_millis(F.col("timestamp")).alias("kafka_ts_ms"),
        # a raw record's metadata is in its headers; a bundle is a JSON header line, then
        # its messages' raw values: parse the line
        F.coalesce(
            # (the value is the user's: the evaluation's probe when it is one, else null)
            raw_as_json(raw, F.from_json(F.col("value").cast("string"), _VALUE)),
            compact_as_json(F.col("value")),  # a compact bundle or tick (§3.9)
            F.substring_index(F.col("value").cast("string"), BUNDLE_HEADER_END, 1),
        ).alias("json"),
        F.coalesce(F.length("value"), F.lit(0)).cast("int").alias("value_bytes"),
    ).withColumn("p", F.from_json("json", RECORD_SCHEMA))
    p = F.col("p")
    kind = F.coalesce(
        p["messageType"],
        F.when(F.col("json").startswith("{"), F.lit(NO_TYPE)).otherwise(F.lit(UNDECODABLE)),
    )
    bundle = (kind == BUNDLE_TYPE) & p["messages"].isNotNull()
    return parsed.withColumn("message_type", kind).withColumn("bundle", bundle)


def load_kafka(
    spark: SparkSession,
    bootstrap: str,
    topics: Sequence[str],
    *,
    layout: str = "split",
    control_log: bool = True,
    run: str = "kafka",
    options: dict[str, str] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """``records`` and ``messages`` of one run, read from its Kafka topics (every record
    from the earliest to the latest offset), in the same columns as the Parquet files."""
    spec = kafka_topics(topics, layout, control_log)
    names = spark.createDataFrame(
        spec, "kafka_topic string, node string, role string, holds_deliveries boolean"
    )
    pattern = "^(" + "|".join(re.escape(name) for name, *_ in spec) + ")$"
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", pattern)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
    )
    for key, value in (options or {}).items():
        reader = reader.option(f"kafka.{key}", value)
    return records_and_messages(reader.load(), names, run)


def records_and_messages(raw: DataFrame, names: DataFrame, run: str) -> tuple[DataFrame, DataFrame]:
    """``records`` and ``messages`` (the Parquet files' columns) of Kafka source rows
    ``raw`` from the topics in ``names`` (``kafka_topic``, ``node``, ``role``,
    ``holds_deliveries``, as :func:`kafka_topics` gives them)."""
    # Records and messages both come from this: read Kafka once.
    parsed = parse_values(raw).join(F.broadcast(names), "kafka_topic").cache()
    p = F.col("p")
    records = parsed.select(
        F.lit(run).alias("run"),
        "kafka_topic",
        "partition",
        "offset",
        "kafka_ts_ms",
        "node",
        "role",
        "message_type",
        F.when(F.col("role") == "dead-letter", F.concat(F.lit("node-"), F.col("node")))
        .otherwise(p["senderID"])
        .alias("writer"),
        p["sentFromTopic"].alias("sent_from_topic"),
        F.when(F.col("bundle"), F.lit(None).cast("string"))
        .otherwise(p["messageID"])
        .alias("message_id"),
        F.when(F.col("bundle"), F.size(p["messages"])).otherwise(F.lit(1)).alias("messages"),
        F.when(
            F.col("bundle"),
            F.transform(p["messages"], lambda m: F.coalesce(m["messageType"], F.lit(NO_TYPE))),
        )
        .otherwise(F.array(F.col("message_type")))
        .alias("inner_types"),
        "value_bytes",
    )
    return records, _messages_from_records(parsed, run)


def _messages_from_records(parsed: DataFrame, run: str) -> DataFrame:
    """Sent messages (ClientMessages clients wrote) with their first delivery at each
    destination (DeliveryMessages a destination's node wrote into its topic)."""
    p = F.col("p")
    writer = F.coalesce(p["senderID"], F.lit(""))
    sent = (
        parsed.where(
            (F.col("role") == "input")
            & (F.col("message_type") == CLIENT_TYPE)
            & ~writer.startswith("node-")
            & ~writer.isin(*_SEQUENCERS)
        )
        .select(
            p["messageID"].alias("message_id"),
            writer.alias("client"),
            F.col("node").alias("home_topic"),
            F.array_sort(F.array_distinct(p["topic"])).alias("destinations"),
            F.coalesce(p["value"]["t"], F.col("kafka_ts_ms") * 1000).alias("send_us"),
            p["value"]["t"].isNull().alias("warmup"),
        )
        .dropDuplicates(["message_id"])
    )
    own = F.struct(*[p[f.name].alias(f.name) for f in _MESSAGE_FIELDS])
    items = parsed.where(F.col("holds_deliveries")).select(
        "node",
        "offset",
        "kafka_ts_ms",
        F.explode(F.when(F.col("bundle"), p["messages"]).otherwise(F.array(own))).alias("m"),
    )
    first = (
        items.where(
            (F.col("m.messageType") == DELIVERY_TYPE) & (F.col("m.sentFromTopic") == F.col("node"))
        )
        .groupBy(F.col("m.messageID").alias("message_id"), F.col("node").alias("destination"))
        .agg(F.min(F.struct("offset", "kafka_ts_ms", F.col("m.timeStamp").alias("ts"))).alias("d"))
    )
    rows = sent.withColumn("destination", F.explode("destinations")).join(
        first, ["message_id", "destination"], "left"
    )
    return rows.select(
        F.lit(run).alias("run"),
        "message_id",
        "client",
        "home_topic",
        "destinations",
        (F.size("destinations") > 1).alias("multicast"),
        "warmup",
        "destination",
        "send_us",
        F.col("d.kafka_ts_ms").alias("delivered_ms"),
        F.col("d.offset").alias("delivery_offset"),
        F.col("d.ts").alias("final_ts"),
        (F.col("d.kafka_ts_ms") - F.col("send_us") / 1000).alias("latency_ms"),
    )


# ----------------------------------------------------------------------------- metrics


def bucket_ms(run_ms: float) -> int:
    """The finest plot bucket that gives at most :data:`MAX_POINTS` points."""
    for width in BUCKETS_MS:
        if run_ms / width <= MAX_POINTS:
            return width
    return BUCKETS_MS[-1]


def _writer_node() -> Column:
    """The AtomicKafka topic whose node wrote a record: ``node-T``, a layer's node
    ``node-T/p`` and a partitioned topic's merger ``merger-T`` all count for ``T``."""
    writer = F.col("writer")
    topic = F.regexp_extract(writer, r"^(?:node|merger)-([^/]+)", 1)
    return F.when(topic != "", topic).when(writer.isin(*_SEQUENCERS), writer)


def _events(records: DataFrame, measured: DataFrame, windows: DataFrame) -> DataFrame:
    """``(run, kind, node, ts, n, r)``: every message (``n``) and record (``r``) a node
    took in or wrote, and every delivery, inside its run's window."""
    ts = F.col("kafka_ts_ms")
    recs = (
        records.where(F.col("role") != "status")
        .join(F.broadcast(windows), "run")
        .where((ts >= F.col("start_ms")) & (ts <= F.col("end_ms")))
    )
    incoming = recs.where(F.col("role") == "input").select(
        "run", F.lit("incoming").alias("kind"), "node", ts.alias("ts"), "messages"
    )
    outgoing = (
        recs.withColumn("writer_node", _writer_node())
        .where(F.col("writer_node").isNotNull())
        .select(
            "run",
            F.lit("outgoing").alias("kind"),
            F.col("writer_node").alias("node"),
            ts.alias("ts"),
            "messages",
        )
    )
    deliveries = measured.where(F.col("delivered_ms").isNotNull()).select(
        "run",
        F.lit("deliveries").alias("kind"),
        F.col("destination").alias("node"),
        F.col("delivered_ms").alias("ts"),
        F.lit(1).alias("messages"),
    )
    return (
        incoming.unionByName(outgoing)
        .unionByName(deliveries)
        .select("run", "kind", "node", "ts", F.col("messages").alias("n"), F.lit(1).alias("r"))
    )


def _latency(complete: DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """Latency summaries per run of fully delivered messages: ``(run, "all" | "single" |
    "multicast")`` -> n, p50, p90, p99, max, mean and 101 quantiles (one Spark job)."""
    rows = (
        complete.rollup("run", "multicast")
        .agg(
            F.count("*").alias("n"),
            F.avg("latency").alias("mean"),
            F.percentile("latency", QUANTILES).alias("q"),
        )
        .where(F.col("run").isNotNull())
        .collect()
    )
    out = {}
    for row in rows:
        name = "all" if row["multicast"] is None else "multicast" if row["multicast"] else "single"
        q = [round(float(v), 3) for v in row["q"]]
        out[(row["run"], name)] = {
            "n": row["n"],
            "p50": q[50],
            "p90": q[90],
            "p99": q[99],
            "max": q[100],
            "mean": round(float(row["mean"]), 3),
            "quantiles": q,
        }
    return out


def _dense(
    cells: dict[tuple[str, str], dict[int, int]], width_ms: int, run_ms: int
) -> dict[str, dict[str, list[float]]]:
    """Counts per bucket index -> rates per second, every bucket from the first to the
    run's last. A last bucket shorter than half a bucket joins the one before it (a
    sliver of a bucket would make a rate out of a handful of records)."""
    count = max(1, math.ceil(run_ms / width_ms))
    widths = [float(width_ms)] * count
    widths[-1] = max(run_ms - (count - 1) * width_ms, 1)
    merge = count > 1 and widths[-1] < width_ms / 2
    if merge:
        sliver = widths.pop()
        widths[-1] += sliver
    out: dict[str, dict[str, list[float]]] = {kind: {} for kind in KINDS}
    for (kind, node), per_index in sorted(cells.items()):
        counts = [per_index.get(i, 0) for i in range(count)]
        if merge:
            last = counts.pop()
            counts[-1] += last
        out[kind][node] = [round(n / (w / 1000), 3) for n, w in zip(counts, widths, strict=True)]
    return out


def _bounds(measured: DataFrame) -> dict[str, tuple[int, int]]:
    """Each run's window: first measured send to last measured delivery (ms)."""
    rows = (
        measured.groupBy("run")
        .agg(
            F.floor(F.min("send_us") / 1000).alias("start_ms"),
            F.max("delivered_ms").alias("end_ms"),
        )
        .collect()
    )
    return {r["run"]: (int(r["start_ms"]), int(r["end_ms"] or r["start_ms"])) for r in rows}


class _Cells:
    """Event counts per run: totals per (kind, node), and per plot bucket and per
    rate window, from one aggregation."""

    def __init__(self) -> None:
        self.totals: dict[str, dict[tuple[str, str], list[int]]] = {}
        self.fine: dict[str, dict[tuple[str, str], dict[int, int]]] = {}
        self.coarse: dict[str, dict[tuple[str, str], dict[int, int]]] = {}

    def add(self, row: Any) -> None:
        run, key = row["run"], (row["kind"], row["node"])
        total = self.totals.setdefault(run, {}).setdefault(key, [0, 0])
        total[0] += row["n"]
        total[1] += row["r"]
        fine = self.fine.setdefault(run, {}).setdefault(key, {})
        fine[row["fi"]] = fine.get(row["fi"], 0) + row["n"]
        coarse = self.coarse.setdefault(run, {}).setdefault(key, {})
        coarse[row["ci"]] = coarse.get(row["ci"], 0) + row["n"]


def _node_rows(
    totals: dict[tuple[str, str], list[int]],
    run_s: float,
    windows: dict[str, dict[str, list[float]]],
) -> list[dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    for (kind, name), (n, r) in totals.items():
        node = nodes.setdefault(
            name,
            {"node": name, **dict.fromkeys(KINDS, 0), "incomingRecords": 0, "outgoingRecords": 0},
        )
        node[kind] = n
        if kind != "deliveries":
            node[f"{kind}Records"] = r
    for name, node in nodes.items():
        for kind in KINDS:
            node[f"{kind}PerSecond"] = round(node[kind] / run_s, 2)
        node["windowMax"] = {kind: max(windows[kind].get(name, [0.0])) for kind in KINDS}
    return [nodes[name] for name in sorted(nodes)]


def compute(
    records: DataFrame, messages: DataFrame, window_s: float = WINDOW_S
) -> list[dict[str, Any]]:
    """Every run's metrics (see the module docstring), as plain JSON-ready data."""
    spark = records.sparkSession
    records = records.cache()
    measured = messages.where(~F.col("warmup")).cache()
    try:
        bounds = _bounds(measured)
        if not bounds:
            return []
        window_ms = int(window_s * 1000)
        windows = F.broadcast(
            spark.createDataFrame(
                [(run, s, e, bucket_ms(e - s)) for run, (s, e) in bounds.items()],
                "run string, start_ms long, end_ms long, bucket_ms long",
            )
        )
        cells = _event_cells(records, measured, windows, window_ms)
        ts = F.col("kafka_ts_ms")
        types = (
            records.where(F.col("role") != "status")
            .join(windows, "run")
            .where((ts >= F.col("start_ms")) & (ts <= F.col("end_ms")))
            .select("run", F.posexplode("inner_types").alias("pos", "type"))
            .groupBy("run", "type")
            .agg(F.count("*").alias("messages"), F.sum((F.col("pos") == 0).cast("int")).alias("r"))
            .collect()
        )
        per_message = measured.groupBy("run", "message_id", "multicast").agg(
            F.count("*").alias("destinations"),
            F.count("delivered_ms").alias("delivered"),
            F.max("latency_ms").alias("latency"),
        )
        sizes = (
            per_message.groupBy("run")
            .agg(
                F.count("*").alias("messages"),
                F.sum(F.col("multicast").cast("int")).alias("multicast"),
                F.sum((F.col("delivered") == F.col("destinations")).cast("int")).alias("complete"),
                F.sum("delivered").alias("deliveries"),
                F.sum(F.col("destinations") - F.col("delivered")).alias("missing"),
            )
            .collect()
        )
        latency = _latency(per_message.where(F.col("delivered") == F.col("destinations")))
    finally:
        records.unpersist()
        measured.unpersist()

    return _run_rows(sizes, bounds, cells, types, latency, window_ms, window_s)


def _event_cells(
    records: DataFrame, measured: DataFrame, windows: DataFrame, window_ms: int
) -> _Cells:
    """Every run's events per kind and node, counted in its fine buckets and its
    ``window_ms`` windows."""
    since = F.col("ts") - F.col("start_ms")
    cells = _Cells()
    for row in (
        _events(records, measured, windows)
        .join(windows, "run")
        .groupBy(
            "run",
            "kind",
            "node",
            F.floor(since / F.col("bucket_ms")).alias("fi"),
            F.floor(since / window_ms).alias("ci"),
        )
        .agg(F.sum("n").alias("n"), F.sum("r").alias("r"))
        .collect()
    ):
        cells.add(row)
    return cells


def _run_rows(
    sizes: list[Any],
    bounds: dict[str, tuple[int, int]],
    cells: _Cells,
    types: list[Any],
    latency: dict[tuple[str, str], dict[str, Any]],
    window_ms: int,
    window_s: float,
) -> list[dict[str, Any]]:
    """One JSON-ready row per run, in the order of the runs' names."""
    out = []
    for row in sorted(sizes, key=lambda r: r["run"]):
        run = row["run"]
        start, end = bounds[run]
        run_ms = end - start
        run_s = max(run_ms / 1000, 0.001)
        width = bucket_ms(run_ms)
        per_window = _dense(cells.coarse.get(run, {}), window_ms, run_ms)
        out.append(
            {
                "run": run,
                "startMs": start,
                "endMs": end,
                "runTimeSeconds": round(run_s, 3),
                "messages": row["messages"],
                "multicast": row["multicast"],
                "deliveredMessages": row["complete"],
                "deliveries": row["deliveries"],
                "missingDeliveries": row["missing"],
                "messagesPerSecond": round(row["messages"] / run_s, 2),
                "deliveriesPerSecond": round(row["deliveries"] / run_s, 2),
                "records": sum(t["r"] for t in types if t["run"] == run),
                "nodes": _node_rows(cells.totals.get(run, {}), run_s, per_window),
                "byType": {t["type"]: t["messages"] for t in types if t["run"] == run},
                "latencyMs": {k: latency.get((run, k)) for k in ("all", "single", "multicast")},
                "series": {
                    "bucketSeconds": width / 1000,
                    **_dense(cells.fine.get(run, {}), width, run_ms),
                },
                "windows": {"windowSeconds": window_s, **per_window},
            }
        )
    return out


def write_results(results: Iterable[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """One ``<run>.json`` per run in ``out_dir``."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for result in results:
        path = folder / f"{result['run']}.json"
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------- main


def read_properties(path: str | Path) -> dict[str, str]:
    """The ``key=value`` lines of a Java properties file (``#`` and ``!`` comments, a
    line ending in a backslash goes on), as the Kafka clients read them (this job
    runs without the atomickafka package, so it reads them itself)."""
    out: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match and line[0] not in "#!":
            out[match.group(1)] = match.group(2)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metrics.py", description="Metrics of AtomicKafka evaluation runs (PySpark)."
    )
    parser.add_argument("--source", choices=["parquet", "kafka"], default="parquet")
    parser.add_argument("--runs", help="folder of run folders (or one run folder): Parquet")
    parser.add_argument("--bootstrap-server", help="Kafka to read (--source kafka)")
    parser.add_argument("--topics", help="the run's AtomicKafka topics, comma-separated")
    parser.add_argument(
        "--control-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the run's nodes had control logs (§7), the default",
    )
    parser.add_argument("--layout", choices=["split", "shared"], default="split")
    parser.add_argument("--run", default="kafka", help="name of the run read from Kafka")
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kafka client setting for the source, e.g. security.protocol=SASL_SSL",
    )
    parser.add_argument(
        "--command-config",
        metavar="PATH",
        help="properties file of Kafka client settings for the source (the Kafka tools' "
        "client.properties: security.protocol, sasl.jaas.config...); --kafka-option wins",
    )
    parser.add_argument("--out", help="folder for <run>.json (required to compute)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, or local)")
    parser.add_argument(
        "--jars-dir",
        help="folder of the Kafka connector's jars, added when this script starts Spark "
        "itself (python metrics_job.py); under spark-submit use its --jars",
    )
    parser.add_argument(
        "--print-jars",
        metavar="DIR",
        help="print the connector jars of DIR comma-separated (for spark-submit --jars), exit",
    )
    parser.add_argument("--window-s", type=float, default=WINDOW_S, help="rate window")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse arguments, compute, write; exit status 0, or 2 on bad usage."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.print_jars:
        print(",".join(connector_jars(args.print_jars)))
        return 0
    if not args.out:
        parser.error("--out is required")
    if args.source == "parquet" and not args.runs:
        parser.error("--runs is required with --source parquet")
    if args.source == "kafka" and not (args.bootstrap_server and args.topics):
        parser.error("--bootstrap-server and --topics are required with --source kafka")
    options = read_properties(args.command_config) if args.command_config else {}
    for pair in args.kafka_option:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"--kafka-option expects KEY=VALUE, got {pair!r}")
        options[key] = value
    jars = connector_jars(args.jars_dir) if args.jars_dir else []
    spark = build_session(args.master, jars)
    if args.source == "kafka":
        topics = [t for t in args.topics.split(",") if t]
        records, messages = load_kafka(
            spark,
            args.bootstrap_server,
            topics,
            layout=args.layout,
            control_log=args.control_log,
            run=args.run,
            options=options,
        )
    else:
        records, messages = load_parquet(spark, args.runs)
    paths = write_results(compute(records, messages, args.window_s), args.out)
    for path in paths:
        print(path)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
