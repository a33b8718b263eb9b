"""``atomickafka broker``: run a local Apache Kafka without Docker.

    atomickafka broker start [--brokers 1|3] [--data-dir DIR] [--port BASEPORT] [--sasl [--acls]]
    atomickafka broker stop [--data-dir DIR] [--purge]
    atomickafka broker status [--data-dir DIR]
    atomickafka broker fetch [--spark [VERSION]] [--tools] [--streams]
    atomickafka broker tool NAME [ARGS...]

``start`` prints the bootstrap servers as the last line of stdout, so
``export KAFKA_BOOTSTRAP_SERVERS=$(atomickafka broker start | tail -n1)`` works; progress
goes to stderr. With ``--sasl`` clients must log in (SASL PLAIN over SASL_PLAINTEXT, users
``admin``, ``alice``, ``node``, ``ops``; ``--acls`` adds an authorizer, ``admin`` the only
super user): the data dir then holds ``client.properties`` and ``atomickafka.toml`` with
alice's settings (``atomickafka send --config DIR/atomickafka.toml``). ``tool`` runs one of
Kafka's command-line tools (``kafka-console-consumer`` ...) from the same Maven jars, for
any Kafka, so the commands ``doctor`` suggests need no Kafka download.
Errors print one message and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from atomickafka import localkafka
from atomickafka.localkafka import BrokerError, fetch_kafka, fetch_spark_kafka, log_stderr
from atomickafka.localkafka.configs import CLIENT_PROPERTIES, CLIENT_TOML
from atomickafka.localkafka.jars import fetch_kafka_tools, fetch_streams_app
from atomickafka.localkafka.tools import TOOLS, run_tool

EXIT_ERROR = 2


def _start(args: argparse.Namespace) -> int:
    bootstrap = localkafka.ensure_broker(
        brokers=args.brokers,
        data_dir=args.data_dir,
        port=args.port,
        timeout=args.timeout,
        sasl=args.sasl,
        acls=args.acls,
    )
    if args.sasl:
        data_dir = localkafka.state.resolve_data_dir(args.data_dir)
        log_stderr(
            f"SASL PLAIN logins only; client settings (user alice): "
            f"{data_dir / CLIENT_TOML} (--config), {data_dir / CLIENT_PROPERTIES} "
            "(--command-config)"
        )
    print(bootstrap, flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or localkafka.default_data_dir()
    stopped = localkafka.stop_broker(data_dir, timeout=args.timeout)
    if stopped:
        log_stderr(f"stopped {stopped} broker process(es) from {data_dir}")
    else:
        log_stderr(f"no broker running from {data_dir}")
    if args.purge:
        localkafka.purge_data_dir(data_dir)
        log_stderr(f"deleted the cluster data in {data_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or localkafka.default_data_dir()
    statuses = localkafka.broker_status(data_dir)
    if not statuses:
        print(f"no broker was started from {data_dir}")
        return 1
    for s in statuses:
        state = "alive" if s.alive else "stopped"
        if s.alive and not s.listening:
            state = "alive, not listening yet"
        pid = s.pid if s.pid is not None else "-"
        print(
            f"broker {s.node_id}  pid {pid}  port {s.port}  controller {s.controller_port}"
            f"  {state}  log {s.log_file}"
        )
    running = [s for s in statuses if s.alive]
    if len(running) != len(statuses):
        print(f"{len(running)} of {len(statuses)} brokers running (data dir {data_dir})")
        return 1
    print(",".join(f"127.0.0.1:{s.port}" for s in statuses))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    if args.tools:
        print(fetch_kafka_tools())
    if args.streams:
        print(fetch_streams_app())
    lib = fetch_kafka()
    print(lib)
    if args.spark is not None:
        version = args.spark
        if not version:
            try:
                version = metadata.version("pyspark")
            except metadata.PackageNotFoundError:
                raise BrokerError(
                    "pyspark is not installed; install the eval extra "
                    "(deploy/bootstrap.sh eval) or name a version: "
                    f"--spark {localkafka.default_spark_version()}"
                ) from None
        print(fetch_spark_kafka(version))
    return 0


def _tool(args: argparse.Namespace) -> int:
    return run_tool(args.name, args.tool_args)


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except BrokerError as exc:
            print(f"atomickafka broker: error: {exc}", file=sys.stderr)
            return EXIT_ERROR

    return run


def register(subparsers: Any) -> None:
    """Add the ``broker`` sub-command (start/stop/status/fetch) to ``subparsers``."""
    parser = subparsers.add_parser(
        "broker",
        help="run a local Apache Kafka (KRaft) from Maven jars, no Docker",
        description="Start, stop and inspect a local Apache Kafka on 127.0.0.1.",
    )
    actions = parser.add_subparsers(dest="broker_action", metavar="ACTION")
    actions.required = True

    data_dir_help = "cluster folder (default: $ATOMICKAFKA_HOME/run or ~/.cache/atomickafka/run)"
    _add_start(actions, data_dir_help)
    _add_stop(actions, data_dir_help)
    _add_status(actions, data_dir_help)
    _add_fetch(actions)
    _add_tool(actions)


def _add_start(actions: Any, data_dir_help: str) -> None:
    """The ``start`` action: brokers, data dir, port, timeout, SASL and ACLs."""
    start = actions.add_parser("start", help="start brokers unless running; print bootstrap")
    start.add_argument(
        "--brokers",
        type=int,
        choices=localkafka.SUPPORTED_SIZES,
        default=1,
        help="1 (RF 1, default) or 3 (RF 3, min.insync.replicas 2)",
    )
    start.add_argument("--data-dir", type=Path, help=data_dir_help)
    start.add_argument(
        "--port",
        type=int,
        help=f"client port of broker 1 (default {localkafka.DEFAULT_PORT}); broker i uses "
        "PORT+2(i-1), its controller the port after that",
    )
    start.add_argument("--timeout", type=float, default=90.0, help="seconds to wait (90)")
    start.add_argument(
        "--sasl",
        action="store_true",
        help="clients log in with SASL PLAIN (users admin, alice, node, ops; alice's "
        "settings in the data dir)",
    )
    start.add_argument(
        "--acls",
        action="store_true",
        help="with --sasl: an authorizer checks Kafka ACLs; admin is the only super user",
    )
    start.set_defaults(func=_guarded(_start))


def _add_stop(actions: Any, data_dir_help: str) -> None:
    """The ``stop`` action: data dir, purge, timeout."""
    stop = actions.add_parser("stop", help="stop the brokers started from the data dir")
    stop.add_argument("--data-dir", type=Path, help=data_dir_help)
    stop.add_argument("--purge", action="store_true", help="also delete the cluster's data")
    stop.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL (30)")
    stop.set_defaults(func=_guarded(_stop))


def _add_status(actions: Any, data_dir_help: str) -> None:
    """The ``status`` action: its data dir."""
    status = actions.add_parser("status", help="show brokers; exit 1 unless all run")
    status.add_argument("--data-dir", type=Path, help=data_dir_help)
    status.set_defaults(func=_guarded(_status))


def _add_fetch(actions: Any) -> None:
    """The ``fetch`` action: Spark's Kafka jars, Kafka's tools, the Streams baseline."""
    fetch = actions.add_parser("fetch", help="only download the Kafka jars (Maven)")
    fetch.add_argument(
        "--spark",
        nargs="?",
        const="",
        metavar="VERSION",
        help="also fetch spark-sql-kafka-0-10_2.13 (default: installed pyspark version)",
    )
    fetch.add_argument(
        "--tools", action="store_true", help="also fetch Kafka's command-line tools (broker tool)"
    )
    fetch.add_argument(
        "--streams",
        action="store_true",
        help="also build the Kafka Streams baseline of bench and eval (Maven, once)",
    )
    fetch.set_defaults(func=_guarded(_fetch))


def _add_tool(actions: Any) -> None:
    """The ``tool`` action: a Kafka command-line tool's name and its arguments."""
    tool = actions.add_parser(
        "tool",
        help="run one of Kafka's command-line tools (kafka-console-consumer, ...) from its jars",
        description="Run Kafka's tool NAME with ARGS, as its script NAME.sh would, from "
        "jars fetched with Maven (once): no Kafka download. The tools: " + ", ".join(sorted(TOOLS)),
    )
    tool.add_argument("name", metavar="NAME", help="the tool, e.g. kafka-console-consumer")
    tool.add_argument("tool_args", nargs=argparse.REMAINDER, metavar="ARGS", help="its options")
    tool.set_defaults(func=_guarded(_tool))
