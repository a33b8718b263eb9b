"""Recording a run: every record of every topic of the run, and every message's times.

After a run, every Kafka topic of the run is read from its beginning (input logs,
delivery topics, dead-letter topics, and the run's records in the status topic) and
written as two Parquet files in the run's folder.

``records.parquet``, one row per Kafka record:

=================  ==============  ===================================================
column             type            meaning
=================  ==============  ===================================================
run                string          the run's id
kafka_topic        string          the Kafka topic the record is in
partition          int32           its partition
offset             int64           its offset
kafka_ts_ms        int64           its Kafka timestamp (ms since the epoch)
node               string          the AtomicKafka topic whose node owns ``kafka_topic``
                                   (a sequencer baseline's topic: its ``senderID``,
                                   ``sequencer``, ``seq-eos`` or ``streams``)
role               string          ``input`` (a node's input log; in the ``shared``
                                   layout it also holds the node's deliveries),
                                   ``delivery``, ``dead-letter`` or ``status``
message_type       string          ``messageType`` as found (``Bundle`` for a bundle,
                                   ``NodeStatus`` for a status, ``<none>`` for an object
                                   without one, ``<undecodable>`` for anything else)
writer             string, null    ``senderID``: a client id, ``node-<topic>`` or a
                                   sequencer baseline's (``sequencer``, ``seq-eos``,
                                   ``streams``); dead letters: the node that set them
                                   aside
sent_from_topic    string, null    ``sentFromTopic``
message_id         string, null    ``messageID`` (null on bundles and statuses)
messages           int32           messages the record carries (a bundle's inner
                                   messages, else 1)
inner_types        list<string>    their types (a plain record: ``[message_type]``)
value_bytes        int32           size of the record value
=================  ==============  ===================================================

``messages.parquet``, one row per sent message and destination:

=================  ==============  ===================================================
run                string          the run's id
message_id         string          ``messageID``
client             string          the sending client's id
home_topic         string          the topic it was written to (the client's own)
destinations       list<string>    every destination of the message
multicast          bool            more than one destination
warmup             bool            an unmeasured warm-up message
destination        string          the destination of this row
send_us            int64           send time, noted by the client (µs since the epoch)
delivered_ms       int64, null     Kafka timestamp of its Delivery record at
                                   ``destination`` (null: not delivered)
delivery_offset    int64, null     offset of that Delivery record
final_ts           int64, null     its final (Lamport) timestamp
latency_ms         float64, null   ``delivered_ms - send_us / 1000``
=================  ==============  ===================================================

A delivery counts once per destination (the first Delivery record of a messageID in
the destination's topic, written by that destination's node, as the client reads it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from atomickafka.core.reader import KafkaRecord, read_delivery
from atomickafka.core.wire import MessageType
from atomickafka.evaluation.cost.topic_scan import RecordedTopic, Role, classify, scan_topics
from atomickafka.evaluation.cost.traffic import TrafficTally, TypeTraffic
from atomickafka.kafka.connection import Where

__all__ = [
    "MESSAGES_SCHEMA",
    "RECORDS_SCHEMA",
    "RecordedTopic",
    "Recording",
    "Role",
    "SentRow",
    "record_run",
    "recorded_traffic",
    "write_table",
]

log = logging.getLogger("atomickafka.eval.recording")

_RECORDS_FIELDS: list[pa.Field[Any]] = [
    pa.field("run", pa.string(), nullable=False),
    pa.field("kafka_topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("kafka_ts_ms", pa.int64(), nullable=False),
    pa.field("node", pa.string(), nullable=False),
    pa.field("role", pa.string(), nullable=False),
    pa.field("message_type", pa.string(), nullable=False),
    pa.field("writer", pa.string()),
    pa.field("sent_from_topic", pa.string()),
    pa.field("message_id", pa.string()),
    pa.field("messages", pa.int32(), nullable=False),
    pa.field("inner_types", pa.list_(pa.string()), nullable=False),
    pa.field("value_bytes", pa.int32(), nullable=False),
]
RECORDS_SCHEMA: Final = pa.schema(_RECORDS_FIELDS)

_MESSAGES_FIELDS: list[pa.Field[Any]] = [
    pa.field("run", pa.string(), nullable=False),
    pa.field("message_id", pa.string(), nullable=False),
    pa.field("client", pa.string(), nullable=False),
    pa.field("home_topic", pa.string(), nullable=False),
    pa.field("destinations", pa.list_(pa.string()), nullable=False),
    pa.field("multicast", pa.bool_(), nullable=False),
    pa.field("warmup", pa.bool_(), nullable=False),
    pa.field("destination", pa.string(), nullable=False),
    pa.field("send_us", pa.int64(), nullable=False),
    pa.field("delivered_ms", pa.int64()),
    pa.field("delivery_offset", pa.int64()),
    pa.field("final_ts", pa.int64()),
    pa.field("latency_ms", pa.float64()),
]
MESSAGES_SCHEMA: Final = pa.schema(_MESSAGES_FIELDS)

#: What a delivery topic's deliveries are called in ``message_type``.
_DELIVERY_KINDS: Final = frozenset(
    {MessageType.DELIVERY.value, MessageType.PARTITION_DELIVERY.value}
)


@dataclass(frozen=True, slots=True)
class SentRow:
    """One sent message, as its client noted it."""

    message_id: str
    client: str
    home_topic: str
    destinations: tuple[str, ...]
    send_us: int
    warmup: bool = False


@dataclass(frozen=True, slots=True)
class Recording:
    """Where a run was written and how much it held."""

    records_path: Path
    messages_path: Path
    records: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class _Delivered:
    kafka_ts_ms: int
    offset: int
    final_ts: int | None


def write_table(columns: Mapping[str, list[Any]], schema: pa.Schema, path: Path) -> int:
    """Write ``columns`` (name -> values) as a Parquet file of ``schema``; return rows."""
    table = pa.table({name: columns[name] for name in schema.names}, schema=schema)
    pq.write_table(table, path, compression="zstd")
    return table.num_rows


def _key_text(record: KafkaRecord) -> str | None:
    """The record's key as text (``None`` for a record without one)."""
    key = record.key()
    return key.decode(errors="replace") if isinstance(key, bytes) else key


class _RecordColumns:
    """Column lists for ``records.parquet``, plus the deliveries found on the way."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.columns: dict[str, list[Any]] = {name: [] for name in RECORDS_SCHEMA.names}
        self.delivered: dict[tuple[str, str], _Delivered] = {}

    def add(self, where: RecordedTopic, record: KafkaRecord) -> None:
        found = classify(where, record)
        seen, node, kind = found.seen, found.node, found.kind
        kafka_ts = record.timestamp()[1]
        offset = record.offset() or 0
        cols = self.columns
        cols["run"].append(self.run)
        cols["kafka_topic"].append(where.kafka_topic)
        cols["partition"].append(record.partition() or 0)
        cols["offset"].append(offset)
        cols["kafka_ts_ms"].append(kafka_ts)
        cols["node"].append(node)
        cols["role"].append(where.role.value)
        cols["message_type"].append(kind)
        cols["writer"].append(found.writer)
        cols["sent_from_topic"].append(seen.sent_from)
        cols["message_id"].append(seen.message_id)
        cols["messages"].append(len(seen.inner) if seen.is_bundle else 1)
        cols["inner_types"].append([i.kind for i in seen.inner] if seen.is_bundle else [kind])
        cols["value_bytes"].append(seen.size)
        if where.holds_deliveries and seen.kind in _DELIVERY_KINDS:
            self._maybe_delivery(node, record, kafka_ts, offset)

    def _maybe_delivery(self, node: str, record: KafkaRecord, kafka_ts: int, offset: int) -> None:
        message = read_delivery(record, at=node)
        if message is None:
            return
        key = (message.messageID, node)
        if key not in self.delivered:
            self.delivered[key] = _Delivered(kafka_ts, offset, message.timeStamp)


def _message_columns(
    run: str, sent: Sequence[SentRow], delivered: Mapping[tuple[str, str], _Delivered]
) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {name: [] for name in MESSAGES_SCHEMA.names}
    for row in sent:
        for destination in row.destinations:
            got = delivered.get((row.message_id, destination))
            cols["run"].append(run)
            cols["message_id"].append(row.message_id)
            cols["client"].append(row.client)
            cols["home_topic"].append(row.home_topic)
            cols["destinations"].append(list(row.destinations))
            cols["multicast"].append(len(row.destinations) > 1)
            cols["warmup"].append(row.warmup)
            cols["destination"].append(destination)
            cols["send_us"].append(row.send_us)
            cols["delivered_ms"].append(got.kafka_ts_ms if got else None)
            cols["delivery_offset"].append(got.offset if got else None)
            cols["final_ts"].append(got.final_ts if got else None)
            cols["latency_ms"].append(got.kafka_ts_ms - row.send_us / 1000 if got else None)
    return cols


def record_run(
    where: Where,
    run: str,
    topics: Sequence[RecordedTopic],
    sent: Sequence[SentRow],
    out_dir: Path,
    *,
    timeout_s: float = 600.0,
) -> Recording:
    """Read the run's ``topics`` and write ``records.parquet`` and ``messages.parquet``
    into ``out_dir``."""
    started = time.monotonic()
    sink = _RecordColumns(run)
    scan_topics(where, topics, sink.add, timeout_s)
    records_path = out_dir / "records.parquet"
    messages_path = out_dir / "messages.parquet"
    records = write_table(sink.columns, RECORDS_SCHEMA, records_path)
    write_table(_message_columns(run, sent, sink.delivered), MESSAGES_SCHEMA, messages_path)
    log.info(
        "recorded",
        extra={
            "fields": {
                "run": run,
                "records": records,
                "deliveries": len(sink.delivered),
                "seconds": round(time.monotonic() - started, 2),
            }
        },
    )
    return Recording(records_path, messages_path, records, len(sink.delivered))


def recorded_traffic(records_path: Path, start_ms: int, end_ms: int) -> dict[str, TypeTraffic]:
    """The records of ``records.parquet`` written between ``start_ms`` and ``end_ms``
    (Kafka timestamps), by type (:class:`~atomickafka.evaluation.cost.traffic.TrafficTally`)."""
    table = pq.read_table(
        records_path, columns=["message_type", "messages", "value_bytes", "kafka_ts_ms"]
    )
    tally = TrafficTally(start_ms, end_ms)
    columns = [table.column(name).to_pylist() for name in table.column_names]
    for kind, messages, size, timestamp in zip(*columns, strict=True):
        tally.add(kind, messages, size, timestamp)
    return tally.result()
