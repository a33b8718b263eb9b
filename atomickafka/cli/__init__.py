"""The ``atomickafka`` command line.

Each sub-command lives in its own module and exposes ``register(subparsers)``; this
module assembles them and runs one: it reads the configuration file and the
environment into the command's options (:mod:`atomickafka.config`: flags >
environment > file > defaults), merges the librdkafka settings, refuses the ones that
would break the guarantees, and only then runs the command. Options follow the Kafka
tools' conventions (``--bootstrap-server``, ``--topic``, ``--from-beginning``,
``-X key=value``, ``--command-config``). Every ``--help`` lists the defaults.

Exit status: 0 done, 1 the work failed (Kafka unreachable, something unhealthy), 2
bad usage or settings (one line on stderr), 130 interrupted. A reader that goes away
(``| head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Final, NoReturn

from atomickafka import __version__
from atomickafka.cli.options import fail
from atomickafka.config import (
    ConfigFile,
    ResolvedConfig,
    apply_to_parser,
    command_options,
    config_path,
    find_command,
    load_config_file,
    resolve_kafka,
)
from atomickafka.config.commands import Origin
from atomickafka.core import core_form
from atomickafka.errors import ConfigError
from atomickafka.kafka.guarantees import refuse_unsafe
from atomickafka.kafka.properties import secret_values
from atomickafka.logs import configure_logging, hide_in_logs

__all__ = ["build_parser", "main"]

# Modules under atomickafka.cli that contribute sub-commands, in help order.
_COMMAND_MODULES = (
    "broker_cmd",
    "node_cmd",
    "send_cmd",
    "tail_cmd",
    "status_cmd",
    "topics_cmd",
    "doctor_cmd",
    "check_cmd",
    "audit_cmd",
    "bench_cmd",
    "demo_cmd",
    "eval_cmd",
    "soak_cmd",
)
#: Commands that run nodes: every guarantee rule applies to their settings.
_RUNS_NODES: Final = frozenset({"node", "cluster", "eval", "bench", "demo"})
#: Commands that set up their own (JSON) logging.
_OWN_LOGGING: Final = frozenset({"node", "cluster", "eval"})


class _Parser(argparse.ArgumentParser):
    """Reports a bad option as one line, ``atomickafka CMD: error: ...``, and status 2
    (argparse would print the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        hint = ""
        if "--bootstrap-server" in message and "required" in message:
            hint = "; or set KAFKA_BOOTSTRAP_SERVERS, or bootstrap_server in a --config file"
        self.exit(2, f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless its help already says it or it has none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default in (None, False, argparse.SUPPRESS, {}, [])
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return text
        return text + " (default: %(default)s)"


class _RawHelpFormatter(_HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`_HelpFormatter` that keeps a description's line breaks."""


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict(action.choices).values():
                sub.formatter_class = (
                    _RawHelpFormatter
                    if issubclass(sub.formatter_class, argparse.RawDescriptionHelpFormatter)
                    else _HelpFormatter
                )
                out += _leaves(sub) or [sub]
    return out


def _add_common(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--print-config`` and ``--log-level`` on every command."""
    dests = {a.dest for a in parser._actions}
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="TOML configuration file (or ATOMICKAFKA_CONFIG); flags > environment > file",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the settings this command would run with, and where each comes from "
        "(secrets masked), then exit",
    )
    if "log_level" not in dests:
        parser.add_argument(
            "--log-level",
            choices=("debug", "info", "warning", "error"),
            default="warning",
            help="log level (librdkafka's own lines show at debug)",
        )


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every available sub-command registered."""
    parser = _Parser(
        prog="atomickafka",
        description="Atomic multicast over Apache Kafka: one message, many topics, one order.",
        epilog="Settings: flags > environment (ATOMICKAFKA_<OPTION>, KAFKA_BOOTSTRAP_SERVERS, "
        "ATOMICKAFKA_X_<KEY>) > the --config file > defaults.",
    )
    parser.add_argument(
        "--version", action="version", version=f"atomickafka {__version__} (core: {core_form()})"
    )
    parser.add_argument("--config", metavar="PATH", default=None, help="TOML configuration file")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(f"atomickafka.cli.{name}").register(subparsers)
    for leaf in _leaves(parser):
        _add_common(leaf)
    return parser


def _prepare(
    parser: argparse.ArgumentParser,
    command: str,
    sub: argparse.ArgumentParser | None,
    argv: Sequence[str],
    env: dict[str, str],
) -> tuple[ConfigFile | None, dict[str, Origin]]:
    """Read the configuration file and the environment into the options of the command
    ``argv`` runs, before argparse parses it."""
    path = config_path(argv, env)
    config = load_config_file(path, command_options(parser)) if path else None
    origins = apply_to_parser(sub, command, config, env) if sub is not None else {}
    return config, origins


def _settle(
    command: str,
    sub: argparse.ArgumentParser,
    args: argparse.Namespace,
    argv: Sequence[str],
    config: ConfigFile | None,
    env: dict[str, str],
    origins: dict[str, Origin],
) -> ResolvedConfig:
    """Merge the librdkafka settings into ``args.overrides``, hide their secrets from
    logs, refuse unsafe ones and check the secret file; return what was resolved."""
    kafka: tuple[dict[str, str], dict[str, str]] = ({}, {})
    if hasattr(args, "overrides"):
        kafka = resolve_kafka(sub, args, argv, config, env, origins)
        args.overrides = kafka[0]
        hide_in_logs(secret_values(kafka[0]))
        refuse_unsafe(kafka[0], node=command in _RUNS_NODES)
    secret_file = getattr(args, "secret_file", None)
    if secret_file is not None:
        try:
            if not secret_file.expanduser().read_bytes().strip():
                raise ConfigError(f"secret file {secret_file} is empty")
        except OSError as exc:
            raise ConfigError(f"secret file {secret_file}: {exc.strerror or exc}") from None
    return ResolvedConfig.of(command, sub, args, argv, origins, kafka)


def _quiet_stdout() -> None:
    """After a reader went away: send what is left to /dev/null, so that the flush at
    exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # no real file descriptor (tests capturing output)


def _run(argv: list[str]) -> int:
    parser = build_parser()
    env = dict(os.environ)
    command, sub = find_command(parser, argv)
    try:
        config, origins = _prepare(parser, command, sub, argv, env)
    except ConfigError as exc:
        return fail(command, exc)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad option (2) is a status; --help (0) still exits
        if exc.code == 2:
            return 2
        raise
    try:
        resolved = _settle(command, sub, args, argv, config, env, origins) if sub else None
    except ConfigError as exc:
        return fail(command, exc)
    if resolved is not None and getattr(args, "print_config", False):
        print(resolved.dump())
        return 0
    if command not in _OWN_LOGGING:
        level = getattr(args, "log_level", "warning")
        configure_logging(
            level, json=False, librdkafka_level="debug" if level == "debug" else "critical"
        )
    status: int = args.func(args)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``atomickafka`` console script; returns the exit status."""
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `atomickafka ... | head`: the reader has what it wanted
        _quiet_stdout()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
