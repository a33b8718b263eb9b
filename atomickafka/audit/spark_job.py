"""The live audit as a PySpark Structured Streaming application (``docs/DESIGN.md`` §10).

The same four rules as the in-process audit (``atomickafka/audit/rules.py``), on Spark's
stateful operators, so that the audit runs where the rest of a Spark pipeline runs:

1. every AtomicKafka delivery topic is read with Spark's Kafka source
   (``read_committed``), and each record parsed by this file's own parser
   (:func:`parse_deliveries`; a contract test holds it to ``atomickafka.core.wire``);
2. **per message** (``applyInPandasWithState`` grouped by ``messageID``,
   processing-time timeouts): rules 2, 3 and 4 -- the same key, digest and destinations
   everywhere, every destination within the bound (else ``missing``), no second
   delivery at a topic (exact repeats are dropped and counted);
3. **per topic** (``transformWithStateInPandas`` grouped by topic, one key of state):
   rule 1 -- strictly increasing ``(timeStamp, layer, messageID)`` in offset order;
4. each trigger's violations go to Parquet (``<out>/violations``) and, as one JSON
   object each, to the Kafka topic ``atomickafka-audit``; each trigger's counts per
   topic and outcome to ``<out>/counts``.

A message's state expires as in the in-process audit: once event time reaches the end
of the second of its first delivery's Kafka time plus the bound. Event time is, as
there, the newest record time read (the watermark, one bound behind it, plus the bound)
moved on by the clock while the input is idle: a trigger reads everything written
before it starts, so the trigger's processing time, less :data:`IDLE_SLACK_MS` for
records committed late or stamped by a clock behind the driver's, is a time up to which
everything has been read. With processing-time timeouts Spark runs a trigger every
interval even when no record arrives (its no-data micro-batches), so a missing message
is reported by the first trigger after its bound passed, with no later record; and it
drops no late row (Spark drops rows behind the watermark only under event-time
timeouts), so on the same input the results equal the in-process audit's.

A plain PySpark application: it imports only pyspark (with pandas, which its
``applyInPandasWithState`` needs), the standard library and ``atomickafka/spark_raw.py``
(the raw record form, shared with the metrics job; pyspark only), so ``spark-submit``
runs it on any cluster -- where the atomickafka package is not installed, pass that
file with ``--py-files``; ``atomickafka audit --spark`` runs it in local mode. Usage::

    JOB=$(atomickafka audit --print-job)
    LIB=~/.cache/atomickafka/spark-kafka-4.0.0/lib   # deploy/bootstrap.sh eval fetches it
    METRICS=$(atomickafka eval --print-job)          # prints the connector's jars
    spark-submit --jars "$(python $METRICS --print-jars $LIB)" $JOB \\
        --bootstrap-server B --topics T1,T2,T3 --out DIR --checkpoint DIR [--bound 10]

(Run spark-submit with the virtualenv's ``bin`` first on ``PATH``: it finds pyspark,
and its workers pandas, through ``python3``.)
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the usual spelling)
from pyspark.sql import types as T  # noqa: N812
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

try:  # the installed package
    from atomickafka.spark_raw import raw_as_json
except ImportError:  # this file alone under spark-submit, with --py-files .../spark_raw.py
    from spark_raw import raw_as_json  # type: ignore[import-not-found,no-redef]

#: The wire format as this job reads it (``atomickafka.core.wire``).
DELIVERY_TYPES: Final = ("DeliveryMessage", "PartitionDeliveryMessage")
FORMAT_VERSION: Final = 2
#: How far a delivery's timestamp may be ahead of its record's time (µs), and the ids
#: that write a topic's deliveries (``atomickafka.core.reader``: ``DELIVERY_LEAD_US``,
#: ``delivery_writers``): a record another writer put into the topic is no delivery.
DELIVERY_LEAD_US: Final = 3_660_000_000
WRITER_PREFIXES: Final = ("node-", "merger-")
#: Where violations go by default (``atomickafka.audit.config.AUDIT_TOPIC``).
AUDIT_TOPIC: Final = "atomickafka-audit"
DEFAULT_BOUND_S: Final = 10.0
FORGET_FACTOR: Final = 10
BUCKET_MS: Final = 1000
#: While the input is idle, event time is a trigger's processing time less this: the
#: slack for a delivery committed after its Kafka timestamp, or stamped by a node whose
#: clock is behind the driver's (milliseconds).
IDLE_SLACK_MS: Final = 1000
#: Outcomes of a record (besides the violation kinds): checked, an exact repeat (dropped),
#: delivered after it was reported missing, not a delivery of its topic.
CHECKED, REPEAT, LATE, SKIPPED = "checked", "repeat", "late", "skipped"
#: Violation kinds (``atomickafka.audit.records.Kind``).
#: Every kind the live audit reports; the last three only the live audit can see (they
#: need its reading order: a second read of an offset, or exactly-once's read_committed
#: repeats), so this batch job never reports them.
KINDS: Final = (
    "order",
    "mismatch",
    "not-a-destination",
    "missing",
    "duplicate",
    "aborted-read",
    "offset-two-values",
    "gone-after-read",
)
_PASS: Final = "pass"  # between the two operators: to be order-checked
_SKIP_KEY: Final = "\u0000skipped"
_OPEN, _DONE, _MISSING = 0, 1, 2

#: Session settings the query needs. transformWithState (the per-topic operator) keeps
#: its state in RocksDB. Spark refuses a stateful operator after another one when the
#: first may emit rows older than the watermark, since the second could drop them as
#: late; the second one here works without event time (it drops nothing), so the check
#: does not apply.
QUERY_SETTINGS: Final = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.statefulOperator.checkCorrectness.enabled": "false",
}

# ----------------------------------------------------------------------------- schemas

#: What the job reads of a delivery record's JSON.
RECORD_SCHEMA: Final = T.StructType(
    [
        T.StructField("messageID", T.StringType()),
        T.StructField("messageType", T.StringType()),
        T.StructField("senderID", T.StringType()),
        T.StructField("sentFromTopic", T.StringType()),
        T.StructField("topic", T.ArrayType(T.StringType())),
        T.StructField("timeStamp", T.LongType()),
        T.StructField("partitionID", T.IntegerType()),
        T.StructField("digest", T.StringType()),
        T.StructField("formatVersion", T.IntegerType()),
    ]
)
#: One row per record, and per violation (``outcome`` says which).
OUTCOME_SCHEMA: Final = (
    "topic string, partition int, offset long, time_ms long, message_id string, "
    "ts long, layer int, outcome string, text string, json string"
)
#: A message's state. Lists are JSON text: Spark 4.0 cannot hand an array in the state of
#: applyInPandasWithState back to Python.
_MESSAGE_STATE: Final = (
    "ts long, layer int, digest string, dests string, waiting string, "
    "first_topic string, first_ms long, first_partition int, first_offset long, "
    "phase int, due long, variants string"
)
_TOPIC_STATE: Final = "ts long, layer int, message_id string"

# ----------------------------------------------------------------------------- parsing


def parse_deliveries(raw: DataFrame) -> DataFrame:
    """Kafka source rows as the rules read them: ``topic``, ``partition``, ``offset``,
    ``time`` (the record's Kafka timestamp) and ``time_ms``, ``is_delivery`` and, for
    a delivery of its own topic, ``message_id``, ``ts``, ``layer``, ``digest`` and
    ``dests`` (sorted, without repeats). ``group`` is what the per-message operator
    groups by: the message id, or a per-topic key for records that are not
    deliveries."""
    text = F.coalesce(raw_as_json(raw, F.lit(True)), F.col("value").cast("string"))
    p = F.from_json(text, RECORD_SCHEMA)
    parsed = raw.select(
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset"),
        F.col("timestamp").alias("time"),
        F.unix_millis(F.col("timestamp")).alias("time_ms"),
        p.alias("p"),
        F.array_contains(F.json_object_keys(text), "value").alias("has_value"),
    )
    r = F.col("p")
    is_delivery = (
        r.isNotNull()
        & r["messageType"].isin(*DELIVERY_TYPES)
        & r["messageID"].isNotNull()
        & (F.length(r["messageID"]) > 0)
        & r["timeStamp"].isNotNull()
        & r["topic"].isNotNull()
        & (F.size(r["topic"]) > 0)
        & F.coalesce(F.col("has_value"), F.lit(False))
        & (r["sentFromTopic"] == F.col("topic"))
        & r["senderID"].isin(*(F.concat(F.lit(p), F.col("topic")) for p in WRITER_PREFIXES))
        & (
            (F.col("time_ms") <= 0)
            | (r["timeStamp"] <= F.col("time_ms") * 1000 + F.lit(DELIVERY_LEAD_US))
        )
        & (F.coalesce(r["formatVersion"], F.lit(1)) <= FORMAT_VERSION)
    )
    return parsed.select(
        "topic",
        "partition",
        "offset",
        "time",
        "time_ms",
        F.coalesce(is_delivery, F.lit(False)).alias("is_delivery"),
        r["messageID"].alias("message_id"),
        r["timeStamp"].alias("ts"),
        F.coalesce(r["partitionID"], F.lit(0)).alias("layer"),
        F.coalesce(r["digest"], F.lit("")).alias("digest"),
        F.array_sort(F.array_distinct(r["topic"])).alias("dests"),
    ).withColumn(
        "group",
        F.when(F.col("is_delivery"), F.col("message_id")).otherwise(
            F.concat(F.lit(_SKIP_KEY), F.col("topic"))
        ),
    )


# ----------------------------------------------------------------------------- rules


def _row(d: dict[str, Any], outcome: str) -> dict[str, Any]:
    """An outcome row of record (or message) ``d``."""
    return {
        "topic": d["topic"],
        "partition": d.get("partition"),
        "offset": d.get("offset"),
        "time_ms": d.get("time_ms"),
        "message_id": d["message_id"],
        "ts": d.get("ts"),
        "layer": d.get("layer"),
        "outcome": outcome,
        "text": "",
        "json": None,
    }


def _violation(d: dict[str, Any], kind: str, text: str, reference: Any) -> dict[str, Any]:
    """A violation row, with the JSON object the in-process audit writes for it
    (``Violation.to_json``)."""
    row = {**_row(d, kind), "text": text}
    data: dict[str, Any] = {
        "kind": kind,
        "topic": d["topic"],
        "messageID": d["message_id"],
        "text": text,
    }
    if _known(d.get("offset")):
        data["partition"] = int(d["partition"])
        data["offset"] = int(d["offset"])
        data["recordTimeMs"] = int(d["time_ms"])
    data["key"] = [int(d["ts"]), int(d["layer"]), d["message_id"]]
    data["reference"] = reference
    row["json"] = json.dumps(data)
    return row


def _known(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def _frame(rows: list[dict[str, Any]]) -> Iterator[pd.DataFrame]:
    if rows:
        frame = pd.DataFrame(rows, columns=[c.split()[0] for c in OUTCOME_SCHEMA.split(", ")])
        yield frame.astype({"partition": "Int32", "offset": "Int64", "time_ms": "Int64"})


def _key(ts: int, layer: int, mid: str) -> str:
    return f"({ts}, {layer}, {mid!r})"


def _reading_order(frames: Iterable[pd.DataFrame]) -> list[dict[str, Any]]:
    """The group's rows in the order the in-process audit would read them: each
    partition in offset order, partitions merged by Kafka time."""
    rows = [r for frame in frames for r in frame.to_dict("records")]
    streams: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
        streams.setdefault((r["topic"], r["partition"]), []).append(r)
    return list(heapq.merge(*streams.values(), key=lambda r: (r["time_ms"], r["topic"])))


class MessageRules:
    """Rules 2-4 for one message's group (the per-message operator's function)."""

    def __init__(self, topics: Sequence[str], bound_s: float) -> None:
        self.topics = frozenset(topics)
        self.bound_ms = round(bound_s * 1000)
        self.forget_ms = max(round(FORGET_FACTOR * bound_s * 1000), self.bound_ms)

    def __call__(
        self, key: tuple[Any, ...], frames: Iterable[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        (group,) = key
        if str(group).startswith(_SKIP_KEY):
            rows = [r for frame in frames for r in frame.to_dict("records")]
            yield from _frame([_row({**r, "message_id": ""}, SKIPPED) for r in rows])
            return
        message = _load(state) if state.exists else None
        out: list[dict[str, Any]] = []
        if not state.hasTimedOut:
            for d in _reading_order(frames):
                if message is None:
                    message = self._first(d, out)
                else:
                    self._next(d, message, out)
        if message is not None:
            self._keep_or_expire(str(group), message, state, out)
        yield from _frame(out)

    def _now(self, state: GroupState) -> int:
        """Event time (see the module docstring): the newest record time read, or the
        trigger's processing time less the slack, whichever is later."""
        watermark = state.getCurrentWatermarkMs()
        newest = watermark + self.bound_ms if watermark > 0 else 0
        return max(newest, state.getCurrentProcessingTimeMs() - IDLE_SLACK_MS)

    def _keep_or_expire(
        self, message_id: str, message: dict[str, Any], state: GroupState, out: list[dict[str, Any]]
    ) -> None:
        """Keep the message, timed out by the trigger after event time may reach its
        expiry (the end of its due second plus the bound), or expire it now."""
        now = self._now(state)
        while True:
            expiry = (int(message["due"]) + 1) * BUCKET_MS + self.bound_ms
            if expiry > now:
                state.update(_stored(message))
                wait = expiry + IDLE_SLACK_MS - state.getCurrentProcessingTimeMs()
                state.setTimeoutDuration(max(1, wait))
                return
            if message["phase"] != _OPEN:
                state.remove()
                return
            out.extend(self._missing(message_id, message))
            message["phase"] = _MISSING
            message["due"] = int(message["due"]) + (self.forget_ms - self.bound_ms) // BUCKET_MS

    def _first(self, d: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
        topic, dests = d["topic"], [str(t) for t in d["dests"]]
        waiting = [t for t in dests if t in self.topics and t != topic]
        message = {
            "ts": int(d["ts"]),
            "layer": int(d["layer"]),
            "digest": d["digest"],
            "dests": dests,
            "waiting": waiting,
            "first_topic": topic,
            "first_ms": int(d["time_ms"]),
            "first_partition": int(d["partition"]),
            "first_offset": int(d["offset"]),
            "phase": _OPEN if waiting else _DONE,
            "due": int(d["time_ms"]) // BUCKET_MS,
            "variants": "{}",
        }
        out.append(_row(d, _PASS))
        if topic not in dests:
            message["variants"] = json.dumps({topic: _content_of(message)})
            out.append(self._not_a_destination(d, dests))
        return message

    def _next(self, d: dict[str, Any], message: dict[str, Any], out: list[dict[str, Any]]) -> None:
        topic = d["topic"]
        variants = json.loads(message["variants"] or "{}")
        content = [int(d["ts"]), int(d["layer"]), d["digest"], [str(t) for t in d["dests"]]]
        reference = _content_of(message)
        waiting = [str(t) for t in message["waiting"]]
        earlier = variants.get(topic)
        if earlier is None and topic in message["dests"] and topic not in waiting:
            earlier = reference
        if earlier is not None:  # rule 4
            if earlier == content:
                out.append(_row(d, REPEAT))
                return
            text = (
                f"{topic} delivered {d['message_id']!r} again, with key "
                f"{_key(content[0], content[1], d['message_id'])} and digest {content[2]} "
                f"(first delivered there with key {_key(earlier[0], earlier[1], d['message_id'])}"
                f" and digest {earlier[2]})"
            )
            out.append(_row(d, CHECKED))
            out.append(
                _violation(d, "duplicate", text, _reference(topic, earlier, d["message_id"]))
            )
            return
        out.append(_row(d, _PASS))
        if message["phase"] == _MISSING and topic in waiting:
            out.append(_row(d, LATE))
        if content != reference:  # rule 2
            mismatch = self._mismatch(d, message, content, variants)
            if mismatch is not None:
                out.append(mismatch)
            variants[topic] = content
        if topic in waiting:
            waiting.remove(topic)
            message["waiting"] = waiting
            if not waiting and message["phase"] == _OPEN:
                message["phase"] = _DONE
        elif topic not in message["dests"]:
            out.append(self._not_a_destination(d, message["dests"]))
            variants[topic] = content
        message["variants"] = json.dumps(variants)

    def _missing(self, message_id: str, message: dict[str, Any]) -> list[dict[str, Any]]:
        delivered = [t for t in message["dests"] if t not in message["waiting"]]
        where = ", ".join(delivered) or message["first_topic"]
        seconds = self.bound_ms / 1000
        out = []
        for topic in message["waiting"]:
            d = {"topic": topic, "message_id": message_id, "ts": message["ts"]}
            d["layer"] = message["layer"]
            text = f"{message_id!r} missing at {topic} after {seconds:g} s: delivered at {where}"
            ref = {
                "deliveredTopics": delivered or [message["first_topic"]],
                "boundSeconds": seconds,
            }
            out.append(_violation(d, "missing", text, ref))
        return out

    @staticmethod
    def _mismatch(
        d: dict[str, Any], message: dict[str, Any], content: list[Any], variants: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The later of the two differing deliveries, in (Kafka time, topic, partition,
        offset), is reported; the first one read at most once (as in-process)."""
        mid = d["message_id"]
        reference = _content_of(message)
        first = [message["first_topic"], message["first_partition"], message["first_offset"]]
        here = [d["topic"], int(d["partition"]), int(d["offset"])]
        if (int(d["time_ms"]), *here) > (int(message["first_ms"]), *first):
            blamed = {**d, "ts": content[0], "layer": content[1]}
            ours, other, other_topic = content, reference, message["first_topic"]
        else:
            if message["first_topic"] in variants:
                return None  # reported already
            variants[message["first_topic"]] = reference
            blamed = {
                "topic": first[0],
                "partition": first[1],
                "offset": first[2],
                "time_ms": message["first_ms"],
                "message_id": mid,
                "ts": reference[0],
                "layer": reference[1],
            }
            ours, other, other_topic = reference, content, d["topic"]
        differs = []
        if ours[:2] != other[:2]:
            differs.append(
                f"key {_key(ours[0], ours[1], mid)} (not {_key(other[0], other[1], mid)})"
            )
        if ours[2] != other[2]:
            differs.append(f"digest {ours[2]} (not {other[2]})")
        if ours[3] != other[3]:
            differs.append(f"destinations {ours[3]} (not {other[3]})")
        text = f"{blamed['topic']} delivered {mid!r} with {', '.join(differs)} as {other_topic} did"
        return _violation(blamed, "mismatch", text, _reference(other_topic, other, mid))

    @staticmethod
    def _not_a_destination(d: dict[str, Any], dests: Sequence[str]) -> dict[str, Any]:
        text = f"{d['topic']} delivered {d['message_id']!r}, whose destinations are {list(dests)}"
        return _violation(d, "not-a-destination", text, {"destinations": list(dests)})


def _load(state: GroupState) -> dict[str, Any]:
    message = dict(zip(_state_fields(_MESSAGE_STATE), state.get, strict=True))
    message["dests"] = json.loads(message["dests"])
    message["waiting"] = json.loads(message["waiting"])
    return message


def _stored(message: dict[str, Any]) -> tuple[Any, ...]:
    lists = {"dests": json.dumps(message["dests"]), "waiting": json.dumps(message["waiting"])}
    return tuple(lists.get(f, message[f]) for f in _state_fields(_MESSAGE_STATE))


def _content_of(message: dict[str, Any]) -> list[Any]:
    return [int(message["ts"]), int(message["layer"]), message["digest"], list(message["dests"])]


def _reference(topic: str, content: list[Any], message_id: str) -> dict[str, Any]:
    return {
        "topic": topic,
        "key": [content[0], content[1], message_id],
        "digest": content[2],
        "destinations": list(content[3]),
    }


def _state_fields(schema: str) -> list[str]:
    return [c.strip().split()[0] for c in schema.split(",")]


class OrderCheck(StatefulProcessor):
    """Rule 1 for one topic's group (the per-topic operator): its records to check, in
    offset order, against the last key; every other row passes through."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one value of state: the topic's last key."""
        self._last = handle.getValueState("last", _TOPIC_STATE)

    def handleInputRows(  # noqa: N802 (Spark's name)
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Check the group's rows (see the class docstring)."""
        found = [r for frame in rows for r in frame.to_dict("records")]
        stored = self._last.get() if self._last.exists() else None
        last = None if stored is None else (int(stored[0]), int(stored[1]), str(stored[2]))
        out: list[dict[str, Any]] = []
        checks = sorted(
            (r for r in found if r["outcome"] == _PASS), key=lambda r: (r["partition"], r["offset"])
        )
        for r in checks:
            mid = r["message_id"]
            current = (int(r["ts"]), int(r["layer"]), mid)
            out.append({**r, "outcome": CHECKED})
            if last is None or current > last:
                last = current
                continue
            text = (
                f"{r['topic']} delivered {mid!r} with key {_key(*current)} after {_key(*last)}: "
                "a topic's deliveries must be strictly increasing in (timeStamp, layer, "
                "messageID) (out of order, or a repeat the audit no longer remembers)"
            )
            out.append(_violation(r, "order", text, {"previousKey": list(last)}))
        out += [r for r in found if r["outcome"] != _PASS]
        if last is not None:
            self._last.update(last)
        yield from _frame(out)

    def close(self) -> None:
        """Nothing to release."""


def outcomes(deliveries: DataFrame, topics: Sequence[str], bound_s: float) -> DataFrame:
    """Every record's outcome and every violation, as a stream of
    :data:`OUTCOME_SCHEMA` rows."""
    per_message = (
        deliveries.withWatermark("time", f"{int(bound_s * 1000)} milliseconds")
        .groupBy("group")
        .applyInPandasWithState(
            MessageRules(topics, bound_s),
            OUTCOME_SCHEMA,
            _MESSAGE_STATE,
            "append",
            GroupStateTimeout.ProcessingTimeTimeout,
        )
    )
    return per_message.groupBy("topic").transformWithStateInPandas(
        OrderCheck(), OUTCOME_SCHEMA, "Append", "None"
    )


# ----------------------------------------------------------------------------- output


class BatchWriter:
    """Writes each trigger's violations (Parquet and Kafka) and counts (Parquet); a
    trigger with no row (an idle one that expired nothing) writes nothing."""

    def __init__(
        self, out: str, bootstrap: str, audit_topic: str | None, options: dict[str, str]
    ) -> None:
        self.out = out.rstrip("/")
        self.bootstrap = bootstrap
        self.audit_topic = audit_topic
        self.options = options

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            if batch.count() == 0:  # computed in full (state committed); nothing to write
                return
            counts = batch.groupBy("topic", "outcome").count().withColumn("batch", F.lit(batch_id))
            counts.write.mode("append").parquet(f"{self.out}/counts")
            violations = batch.filter(F.col("outcome").isin(*KINDS)).withColumn(
                "batch", F.lit(batch_id)
            )
            violations.write.mode("append").parquet(f"{self.out}/violations")
            if self.audit_topic:
                writer = violations.select(
                    F.col("topic").alias("key"), F.col("json").alias("value")
                ).write.format("kafka")
                writer = writer.option("kafka.bootstrap.servers", self.bootstrap)
                for key, value in self.options.items():
                    writer = writer.option(f"kafka.{key}", value)
                writer.option("topic", self.audit_topic).save()
        finally:
            batch.unpersist()


def start(
    spark: SparkSession,
    *,
    bootstrap: str,
    topics: Sequence[str],
    out: str,
    checkpoint: str,
    bound_s: float = DEFAULT_BOUND_S,
    audit_topic: str | None = AUDIT_TOPIC,
    trigger_s: float = 5.0,
    options: dict[str, str] | None = None,
) -> Any:
    """Start the audit query; return the running ``StreamingQuery``."""
    options = dict(options or {})
    for key, value in QUERY_SETTINGS.items():
        spark.conf.set(key, value)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .option("kafka.isolation.level", "read_committed")
    )
    for key, value in options.items():
        reader = reader.option(f"kafka.{key}", value)
    stream = outcomes(parse_deliveries(reader.load()), topics, bound_s)
    return (
        stream.writeStream.foreachBatch(BatchWriter(out, bootstrap, audit_topic, options))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
        .queryName("atomickafka-audit")
        .start()
    )


# ----------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", help="Kafka to read")
    parser.add_argument("--topics", help="comma-separated delivery topics")
    parser.add_argument("--out", help="folder of the Parquet output (violations/, counts/)")
    parser.add_argument("--checkpoint", help="Spark's checkpoint folder (state and offsets)")
    parser.add_argument("--bound", type=float, default=DEFAULT_BOUND_S, help="seconds (10)")
    parser.add_argument("--audit-topic", default=AUDIT_TOPIC, help="'' for none")
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    parser.add_argument(
        "--kafka-option", action="append", default=[], type=_setting, metavar="KEY=VALUE"
    )
    return parser


def _setting(text: str) -> tuple[str, str]:
    """One ``KEY=VALUE`` Kafka setting."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Run the audit until stopped (or ``--max-seconds`` passed), in ``spark`` (default:
    the session spark-submit configured)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not (args.bootstrap_server and args.topics and args.out and args.checkpoint):
        parser.error("--bootstrap-server, --topics, --out and --checkpoint are required")
    options = dict(args.kafka_option)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if spark is None:
        spark = SparkSession.builder.appName("atomickafka-audit").getOrCreate()
    query = start(
        spark,
        bootstrap=args.bootstrap_server,
        topics=topics,
        out=args.out,
        checkpoint=args.checkpoint,
        bound_s=args.bound,
        audit_topic=args.audit_topic or None,
        trigger_s=args.trigger_seconds,
        options=options,
    )
    deadline = None if args.max_seconds is None else time.monotonic() + args.max_seconds
    try:
        while query.isActive and (deadline is None or time.monotonic() < deadline):
            query.awaitTermination(1.0)
            _log_progress(query)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
    return 0


def _log_progress(query: Any) -> None:
    """One line per trigger: rows read, and rows Spark's watermark dropped."""
    progress = query.lastProgress
    if not progress or progress.get("batchId") == getattr(query, "_audit_logged", None):
        return
    query._audit_logged = progress.get("batchId")
    dropped = sum(
        op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", [])
    )
    print(
        json.dumps(
            {
                "batch": progress.get("batchId"),
                "rows": progress.get("numInputRows"),
                "droppedLate": dropped,
            }
        ),
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
