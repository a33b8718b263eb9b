"""Delivery topics that existing consumers read as any topic (``--delivery-format raw``,
docs/DESIGN.md §3.8): the value exactly as sent (any bytes), the key as sent, the
sender's headers, and AtomicKafka's metadata in headers; the JSON envelope, the default;
readers in a consumer group that resume where they stopped. Every test runs the order
checker."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from atomickafka.client import AtomicKafkaClient
from atomickafka.core.reader import header_value
from atomickafka.kafka.consumer import read_to_end
from atomickafka.kafka.topics import delivery_topic
from tests.conftest import plain_records
from tests.integration.harness import (
    Sent,
    assert_order_checked,
    collect_deliveries,
    run_cli,
    running_cluster,
)

pytestmark = pytest.mark.integration


def _send_mixed(bootstrap: str, topics: list[str], count: int, prefix: str) -> list[Sent]:
    """Binary values with keys and headers, multicast to two topics or sent to one."""
    sent: list[Sent] = []
    with AtomicKafkaClient(bootstrap) as client:
        for i in range(count):
            dests = topics if i % 2 else [topics[i % len(topics)]]
            value = f"{prefix}{i}\t\x00\xff".encode("latin-1")
            headers = {"trace": f"t-{i}".encode(), "kind": b"test"}
            mid = client.send(value, dests, key=f"k{i % 5}", headers=headers)
            sent.append(Sent(mid, tuple(sorted(dests)), value, ""))
    return sent


def test_a_plain_consumer_reads_the_values_keys_and_headers_as_sent(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    topics = [topic_factory(), topic_factory()]
    with running_cluster(kafka_bootstrap, topics, log_dir=tmp_path, delivery_format="raw"):
        sent = _send_mixed(kafka_bootstrap, topics, 60, "raw")
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        by_id = {s.messageID: s for s in sent}
        for topic in topics:
            records = read_to_end(kafka_bootstrap, delivery_topic(topic), [0])
            assert len(records) == expected[topic]
            for record in records:
                mid = (header_value(record, "atomickafka-id") or b"").decode()
                i = _index(by_id[mid].value)
                assert record.value() == by_id[mid].value  # exactly the bytes sent
                assert record.key() == f"k{i % 5}".encode()
                assert header_value(record, "trace") == f"t-{i}".encode()
                assert header_value(record, "kind") == b"test"
                assert header_value(record, "atomickafka-type") == b"DeliveryMessage"
                assert int(header_value(record, "atomickafka-ts") or b"0") > 0
    for topic in topics:  # the client hands the same back
        for d in deliveries[topic]:
            assert d.is_bytes and d.raw == by_id[d.messageID].value
            assert ("trace", f"t-{_index(d.raw)}".encode()) in d.headers
    assert_order_checked(sent, deliveries)


def _index(value: bytes) -> int:
    """The number a value of :func:`_send_mixed` carries (``raw7\t...`` -> 7)."""
    return int(value.split(b"\t")[0][3:])


def test_the_json_envelope_is_the_default(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """Without --delivery-format a delivery record is the JSON envelope (raw costs more,
    docs/performance.md), carrying the value, key and headers as sent."""
    topics = [topic_factory(), topic_factory()]
    with running_cluster(kafka_bootstrap, topics, log_dir=tmp_path, name="json"):
        sent = _send_mixed(kafka_bootstrap, topics, 20, "env")
        with AtomicKafkaClient(kafka_bootstrap) as client:
            mid = client.send({"order": 1}, topics)
            sent.append(Sent(mid, tuple(sorted(topics)), {"order": 1}, ""))
        expected = Counter(t for s in sent for t in s.destinations)
        deliveries = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        records = read_to_end(kafka_bootstrap, delivery_topic(topics[0]), [0])
    envelopes = [orjson.loads(r.value() or b"") for r in records]  # valid UTF-8 JSON
    assert {"valueBase64", "key", "headers"} <= set(envelopes[0])
    assert any(e.get("value") == {"order": 1} for e in envelopes)
    assert_order_checked(sent, deliveries)


def test_a_group_reader_resumes_where_it_stopped_without_repeats(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    topics = [topic_factory(), topic_factory()]
    group = f"readers-{topics[0]}"
    with running_cluster(kafka_bootstrap, topics, log_dir=tmp_path, name="group"):
        sent = _send_mixed(kafka_bootstrap, topics, 80, "g")
        collect_deliveries(kafka_bootstrap, topics, {topics[0]: 40}, "split")
        reader_client = AtomicKafkaClient(kafka_bootstrap)
        first: list[Any] = list(
            reader_client.deliveries(topics[0], group=group, max_messages=15, timeout_s=10)
        )
        sent += _send_mixed(kafka_bootstrap, topics, 40, "h")
        expected = Counter(t for s in sent for t in s.destinations)
        collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
        second = list(reader_client.deliveries(topics[0], group=group, timeout_s=5))
        tail = run_cli(  # a new group starts where --from-beginning says, as Kafka's tools
            "tail", "--bootstrap-server", kafka_bootstrap, "--topic", topics[0],
            "--group", f"{group}-cli", "--from-beginning", "--max-messages", "5",
            "--timeout-ms", "10000",
        )  # fmt: skip
        tail_again = run_cli(
            "tail", "--bootstrap-server", kafka_bootstrap, "--topic", topics[0],
            "--group", f"{group}-cli", "--max-messages", "5", "--timeout-ms", "10000", "--json",
        )  # fmt: skip
        all_of_it = collect_deliveries(kafka_bootstrap, topics, dict(expected), "split")
    ids = [d.messageID for d in first + second]
    assert len(first) == 15 and len(ids) == len(set(ids)) == expected[topics[0]]
    assert ids == [d.messageID for d in all_of_it[topics[0]]]  # in order, nothing twice
    cli_ids = [line.split("\t")[1] for line in tail.stdout.splitlines()]
    cli_next = [orjson.loads(line)["messageID"] for line in tail_again.stdout.splitlines()]
    assert cli_ids + cli_next == ids[:10]
    assert_order_checked(sent, all_of_it)


def test_send_keys_and_headers_cross_the_merger_to_a_plain_consumer(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """``atomickafka send --key K -H NAME=VALUE`` to partitioned topics (3 layers, so
    through each topic's merger): a plain consumer of the delivery topic reads the
    value, the key and the headers as sent; the key chose the layer."""
    layers = 3
    topics = [topic_factory(), topic_factory()]
    keys = {zlib.crc32(k.encode()) % layers: k for k in (f"key{n}" for n in range(30))}
    assert sorted(keys) == list(range(layers))
    sent: list[Sent] = []
    with running_cluster(
        kafka_bootstrap,
        topics,
        partitions=layers,
        log_dir=tmp_path,
        name="headers",
        delivery_format="raw",
    ):
        for layer, key in sorted(keys.items()):
            values = [{"n": n, "layer": layer} for n in range(4)]
            done = run_cli(
                "send", "--bootstrap-server", kafka_bootstrap, "--to", ",".join(topics),
                "--key", key, "-H", f"trace=t-{key}", "--header", "kind=cli=v1",
                "--json-value", "--json",
                stdin="".join(orjson.dumps(v).decode() + "\n" for v in values),
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            for line in done.stdout.splitlines():
                record = orjson.loads(line)
                sent.append(Sent(record["messageID"], tuple(record["topic"]), record["value"], ""))
        expected = {t: len(sent) for t in topics}
        plain = {
            t: plain_records(kafka_bootstrap, delivery_topic(t), len(sent), 60) for t in topics
        }
        deliveries = collect_deliveries(kafka_bootstrap, topics, expected, "split")
    by_id = {s.messageID: s for s in sent}
    assert len(sent) == 4 * layers
    for topic in topics:
        assert len(plain[topic]) == len(sent), topic
        for record in plain[topic]:
            mid = (header_value(record, "atomickafka-id") or b"").decode()
            value = by_id[mid].value
            key = keys[value["layer"]]
            assert orjson.loads(record.value()) == value  # the JSON value sent
            assert record.key() == key.encode()
            mine = [(n, v) for n, v in record.headers() if not n.startswith("atomickafka-")]
            assert mine == [("trace", f"t-{key}".encode()), ("kind", b"cli=v1")]
            assert header_value(record, "atomickafka-layer") == str(value["layer"]).encode()
    assert_order_checked(sent, deliveries)
