"""The data source Spark sees: ``format("atomickafka")`` for reading and writing,
batch and streaming."""

from __future__ import annotations

from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from atomickafka.spark.columns import DELIVERY_SCHEMA
from atomickafka.spark.sink import BatchWriter, StreamWriter
from atomickafka.spark.source import BatchReader, StreamReader

__all__ = ["NAME", "AtomicKafkaDataSource", "register"]

#: The name queries use: ``spark.read.format("atomickafka")``.
NAME: Final = "atomickafka"


class AtomicKafkaDataSource(DataSource):
    """AtomicKafka as a Spark data source: read topics' deliveries in their agreed
    order (:mod:`atomickafka.spark.source`), write rows as multicasts, exactly once per
    micro-batch (:mod:`atomickafka.spark.sink`). Options: :mod:`atomickafka.spark.options`."""

    @classmethod
    def name(cls) -> str:
        """``atomickafka``."""
        return NAME

    def schema(self) -> StructType:
        """The columns of a read (:mod:`atomickafka.spark.columns`)."""
        return DELIVERY_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """``spark.read``."""
        return BatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        """``spark.readStream``."""
        return StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write`` (``overwrite`` means nothing to a stream of messages)."""
        return BatchWriter(self.options, schema)

    def streamWriter(  # noqa: N802 (Spark's name)
        self, schema: StructType, overwrite: bool
    ) -> DataSourceStreamWriter:
        """``df.writeStream``."""
        return StreamWriter(self.options, schema)


def register(spark: SparkSession) -> None:
    """Make ``format("atomickafka")`` known to ``spark`` (once per session)."""
    spark.dataSource.register(AtomicKafkaDataSource)
