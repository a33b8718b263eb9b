"""``atomickafka demo``: multicast a few messages through three nodes and show the order."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import uuid
from typing import Any

from atomickafka.checker import check
from atomickafka.node.status_reader import wait_for_nodes
from client import AtomicKafkaClient, Delivery


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    parser = subparsers.add_parser(
        "demo", help="start three nodes, multicast a few messages, print and check the order"
    )
    parser.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        default=None,
        help="Kafka to use (default: start or reuse the local broker)",
    )
    parser.set_defaults(func=_run)


_SCRIPT: list[tuple[str, tuple[str, ...], str | None]] = [
    ("order #1 placed", ("orders", "payments", "audit"), None),
    ("payment for #1 authorised", ("payments", "audit"), None),
    ("order #2 placed", ("orders", "payments", "audit"), None),
    ("warehouse note", ("orders",), None),
    ("order #2 cancelled", ("orders", "audit"), "payments"),  # relayed via payments
    ("refund for #2", ("payments", "audit"), None),
]


def _run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        from atomickafka.broker import ensure_broker  # noqa: PLC0415  (starts Java only here)

        bootstrap = ensure_broker()
    run = uuid.uuid4().hex[:6]
    names = {base: f"demo-{run}-{base}" for base in ("orders", "payments", "audit")}
    print(f"bootstrap {bootstrap}; topics {', '.join(names.values())}")
    cluster = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atomickafka",
            "cluster",
            "--bootstrap-server",
            bootstrap,
            "--topics",
            ",".join(names.values()),
            "--log-level",
            "warning",
        ],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_for_nodes(bootstrap, names.values(), timeout_s=90)
        sent: dict[str, tuple[tuple[str, ...], str]] = {}
        with AtomicKafkaClient(bootstrap) as client:
            for value, bases, via in _SCRIPT:
                dests = tuple(names[b] for b in bases)
                mid = client.send(value, dests, via=names[via] if via else None)
                sent[mid] = (dests, value)
                relay = f" (via {via})" if via else ""
                print(f"sent {mid} -> {', '.join(bases)}{relay}: {value}")
        reader = AtomicKafkaClient(bootstrap)
        deliveries: dict[str, list[Delivery]] = {}
        for base, topic in names.items():
            want = sum(topic in d for d, _ in sent.values())
            deliveries[topic] = list(reader.deliveries(topic, timeout_s=15, max_messages=want))
            print(f"\n{base} delivered, in order:")
            for d in deliveries[topic]:
                print(f"  ts={d.timeStamp:<4} {d.messageID}  {d.value}")
        report = check(sent=sent, deliveries=deliveries)
        print(f"\norder check: {report.summary()}")
        return 0 if report.ok else 1
    finally:
        cluster.send_signal(signal.SIGTERM)
        try:
            cluster.wait(timeout=60)
        except subprocess.TimeoutExpired:
            cluster.kill()
