"""``atomickafka send``: publish one message (or one per stdin line) to several topics."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from atomickafka.cli.options import add_bootstrap, add_destinations, add_overrides
from atomickafka.kafka.topics import Layout
from client import AtomicKafkaClient, DeliveryError


def register(subparsers: Any) -> None:
    """Add the ``send`` sub-command."""
    parser = subparsers.add_parser(
        "send",
        help="multicast VALUE (or each stdin line) to several topics; print each messageID",
    )
    add_bootstrap(parser)
    add_overrides(parser)
    add_destinations(parser)
    parser.add_argument(
        "--via", default=None, help="topic to write to (relays if not a destination)"
    )
    parser.add_argument("--layout", choices=[x.value for x in Layout], default=Layout.SPLIT.value)
    parser.add_argument(
        "--json-value", action="store_true", help="parse VALUE / each line as JSON, not a string"
    )
    parser.add_argument("value", nargs="?", default=None, metavar="VALUE")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        client = AtomicKafkaClient(
            args.bootstrap_server, layout=args.layout, config=args.overrides
        )
        values = [args.value] if args.value is not None else (ln.rstrip("\n") for ln in sys.stdin)
        for raw in values:
            value = orjson.loads(raw) if args.json_value else raw
            print(client.send(value, args.to, via=args.via), flush=True)
        client.flush()
    except (ValueError, orjson.JSONDecodeError) as exc:
        print(f"atomickafka send: {exc}", file=sys.stderr)
        return 2
    except DeliveryError as exc:
        print(f"atomickafka send: {exc}", file=sys.stderr)
        return 1
    return 0
