"""``atomickafka bench``: AtomicKafka vs a bare Kafka pipe and the sequencer baselines
on the same broker, with what each costs per message."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from tqdm import tqdm

from atomickafka.cli.options import (
    add_bootstrap,
    add_commit_interval,
    add_delivery_mode,
    add_load_shape,
    add_overrides,
    add_topics_per_process,
    connection,
    guarded,
    reach,
    resolve_bootstrap,
)
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.core.protocols import CARRIER, NOTIFY_VALUES
from atomickafka.errors import ConfigError
from atomickafka.kafka.topics import Layout
from atomickafka.node.config import DEFAULT_COMMIT_INTERVAL_S

if TYPE_CHECKING:
    from atomickafka.evaluation.bench.command import BenchResult, BenchSetup


def register(subparsers: Any) -> None:
    """Add the ``bench`` sub-command."""
    parser = subparsers.add_parser(
        "bench",
        help="measure AtomicKafka against a bare Kafka pipe and the sequencer baselines",
    )
    add_bootstrap(parser, local_fallback=True)
    add_overrides(parser)
    _add_scenario_options(parser)
    _add_node_mode_options(parser)
    _add_run_options(parser)
    _add_workload_options(parser)
    parser.set_defaults(func=guarded("bench", _run))


def _add_scenario_options(parser: argparse.ArgumentParser) -> None:
    """The load and the deployment of every scenario: messages, shape, topics, protocol."""
    parser.add_argument("--messages", type=int, default=20_000, help="messages per scenario")
    add_load_shape(parser, record_size=200)
    parser.add_argument(
        "--shares", default="0,10,50", help="multicast percentages to run, e.g. 0,10,50"
    )
    parser.add_argument("--topics", type=int, default=5, help="topics (one node each)")
    parser.add_argument(
        "--algorithm",
        choices=[a.value for a in Algorithm],
        default=DEFAULT_ALGORITHM.value,
        help="the nodes' protocol",
    )
    parser.add_argument("--partitions", type=int, default=1, help="partition layers per topic")
    parser.add_argument(
        "--layout", choices=[x.value for x in Layout], default=Layout.SPLIT.value, help="layout"
    )


def _add_node_mode_options(parser: argparse.ArgumentParser) -> None:
    """How the nodes run: exactly-once or at-least-once, with control logs or not."""
    add_delivery_mode(
        parser,
        "run the nodes in exactly-once mode, the default (as cluster)",
        "run the nodes in at-least-once mode (as cluster --at-least-once; default: --exactly-once)",
    )
    parser.add_argument(
        "--control-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the nodes with control logs of their own, the default (as node; "
        "--no-control-log: one log each)",
    )
    parser.add_argument(
        "--notify-values",
        choices=list(NOTIFY_VALUES),
        default=CARRIER,
        help="what the nodes' direct Notifies carry (as node): carrier, the default, or every",
    )
    add_commit_interval(parser, DEFAULT_COMMIT_INTERVAL_S, "the nodes (as node)")
    add_topics_per_process(parser, "the bench's")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run's output file, its warm-up and the sequencer baselines beside it."""
    parser.add_argument("--json", dest="json_out", default=None, help="also write results here")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up pass")
    parser.add_argument(
        "--baselines",
        default=None,
        metavar="seq-alo|seq-eos|streams[,...]",
        help="the sequencer baselines beside AtomicKafka (default: those with its promise: "
        "seq-eos,streams exactly-once, seq-alo with --at-least-once)",
    )
    parser.add_argument("--no-baselines", action="store_true", help="run no sequencer baseline")
    parser.add_argument(  # its old name
        "--no-sequencer", dest="no_baselines", action="store_true", help=argparse.SUPPRESS
    )


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    """The workloads (standard, many-topic), their plot, pacing and delivery formats."""
    parser.add_argument(
        "--workload",
        default="standard",
        metavar="standard|many[,...]",
        help="standard: multicast shares to every topic (--shares), the paced runs; many: "
        "the many-topic workload (90 %% to one topic, 10 %% to 2-3; a skewed variant with "
        "hot topics) on --many-topics topics, unpaced and at --low-rate (default: standard)",
    )
    parser.add_argument(
        "--many-topics", default="5,10,20", help="topic counts of the many-topic workload"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="write the plot of projected capacity against the number of topics here "
        "(PNG; with --workload many)",
    )
    parser.add_argument(
        "--paced-rate",
        type=float,
        default=None,
        help="msg/s of the paced (@half) runs (default: half the last multicast capacity)",
    )
    parser.add_argument(
        "--low-rate",
        type=float,
        default=1000.0,
        help="msg/s of the first paced runs (@1000; 0: skip them)",
    )
    parser.add_argument(
        "--delivery-format",
        default="json",
        help="the nodes' delivery format: raw, json, or both (raw,json: the unpaced "
        "multicast runs once per format, the first for the rest)",
    )


def _row(r: BenchResult, baseline: BenchResult | None) -> str:
    ratio = f"{r.messages_per_s / baseline.messages_per_s:6.3f}" if baseline else "     -"
    mp99 = "-" if r.multicast_p99_ms is None else f"{r.multicast_p99_ms:.1f}"
    p999 = "-" if r.p999_ms is None else f"{r.p999_ms:.1f}"
    flag = "" if r.delivered_ok else "  INCOMPLETE"
    load = "" if r.load_avg is None else f"  load {r.load_avg[0]:.1f}"
    held = f"  held back {r.held_back_s:.1f} s" if r.held_back_s else ""
    return (
        f"{r.name:<20} {r.messages:>7} {r.seconds:>8.2f} {r.messages_per_s:>10.1f} "
        f"{r.records_per_s:>10.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {p999:>8} {mp99:>9} "
        f"{ratio}{load}{held}{flag}"
    )


def _hop_section(results: Sequence[BenchResult]) -> list[str]:
    """p50 / p99 / p99.9 per hop class of every paced run (the bare hops, AtomicKafka's
    and each baseline's single-destination and multicast messages)."""
    rows = []
    for r in results:
        if r.rate is None:
            continue
        for label, found in r.classes.items():
            rows.append(
                [
                    f"{r.rate:,.0f} msg/s ({r.name})",
                    label,
                    f"{found.count:,}",
                    f"{found.p50_ms:.1f}",
                    f"{found.p99_ms:.1f}",
                    f"{found.p999_ms:.1f}",
                ]
            )
    if not rows:
        return []
    headers = ["paced at", "hop class", "messages", "p50 ms", "p99 ms", "p99.9 ms"]
    title = "Latency per hop class (send to delivery at every destination):"
    return ["", title, *_text_table(headers, rows)]


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns aligned, the first to the left, the others to the right."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        out = [first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
        return "  " + "  ".join(out)

    return [line(headers), *(line(r) for r in rows)]


def _projection_rows(results: Sequence[BenchResult], baselines: Sequence[str]) -> list[Any]:
    """Per unpaced AtomicKafka row (a share, a many-topic load): its cost beside each
    baseline's of the same load, and the bare pipe's."""
    by_name = {r.name: r.cost for r in results if r.cost is not None}
    rows = []
    for r in results:
        if not r.name.startswith("amcast-") or "@" in r.name or r.cost is None:
            continue
        load = r.name.removeprefix("amcast-")
        plain = load.split("[", 1)[0]
        theirs = {b: by_name.get(f"{b}-{plain}") for b in baselines}
        rows.append((load, r.cost, theirs, by_name.get("kafka")))
    return rows


def _cost_sections(results: Sequence[BenchResult], baselines: Sequence[str]) -> list[str]:
    """The cost tables: CPU per message by role, records and bytes by type, and the
    projection with one core per process, AtomicKafka beside each baseline."""
    from atomickafka.evaluation.cost.accounting import (  # noqa: PLC0415
        BROKER_FORMULA,
        PROJECTION_FORMULA,
        cost_table,
        projection_table,
        traffic_table,
    )
    from atomickafka.evaluation.load.baselines import Baseline  # noqa: PLC0415

    costs = [(r.name, r.cost) for r in results if r.cost is not None]
    lines = ["", "CPU-µs per delivered message, by role (CPU time from the OS over each"]
    lines += ["scenario's measured window, from the first send to the last delivery):"]
    lines += _text_table(*cost_table(costs))
    lines += ["", "Records and value bytes written per delivered message, by type:"]
    lines += _text_table(*traffic_table(costs))
    lines += ["", "Projected capacity with one core per process (a projection, not a measurement):"]
    lines += [f"  {PROJECTION_FORMULA};", f"  {BROKER_FORMULA}."]
    lines += _text_table(*projection_table(_projection_rows(results, baselines), baselines))
    for name in baselines:
        lines.append(f"  {name}: {Baseline(name).promise}")
    missing = sorted({p.name for _, c in costs for p in c.unmeasured})
    if missing:
        lines.append(f"(not measured over a whole window: {', '.join(missing)})")
    if not any(p.role == "broker" for _, c in costs for p in c.processes):
        lines.append("(the broker is not on this machine, or not found: its CPU is not counted)")
    return lines


def _options(args: argparse.Namespace) -> tuple[list[float], list[str], Any, set[str], Any]:
    """The shares, delivery formats, baselines, workloads and topic counts asked for
    (:class:`~atomickafka.errors.ConfigError` for the first that is wrong)."""
    from atomickafka.evaluation.load.baselines import (  # noqa: PLC0415
        baselines_for,
        parse_baselines,
    )
    from atomickafka.evaluation.load.destinations import parse_topic_counts  # noqa: PLC0415

    try:
        shares = [int(x) / 100 for x in args.shares.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--shares: whole percentages, e.g. 0,10,50, not {args.shares!r}"
        ) from None
    formats = [f.strip() for f in args.delivery_format.split(",") if f.strip()]
    if not formats or any(f not in ("raw", "json") for f in formats):
        raise ConfigError(f"--delivery-format: raw, json or raw,json, not {args.delivery_format!r}")
    if args.no_baselines:
        baselines: Any = ()
    elif args.baselines is None:
        baselines = baselines_for(args.exactly_once)
    else:
        baselines = parse_baselines(args.baselines)
    workloads = {w.strip() for w in args.workload.split(",") if w.strip()}
    if not workloads or workloads - {"standard", "many"}:
        raise ConfigError(f"--workload: standard, many or standard,many, not {args.workload!r}")
    if args.plot is not None and "many" not in workloads:
        raise ConfigError("--plot draws the many-topic workload: add --workload many")
    if "standard" in workloads and not shares:
        raise ConfigError("--shares: give at least one multicast percentage")
    return shares, formats, baselines, workloads, parse_topic_counts(args.many_topics)


def _announce(
    args: argparse.Namespace,
    formats: Sequence[str],
    baselines: Sequence[Any],
    workloads: set[str],
    counts: Sequence[int],
) -> None:
    """What the bench runs, said before its rows: the load, every baseline's promise."""
    from atomickafka.evaluation.load.destinations import HOT, MANY  # noqa: PLC0415

    fanout = args.fanout
    shape = "every topic" if fanout is None else f"{fanout[0]}-{fanout[1]} topics at random"
    mode = "exactly-once" if args.exactly_once else "at-least-once"
    if args.control_log:
        mode += " with control logs"
    print(
        f"{args.topics} topics, {args.record_size}-byte values, multicasts to {shape}, "
        f"{args.messages:,} messages per scenario, nodes {mode}, deliveries "
        f"{' and '.join(formats)}"
    )
    for baseline in baselines:
        print(f"baseline {baseline.value}: {baseline.promise}")
    if "many" in workloads:
        print(f"many-topic workload ({', '.join(map(str, counts))} topics): {MANY.describe()}")
        print(f"  hot-{max(counts)}: {HOT.describe()}")
    print(
        f"{'scenario':<20} {'msgs':>7} {'seconds':>8} {'msg/s':>10} {'records/s':>10} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>8} {'mc p99':>9} {'vs kafka':>6}"
    )


def _scenario_count(
    args: argparse.Namespace,
    shares: Sequence[float],
    formats: Sequence[str],
    baselines: int,
    workloads: set[str],
    counts: Sequence[int],
) -> int:
    """How many rows the bench will print (its progress bar's length)."""
    scenarios = 0
    if "standard" in workloads:
        paced_rates = 2 if args.low_rate else 1
        per_share = len(formats) + baselines
        scenarios += 1 + len(shares) * per_share + 3 * paced_rates + 1
        scenarios += baselines if args.low_rate else 0
    if "many" in workloads:
        scenarios += (len(counts) + 1 + (1 if args.low_rate else 0)) * (1 + baselines)
    return scenarios


def _run(args: argparse.Namespace) -> int:
    # imported here: only this command needs the bench (and the client it drives)
    from atomickafka.evaluation.bench.command import BenchSetup  # noqa: PLC0415
    from atomickafka.evaluation.load.baselines import check_reachable  # noqa: PLC0415

    try:
        shares, formats, baselines, workloads, counts = _options(args)
        check_reachable(baselines, connection(args, ""))
    except ConfigError as exc:
        print(f"atomickafka bench: error: {exc}", file=sys.stderr)
        return 2
    if args.bootstrap_server is not None:
        reach(args)  # a wrong --bootstrap-server: one line, before any node starts
    where = connection(args, resolve_bootstrap(args.bootstrap_server))
    _announce(args, formats, baselines, workloads, counts)
    baseline_row: list[BenchResult] = []
    scenarios = _scenario_count(args, shares, formats, len(baselines), workloads, counts)
    # a bar on a terminal only (disable=None): the rows themselves are the record
    progress = tqdm(total=scenarios, unit="scenario", leave=False, disable=None)

    def show(result: BenchResult) -> None:
        if not baseline_row and result.name == "kafka":
            baseline_row.append(result)
        bare = baseline_row[0] if baseline_row and result is not baseline_row[0] else None
        progress.write(_row(result, bare))
        progress.update()

    setup = BenchSetup(
        where,
        Algorithm(args.algorithm),
        Layout(args.layout),
        args.partitions,
        exactly_once=args.exactly_once,
        delivery_format=formats[0],
        control_log=args.control_log,
        notify_values=args.notify_values,
        commit_interval_s=args.commit_interval,
        topics_per_process=args.topics_per_process,
    )
    results = _run_workloads(args, setup, shares, formats, baselines, workloads, counts, show)
    progress.close()
    return _report(args, results, baselines)


def _run_workloads(
    args: argparse.Namespace,
    setup: BenchSetup,
    shares: Sequence[float],
    formats: Sequence[str],
    baselines: Any,
    workloads: set[str],
    counts: Sequence[int],
    show: Callable[[BenchResult], None],
) -> list[BenchResult]:
    """Run the standard workload, then the many-topic one, as asked; every row to show."""
    from atomickafka.evaluation.bench.command import (  # noqa: PLC0415
        run_bench,
        run_many_topics,
    )

    results: list[BenchResult] = []
    if "standard" in workloads:
        results += run_bench(
            setup,
            messages=args.messages,
            record_size=args.record_size,
            shares=shares,
            warmup=not args.no_warmup,
            paced_rate=args.paced_rate,
            low_rate=args.low_rate or None,
            formats=formats,
            topics=args.topics,
            fanout=args.fanout,
            seed=args.seed,
            baselines=baselines,
            on_result=show,
        )
    if "many" in workloads:
        results += run_many_topics(
            setup,
            topic_counts=counts,
            messages=args.messages,
            record_size=args.record_size,
            low_rate=args.low_rate or None,
            seed=args.seed,
            baselines=baselines,
            on_result=show,
            warmup=not args.no_warmup,
        )
    return results


def _report(args: argparse.Namespace, results: list[BenchResult], baselines: Any) -> int:
    """The JSON file, the legend, the hop and cost tables, the plot; 1 if a run fell short."""
    if args.json_out:
        with open(args.json_out, "wb") as fh:
            fh.write(orjson.dumps([r.to_dict() for r in results], option=orjson.OPT_INDENT_2))
    print(
        "\nRows without @: sent as fast as possible, so msg/s is capacity and latency is\n"
        "queueing in the burst. @1000 rows: paced at 1,000 msg/s; @half rows: at half\n"
        "the capacity of the last multicast run; latency there is what a message sees\n"
        "below saturation; the @2x row: offered twice that capacity, the sender held\n"
        "back by the nodes' back-pressure for the time shown. kafka-x3: three bare hops\n"
        "through two relaying consumer-producers (the floor of a three-hop path). [json]\n"
        "rows: the nodes write JSON envelopes. mc p99: p99 of multicast messages, sent to\n"
        "delivered at all destinations. seq-alo rows: the plain sequencer (one partition,\n"
        "one fan-out process; at-least-once, no recovery); seq-eos and streams rows: the\n"
        "exactly-once sequencers (transactional Python; Kafka Streams exactly_once_v2),\n"
        "read read_committed. many-N / hot-N rows: the many-topic workload on N topics.\n"
        "load: the machine's 1-minute load average as the run ended."
    )
    print("\n".join(_hop_section(results)))
    print("\n".join(_cost_sections(results, [b.value for b in baselines])))
    if args.plot is not None:
        print(f"plot: {_plot(results, [b.value for b in baselines], args.plot)}")
    ok = all(r.delivered_ok for r in results)
    if not ok:
        print("some scenario did not deliver every message in time", file=sys.stderr)
    return 0 if ok else 1


def _plot(results: Sequence[BenchResult], baselines: Sequence[str], path: Path) -> Path:
    """Projected (and measured) capacity against the topic count, the many mix's runs."""
    from atomickafka.evaluation.cost.projection_plot import (  # noqa: PLC0415
        TopicPoint,
        plot_projection_vs_topics,
    )
    from atomickafka.evaluation.load.destinations import MANY  # noqa: PLC0415

    lines: dict[str, list[TopicPoint]] = {}
    for system in ["amcast", *baselines]:
        label = "AtomicKafka" if system == "amcast" else system
        prefix = f"{system}-{MANY.name}-"
        for r in results:
            tail = r.name.removeprefix(prefix)
            if r.name.startswith(prefix) and tail.isdigit() and r.cost is not None:
                point = (int(tail), r.cost.projected_msgs_per_s, r.messages_per_s)
                lines.setdefault(label, []).append(point)
    return plot_projection_vs_topics(lines, path, f"{MANY.name}: {MANY.describe()}")
