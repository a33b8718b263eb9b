"""``atomickafka bench``: AtomicKafka vs a bare Kafka pipe and a single sequencer on the
same broker, with what each costs per message."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
from tqdm import tqdm

from atomickafka.cli.options import (
    add_bootstrap,
    add_delivery_mode,
    add_load_shape,
    add_overrides,
    connection,
    guarded,
    reach,
    resolve_bootstrap,
)
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.kafka.topics import Layout

if TYPE_CHECKING:
    from atomickafka.evaluation.bench.command import BenchResult


def register(subparsers: Any) -> None:
    """Add the ``bench`` sub-command."""
    parser = subparsers.add_parser(
        "bench",
        help="measure AtomicKafka against a bare Kafka pipe and a single sequencer",
    )
    add_bootstrap(parser, local_fallback=True)
    add_overrides(parser)
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
    parser.add_argument("--json", dest="json_out", default=None, help="also write results here")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up pass")
    parser.add_argument(
        "--no-sequencer", action="store_true", help="skip the single-sequencer scenarios"
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
    parser.set_defaults(func=guarded("bench", _run))


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
    """p50 / p99 / p99.9 per hop class at each paced rate."""
    from atomickafka.evaluation.bench.command import HOP_CLASSES  # noqa: PLC0415

    paced = [r for r in results if r.rate is not None]
    tags = list(dict.fromkeys(r.name.split("@", 1)[1] for r in paced if "@" in r.name))
    if not tags:
        return []
    rows = []
    for tag in tags:
        runs = [r for r in paced if r.name.endswith(f"@{tag}")]
        rate = runs[0].rate or 0.0
        for label in HOP_CLASSES:
            found = next((r.classes[label] for r in runs if label in r.classes), None)
            if found is None:
                continue
            rows.append(
                [
                    f"{rate:,.0f} msg/s (@{tag})",
                    label,
                    f"{found.count:,}",
                    f"{found.p50_ms:.1f}",
                    f"{found.p99_ms:.1f}",
                    f"{found.p999_ms:.1f}",
                ]
            )
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


def _cost_sections(results: Sequence[BenchResult]) -> list[str]:
    """The cost tables: CPU per message by role, records and bytes by type, and the
    projection with one core per process, AtomicKafka beside the sequencer."""
    from atomickafka.evaluation.cost.accounting import (  # noqa: PLC0415
        BROKER_FORMULA,
        PROJECTION_FORMULA,
        cost_table,
        projection_table,
        traffic_table,
    )

    costs = [(r.name, r.cost) for r in results if r.cost is not None]
    lines = ["", "CPU-µs per delivered message, by role (CPU time from the OS over each"]
    lines += ["scenario's measured window, from the first send to the last delivery):"]
    lines += _text_table(*cost_table(costs))
    lines += ["", "Records and value bytes written per delivered message, by type:"]
    lines += _text_table(*traffic_table(costs))
    by_name = dict(costs)
    shares = []
    for r in results:
        if r.name.startswith("amcast-") and "@" not in r.name:
            share = r.name.removeprefix("amcast-")
            seq = by_name.get(f"seq-{share.split('[', 1)[0]}")
            shares.append((share, by_name.get(r.name), seq, by_name.get("kafka")))
    lines += ["", "Projected capacity with one core per process (a projection, not a measurement):"]
    lines += [f"  {PROJECTION_FORMULA};", f"  {BROKER_FORMULA}."]
    lines += _text_table(*projection_table(shares))
    missing = sorted({p.name for _, c in costs for p in c.unmeasured})
    if missing:
        lines.append(f"(not measured over a whole window: {', '.join(missing)})")
    if not any(p.role == "broker" for _, c in costs for p in c.processes):
        lines.append("(the broker is not on this machine, or not found: its CPU is not counted)")
    return lines


def _run(args: argparse.Namespace) -> int:
    # imported here: only this command needs the bench (and the client it drives)
    from atomickafka.evaluation.bench.command import BenchSetup, run_bench  # noqa: PLC0415

    if args.bootstrap_server is not None:
        reach(args)  # a wrong --bootstrap-server: one line, before any node starts
    where = connection(args, resolve_bootstrap(args.bootstrap_server))
    shares = [int(x) / 100 for x in args.shares.split(",") if x.strip()]
    formats = [f.strip() for f in args.delivery_format.split(",") if f.strip()]
    if not formats or any(f not in ("raw", "json") for f in formats):
        print(
            f"--delivery-format: raw, json or raw,json, not {args.delivery_format!r}",
            file=sys.stderr,
        )
        return 2
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
    print(
        f"{'scenario':<20} {'msgs':>7} {'seconds':>8} {'msg/s':>10} {'records/s':>10} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>8} {'mc p99':>9} {'vs kafka':>6}"
    )
    baseline: list[BenchResult] = []
    paced_rates = 2 if args.low_rate else 1
    per_share = len(formats) + (0 if args.no_sequencer else 1)
    scenarios = 1 + len(shares) * per_share + 3 * paced_rates + 1
    # a bar on a terminal only (disable=None): the rows themselves are the record
    progress = tqdm(total=scenarios, unit="scenario", leave=False, disable=None)

    def show(result: BenchResult) -> None:
        if not baseline:
            baseline.append(result)
        progress.write(_row(result, baseline[0] if result is not baseline[0] else None))
        progress.update()

    results = run_bench(
        BenchSetup(
            where,
            Algorithm(args.algorithm),
            Layout(args.layout),
            args.partitions,
            exactly_once=args.exactly_once,
            delivery_format=formats[0],
            control_log=args.control_log,
        ),
        messages=args.messages,
        record_size=args.record_size,
        shares=shares,
        warmup=not args.no_warmup,
        paced_rate=args.paced_rate,
        low_rate=args.low_rate or None,
        formats=formats,
        topics=args.topics,
        fanout=fanout,
        seed=args.seed,
        sequencer=not args.no_sequencer,
        on_result=show,
    )
    progress.close()
    if args.json_out:
        with open(args.json_out, "wb") as fh:
            fh.write(orjson.dumps([r.to_dict() for r in results], option=orjson.OPT_INDENT_2))
    print(
        "\nRows without @: sent as fast as possible, so msg/s is capacity and latency is\n"
        "queueing in the burst. @1000 rows: paced at 1,000 msg/s; @half rows: at half\n"
        "the capacity of the last multicast run; latency there is what a message sees\n"
        "below saturation; the @2x row: offered twice that capacity, the sender held\n"
        "back by the nodes' back-pressure for the time shown. kafka-x3: three bare hops\n"
        "through two relaying consumer-\n"
        "producers (the floor of a three-hop path). [json] rows: the nodes write JSON\n"
        "envelopes. mc p99: p99 of multicast messages, sent to delivered at all\n"
        "destinations. seq rows: the single sequencer (one partition, one fan-out\n"
        "process). load: the machine's 1-minute load average as the run ended."
    )
    print("\n".join(_hop_section(results)))
    print("\n".join(_cost_sections(results)))
    ok = all(r.delivered_ok for r in results)
    if not ok:
        print("some scenario did not deliver every message in time", file=sys.stderr)
    return 0 if ok else 1
