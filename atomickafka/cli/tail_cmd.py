"""``atomickafka tail``: print a topic's deliveries in order, control records hidden.

A record it does not print (not written by the topic's node or merger, wrongly signed,
out of order) is said on stderr as it is read (a warning line, at most one per kind
every ten seconds with the count of those held back) and counted in a last line when
it exits."""

from __future__ import annotations

import argparse
import base64
import sys
from typing import Any, Final

import orjson

from atomickafka.cli.options import (
    add_bootstrap,
    add_overrides,
    add_secret_file,
    connection,
    guarded,
    reach,
)
from atomickafka.client import Delivery, DeliveryReader
from atomickafka.core.wire import parse_destinations
from atomickafka.errors import UnknownTopicError
from atomickafka.kafka.topics import Layout, delivery_topic


def register(subparsers: Any) -> None:
    """Add the ``tail`` sub-command."""
    parser = subparsers.add_parser("tail", help="print a topic's deliveries in order")
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, help="AtomicKafka topic to read")
    add_overrides(parser)
    parser.add_argument("--from-beginning", action="store_true", help="start at the first delivery")
    parser.add_argument("--max-messages", type=int, default=None, help="exit after N deliveries")
    parser.add_argument(
        "--timeout-ms", type=int, default=None, help="exit after this long without a delivery"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per delivery (what atomickafka check reads); default: "
        "TIMESTAMP<tab>MESSAGEID<tab>VALUE with the value as JSON (a string value in "
        'quotes, tabs and newlines escaped; bytes as {"valueBase64": ...})',
    )
    parser.add_argument(
        "--group",
        default=None,
        help="a consumer group: go on where this group's reader stopped, repeating nothing "
        "(default: no group, read from --from-beginning or the end)",
    )
    parser.add_argument(
        "--layout",
        choices=[x.value for x in Layout],
        default=Layout.SPLIT.value,
        help="the nodes' layout (accepted for symmetry with send: both deliver into the topic)",
    )
    parser.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
        help="read_uncommitted (the default): a delivery as soon as its node wrote it, a "
        "repeat of an aborted transaction's dropped; read_committed: once the node's "
        "transaction committed (up to 100 ms later)",
    )
    add_secret_file(parser)
    parser.set_defaults(func=guarded("tail", _run))


#: Characters JSON leaves unescaped that Python's ``str.splitlines`` (and some
#: editors) still take for line ends; inside JSON they can only stand in strings, where
#: their escapes mean the same.
_LINE_BREAKS_JSON_KEEPS: Final = str.maketrans(
    {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def text_value(delivery: Delivery) -> str:
    """A delivery's value on one line that cannot be mistaken for another: its JSON
    text (a string in quotes, tabs and every kind of line break escaped); bytes sent as
    bytes as ``{"valueBase64": ...}``."""
    if delivery.is_bytes:
        return orjson.dumps({"valueBase64": base64.b64encode(delivery.raw).decode()}).decode()
    return orjson.dumps(delivery.value).decode().translate(_LINE_BREAKS_JSON_KEEPS)


def _run(args: argparse.Namespace) -> int:
    timeout_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    out = sys.stdout
    parse_destinations([args.topic])  # a name Kafka cannot have: one line, at once
    try:  # a wrong --bootstrap-server or --topic: one line, at once
        reach(args, [delivery_topic(args.topic)])
    except UnknownTopicError as exc:
        raise UnknownTopicError(
            f"{exc}: no node has served it (start one: atomickafka node --topic {args.topic})"
        ) from None
    with DeliveryReader(
        connection(args),
        args.topic,
        from_beginning=args.from_beginning,
        secret_file=args.secret_file,
        group=args.group,
        committed_only=args.isolation_level == "read_committed",
    ) as reader:
        for delivery in reader.deliveries(timeout_s=timeout_s, max_messages=args.max_messages):
            if args.json:
                line = orjson.dumps(delivery.to_json_dict()).decode()
                out.write(line.translate(_LINE_BREAKS_JSON_KEEPS) + "\n")
            else:
                out.write(f"{delivery.timeStamp}\t{delivery.messageID}\t{text_value(delivery)}\n")
            out.flush()
    skipped = {
        "wrongly signed": reader.forged,
        "not written by its node or merger": reader.foreign,
        "out of order (at or below the last delivery shown, and no repeat of it)": (
            reader.out_of_order
        ),
    }
    for what, count in skipped.items():
        if count:
            sys.stderr.write(f"atomickafka tail: skipped {count} records {what}\n")
    return 0
