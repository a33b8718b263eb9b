"""``atomickafka status``: each node's pending count and oldest pending age."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson

from atomickafka.cli.options import add_bootstrap, add_overrides
from atomickafka.node.status_reader import read_statuses


def register(subparsers: Any) -> None:
    """Add the ``status`` sub-command."""
    parser = subparsers.add_parser("status", help="show every node's pending work and rates")
    add_bootstrap(parser)
    add_overrides(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per node")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    statuses = read_statuses(args.bootstrap_server, args.overrides)
    if not statuses:
        print("no node has published a status yet", file=sys.stderr)
        return 1
    now = time.time()
    if args.json:
        for topic in sorted(statuses):
            entry = statuses[topic].to_dict() | {
                "status_age_s": round(now - statuses[topic].time, 1)
            }
            print(orjson.dumps(entry).decode())
        return 0
    header = f"{'TOPIC':<20} {'PENDING':>8} {'OLDEST AGE':>11} {'DELIV/S':>9} {'IN/S':>9} "
    print(header + f"{'DLQ':>5}  SEEN")
    for topic in sorted(statuses):
        s = statuses[topic]
        age = "-" if s.oldest_pending_age_s is None else f"{s.oldest_pending_age_s:.2f}s"
        seen = now - s.time
        state = "replaying" if s.replaying else ("stale" if seen > 10 else "live")
        print(
            f"{topic:<20} {s.pending:>8} {age:>11} {s.deliveries_per_s:>9.1f} "
            f"{s.records_in_per_s:>9.1f} {s.dead_letters:>5}  {seen:.0f}s ago ({state})"
        )
    return 0
