"""AtomicKafka as a PySpark data source (Spark's Python Data Source API, pyspark 4.0).

>>> from atomickafka.spark import register          # doctest: +SKIP
>>> register(spark)
>>> deliveries = (spark.readStream.format("atomickafka")
...     .option("kafka.bootstrap.servers", "127.0.0.1:19092")
...     .option("subscribe", "orders").load())
>>> (deliveries.selectExpr("valueString AS value")
...     .writeStream.format("atomickafka")
...     .option("kafka.bootstrap.servers", "127.0.0.1:19092")
...     .option("destinations", "billing,audit")
...     .option("checkpointLocation", "/tmp/ck").start())

- :mod:`~atomickafka.spark.source`: ``spark.read`` / ``readStream``: topics'
  deliveries in their agreed order (:mod:`~atomickafka.spark.columns`), control traffic
  and foreign records hidden as the client hides them; streaming offsets are Kafka's.
- :mod:`~atomickafka.spark.sink`: ``df.write`` / ``writeStream``: each row one
  multicast, written by the client, exactly once per micro-batch.
- :mod:`~atomickafka.spark.options`: the options, in Kafka's words.

Spark's Python workers import this package: run them with the interpreter it is
installed in (``PYSPARK_PYTHON``). Needs the ``spark`` extra (pyspark, pyarrow).
"""

from atomickafka.spark.datasource import NAME, AtomicKafkaDataSource, register

__all__ = ["NAME", "AtomicKafkaDataSource", "register"]
