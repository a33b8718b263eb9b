"""The ``atomickafka`` command line.

Each sub-command lives in its own module and exposes ``register(subparsers)``; this
module only assembles them. Options follow the Kafka tools' conventions
(``--bootstrap-server``, ``--topic``, ``--from-beginning``, ``-X key=value``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules under atomickafka.cli that contribute sub-commands, in help order.
_COMMAND_MODULES = (
    "broker_cmd",
    "node_cmd",
    "send_cmd",
    "tail_cmd",
    "status_cmd",
    "check_cmd",
    "bench_cmd",
    "demo_cmd",
    "eval_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every available sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="atomickafka",
        description="Atomic multicast over Apache Kafka: one message, many topics, one order.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(f"atomickafka.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``atomickafka`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
