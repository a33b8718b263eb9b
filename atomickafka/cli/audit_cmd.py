"""``atomickafka audit``: the live order audit of delivery topics (docs/audit.md).

In-process by default (:mod:`atomickafka.audit.service`); ``--spark`` runs the same
rules as the PySpark job (:mod:`atomickafka.audit.spark_job`) in local mode, and
``--print-job`` prints that job's file for ``spark-submit``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from atomickafka.audit.config import AUDIT_GROUP, AUDIT_TOPIC, AuditConfig
from atomickafka.audit.rules import DEFAULT_BOUND_S
from atomickafka.cli.options import (
    add_log_level,
    add_overrides,
    add_secret_file,
    fail,
    guarded,
    reach,
)
from atomickafka.logs import configure_logging

__all__ = ["SPARK_JOB_MODULE", "register", "spark_job_path"]

#: The Spark job's module; its file is what ``spark-submit`` runs.
SPARK_JOB_MODULE = "atomickafka.audit.spark_job"


def register(subparsers: Any) -> None:
    """Add the ``audit`` sub-command."""
    parser = subparsers.add_parser(
        "audit", help="check the delivery topics' order live (in-process, or with --spark)"
    )
    parser.add_argument(
        "--bootstrap-server",
        "--bootstrap-servers",
        dest="bootstrap_server",
        metavar="HOST:PORT[,...]",
        help="Kafka brokers to connect to",
    )
    parser.add_argument("--topics", help="comma-separated AtomicKafka topics, e.g. T1,T2,T3")
    parser.add_argument(
        "--bound",
        type=float,
        default=DEFAULT_BOUND_S,
        help="seconds a message may take to reach all its destinations after its first "
        f"delivery, else 'missing' ({DEFAULT_BOUND_S:g})",
    )
    parser.add_argument(
        "--group", default=AUDIT_GROUP, help=f"consumer group of its position ({AUDIT_GROUP})"
    )
    parser.add_argument(
        "--audit-topic",
        default=AUDIT_TOPIC,
        help=f"topic the violations are written to ({AUDIT_TOPIC}); '' for none",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port"
    )
    parser.add_argument(
        "--metrics-host", default="0.0.0.0", help="address of the metrics endpoint (0.0.0.0)"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop after this long (for scripts)"
    )
    spark = parser.add_argument_group("Spark (--spark)")
    spark.add_argument("--spark", action="store_true", help="run the PySpark job, local mode")
    spark.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    spark.add_argument("--out", type=Path, help="folder of its Parquet output")
    spark.add_argument("--checkpoint", type=Path, help="Spark's checkpoint folder")
    spark.add_argument("--trigger-seconds", type=float, default=5.0, help="trigger interval (5)")
    spark.add_argument(
        "--print-job", action="store_true", help="print the Spark job's file and exit"
    )
    add_overrides(parser)
    add_secret_file(parser)
    add_log_level(parser)
    parser.set_defaults(func=guarded("audit", _run))


def spark_job_path() -> Path:
    """The Spark job's file, as installed."""
    spec = importlib.util.find_spec(SPARK_JOB_MODULE)
    assert spec is not None and spec.origin is not None, SPARK_JOB_MODULE
    return Path(spec.origin)


def _topics(text: str | None) -> tuple[str, ...]:
    from atomickafka.core.wire import parse_destinations  # noqa: PLC0415

    topics = tuple(dict.fromkeys(t.strip() for t in (text or "").split(",") if t.strip()))
    parse_destinations(list(topics))  # the same name rules as destinations
    return topics


def _run(args: argparse.Namespace) -> int:
    if args.print_job:
        print(spark_job_path())
        return 0
    if not args.bootstrap_server or not args.topics:
        return fail("audit", "--bootstrap-server and --topics are required")
    topics = _topics(args.topics)
    if args.spark and args.secret_file is not None:
        return fail(
            "audit",
            "--secret-file is not supported with --spark: the Spark job does not check "
            "signatures; run the in-process audit (without --spark) on a signed deployment",
        )
    if args.spark and (args.out is None or args.checkpoint is None):
        return fail("audit", "--spark needs --out DIR and --checkpoint DIR")
    reach(args)  # a wrong --bootstrap-server: one line, within seconds, as every command
    configure_logging(args.log_level)
    if args.spark:
        return _run_spark(args, topics)
    from atomickafka.audit.service import LiveAudit  # noqa: PLC0415

    config = AuditConfig(
        bootstrap=args.bootstrap_server,
        topics=topics,
        bound_s=args.bound,
        group=args.group,
        audit_topic=args.audit_topic or None,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        overrides=args.overrides,
        log_level=args.log_level,
        secret_file=None if args.secret_file is None else str(args.secret_file),
    )
    audit = LiveAudit(config)
    audit.install_signal_handlers()
    return audit.run(max_seconds=args.max_seconds)


def _run_spark(args: argparse.Namespace, topics: tuple[str, ...]) -> int:
    from atomickafka.audit import spark_job  # noqa: PLC0415 (the eval extra)
    from atomickafka.evaluation.suite.spark import session  # noqa: PLC0415

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers need pandas
    spark = session(args.master, kafka_source=True, app_name="atomickafka-audit")
    argv = [
        "--bootstrap-server",
        args.bootstrap_server,
        "--topics",
        ",".join(topics),
        "--out",
        str(args.out),
        "--checkpoint",
        str(args.checkpoint),
        "--bound",
        str(args.bound),
        "--audit-topic",
        args.audit_topic,
        "--trigger-seconds",
        str(args.trigger_seconds),
    ]
    if args.max_seconds is not None:
        argv += ["--max-seconds", str(args.max_seconds)]
    for key, value in args.overrides.items():
        argv += ["--kafka-option", f"{key}={value}"]
    try:
        return spark_job.main(argv, spark)
    finally:
        spark.stop()
