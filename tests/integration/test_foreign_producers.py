"""A producer in another language sends multicasts without the Python client, as
docs/json.md ("Sending without the Python client") says: Kafka's own console producer
(``atomickafka broker tool kafka-console-producer``, headers on) writes client records
into one topic's input log -- the raw form with the destinations in a header (a JSON
value, and bytes with a header of the sender's own relayed through a topic that is not
a destination) and the JSON ClientMessage form -- and every destination delivers each
once, in one order (the checker)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.kafka.topics import input_topic
from tests.integration.harness import (
    Sent,
    assert_order_checked,
    collect_deliveries,
    run_cli,
    running_cluster,
)

pytestmark = pytest.mark.integration


def raw_line(message_id: str, destinations: str, value: str, *extra: str) -> str:
    """One console-producer line: ``;``-separated headers, a tab, the value."""
    headers = [
        "atomickafka-format:3",
        "atomickafka-type:ClientMessage",
        f"atomickafka-id:{message_id}",
        f"atomickafka-to:{destinations}",
        "atomickafka-sender:console",
        *extra,
    ]
    return ";".join(headers) + "\t" + value


def test_the_console_producer_multicasts_through_an_input_log(
    kafka_bootstrap: str, topic_factory: Callable[[str], str], tmp_path: Path
) -> None:
    x, y = topic_factory("cx"), topic_factory("cy")
    run = uuid.uuid4().hex[:6]
    ids = [f"console-{run}-{n}" for n in range(3)]
    lines = [
        raw_line(ids[0], f"{x},{y}", '{"n": 1}'),
        raw_line(ids[1], y, "plain text", "atomickafka-encoding:bytes", "trace:t-2"),  # relayed
        "form:json\t"
        f'{{"messageID": "{ids[2]}", "messageType": "ClientMessage", "topic": ["{x}", "{y}"], '
        '"value": {"n": 3}, "formatVersion": 2}',
    ]
    with running_cluster(kafka_bootstrap, [x, y], log_dir=tmp_path):
        done = run_cli(
            "broker", "tool", "kafka-console-producer",
            "--bootstrap-server", kafka_bootstrap,
            "--topic", input_topic(x, "split"),
            "--reader-property", "parse.headers=true",
            "--reader-property", "headers.separator=;",
            stdin="\n".join(lines) + "\n",
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        delivered = collect_deliveries(kafka_bootstrap, [x, y], {x: 2, y: 3}, "split")
    assert [d.messageID for d in delivered[y]].count(ids[1]) == 1
    relayed = next(d for d in delivered[y] if d.messageID == ids[1])
    assert relayed.value == b"plain text" and relayed.headers == (("trace", b"t-2"),)
    sent = [
        Sent(ids[0], (x, y), {"n": 1}, ""),
        Sent(ids[1], (y,), b"plain text", x),
        Sent(ids[2], (x, y), {"n": 3}, ""),
    ]
    assert_order_checked(sent, delivered)
