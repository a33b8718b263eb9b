"""``atomickafka node`` (one node, or one topic's merger) and ``atomickafka cluster``
(one process per node, and per merger when the topics are partitioned).

Both check first that Kafka answers (one line and exit status 1 when it does not);
``cluster`` stops, with one line and a non-zero status, rather than restart nodes that
cannot start or cannot reach Kafka.
"""

from __future__ import annotations

import argparse
from typing import Any

from atomickafka.audit.config import AuditConfig
from atomickafka.audit.rules import DEFAULT_BOUND_S
from atomickafka.cli.options import (
    add_bootstrap,
    add_commit_interval,
    add_delivery_mode,
    add_log_level,
    add_overrides,
    add_secret_file,
    add_topics_per_process,
    fail,
    guarded,
    reach,
)
from atomickafka.core.compact import BINARY, CONTROL_FORMATS
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.protocols import CARRIER, NOTIFY_VALUES
from atomickafka.kafka.topics import Layout
from atomickafka.logs import configure_logging
from atomickafka.node.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_COMMIT_INTERVAL_S,
    DEFAULT_STUCK_AFTER_S,
    ClusterConfig,
    NodeConfig,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``node`` and ``cluster`` sub-commands."""
    node = subparsers.add_parser("node", help="run the ordering node of one topic (or layer)")
    add_bootstrap(node)
    node.add_argument("--topic", required=True, help="the AtomicKafka topic this node serves")
    node.add_argument(
        "--layer", type=int, default=None, help="with --partitions N: the layer (0..N-1)"
    )
    node.add_argument(
        "--merger", action="store_true", help="with --partitions N: run the topic's merger"
    )
    _add_node_options(node)
    node.set_defaults(func=guarded("node", _run_node))

    cluster = subparsers.add_parser("cluster", help="run and supervise one node per topic")
    add_bootstrap(cluster)
    cluster.add_argument("--topics", required=True, help="comma-separated topics, e.g. T1,T2,T3")
    cluster.add_argument(
        "--standby",
        action="store_true",
        help="run a standby beside every node and merger: it takes over when the active one dies",
    )
    add_topics_per_process(cluster, "the cluster's")
    cluster.add_argument(
        "--audit", action="store_true", help="run the live order audit beside the nodes"
    )
    cluster.add_argument(
        "--audit-bound",
        type=float,
        default=DEFAULT_BOUND_S,
        help=f"the audit's bound in seconds ({DEFAULT_BOUND_S:g}; see atomickafka audit)",
    )
    cluster.add_argument(
        "--audit-metrics-port", type=int, default=None, help="the audit's Prometheus port"
    )
    _add_node_options(cluster)
    cluster.set_defaults(func=guarded("cluster", _run_cluster))


def _add_node_options(parser: argparse.ArgumentParser) -> None:
    add_overrides(parser)
    add_secret_file(parser)
    _add_protocol_options(parser)
    _add_durability_options(parser)
    _add_format_options(parser)
    _add_takeover_options(parser)
    _add_metrics_options(parser)
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop after this long (for scripts)"
    )
    add_log_level(parser)


def _add_protocol_options(parser: argparse.ArgumentParser) -> None:
    """The protocol and its shape: algorithm, layout, partitions, batches, stuck warning."""
    parser.add_argument(
        "--algorithm",
        choices=[a.value for a in Algorithm],
        default=DEFAULT_ALGORITHM.value,
        help="direct: every destination proposes to every other (3 hops); optimized: the "
        "coordinator decides (thesis Alg. 3/4); poc: all decide (Alg. 1/2). "
        f"Default {DEFAULT_ALGORITHM.value}",
    )
    parser.add_argument(
        "--layout",
        choices=[layout.value for layout in Layout],
        default=Layout.SPLIT.value,
        help="split: input log in atomickafka-in.<topic>, only deliveries in <topic>; "
        "shared: everything in <topic> (the thesis layout)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="partition layers per topic; each runs the protocol alone and a merger per "
        "topic merges them (split layout)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="records per batch"
    )
    parser.add_argument(
        "--stuck-after",
        type=float,
        default=DEFAULT_STUCK_AFTER_S,
        help="warn when a message has held the queue head this long (seconds)",
    )


def _add_durability_options(parser: argparse.ArgumentParser) -> None:
    """What survives a crash: delivery mode, snapshots, the memory of settled ids."""
    add_delivery_mode(
        parser,
        "the default: each batch's outputs, snapshot and input offsets in one Kafka "
        "transaction; a plain read_committed consumer of a delivery topic sees each delivery "
        "once across any crash, and the broker fences an older instance of the role",
        "write outputs with a gapless idempotent producer, then commit the input "
        "offsets: no transactions, but a plain consumer of a delivery topic may see the last "
        "deliveries again after a crash (the client and tail hide them) and there is no "
        "broker fence, only the lease (default: --exactly-once)",
    )
    add_commit_interval(parser, DEFAULT_COMMIT_INTERVAL_S, "the nodes")
    parser.add_argument(
        "--snapshot-every",
        type=int,
        default=50_000,
        metavar="RECORDS",
        help="snapshot the node's state after this many input records (default 50000)",
    )
    parser.add_argument(
        "--snapshot-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="and at least this often while records arrive (default 30)",
    )
    parser.add_argument(
        "--memory-window",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long settled message ids are remembered; a client copy may arrive half "
        "of it late (default 60)",
    )


def _add_format_options(parser: argparse.ArgumentParser) -> None:
    """How the node writes: delivery format, control format, its control log."""
    parser.add_argument(
        "--delivery-format",
        choices=["raw", "json"],
        default="json",
        help="json: a JSON envelope (messageID, value, timeStamp, ...); raw: a delivery "
        "record's value is the value as sent, its key the key as sent, the sender's headers "
        "carried, AtomicKafka's metadata in atomickafka-* headers, so that existing consumers "
        "read the topic as any other (costs more broker and node CPU per delivery, "
        "docs/performance.md)",
    )
    parser.add_argument(
        "--control-format",
        choices=list(CONTROL_FORMATS),
        default=BINARY,
        help="how the node writes what it sends other nodes (bundles of control messages, "
        "ticks): binary, compact (the default), or json, the only form releases before it "
        "read: during a rolling upgrade from such a release, start upgraded nodes with "
        "json until every node is upgraded (docs/operators.md, Upgrade). Both are read",
    )
    parser.add_argument(
        "--notify-values",
        choices=list(NOTIFY_VALUES),
        default=CARRIER,
        help="direct: carrier (the default), a Notify carries the value only from or to "
        "the message's carrier destination, so a multicast to k topics writes its value "
        "O(k) times, not O(k^2); every: the value in every Notify, the only form releases "
        "before it accept: during a rolling upgrade from such a release, start upgraded "
        "nodes with every until every node is upgraded (docs/operators.md, Upgrade). Both "
        "are read",
    )
    parser.add_argument(
        "--control-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read peers' proposals from a control log of the node's own "
        "(atomickafka-ctl.T), before the clients' records, so that under a client flood "
        "proposals never wait behind them (docs/DESIGN.md §7.1); the default. "
        "--no-control-log: one log, as releases before it. Every node of a deployment "
        "runs with it or none does",
    )


def _add_takeover_options(parser: argparse.ArgumentParser) -> None:
    """Restarts and standbys: --reconfigure, --takeover-after."""
    parser.add_argument(
        "--reconfigure",
        action="store_true",
        help="take up another --algorithm, --delivery-format or signing than the node's "
        "state was built with; only accepted for a node stopped cleanly with nothing in "
        "flight (docs/DESIGN.md §6.6). Without it such a start is refused",
    )
    parser.add_argument(
        "--takeover-after",
        type=float,
        default=6.0,
        metavar="SECONDS",
        help="a standby takes over once the active instance has been silent this long "
        "(the lease group's session timeout; default 6)",
    )


def _add_metrics_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (0: any free port, "
        "logged); cluster serves every node's and merger's on this one port. Default: none",
    )
    parser.add_argument(
        "--metrics-host",
        default="0.0.0.0",
        metavar="HOST",
        help="the address the metrics endpoint listens on (default 0.0.0.0)",
    )


def _node_config(args: argparse.Namespace, topic: str, layer: int | None) -> NodeConfig:
    return NodeConfig(
        bootstrap=args.bootstrap_server,
        topic=topic,
        algorithm=Algorithm(args.algorithm),
        layout=Layout(args.layout),
        partitions=args.partitions,
        layer=layer,
        overrides=args.overrides,
        batch_size=args.batch_size,
        stuck_after_s=args.stuck_after,
        log_level=args.log_level,
        exactly_once=args.exactly_once,
        commit_interval_s=args.commit_interval,
        snapshot_every_records=args.snapshot_every,
        snapshot_every_s=args.snapshot_interval,
        window_ms=int(args.memory_window * 1000),
        session_timeout_ms=int(args.takeover_after * 1000),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        delivery_format=args.delivery_format,
        control_format=args.control_format,
        notify_values=args.notify_values,
        control_log=args.control_log,
        secret_file=None if args.secret_file is None else str(args.secret_file),
        reconfigure=args.reconfigure,
    )


def _run_node(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    if args.partitions > 1 and (args.layer is None) == (not args.merger):
        return fail("node", "with --partitions N > 1 give either --layer L or --merger")
    if args.partitions <= 1 and (args.layer is not None or args.merger):
        return fail("node", "--layer and --merger need --partitions N > 1")
    config = _node_config(args, args.topic, args.layer)
    reach(args)
    from atomickafka.node.merger_runtime import MergerRuntime  # noqa: PLC0415
    from atomickafka.node.runtime import NodeRuntime, NodeStartError  # noqa: PLC0415

    runtime = MergerRuntime(config) if args.merger else NodeRuntime(config)
    runtime.install_signal_handlers()
    try:
        return runtime.run(max_seconds=args.max_seconds)
    except NodeStartError as exc:
        return fail("node", exc)


def _run_cluster(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    topics = tuple(dict.fromkeys(t.strip() for t in args.topics.split(",") if t.strip()))
    if not topics:
        return fail("cluster", "--topics names no topic")
    from atomickafka.core.wire import parse_destinations  # noqa: PLC0415
    from atomickafka.node.supervisor import Supervisor  # noqa: PLC0415

    parse_destinations(list(topics))  # the same name rules as destinations
    node = _node_config(args, topics[0], None)
    audit = None
    if args.audit:
        audit = AuditConfig(
            node.bootstrap,
            topics,
            bound_s=args.audit_bound,
            metrics_port=args.audit_metrics_port,
            overrides=node.overrides,
            log_level=node.log_level,
            secret_file=node.secret_file,
            exactly_once=node.exactly_once,
        )
    cluster_config = ClusterConfig(  # a ConfigError is reported by guarded()
        topics, node, audit=audit, standby=args.standby, topics_per_process=args.topics_per_process
    )
    supervisor = Supervisor(cluster_config)
    reach(args)
    supervisor.install_signal_handlers()
    status = supervisor.run(max_seconds=args.max_seconds)
    if supervisor.failure is not None:
        return fail("cluster", f"stopped: {supervisor.failure}", status)
    return status
