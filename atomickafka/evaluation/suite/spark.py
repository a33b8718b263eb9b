"""The suite's side of the PySpark metrics job
(:mod:`atomickafka.evaluation.suite.metrics_job`).

The job is a plain PySpark application that needs nothing but pyspark; it ships in
the package, so ``spark-submit`` can run its file (:func:`job_path`) and the suite
imports it and runs it in its own process, in local mode, with one SparkSession for
the whole suite. Spark's Kafka connector jars are fetched by the setup step
(``deploy/bootstrap.sh eval``); here they are only looked up.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

from atomickafka.errors import AtomicKafkaError
from atomickafka.localkafka import spark_kafka_lib_dir

if TYPE_CHECKING:  # pyspark is the eval extra's: imported only where Spark runs
    from pyspark.sql import SparkSession

__all__ = [
    "JOB_MODULE",
    "SparkSetupError",
    "compute_metrics",
    "job_path",
    "kafka_source_jars",
    "load_job",
    "session",
    "spark_kafka_dir",
    "spark_session",
]

#: Local mode on two threads: the machines this targets have two cores.
DEFAULT_MASTER = "local[2]"


class SparkSetupError(AtomicKafkaError):
    """Spark or its Kafka connector is not set up; the message says how to set it up."""


#: The job's module; its file is what ``spark-submit`` runs.
JOB_MODULE = "atomickafka.evaluation.suite.metrics_job"
#: Names another job file to run instead (a modified copy, say).
JOB_OVERRIDE = "ATOMICKAFKA_EVAL_JOB"


def job_path() -> Path:
    """The metrics job's file, as installed (``$ATOMICKAFKA_EVAL_JOB`` overrides)."""
    override = os.environ.get(JOB_OVERRIDE)
    if override:
        return Path(override)
    spec = importlib.util.find_spec(JOB_MODULE)
    assert spec is not None and spec.origin is not None, JOB_MODULE
    return Path(spec.origin)


@functools.cache
def load_job() -> ModuleType:
    """The metrics job as a module (loaded once)."""
    if not os.environ.get(JOB_OVERRIDE):
        return importlib.import_module(JOB_MODULE)
    path = job_path()
    spec = importlib.util.spec_from_file_location("atomickafka_eval_metrics", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SparkSetupError(f"the metrics job is missing: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _refuse_download(message: str) -> NoReturn:
    """The log sink of the fetch below: it is only called when a download would start."""
    raise SparkSetupError(
        "Spark's Kafka connector jars are not fetched; run `deploy/bootstrap.sh eval` "
        f"(or `atomickafka broker fetch --spark`) first ({message})"
    )


def spark_kafka_dir(version: str | None = None) -> Path:
    """The folder of the fetched ``spark-sql-kafka-0-10_2.13:<pyspark version>`` jars.

    Never downloads (that is the setup step's job): a missing folder raises
    :class:`SparkSetupError`.
    """
    version = version or metadata.version("pyspark")
    folder = spark_kafka_lib_dir(version)
    if not folder.is_dir():
        _refuse_download(f"no {folder}")
    return folder


def kafka_source_jars() -> list[str]:
    """The connector jars Spark needs for its Kafka source (``spark.jars``)."""
    jars: list[str] = load_job().connector_jars(spark_kafka_dir())
    return jars


def session(
    master: str = DEFAULT_MASTER, *, kafka_source: bool = False, app_name: str = "atomickafka-eval"
) -> SparkSession:
    """The SparkSession (the running one, if any): the job's builder, in local mode
    by default, with the Kafka connector on ``spark.jars`` when ``kafka_source`` (and
    whenever its jars are fetched: the first session of a process starts Spark's JVM,
    and a later session in that process cannot add to its driver's classpath)."""
    fetched = spark_kafka_lib_dir(metadata.version("pyspark")).is_dir()
    jars = kafka_source_jars() if kafka_source or fetched else []
    spark: SparkSession = load_job().build_session(master, jars, app_name)
    return spark


@contextmanager
def spark_session(master: str = DEFAULT_MASTER) -> Iterator[SparkSession]:
    """The running SparkSession if there is one (left running), else a new one that is
    stopped when the block ends."""
    from pyspark.sql import SparkSession  # noqa: PLC0415  (the eval extra)

    running = SparkSession.getActiveSession()
    spark = running if running is not None else session(master)
    try:
        yield spark
    finally:
        if running is None:
            spark.stop()


def compute_metrics(
    spark: SparkSession, runs_dir: Path, out_dir: Path, window_s: float
) -> list[Path]:
    """Run the job on the Parquet files under ``runs_dir``; one ``<run>.json`` per run
    in ``out_dir``. Returns their paths."""
    job = load_job()
    records, messages = job.load_parquet(spark, str(runs_dir))
    paths: list[Path] = job.write_results(job.compute(records, messages, window_s), out_dir)
    return paths
