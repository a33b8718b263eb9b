"""Issue 26, item 1, on the real broker: a node started with a wrong ``--secret-file``
is named as such, and once restarted with the right one it catches up by itself: the
messages its peers held for it are delivered everywhere, and what followed them too
(docs/DESIGN.md §4.14, §6.6)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from atomickafka.client import AtomicKafkaClient
from atomickafka.kafka.status import read_statuses, wait_for_nodes
from tests.integration.harness import (
    Sent,
    assert_order_checked,
    collect_deliveries,
    run_cli,
    running_cluster,
)

pytestmark = pytest.mark.integration


@contextmanager
def lone_node(bootstrap: str, topic: str, secret: Path, log: Path) -> Iterator[None]:
    """``atomickafka node --topic TOPIC --secret-file SECRET`` for the block."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--secret-file", str(secret)]
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "atomickafka", "node", *args, "--log-level", "info"],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def wait_named(bootstrap: str, topic: str, sender: str) -> dict[str, int]:
    """``topic``'s node's count of records that failed the signature check, by claimed
    sender, once it names ``sender`` (or after a minute)."""
    deadline = time.monotonic() + 60
    named: dict[str, int] = {}
    while time.monotonic() < deadline and sender not in named:
        time.sleep(1)
        status = read_statuses(bootstrap).get(topic)
        named = {} if status is None else dict(status.bad_signatures)
    return named


def test_a_node_with_a_wrong_secret_is_named_and_catches_up_once_given_the_right_one(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    orders, payments, ledger = topic_factory(), topic_factory(), topic_factory()
    right, wrong = tmp_path / "secret", tmp_path / "wrong"
    right.write_bytes(b"the-deployment-s-secret-0123456789ab")
    wrong.write_bytes(b"someone-else-s-secret-0123456789abcd")
    with running_cluster(
        kafka_bootstrap, [orders, payments], log_dir=tmp_path, secret_file=str(right)
    ):
        wait_for_nodes(kafka_bootstrap, [orders, payments], timeout_s=60)
        client = AtomicKafkaClient(kafka_bootstrap, secret_file=str(right), allow_offline=True)
        with client:
            # x is written before ledger's node starts (a client refuses to send to a
            # node that accepts none of its secrets, issue 26 item 7): then ledger's node
            # starts with another secret, and sets it aside with everything else
            x = client.send("x", [orders, payments, ledger])
            client.flush()
            with lone_node(kafka_bootstrap, ledger, wrong, tmp_path / "wrong.log"):
                named = wait_named(kafka_bootstrap, ledger, orders)
                assert orders in named, named  # ledger names a member it cannot verify
                status = run_cli(
                    "status", "--bootstrap-server", kafka_bootstrap, "--topics",
                    f"{orders},{payments},{ledger}",
                )  # fmt: skip
                assert f"{ledger}: signs with another secret" in status.stdout, status.stdout
                assert "signed with a secret this node does not hold" in status.stdout
            # ledger restarted with the deployment's secret: it catches up by itself
            with lone_node(kafka_bootstrap, ledger, right, tmp_path / "right.log"):
                y = client.send("y", [orders])
                client.flush()
                everywhere = tuple(sorted((orders, payments, ledger)))
                sent = [Sent(x, everywhere, "x", ""), Sent(y, (orders,), "y", "")]
                expected = {orders: 2, payments: 1, ledger: 1}
                deliveries = collect_deliveries(
                    kafka_bootstrap, [orders, payments, ledger], expected, "split", timeout_s=90
                )
    assert_order_checked(sent, deliveries)
    assert [d.messageID for d in deliveries[orders]] == [x, y]
    log = (tmp_path / "right.log").read_text()
    assert "signed with a secret this node does not hold" in log
    assert "writing again what followed it" in log
