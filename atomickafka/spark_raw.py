"""The raw record form (docs/DESIGN.md §3.8) as the two Spark jobs read it.

A raw record's value is the user's and its metadata is in headers; Spark's Kafka source
(``includeHeaders``) hands those over as an array of ``(key, value)`` structs. The
evaluation's metrics job (``evaluation/suite/metrics_job.py``) and the audit's streaming job
(``audit/spark_job.py``) both turn a raw record's metadata into the JSON object the
JSON forms hold, so that one ``from_json`` parses either form; this module is that one
reading. It imports only pyspark: next to the jobs it runs wherever they do (pass it to
``spark-submit --py-files`` on a cluster without the atomickafka package). A unit test
holds its header names to the codec's (``atomickafka.core.raw``).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the usual spelling)

__all__ = ["RAW_FORMAT", "RAW_FORMAT_HEADER", "raw_as_json"]

#: The header that marks the raw form, and its value.
RAW_FORMAT_HEADER: Final = "atomickafka-format"
RAW_FORMAT: Final = "3"


def raw_as_json(raw: DataFrame, value: Column) -> Column:
    """For a raw-form record (by its ``headers``), its metadata as the JSON object the
    JSON forms hold (``messageID``, ``messageType``, ...), with ``value`` as its
    ``value`` field; ``None`` for other records. The Kafka source must read headers
    (``includeHeaders``); without them every record is taken for a JSON one."""
    if "headers" not in raw.columns:
        return F.lit(None).cast("string")
    h = F.map_from_entries(
        F.transform(
            F.coalesce(F.col("headers"), F.array()),
            lambda e: F.struct(e["key"].alias("k"), e["value"].cast("string").alias("v")),
        )
    )
    fields = F.struct(
        h["atomickafka-id"].alias("messageID"),
        h["atomickafka-type"].alias("messageType"),
        h["atomickafka-sender"].alias("senderID"),
        h["atomickafka-from"].alias("sentFromTopic"),
        F.split(h["atomickafka-to"], ",").alias("topic"),
        h["atomickafka-ts"].cast("long").alias("timeStamp"),
        h["atomickafka-layer"].cast("int").alias("partitionID"),
        h["atomickafka-digest"].alias("digest"),
        F.lit(2).alias("formatVersion"),
        value.alias("value"),
    )
    return F.when(h[RAW_FORMAT_HEADER] == RAW_FORMAT, F.to_json(fields))
