"""``atomickafka demo``: multicast a few messages through three nodes and show the order."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from atomickafka.cli.options import (
    add_bootstrap,
    add_overrides,
    connection,
    guarded,
    reach,
    resolve_bootstrap,
)
from atomickafka.client import AtomicKafkaClient, Delivery, DeliveryReader
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.node.launch import running_cluster
from atomickafka.verify.checker import check, deliveries_from_client, sent_from_pairs


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    parser = subparsers.add_parser(
        "demo", help="start three nodes, multicast a few messages, print and check the order"
    )
    add_bootstrap(parser, local_fallback=True)
    add_overrides(parser)
    parser.set_defaults(func=guarded("demo", _run))


_SCRIPT: list[tuple[str, tuple[str, ...], str | None]] = [
    ("order #1 placed", ("orders", "payments", "audit"), None),
    ("payment for #1 authorised", ("payments", "audit"), None),
    ("order #2 placed", ("orders", "payments", "audit"), None),
    ("warehouse note", ("orders",), None),
    ("order #2 cancelled", ("orders", "audit"), "payments"),  # relayed via payments
    ("refund for #2", ("payments", "audit"), None),
]


def _run(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None:
        reach(args)  # a wrong --bootstrap-server: one line, before any node starts
    where = connection(args, resolve_bootstrap(args.bootstrap_server))
    bootstrap = where.bootstrap
    run = uuid.uuid4().hex[:6]
    names = {base: f"demo-{run}-{base}" for base in ("orders", "payments", "audit")}
    print(f"bootstrap {bootstrap}; topics {', '.join(names.values())}")
    topics = tuple(names.values())
    with running_cluster(
        ClusterConfig(
            topics, NodeConfig(bootstrap, topics[0], overrides=args.overrides, log_level="warning")
        )
    ):
        sent: dict[str, tuple[tuple[str, ...], str]] = {}
        with AtomicKafkaClient(where) as client:
            for value, bases, via in _SCRIPT:
                dests = tuple(names[b] for b in bases)
                mid = client.send(value, dests, via=names[via] if via else None)
                sent[mid] = (dests, value)
                relay = f" (via {via})" if via else ""
                print(f"sent {mid} -> {', '.join(bases)}{relay}: {value}")
        deliveries: dict[str, list[Delivery]] = {}
        for base, topic in names.items():
            want = sum(topic in d for d, _ in sent.values())
            with DeliveryReader(where, topic) as reader:
                deliveries[topic] = list(reader.deliveries(timeout_s=15, max_messages=want))
            print(f"\n{base} delivered, in order:")
            for d in deliveries[topic]:
                print(f"  ts={d.timeStamp:<4} {d.messageID}  {d.value}")
        report = check(sent_from_pairs(sent), deliveries_from_client(deliveries))
        print(f"\norder check: {report.summary()}")
        return 0 if report.ok else 1
