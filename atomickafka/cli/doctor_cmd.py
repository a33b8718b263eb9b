"""``atomickafka doctor``: the cluster and the deployment checked against what ordering
needs, each finding with its fix.

Checks the brokers (version, transactions and idempotence, replication defaults,
unclean leader election), every Kafka topic of the deployment (replication, in-sync
replicas, ``min.insync.replicas``, retention -- at least twice the snapshot interval
plus the longest downtime, or none -- and timestamps of the input logs, logs cut below
every snapshot,
compaction, ``max.message.bytes``) and the nodes (alive, one protocol, stuck heads,
dead letters, lag). Without ``--topics`` the deployment is what the status topic shows.
Exit status: 0 when nothing is unsafe, 1 when something is, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import orjson

from atomickafka.cli.options import add_bootstrap, add_overrides, connection, guarded, reach
from atomickafka.core.wire import parse_destinations
from atomickafka.doctor import (
    DEFAULT_MAX_DOWNTIME_S,
    DEFAULT_MAX_LAG,
    DEFAULT_SNAPSHOT_INTERVAL_S,
    DEFAULT_STUCK_AFTER_S,
    Deployment,
    Finding,
    Severity,
    diagnose,
    discover,
    exit_status,
    render_json,
    render_text,
)
from atomickafka.errors import ConfigError
from atomickafka.kafka.topics import Layout

__all__ = ["add_retention_rule", "register", "with_retention_rule"]


def add_retention_rule(parser: argparse.ArgumentParser) -> None:
    """The options a finite retention of the replayed logs is judged by (DESIGN §6.5)."""
    parser.add_argument(
        "--snapshot-interval",
        type=float,
        default=DEFAULT_SNAPSHOT_INTERVAL_S,
        metavar="S",
        help="the nodes' --snapshot-interval: an input log or layer stream may delete "
        "records older than twice this plus --max-downtime",
    )
    parser.add_argument(
        "--max-downtime",
        type=float,
        default=DEFAULT_MAX_DOWNTIME_S,
        metavar="S",
        help="the longest a node or merger may be down (seconds)",
    )


def with_retention_rule(deployment: Deployment, args: argparse.Namespace) -> Deployment:
    """``deployment`` judged with the retention options of ``args``."""
    if args.snapshot_interval <= 0 or args.max_downtime < 0:
        raise ConfigError("--snapshot-interval must be positive, --max-downtime not negative")
    return dataclasses.replace(
        deployment, snapshot_interval_s=args.snapshot_interval, max_downtime_s=args.max_downtime
    )


def register(subparsers: Any) -> None:
    """Add the ``doctor`` sub-command."""
    parser = subparsers.add_parser(
        "doctor",
        help="check the cluster and the deployment against what ordering needs",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    add_bootstrap(parser)
    add_overrides(parser)
    parser.add_argument(
        "--topics",
        default=None,
        metavar="T1,T2,...",
        help="the deployment's AtomicKafka topics (default: those the status topic shows)",
    )
    parser.add_argument(
        "--layout",
        choices=[x.value for x in Layout],
        default=Layout.SPLIT.value,
        help="the nodes' layout, with --topics",
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="partition layers per topic, with --topics"
    )
    parser.add_argument(
        "--stuck-after",
        type=float,
        default=DEFAULT_STUCK_AFTER_S,
        help="a queue head waiting longer is a failure (seconds)",
    )
    parser.add_argument(
        "--max-lag",
        type=int,
        default=DEFAULT_MAX_LAG,
        help="warn when a node has more input records than this to process",
    )
    add_retention_rule(parser)
    parser.add_argument(
        "--no-transactions",
        dest="transactions",
        action="store_false",
        help="skip the transactional producer test (it uses transactional id atomickafka-doctor)",
    )
    parser.add_argument(
        "--control-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the nodes run with control logs, the default: check their control logs too, "
        "with --topics (--no-control-log for nodes run with --no-control-log)",
    )
    parser.add_argument("--json", action="store_true", help="the findings as one JSON object")
    parser.add_argument("--verbose", action="store_true", help="also list what is fine")
    parser.set_defaults(func=guarded("doctor", _run))


def _run(args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise ConfigError("--partitions must be at least 1")
    if args.topics:
        parse_destinations([t.strip() for t in args.topics.split(",") if t.strip()])
    reach(args)
    deployment: Deployment | None
    if args.topics:
        topics = tuple(dict.fromkeys(t.strip() for t in args.topics.split(",") if t.strip()))
        deployment = Deployment(
            topics, Layout(args.layout), args.partitions, control_log=args.control_log
        )
    else:
        deployment = discover(connection(args))
    if deployment is not None:
        deployment = with_retention_rule(deployment, args)
    findings = diagnose(
        connection(args),
        deployment,
        stuck_after_s=args.stuck_after,
        max_lag=args.max_lag,
        transactions=args.transactions,
    )
    if deployment is None:
        findings.append(
            Finding(
                "deployment",
                Severity.INFO,
                args.bootstrap_server,
                "no node has published a status: only the cluster was checked",
                "name the topics with --topics",
            )
        )
    if args.json:
        context: dict[str, Any] = {"bootstrap": args.bootstrap_server}
        if deployment is not None:
            context |= {
                "topics": list(deployment.topics),
                "layout": deployment.layout.value,
                "partitions": deployment.partitions,
            }
        print(orjson.dumps(render_json(findings, **context)).decode())
        return exit_status(findings)
    what = "the cluster only"
    if deployment is not None:
        what = (
            f"topics {', '.join(deployment.topics)} ({deployment.layout.value}, "
            f"{deployment.partitions} layer{'s' if deployment.partitions > 1 else ''})"
        )
    print(render_text(findings, f"atomickafka doctor: {args.bootstrap_server}, {what}",
                      verbose=args.verbose))  # fmt: skip
    return exit_status(findings)
