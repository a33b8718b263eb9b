"""The source's columns: one row per delivery, and the Arrow batches Spark takes them in.

=================  ============================  ===============================================
column             type                          what
=================  ============================  ===============================================
``topic``          string                        the topic that delivered it
``timeStamp``      bigint                        the final Lamport timestamp (the order's key)
``messageID``      string                        the message's id
``value``          binary                        the value's bytes as sent (JSON text, or bytes)
``valueString``    string                        the same bytes as UTF-8 text (JSON text as is)
``destinations``   array<string>                 every topic the message was sent to
``key``            binary                        the sender's Kafka key, or null
``headers``        array<struct<key, value>>     the sender's own headers (value binary)
``sentAt``         timestamp                     when the sender sent it, or null
``partition``      int                           the delivery record's Kafka partition
``offset``         bigint                        the delivery record's Kafka offset
``layer``          int                           the partition layer that ordered it, or null
=================  ============================  ===============================================

A topic's rows come in its delivery order: ``(timeStamp, layer, messageID)`` grows
strictly along ``offset``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from atomickafka.client import Delivery

__all__ = ["ARROW_SCHEMA", "DELIVERY_SCHEMA", "arrow_batch"]

_HEADER = StructType(
    [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
)
#: The columns of ``spark.read.format("atomickafka")``.
DELIVERY_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("timeStamp", LongType(), False),
        StructField("messageID", StringType(), False),
        StructField("value", BinaryType(), False),
        StructField("valueString", StringType(), False),
        StructField("destinations", ArrayType(StringType(), False), False),
        StructField("key", BinaryType(), True),
        StructField("headers", ArrayType(_HEADER, False), False),
        StructField("sentAt", TimestampType(), True),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("layer", IntegerType(), True),
    ]
)
_ARROW_HEADER = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
#: The same columns as Arrow types (what :func:`arrow_batch` builds).
_ARROW_FIELDS: list[pa.Field[Any]] = [
    pa.field("topic", pa.string(), False),
    pa.field("timeStamp", pa.int64(), False),
    pa.field("messageID", pa.string(), False),
    pa.field("value", pa.binary(), False),
    pa.field("valueString", pa.string(), False),
    pa.field("destinations", pa.list_(pa.field("element", pa.string(), False)), False),
    pa.field("key", pa.binary()),
    pa.field("headers", pa.list_(pa.field("element", _ARROW_HEADER, False)), False),
    pa.field("sentAt", pa.timestamp("us", tz="UTC")),
    pa.field("partition", pa.int32(), False),
    pa.field("offset", pa.int64(), False),
    pa.field("layer", pa.int32()),
]
ARROW_SCHEMA: Final = pa.schema(_ARROW_FIELDS)


def arrow_batch(deliveries: Iterable[Delivery]) -> pa.RecordBatch:
    """The rows of ``deliveries``, in order, as one Arrow record batch."""
    listed = list(deliveries)
    sent = [None if d.sentAt is None else d.sentAt * 1000 for d in listed]
    columns: list[list[Any]] = [
        [d.topic for d in listed],
        [d.timeStamp for d in listed],
        [d.messageID for d in listed],
        [d.raw for d in listed],
        [d.raw.decode("utf-8", "replace") for d in listed],
        [list(d.destinations) for d in listed],
        [d.key for d in listed],
        [[{"key": n, "value": v} for n, v in d.headers] for d in listed],
        sent,
        [d.partition for d in listed],
        [d.offset for d in listed],
        [d.layer for d in listed],
    ]
    arrays = [
        pa.array(column, type=field.type)
        for column, field in zip(columns, ARROW_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
