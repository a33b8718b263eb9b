"""``atomickafka check SENT.jsonl DELIVERIES...``: check delivery logs offline.

``SENT.jsonl`` holds one JSON object per line with ``messageID``, ``topic`` (the
destination list) and optionally ``value``. Each DELIVERIES file holds Delivery records
as ``atomickafka tail --json`` prints them; the delivering topic is the record's
``deliveredAt`` field or else the file name (``T1.jsonl``). The exit status is 0 when
integrity, validity and total order hold, 1 on a violation and 2 on unusable input.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from atomickafka.verify.checker import CheckInputError, check_files

__all__ = ["register", "run"]

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_BAD_INPUT = 2

_DESCRIPTION = """\
Check what the topics delivered against what the clients sent: integrity (nothing
delivered twice, invented, or at a non-destination), validity (everything delivered
at every destination; skipped with --prefix) and total order (every two topics agree
on their common messages, and the per-topic orders have no cycle).

SENT.jsonl: one JSON object per line with messageID, topic (destination list) and
optionally value. DELIVERIES: JSON lines as 'atomickafka tail --json' prints them; the
delivering topic is the record's deliveredAt field or else the file name (T1.jsonl).

Exit status: 0 ok, 1 violation, 2 bad input."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``check`` sub-command to ``subparsers``."""
    parser = subparsers.add_parser(
        "check",
        help="check delivery logs for integrity, validity and total order",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sent", metavar="SENT.jsonl", help="what the clients sent")
    parser.add_argument(
        "deliveries",
        metavar="DELIVERIES",
        nargs="+",
        help="delivery logs (JSON lines; topic from 'deliveredAt' or the file name)",
    )
    parser.add_argument(
        "--prefix",
        dest="complete",
        action="store_false",
        help="the system is still running: do not require every message to be delivered",
    )
    parser.add_argument(
        "--show",
        type=int,
        default=10,
        metavar="N",
        help="print at most N violations (default 10)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the check; print a summary; return 0 (ok), 1 (violation) or 2 (bad input)."""
    try:
        report = check_files(
            args.sent,
            args.deliveries,
            complete=args.complete,
            max_violations=max(args.show, 1),
        )
    except CheckInputError as exc:
        print(f"atomickafka check: bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(report.summary(limit=max(args.show, 1)))
    return EXIT_OK if report.ok else EXIT_VIOLATION
