"""The streaming query of ``tests/integration/test_spark.py``, run as its own process so
that the test can kill its driver: it reads one topic's deliveries, turns each into
``{"i": ..., "twice": ..., "from": <its messageID>}`` and multicasts that to two topics,
exactly once per micro-batch, until it is killed. The test restarts it from its
checkpoint in its own SparkSession (:func:`start`).

    python -m tests.integration.spark_pipeline BOOTSTRAP SOURCE A,B CHECKPOINT
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the usual spelling)
from pyspark.sql.streaming.query import StreamingQuery

from atomickafka.evaluation.suite.spark import session
from atomickafka.spark import register


def start(
    spark: SparkSession, bootstrap: str, source: str, destinations: str, checkpoint: str
) -> StreamingQuery:
    """Start the query in ``spark`` (the data source registered), from ``checkpoint``."""
    deliveries = (
        spark.readStream.format("atomickafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    i = F.get_json_object("valueString", "$.i").cast("long")
    results = deliveries.select(
        F.to_json(
            F.struct(i.alias("i"), (i * 2).alias("twice"), F.col("messageID").alias("from"))
        ).alias("value")
    )
    return (
        results.writeStream.format("atomickafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("destinations", destinations)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def main(bootstrap: str, source: str, destinations: str, checkpoint: str) -> None:
    """Run the query until the process is killed."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers import atomickafka
    spark = session("local[2]", app_name="atomickafka-spark-pipeline")
    register(spark)
    start(spark, bootstrap, source, destinations, checkpoint).awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
