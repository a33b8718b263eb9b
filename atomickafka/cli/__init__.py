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
from typing import NoReturn

from atomickafka import __version__

# Modules under atomickafka.cli that contribute sub-commands, in help order.
_COMMAND_MODULES = (
    "broker_cmd",
    "node_cmd",
    "send_cmd",
    "tail_cmd",
    "status_cmd",
    "check_cmd",
    "audit_cmd",
    "bench_cmd",
    "demo_cmd",
    "eval_cmd",
)


class _Parser(argparse.ArgumentParser):
    """Reports a bad option as one line, ``atomickafka CMD: error: ...``, and status 2
    (argparse would print the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every available sub-command registered."""
    parser = _Parser(
        prog="atomickafka",
        description="Atomic multicast over Apache Kafka: one message, many topics, one order.",
    )
    parser.add_argument("--version", action="version", version=f"atomickafka {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(f"atomickafka.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``atomickafka`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad option (2) is a status; --help (0) still exits
        if exc.code == 2:
            return 2
        raise
    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
