"""The options every command shares, spelled as the Kafka tools spell them.

- ``--bootstrap-server HOST:PORT[,...]`` (required, or optional where the embedded
  local broker is the fallback; ``KAFKA_BOOTSTRAP_SERVERS`` and the configuration file
  can give it too: :mod:`atomickafka.config`);
- ``-X key=value`` (repeatable): librdkafka settings passed through to the Kafka
  clients the command creates, ``--producer-property``/``--consumer-property``/
  ``--admin-property`` for one kind of client, ``--command-config PATH`` for a
  properties file; a malformed pair is one clear line and exit status 2;
- ``--topic`` and ``--to`` (destination lists), checked with the wire format's rules;
- ``--log-level``;
- the load's shape for ``bench`` and ``eval``: ``--record-size``, ``--fanout LO-HI``
  (each multicast's destination count, drawn at random) and ``--seed``.
- ``--secret-file``.

A command reaches Kafka through one :class:`~atomickafka.kafka.connection.Connection`,
built by :func:`connection` from ``--bootstrap-server`` and the ``-X`` settings (merged
with the configuration file and the environment into ``args.overrides``).

:func:`guarded` turns the errors a user can cause (a bad value, an unknown librdkafka
property, a broker that cannot be started or reached) into ``atomickafka CMD: reason``
and a non-zero exit status; secrets never show in it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import orjson
from confluent_kafka import KafkaException

from atomickafka.config import KafkaPairAction
from atomickafka.core.wire import MessageError, parse_destinations
from atomickafka.errors import KafkaUnreachableError
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.reach import is_unreachable, probe
from atomickafka.localkafka import BrokerError
from atomickafka.logs import logs_json, redacted

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "add_bootstrap",
    "add_delivery_mode",
    "add_destinations",
    "add_load_shape",
    "add_log_level",
    "add_overrides",
    "add_secret_file",
    "connection",
    "fail",
    "guarded",
    "parse_fanout",
    "reach",
    "resolve_bootstrap",
]

#: Exit status for bad input (argparse uses it too).
EXIT_USAGE: Final = 2
#: Exit status when the command could not do its work (Kafka unreachable, unhealthy).
EXIT_FAILURE: Final = 1
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
#: The long-running commands whose stderr is a JSON log (once they configured it).
_JSON_LOGGING: Final = frozenset({"node", "cluster"})


def add_bootstrap(parser: argparse.ArgumentParser, *, local_fallback: bool = False) -> None:
    """``--bootstrap-server``; with ``local_fallback`` it is optional and
    :func:`resolve_bootstrap` starts (or reuses) the embedded local broker without it."""
    if local_fallback:
        parser.add_argument(
            "--bootstrap-server",
            "--bootstrap-servers",
            dest="bootstrap_server",
            default=None,
            metavar="HOST:PORT[,...]",
            help="Kafka to use (default: start or reuse the embedded local broker)",
        )
    else:
        parser.add_argument(
            "--bootstrap-server",
            "--bootstrap-servers",
            dest="bootstrap_server",
            required=True,
            metavar="HOST:PORT[,...]",
            help="Kafka brokers to connect to (or KAFKA_BOOTSTRAP_SERVERS, or "
            "bootstrap_server in the --config file)",
        )


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """librdkafka settings: ``-X key=value`` and the per-role properties (repeatable)
    into ``args.overrides`` (a dict, empty by default; role-prefixed keys such as
    ``producer.linger.ms`` go to one kind of client), and ``--command-config``."""
    parser.add_argument(
        "-X",
        dest="overrides",
        action=KafkaPairAction,
        default={},
        metavar="KEY=VALUE",
        help="librdkafka setting for every Kafka client (repeatable; KEY.file=PATH reads "
        "the value from a file)",
    )
    for role in ("producer", "consumer", "admin"):
        parser.add_argument(
            f"--{role}-property",
            dest="overrides",
            action=KafkaPairAction,
            prefix=f"{role}.",
            default={},
            metavar="KEY=VALUE",
            help=f"librdkafka setting for the {role} clients only (repeatable)",
        )
    parser.add_argument(
        "--command-config",
        default=None,
        metavar="PATH",
        help="properties file of librdkafka settings (key=value lines, as the Kafka tools' "
        "--command-config; -X pairs win)",
    )


def add_secret_file(parser: argparse.ArgumentParser) -> None:
    """``--secret-file PATH``: sign what is written and check what is read (§4.14); only
    the path is ever shown."""
    parser.add_argument(
        "--secret-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="signing secrets, one per line (the first signs, all are accepted); records "
        "written are signed with HMAC-SHA256, unsigned or wrongly signed ones are set "
        "aside (nodes) or dropped (readers); its content is never shown. Default: no signing",
    )


def add_delivery_mode(
    parser: argparse.ArgumentParser, exactly_once: str, at_least_once: str
) -> None:
    """``--exactly-once`` (the default) | ``--at-least-once`` into ``args.exactly_once``,
    with each flag's help (the nodes' delivery mode, docs/DESIGN.md §6.3)."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--exactly-once", dest="exactly_once", action="store_true", default=True, help=exactly_once
    )
    mode.add_argument(
        "--at-least-once", dest="exactly_once", action="store_false", help=at_least_once
    )


def add_commit_interval(parser: argparse.ArgumentParser, default: float, whose: str) -> None:
    """``--commit-interval SECONDS`` into ``args.commit_interval`` (a node's writer commits
    its transaction, or its offsets, this often while records arrive; docs/DESIGN.md §6.3)."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not 0 < value <= 60:
            raise argparse.ArgumentTypeError(f"must be above 0 and at most 60, not {text}")
        return value

    parser.add_argument(
        "--commit-interval",
        type=seconds,
        default=default,
        metavar="SECONDS",
        help=f"how often {whose} commit their transaction (exactly-once) or input offsets "
        "(at-least-once) while records arrive, and how soon after the last commit an idle "
        "node commits: shorter lets read_committed readers (plain consumers, layered "
        "mergers) see deliveries sooner at the cost of more transactions; the client, tail "
        f"and bench do not wait for it (default {default:g})",
    )


def add_topics_per_process(parser: argparse.ArgumentParser, whose: str) -> None:
    """``--topics-per-process N`` into ``args.topics_per_process`` (docs/DESIGN.md §6.7)."""
    parser.add_argument(
        "--topics-per-process",
        type=int,
        default=1,
        metavar="N",
        help=f"host {whose} N topics' nodes to a process, sharing one consumer, one "
        "transactional producer, one transaction per commit interval and one lease: far "
        "fewer broker requests and transactions than a process per node (exactly-once, "
        "whole topics; a standby of a host process is cold) (default 1: a process per node)",
    )


def add_destinations(parser: argparse.ArgumentParser, *flags: str, required: bool = True) -> None:
    """A comma-separated destination list (``--to T1,T3``), checked as topic names."""

    def destinations(text: str) -> tuple[str, ...]:
        try:
            return parse_destinations([t.strip() for t in text.split(",") if t.strip()])
        except MessageError as exc:
            raise argparse.ArgumentTypeError(exc.reason + _shown(exc)) from None

    parser.add_argument(
        *(flags or ("--to",)),
        type=destinations,
        required=required,
        metavar="T1,T2,...",
        help="destination topics, comma-separated",
    )


def _shown(exc: MessageError) -> str:
    text = str(exc)
    start = text.find(" (got ")
    return text[start:] if start >= 0 else ""


def add_log_level(parser: argparse.ArgumentParser, default: str = "info") -> None:
    """``--log-level``."""
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default=default, help=f"log level ({default})"
    )


def resolve_bootstrap(bootstrap: str | None) -> str:
    """``bootstrap``, or that of the embedded local broker, started if it is not running."""
    if bootstrap is not None:
        return bootstrap
    from atomickafka.localkafka import ensure_broker  # noqa: PLC0415 (starts Java only here)

    return ensure_broker()


def connection(args: argparse.Namespace, bootstrap: str | None = None) -> Connection:
    """The command's connection: ``bootstrap`` (default ``--bootstrap-server``) and its
    librdkafka settings (``-X``, the configuration file, the environment)."""
    where = args.bootstrap_server if bootstrap is None else bootstrap
    return Connection(where, getattr(args, "overrides", None) or {})


def reach(args: argparse.Namespace, topics: Iterable[str] = ()) -> Any:
    """Ask the cluster of ``args.bootstrap_server`` for its metadata, within a bounded
    time (see :func:`~atomickafka.kafka.reach.probe`); return it."""
    return probe(connection(args), topics=topics)


def fail(command: str, reason: object, status: int = EXIT_USAGE) -> int:
    """Print ``atomickafka COMMAND: reason`` on stderr (one line, secrets hidden);
    return ``status``. A command that logs JSON lines (``node``, ``cluster``: their
    stderr is a JSON log) prints it as one more: ``level`` ``error``, the line as
    ``msg``, ``exitStatus``."""
    text = " ".join(redacted(str(reason)).split("\n"))
    line = f"atomickafka{' ' + command if command else ''}: {text}"
    if command in _JSON_LOGGING and logs_json():
        entry = {
            "ts": round(time.time(), 3),
            "level": "error",
            "logger": f"atomickafka.{command.split(maxsplit=1)[0] if command else 'cli'}",
            "pid": os.getpid(),
            "msg": line,
            "exitStatus": status,
        }
        line = orjson.dumps(entry).decode()
    print(line, file=sys.stderr)
    return status


def guarded(
    command: str, run: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    """Wrap a command so that the errors a user causes are one line and a non-zero
    status.

    ``ValueError`` (bad values, including :class:`~atomickafka.core.wire.MessageError`
    and :class:`~atomickafka.errors.ConfigError`), an embedded broker that cannot start,
    a file that cannot be read or written, and librdkafka's errors about settings (an
    unknown ``-X`` property, a bad value for one) exit with status 2; a Kafka that
    cannot be reached with status 1. Anything else is a bug and keeps its traceback.
    """

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except KafkaUnreachableError as exc:
            return fail(command, exc, EXIT_FAILURE)
        except (ValueError, BrokerError) as exc:
            return fail(command, exc)
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise  # the reader went away: main() handles it
            return fail(command, exc)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            text = getattr(err, "str", lambda: str(err))()
            status = EXIT_FAILURE if is_unreachable(exc) else EXIT_USAGE
            return fail(command, f"Kafka: {text}", status)

    return wrapped


def parse_fanout(text: str) -> tuple[int, int]:
    """``LO-HI`` (or ``N``) as the range of a multicast's destination count, at least 2
    (a single destination is not a multicast); ``argparse.ArgumentTypeError`` else."""
    low, sep, high = text.strip().partition("-")
    try:
        bounds = (int(low), int(high) if sep else int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO-HI, e.g. 2-5, got {text!r}") from None
    if bounds[0] < 2 or bounds[1] < bounds[0]:
        raise argparse.ArgumentTypeError(f"need 2 <= LO <= HI, got {text!r}")
    return bounds


def add_load_shape(parser: argparse.ArgumentParser, *, record_size: int) -> None:
    """``--record-size``, ``--fanout`` and ``--seed``: what each message looks like."""
    parser.add_argument(
        "--record-size",
        type=int,
        default=record_size,
        help=f"bytes of each message's value as JSON (default {record_size}; e.g. 1000, 10000)",
    )
    parser.add_argument(
        "--fanout",
        type=parse_fanout,
        default=None,
        metavar="LO-HI",
        help="each multicast goes to LO..HI topics drawn at random (default: every topic)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the --fanout draws")
