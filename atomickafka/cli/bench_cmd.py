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
    add_load_shape,
    add_overrides,
    guarded,
    reach,
    resolve_bootstrap,
)
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.kafka.topics import Layout

if TYPE_CHECKING:
    from atomickafka.evaluation.bench import BenchResult


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
    parser.add_argument(
        "--at-least-once",
        dest="exactly_once",
        action="store_false",
        help="run the nodes in at-least-once mode (as cluster --at-least-once); "
        "default: exactly-once",
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
    parser.set_defaults(func=guarded("bench", _run))


def _row(r: BenchResult, baseline: BenchResult | None) -> str:
    ratio = f"{r.messages_per_s / baseline.messages_per_s:6.3f}" if baseline else "     -"
    mp99 = "-" if r.multicast_p99_ms is None else f"{r.multicast_p99_ms:.1f}"
    flag = "" if r.delivered_ok else "  INCOMPLETE"
    return (
        f"{r.name:<16} {r.messages:>7} {r.seconds:>8.2f} {r.messages_per_s:>10.1f} "
        f"{r.records_per_s:>10.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {mp99:>9} {ratio}{flag}"
    )


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
    from atomickafka.evaluation.cost import (  # noqa: PLC0415
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
            seq = by_name.get(f"seq-{share}")
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
    from atomickafka.evaluation.bench import BenchSetup, run_bench  # noqa: PLC0415

    if args.bootstrap_server is not None:
        reach(args)  # a wrong --bootstrap-server: one line, before any node starts
    bootstrap = resolve_bootstrap(args.bootstrap_server)
    shares = [int(x) / 100 for x in args.shares.split(",") if x.strip()]
    fanout = args.fanout
    shape = "every topic" if fanout is None else f"{fanout[0]}-{fanout[1]} topics at random"
    mode = "exactly-once" if args.exactly_once else "at-least-once"
    print(
        f"{args.topics} topics, {args.record_size}-byte values, multicasts to {shape}, "
        f"{args.messages:,} messages per scenario, nodes {mode}"
    )
    print(
        f"{'scenario':<16} {'msgs':>7} {'seconds':>8} {'msg/s':>10} {'records/s':>10} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'mc p99':>9} {'vs kafka':>6}"
    )
    baseline: list[BenchResult] = []
    scenarios = 3 + len(shares) * (1 if args.no_sequencer else 2)
    # a bar on a terminal only (disable=None): the rows themselves are the record
    progress = tqdm(total=scenarios, unit="scenario", leave=False, disable=None)

    def show(result: BenchResult) -> None:
        if not baseline:
            baseline.append(result)
        progress.write(_row(result, baseline[0] if result is not baseline[0] else None))
        progress.update()

    results = run_bench(
        bootstrap,
        messages=args.messages,
        record_size=args.record_size,
        shares=shares,
        setup=BenchSetup(
            Algorithm(args.algorithm),
            Layout(args.layout),
            args.partitions,
            args.overrides,
            exactly_once=args.exactly_once,
        ),
        warmup=not args.no_warmup,
        paced_rate=args.paced_rate,
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
        "queueing in the burst. @half rows: paced at half the capacity of the last\n"
        "multicast run; latency there is what a message sees below saturation.\n"
        "mc p99: p99 of multicast messages, sent to delivered at all destinations.\n"
        "seq rows: the single sequencer (one partition, one fan-out process)."
    )
    print("\n".join(_cost_sections(results)))
    ok = all(r.delivered_ok for r in results)
    if not ok:
        print("some scenario did not deliver every message in time", file=sys.stderr)
    return 0 if ok else 1
