"""``atomickafka send``: publish one message (or one per stdin line) to several topics.

Stdin's lines go out in batches (``send_batch``): the lines that have arrived, up to
:data:`CHUNK_LINES`, without waiting for more. Each messageID is printed once the
broker has acknowledged the message (in input order), never for a message that was not
written. A line that cannot be sent (not UTF-8, not JSON with ``--json-value``, a value
over the size limit) is reported on stderr with its line number and skipped; the rest
of its batch, and what was queued before it, is still sent.
Exit status: 0 all sent, 1 some lines skipped or failed, 2 bad usage or a destination
without a live node (nothing sent).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import select
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import orjson
from confluent_kafka import KafkaError

from atomickafka.cli.options import (
    add_bootstrap,
    add_destinations,
    add_overrides,
    add_secret_file,
    connection,
    fail,
    guarded,
    reach,
)
from atomickafka.client import (
    AtomicKafkaClient,
    DeliveryError,
    DestinationError,
    MessageError,
    SentMessage,
)
from atomickafka.client.client import DEFAULT_MAX_BLOCK_S
from atomickafka.client.plan import DEFAULT_MAX_LAG_S
from atomickafka.core.raw import RESERVED_HEADER_PREFIX
from atomickafka.core.wire import MAX_VALUE_BYTES
from atomickafka.kafka.topics import Layout

__all__ = ["register", "sent_record"]


def register(subparsers: Any) -> None:
    """Add the ``send`` sub-command."""
    parser = subparsers.add_parser(
        "send",
        help="multicast VALUE (or each stdin line) to several topics; print each messageID",
        description=f"Values are at most {MAX_VALUE_BYTES} bytes as JSON.",
    )
    add_bootstrap(parser)
    add_overrides(parser)
    add_secret_file(parser)
    add_destinations(parser)
    parser.add_argument(
        "--via", default=None, help="topic to write to (relays if not a destination)"
    )
    parser.add_argument(
        "--layout",
        choices=[x.value for x in Layout],
        default=Layout.SPLIT.value,
        help="the nodes' layout (where the input logs are)",
    )
    _add_record_options(parser)
    parser.add_argument(
        "--allow-offline",
        action="store_true",
        help="send even to topics no live node serves (their other destinations wait)",
    )
    parser.add_argument(
        "--json",
        dest="json_out",
        action="store_true",
        help="print each sent message as a JSON line (messageID, topic, value): the "
        "SENT.jsonl that atomickafka check reads; default: the messageID alone",
    )
    _add_backpressure_options(parser)
    parser.add_argument("value", nargs="?", default=None, metavar="VALUE")
    parser.set_defaults(func=guarded("send", _run))


def _add_record_options(parser: argparse.ArgumentParser) -> None:
    """What every delivery record carries: the value as JSON, a key, headers."""
    parser.add_argument(
        "--json-value", action="store_true", help="parse VALUE / each line as JSON, not a string"
    )
    parser.add_argument(
        "--key",
        default=None,
        help="the Kafka key of every delivery record; on partitioned topics it also "
        "chooses the layer, so messages with one key keep one layer (default: no key; "
        "layers round-robin)",
    )
    parser.add_argument(
        "-H",
        "--header",
        action=_HeaderAction,
        type=_header,
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka record header every delivery carries (repeatable, as kcat's -H; "
        "names starting atomickafka- are reserved). Default: none",
    )


def _add_backpressure_options(parser: argparse.ArgumentParser) -> None:
    """Back-pressure: how much lag to wait behind, and for how long."""
    parser.add_argument(
        "--max-lag",
        type=float,
        default=DEFAULT_MAX_LAG_S,
        metavar="SECONDS",
        help="wait while a destination's node has left its input unread for longer than "
        f"this (back-pressure; 0: never wait; default {DEFAULT_MAX_LAG_S:g})",
    )
    parser.add_argument(
        "--max-block",
        type=float,
        default=DEFAULT_MAX_BLOCK_S,
        metavar="SECONDS",
        help="how long to wait for a lagging destination before giving up "
        f"(default {DEFAULT_MAX_BLOCK_S:g})",
    )


def sent_record(message_id: str, destinations: Sequence[str], value: Any) -> dict[str, Any]:
    """What ``send --json`` prints of a sent message: the wire's names, as ``check``
    reads them from SENT.jsonl."""
    return {"messageID": message_id, "topic": list(destinations), "value": value}


def _header(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as a header pair (the value may hold ``=``; it may be empty)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    if name.startswith(RESERVED_HEADER_PREFIX):
        raise argparse.ArgumentTypeError(
            f"header names starting {RESERVED_HEADER_PREFIX} are AtomicKafka's, got {name!r}"
        )
    return name, value


class _HeaderAction(argparse.Action):
    """``-H NAME=VALUE`` (repeatable): the pairs in command-line order, in a list; the
    command line's replace the one pair the configuration file or the environment may
    give (a pair, not a list), as any flag wins over them."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, [*(given if isinstance(given, list) else []), values])


def _pairs(given: object) -> list[tuple[str, str]]:
    """The header pairs an option holds: a list of them, or one pair (from a file)."""
    if isinstance(given, tuple):
        return [given]
    return list(given) if isinstance(given, list) else []


#: The most stdin lines sent as one batch (``send_batch``). A batch is what has been
#: read when no more is waiting, up to this: a slow writer's lines are never held back
#: for lines it has not written yet.
CHUNK_LINES: Final = 500
_READ_BYTES: Final = 1 << 16


@dataclass(slots=True)
class _Line:
    number: int
    message_id: str = ""
    #: With ``--json``: the line printed once the message is acknowledged.
    record: bytes | None = None


class _Printer:
    """Prints acknowledged ids in input order, and failures with their line numbers."""

    def __init__(self) -> None:
        self.lines: list[_Line] = []
        self.printed = 0
        self.failed = 0
        #: What the broker said of each message not printed yet (``None``: written).
        self.acknowledged: dict[str, KafkaError | None] = {}

    def on_delivery(self, error: KafkaError | None, sent: SentMessage) -> None:
        """Every message's ``on_delivery``: noted, printed in order by :meth:`drain`."""
        self.acknowledged[sent.messageID] = error

    def drain(self) -> None:
        """Print what was acknowledged since the last call, in input order, with one
        write and one flush (not one per line)."""
        done: list[str] = []
        lines, acknowledged = self.lines, self.acknowledged
        while self.printed < len(lines) and lines[self.printed].message_id in acknowledged:
            line = lines[self.printed]
            self.printed += 1
            error = acknowledged.pop(line.message_id)
            if error is None:
                done.append(line.record.decode() if line.record else line.message_id)
            else:
                self.failed += 1
                print(
                    f"atomickafka send: line {line.number}: not written: {error}",
                    file=sys.stderr,
                )
        if done:
            sys.stdout.write("\n".join(done) + "\n")
            sys.stdout.flush()


def _chunks(args: argparse.Namespace) -> Iterator[list[tuple[int, bytes | str]]]:
    """The input, numbered from 1, in batches: VALUE alone, or stdin's lines."""
    if args.value is not None:
        yield [(1, args.value)]
        return
    yield from _line_chunks(cast(io.BufferedIOBase, sys.stdin.buffer), CHUNK_LINES)


def _line_chunks(stream: io.BufferedIOBase, most: int) -> Iterator[list[tuple[int, bytes | str]]]:
    """``stream``'s lines (without their line ends), numbered from 1, in chunks of at
    most ``most``: what has arrived, read without waiting while more is there; a read
    waits only when nothing has arrived."""
    try:
        fd: int | None = stream.fileno()
    except (AttributeError, OSError):  # an in-memory stream holds all there is
        fd = None
    number = 0
    pending: list[bytes] = []  # the start of a line whose end has not arrived
    lines: list[tuple[int, bytes | str]] = []
    while True:
        data = stream.read1(_READ_BYTES)  # what is there; waits only if nothing is
        if b"\n" in data or not data:
            *complete, rest = b"".join([*pending, data]).split(b"\n")
            pending = [rest] if data and rest else []
            if not data and rest:  # the last line, without a line end
                complete.append(rest)
            for raw in complete:
                number += 1
                lines.append((number, raw.rstrip(b"\r")))
        else:
            pending.append(data)
        while len(lines) >= most:
            yield lines[:most]
            del lines[:most]
        if lines and (not data or not _waiting(fd)):
            yield lines
            lines = []
        if not data:
            return


def _waiting(fd: int | None) -> bool:
    """Whether more input can be read from ``fd`` at once."""
    return fd is None or bool(select.select([fd], [], [], 0)[0])


def _run(args: argparse.Namespace) -> int:
    reach(args)  # a wrong --bootstrap-server: one line, before reading any input
    client = AtomicKafkaClient(
        connection(args),
        layout=args.layout,
        allow_offline=args.allow_offline,
        secret_file=args.secret_file,
        # one message cannot be reordered, and a retried copy is dropped by the nodes:
        # skip the idempotent producer's start-up (up to 500 ms waiting for an id)
        idempotent=args.value is None,
        max_lag_s=args.max_lag or None,
        max_block_s=args.max_block,
    )
    printer = _Printer()
    skipped = 0
    try:
        for chunk in _chunks(args):
            values: list[Any] = []
            lines: list[_Line] = []
            for number, raw in chunk:
                try:
                    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
                    values.append(orjson.loads(text) if args.json_value else text)
                except UnicodeDecodeError as exc:
                    skipped += 1
                    where = f"{exc.reason} at byte {exc.start}"
                    print(
                        f"atomickafka send: line {number}: not valid UTF-8 ({where}); skipped",
                        file=sys.stderr,
                    )
                    continue
                except orjson.JSONDecodeError as exc:
                    skipped += 1
                    print(f"atomickafka send: line {number}: {exc}; skipped", file=sys.stderr)
                    continue
                lines.append(_Line(number))
            try:
                skipped += _send(client, args, values, lines, printer)
            except DestinationError as exc:  # nothing sent: a usage problem
                return fail("send", exc)
            printer.drain()
    finally:
        with contextlib.suppress(DeliveryError):  # each failure is reported with its line
            client.close()  # flushes what was queued, whatever happened above
        printer.drain()
        for line in printer.lines[printer.printed :]:
            print(
                f"atomickafka send: line {line.number}: not acknowledged in time", file=sys.stderr
            )
    return 1 if skipped or printer.failed or printer.printed < len(printer.lines) else 0


def _send(
    client: AtomicKafkaClient,
    args: argparse.Namespace,
    values: list[Any],
    lines: list[_Line],
    printer: _Printer,
) -> int:
    """Send one chunk's ``values`` (read from ``lines``) as a batch; a value that cannot
    be sent is reported with its line and left out, and the rest sent. Return how many
    lines were skipped."""
    skipped = 0
    while values:
        try:
            ids = client.send_batch(
                values,
                args.to,
                via=args.via,
                key=args.key,
                headers=_pairs(args.header),
                on_delivery=printer.on_delivery,
            )
        except DestinationError:
            raise
        except ValueError as exc:  # a MessageError naming its value, or not (--via)
            index = exc.index if isinstance(exc, MessageError) else None
            bad = lines if index is None else [lines[index]]
            # the batch's index is no business of the command's: the line number is
            reason = str(exc).removeprefix(f"values[{index}]: ")
            for line in bad:
                print(f"atomickafka send: line {line.number}: {reason}; skipped", file=sys.stderr)
            skipped += len(bad)
            if index is None:
                return skipped
            del values[index], lines[index]
            continue
        for line, message_id, value in zip(lines, ids, values, strict=True):
            line.message_id = message_id
            if args.json_out:
                line.record = orjson.dumps(sent_record(message_id, args.to, value))
        printer.lines.extend(lines)
        break
    return skipped
