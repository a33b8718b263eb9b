"""``atomickafka eval``: the thesis's evaluation suite, with a report beside its figures."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atomickafka.cli.options import (
    add_bootstrap,
    add_load_shape,
    add_log_level,
    add_overrides,
    add_secret_file,
    add_topics_per_process,
    connection,
    guarded,
    reach,
    resolve_bootstrap,
)
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.errors import ConfigError
from atomickafka.evaluation.suite.results import RunInfo
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.topics import Layout
from atomickafka.localkafka import running_bootstrap
from atomickafka.logs import configure_logging

if TYPE_CHECKING:  # the suite needs the eval extra: imported when it runs
    from atomickafka.evaluation.load.scenarios import Scenario
    from atomickafka.evaluation.load.variants import Comparison
    from atomickafka.evaluation.suite.command import SuiteOutcome, SuiteSettings

EXIT_FAILED = 1
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    """Add the ``eval`` sub-command."""
    parser = subparsers.add_parser(
        "eval",
        help="run the thesis's evaluation (baseline, 90-10 ... 50-50) and write a report",
        description=(
            "Run the scenarios of the 2019 thesis's chapter 5 through AtomicKafka (and any "
            "compared variant), check every run's delivery order, compute the metrics with "
            "PySpark and write a Markdown report with plots beside the thesis's figures."
        ),
    )
    add_bootstrap(parser, local_fallback=True)
    add_overrides(parser)
    add_secret_file(parser)
    _add_load_options(parser)
    _add_variant_options(parser)
    _add_run_options(parser)
    add_log_level(parser, default="warning")
    parser.set_defaults(func=guarded("eval", _run))


def _add_load_options(parser: argparse.ArgumentParser) -> None:
    """The load: scenarios, messages per client, clients, topics, shape and pace."""
    parser.add_argument(
        "--scenarios",
        default="baseline,90-10,80-20,70-30,60-40,50-50",
        help="comma-separated: baseline, or A-B with B %% multicast to every topic",
    )
    parser.add_argument(
        "--messages-per-client", type=int, default=20_000, help="messages each client sends"
    )
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--topics", type=int, default=5, help="topics, one node each")
    add_load_shape(parser, record_size=0)
    parser.add_argument(
        "--pace-ms", type=float, default=0.0, help="ms between a client's sends (0: unthrottled)"
    )


def _add_variant_options(parser: argparse.ArgumentParser) -> None:
    """The variants run: protocol, partitions, layout, the compared ones, many topics."""
    parser.add_argument(
        "--algorithm",
        choices=[a.value for a in Algorithm],
        default=DEFAULT_ALGORITHM.value,
        help="the protocol of the main variant",
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="partition layers per topic (split layout)"
    )
    parser.add_argument(
        "--layout", choices=[x.value for x in Layout], default=Layout.SPLIT.value, help="layout"
    )
    parser.add_argument(
        "--compare",
        default="",
        metavar="algorithms|layouts|baselines|seq-alo|seq-eos|streams|kafka|many-topics[,...]",
        help=(
            "also run every protocol, both layouts, the sequencer baselines (baselines: "
            "seq-eos and streams, exactly-once as AtomicKafka; seq-alo: the plain one, "
            "at-least-once, no recovery), the bare Kafka pipe (no ordering: the cost "
            "floor); many-topics: also the many-topic workload (90 %% of messages to one "
            "topic, 10 %% to 2-3, on --many-topics topics, and a skewed variant) through "
            "every variant"
        ),
    )
    parser.add_argument(
        "--many-topics",
        default="5,10,20",
        help="topic counts of the many-topic workload (--compare many-topics)",
    )


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run: report folder, Spark, rate window, stall timeout, control logs, warm-up."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report folder (default: eval/out/<UTC time>)",
    )
    parser.add_argument("--spark-master", default="local[2]", help="Spark master for the job")
    parser.add_argument("--window-s", type=float, default=5.0, help="rate window (thesis: 5)")
    parser.add_argument(
        "--stall-timeout-s",
        type=float,
        default=120.0,
        help="a run fails when no delivery arrives for this long",
    )
    parser.add_argument(
        "--control-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run AtomicKafka's nodes with control logs of their own, the default (as node; "
        "--no-control-log: one log each)",
    )
    add_topics_per_process(parser, "AtomicKafka's runs'")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up run")
    parser.add_argument(
        "--print-job",
        action="store_true",
        help="print the path of the PySpark metrics job (for spark-submit) and exit",
    )


def _row(info: RunInfo) -> str:
    return (
        f"{info.scenario:<10} {info.variant:<18} {info.sent:>8,} msgs  "
        f"{info.counted_deliveries:>8,}/{info.expected_deliveries:<8,} deliveries  "
        f"{info.wall_s:>7.1f} s  {info.verdict}"
    )


def _announce(info: RunInfo) -> None:
    """A run's line as it ends; a failed run also gets its reasons on stderr, at once."""
    print(_row(info), flush=True)
    if not info.ok:
        details = info.error or info.check_summary
        print(f"RUN FAILED: {info.scenario} {info.variant}: {info.verdict}", file=sys.stderr)
        if details:
            print(details, file=sys.stderr, flush=True)


def _parse_load(args: argparse.Namespace) -> tuple[list[Scenario], list[Comparison]]:
    """The scenarios and comparisons asked for, once every size, pace and layout option
    is checked; a :class:`~atomickafka.errors.ConfigError` names the first one the suite
    cannot run."""
    from atomickafka.evaluation.load.destinations import parse_topic_counts  # noqa: PLC0415
    from atomickafka.evaluation.load.scenarios import parse_scenarios  # noqa: PLC0415
    from atomickafka.evaluation.load.variants import parse_comparisons  # noqa: PLC0415

    scenarios = parse_scenarios(args.scenarios)
    comparisons = parse_comparisons(args.compare)
    args.topic_counts = parse_topic_counts(args.many_topics)
    for name in ("messages_per_client", "clients", "topics", "partitions"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    if args.record_size < 0:
        raise ConfigError("--record-size must be >= 0")
    if args.pace_ms < 0 or args.window_s <= 0 or args.stall_timeout_s <= 0:
        raise ConfigError("--pace-ms must be >= 0, --window-s and --stall-timeout-s > 0")
    if args.partitions > 1 and args.layout != Layout.SPLIT.value:
        raise ConfigError("--partitions needs the split layout")
    return scenarios, comparisons


def _check_baselines(args: argparse.Namespace, comparisons: list[Comparison]) -> None:
    """:class:`~atomickafka.errors.ConfigError` when a compared baseline cannot reach
    Kafka with the command's settings (before any run starts)."""
    from atomickafka.evaluation.load.baselines import check_reachable  # noqa: PLC0415
    from atomickafka.evaluation.load.variants import Variant, variants_for  # noqa: PLC0415

    primary = Variant.atomickafka(args.algorithm, args.layout)
    variants = variants_for(primary, comparisons)
    check_reachable(
        [v.system.baseline for v in variants if v.system.baseline], connection(args, "")
    )


def _settings(
    args: argparse.Namespace,
    where: Connection,
    scenarios: list[Scenario],
    comparisons: list[Comparison],
) -> SuiteSettings:
    """The suite's settings from the checked command line, its runs reaching Kafka
    through ``where`` (needs the eval extra)."""
    from atomickafka.evaluation.suite.command import SuiteSettings  # noqa: PLC0415

    return SuiteSettings(
        scenarios=tuple(scenarios),
        out=args.out or Path("eval", "out", datetime.now(UTC).strftime("%Y%m%d-%H%M%S")),
        connection=where,
        messages_per_client=args.messages_per_client,
        clients=args.clients,
        topics=args.topics,
        pace_ms=args.pace_ms,
        algorithm=Algorithm(args.algorithm),
        layout=Layout(args.layout),
        partitions=args.partitions,
        comparisons=tuple(comparisons),
        window_s=args.window_s,
        spark_master=args.spark_master,
        stall_timeout_s=args.stall_timeout_s,
        warmup=not args.no_warmup,
        record_size=args.record_size,
        fanout=args.fanout,
        seed=args.seed,
        secret_file=None if args.secret_file is None else str(args.secret_file),
        control_log=args.control_log,
        topics_per_process=args.topics_per_process,
        topic_counts=args.topic_counts,
    )


def _print_outcome(outcome: SuiteOutcome) -> None:
    """Each measured run's throughput and latency, then every failure (on stderr)."""
    for result in outcome.results:
        info, m = result.info, result.metrics
        if m is not None:
            lat = m.latency.get("all")
            p99 = f"{lat.p99:,.0f}" if lat else "-"
            print(
                f"{info.scenario:<10} {info.variant:<18} {m.messages_per_s:>9,.0f} msg/s  "
                f"run time {m.run_time_s:>7.2f} s  p99 {p99:>6} ms  {info.verdict}"
            )
    failed = [r.info for r in outcome.results if not r.info.ok]
    for info in failed:
        print(f"FAILED: {info.scenario} {info.variant}: {info.verdict}", file=sys.stderr)
    if outcome.metrics_error:
        print(f"FAILED: metrics job: {outcome.metrics_error}", file=sys.stderr)
    print(f"total wall time {outcome.wall_s / 60:.1f} min")
    print(f"report: {outcome.report}")


def _run(args: argparse.Namespace) -> int:
    if args.print_job:
        from atomickafka.evaluation.suite.spark import job_path  # noqa: PLC0415

        print(job_path())
        return 0
    try:
        scenarios, comparisons = _parse_load(args)
        _check_baselines(args, comparisons)
    except ValueError as exc:
        print(f"atomickafka eval: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from atomickafka.evaluation.suite.command import run_suite  # noqa: PLC0415
    except ImportError as exc:
        print(
            f"atomickafka eval: error: {exc.name or exc} is missing; install the eval extra "
            "(deploy/bootstrap.sh eval)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    configure_logging(args.log_level)
    embedded = args.bootstrap_server is None
    if not embedded:
        reach(args)  # a wrong --bootstrap-server: one line, before any node starts
    started = embedded and running_bootstrap() is None
    bootstrap = resolve_bootstrap(args.bootstrap_server)
    settings = _settings(args, connection(args, bootstrap), scenarios, comparisons)
    if embedded:
        how = "started" if started else "reused the running"
        print(f"eval: {how} embedded broker at {bootstrap}", flush=True)
    print(f"eval: {len(scenarios)} scenarios on {bootstrap}; report in {settings.out}", flush=True)
    outcome = run_suite(settings, embedded=embedded, on_run=_announce)
    _print_outcome(outcome)
    if started:
        print(
            f"the embedded broker started for this suite keeps running at {bootstrap}; "
            "stop it with: atomickafka broker stop"
        )
    return 0 if outcome.ok else EXIT_FAILED
