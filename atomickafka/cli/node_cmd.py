"""``atomickafka node`` (one node) and ``atomickafka cluster`` (one node per topic)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from atomickafka.core.engine import Algorithm
from atomickafka.kafka.settings import add_kafka_arguments, parse_overrides
from atomickafka.logs import configure_logging
from atomickafka.node.runtime import NodeConfig, NodeRuntime, NodeStartError
from atomickafka.node.supervisor import Supervisor
from atomickafka.kafka.topics import Layout


def register(subparsers: Any) -> None:
    """Add the ``node`` and ``cluster`` sub-commands."""
    node = subparsers.add_parser("node", help="run the ordering node of one topic")
    add_kafka_arguments(node, topic=True)
    _add_node_options(node)
    node.set_defaults(func=_run_node)

    cluster = subparsers.add_parser("cluster", help="run and supervise one node per topic")
    add_kafka_arguments(cluster)
    cluster.add_argument("--topics", required=True, help="comma-separated topics, e.g. T1,T2,T3")
    _add_node_options(cluster)
    cluster.set_defaults(func=_run_cluster)


def _add_node_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--algorithm",
        choices=[a.value for a in Algorithm],
        default=Algorithm.OPTIMIZED.value,
        help="optimized: coordinator decides (thesis Alg. 3/4); poc: all decide (Alg. 1/2)",
    )
    parser.add_argument(
        "--layout",
        choices=[layout.value for layout in Layout],
        default=Layout.SPLIT.value,
        help="split: input log in atomickafka-in.<topic>, only deliveries in <topic>; "
        "shared: everything in <topic> (the thesis layout)",
    )
    parser.add_argument("--batch-size", type=int, default=2000, help="records per batch")
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop after this long (for scripts)"
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")


def _run_node(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        overrides = parse_overrides(args.overrides)
    except ValueError as exc:
        print(f"atomickafka node: {exc}", file=sys.stderr)
        return 2
    runtime = NodeRuntime(
        NodeConfig(
            bootstrap=args.bootstrap_server,
            topic=args.topic,
            algorithm=Algorithm(args.algorithm),
            layout=Layout(args.layout),
            overrides=overrides,
            batch_size=args.batch_size,
        )
    )
    runtime.install_signal_handlers()
    try:
        return runtime.run(max_seconds=args.max_seconds)
    except NodeStartError as exc:
        print(f"atomickafka node: {exc}", file=sys.stderr)
        return 2


def _run_cluster(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not topics:
        print("atomickafka cluster: --topics names no topic", file=sys.stderr)
        return 2
    node_args = [
        "--bootstrap-server",
        args.bootstrap_server,
        "--algorithm",
        args.algorithm,
        "--layout",
        args.layout,
        "--batch-size",
        str(args.batch_size),
        "--log-level",
        args.log_level,
    ]
    for pair in args.overrides:
        node_args += ["-X", pair]
    supervisor = Supervisor(topics, node_args)
    supervisor.install_signal_handlers()
    return supervisor.run(max_seconds=args.max_seconds)
