"""``atomickafka soak --nemesis``: the network-fault soak (docs/soak.md, "Network faults").

Starts three brokers, node hosts and a client host in network namespaces of their own
(root needed), sends at a steady rate while a seeded schedule of faults runs, heals,
checks, and writes ``results.json``, ``summary.md`` and ``timeline.png`` to ``--out``.
The soak's other phases (memory, recovery, takeover, modes) are ``eval/soak.py``.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from atomickafka.cli.options import fail, guarded

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``soak`` sub-command."""
    parser = subparsers.add_parser(
        "soak",
        help="run the network-fault soak: partitions, delays, pauses, kills (--nemesis)",
    )
    parser.add_argument(
        "--nemesis",
        action="store_true",
        help="inject a seeded schedule of faults into a deployment spread over network "
        "namespaces (needs root); the only form of this command (the other soak phases are "
        "eval/soak.py)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="how long faults are injected (default 0: the shortest schedule with one "
        "fault of every kind, about two minutes)",
    )
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    parser.add_argument("--rate", type=float, default=30.0, help="messages/s sent (default 30)")
    parser.add_argument(
        "--node-hosts", type=int, choices=(2, 3), default=2, help="node hosts (default 2)"
    )
    parser.add_argument(
        "--takeover-after",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="the nodes' lease (default 3)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default eval/results/nemesis-<UTC time>"
    )
    parser.set_defaults(func=guarded("soak", _run))


def _run(args: argparse.Namespace) -> int:
    if not args.nemesis:
        return fail("soak", "give --nemesis (the other soak phases are eval/soak.py)")
    from atomickafka.evaluation.nemesis.command import (  # noqa: PLC0415 (heavy imports)
        NemesisSettings,
        run_nemesis,
    )

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path("eval") / "results" / f"nemesis-{stamp}"
    settings = NemesisSettings(
        out=out.resolve(),
        seconds=args.seconds,
        seed=args.seed,
        rate=args.rate,
        node_hosts=args.node_hosts,
        lease_s=args.takeover_after,
        log_level="info",
    )
    results = run_nemesis(settings)
    for verdict in results["checks"]:
        mark = "ok" if verdict["ok"] else "FAILED"
        print(f"{verdict['name']}: {mark} -- {verdict['detail']}")
    print(settings.out)
    sys.stdout.flush()
    return 0 if results["ok"] else 1
