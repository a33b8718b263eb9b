"""The Prometheus endpoints on the real broker: scraped over HTTP on 127.0.0.1 while
clients send, their delivery counters equal to what the topics delivered, and the
order checker run on those deliveries."""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from atomickafka.client import AtomicKafkaClient, Delivery
from atomickafka.logs import _JsonFormatter
from atomickafka.node.config import NodeConfig
from atomickafka.node.runtime import NodeRuntime
from tests.integration.harness import (
    Sent,
    Workload,
    assert_order_checked,
    collect_deliveries,
    run_cli,
    running_cluster,
    send_concurrently,
)

pytestmark = pytest.mark.integration

#: (sample name, labels) -> value, as one scrape read them.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def values(samples: Samples, name: str, **labels: str) -> list[float]:
    """Every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return [v for (n, have), v in samples.items() if n == name and want <= have]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(values(samples, name, **labels))


def scrape_until(port: int, done: Callable[[Samples], bool], timeout_s: float = 60) -> Samples:
    """Scrape until ``done`` holds (the gauges move once per status interval, and a
    counter moves just after its batch is written); the last scrape otherwise."""
    deadline = time.monotonic() + timeout_s
    samples: Samples = {}
    while time.monotonic() < deadline:
        try:
            samples = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            samples = {}
        if samples and done(samples):
            break
        time.sleep(0.5)
    return samples


def client_records(sent: list[Sent]) -> int:
    """ClientMessage records the clients wrote: one per destination, or one to the relay."""
    return sum(1 if s.via else len(s.destinations) for s in sent)


def run_and_scrape(
    bootstrap: str,
    topics: list[str],
    workload: Workload,
    done: Callable[[Samples, Mapping[str, list[Delivery]]], bool],
    log_dir: Path,
    **cluster: Any,
) -> tuple[list[Sent], dict[str, list[Delivery]], Samples]:
    """Run a cluster with its metrics on a free port of 127.0.0.1, send ``workload``,
    read every topic's deliveries, then scrape until ``done`` holds; the order checker
    runs on the deliveries."""
    port = free_port()
    with running_cluster(
        bootstrap, topics, log_dir=log_dir, metrics_port=port, metrics_host="127.0.0.1", **cluster
    ):
        sent = send_concurrently(bootstrap, workload, "split")
        expected = {t: sum(t in s.destinations for s in sent) for t in topics}
        deliveries = collect_deliveries(bootstrap, topics, expected, "split")
        samples = scrape_until(port, lambda samples: done(samples, deliveries))
    assert_order_checked(sent, deliveries)
    assert {t: len(d) for t, d in deliveries.items()} == expected
    return sent, deliveries, samples


def test_cluster_metrics_count_what_the_nodes_delivered(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    topics = [topic_factory() for _ in range(3)]

    def settled(samples: Samples, deliveries: Mapping[str, list[Delivery]]) -> bool:
        return all(
            total(samples, "atomickafka_node_deliveries_total", topic=t) == len(deliveries[t])
            and total(samples, "atomickafka_node_pending_messages", topic=t) == 0
            for t in topics
        )

    workload = Workload(topics, 150, clients=2, seed=17)
    sent, deliveries, samples = run_and_scrape(
        kafka_bootstrap, topics, workload, settled, tmp_path, standby=True, name="metrics"
    )
    assert sum(values(samples, "atomickafka_node_records_in_total", type="ClientMessage")) == (
        client_records(sent)
    )
    for topic in topics:
        delivered = len(deliveries[topic])
        assert total(samples, "atomickafka_node_deliveries_total", topic=topic) == delivered
        out = total(samples, "atomickafka_node_records_out_total", topic=topic, kind="delivery")
        assert out == delivered
        latency = "atomickafka_node_delivery_latency_seconds"
        assert total(samples, f"{latency}_count", topic=topic) == delivered
        assert total(samples, f"{latency}_bucket", topic=topic, le="+Inf") == delivered
        assert total(samples, "atomickafka_node_pending_messages", topic=topic) == 0
        assert total(samples, "atomickafka_node_dead_letters_total", topic=topic) == 0
        assert values(samples, "atomickafka_node_recovery_seconds", topic=topic)
        assert sorted(values(samples, "atomickafka_node_active", topic=topic)) == [0.0, 1.0]
        lag = values(samples, "atomickafka_node_input_lag_records", topic=topic)
        assert lag and max(lag) <= 1  # at most a transaction's commit marker
        restarts = {"role": "node", "key": topic}
        assert values(samples, "atomickafka_cluster_restarts_total", **restarts) == [0.0]


def test_partitioned_cluster_metrics_count_the_mergers_deliveries(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    topics = [topic_factory() for _ in range(2)]

    def settled(samples: Samples, deliveries: Mapping[str, list[Delivery]]) -> bool:
        return all(
            total(samples, "atomickafka_merger_deliveries_total", topic=t)
            == total(samples, "atomickafka_node_deliveries_total", topic=t)
            == len(deliveries[t])
            for t in topics
        )

    workload = Workload(topics, 100, clients=2, seed=5)
    _, deliveries, samples = run_and_scrape(
        kafka_bootstrap, topics, workload, settled, tmp_path, partitions=2, name="metrics-layers"
    )
    for topic in topics:
        delivered = len(deliveries[topic])
        assert total(samples, "atomickafka_merger_deliveries_total", topic=topic) == delivered
        layers = values(samples, "atomickafka_node_deliveries_total", topic=topic)
        assert len(layers) == 2 and sum(layers) == delivered  # each message at one layer
        latency = "atomickafka_merger_delivery_latency_seconds_count"
        assert total(samples, latency, topic=topic) == delivered
        read = {"topic": topic, "type": "PartitionDeliveryMessage"}
        assert total(samples, "atomickafka_merger_records_in_total", **read) == delivered
        assert values(samples, "atomickafka_merger_active", topic=topic) == [1.0]
        merger = {"role": "merger", "key": f"{topic}/merger"}
        assert values(samples, "atomickafka_cluster_restarts_total", **merger) == [0.0]


@contextmanager
def captured_log(name: str) -> Iterator[io.StringIO]:
    """The JSON lines logger ``name`` writes at level info while the block runs."""
    stream, logger = io.StringIO(), logging.getLogger(name)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_JsonFormatter())
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_node_serves_its_own_metrics_and_names_itself_in_its_log(
    kafka_bootstrap: str, topic_factory: Callable[[], str]
) -> None:
    topic, port = topic_factory(), free_port()
    config = NodeConfig(kafka_bootstrap, topic, metrics_port=port, metrics_host="127.0.0.1")
    runtime = NodeRuntime(config)
    labels = {"topic": topic, "layer": ""}
    with captured_log("atomickafka.node") as log:
        thread = threading.Thread(target=runtime.run, kwargs={"max_seconds": 120})
        thread.start()
        try:
            active = scrape_until(
                port, lambda s: values(s, "atomickafka_node_active", **labels) == [1]
            )
            with AtomicKafkaClient(kafka_bootstrap) as client:
                mid = client.send("measured", [topic])
            deliveries = collect_deliveries(kafka_bootstrap, [topic], {topic: 1}, "split")
            samples = scrape_until(
                port, lambda s: total(s, "atomickafka_node_deliveries_total", **labels) == 1
            )
        finally:
            runtime.stop()
            thread.join(timeout=60)
    assert not thread.is_alive()
    assert_order_checked([Sent(mid, (topic,), "measured", "")], deliveries)
    assert values(active, "atomickafka_node_active", **labels) == [1.0]
    assert total(samples, "atomickafka_node_deliveries_total", **labels) == 1
    assert total(samples, "atomickafka_node_delivery_latency_seconds_count", **labels) == 1
    lines = [orjson.loads(line) for line in log.getvalue().splitlines()]
    assert lines and all(
        (line["node"], line["topic"], line["layer"]) == (topic, topic, None) for line in lines
    )
    opened = [line for line in lines if " active: input " in line["msg"]]
    assert opened and opened[0]["offset"] == 0


def hold_port() -> tuple[socket.socket, int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port: int = holder.getsockname()[1]
    return holder, port


@pytest.mark.parametrize("command", ["cluster", "node"])
def test_a_taken_metrics_port_is_one_line_and_exit_2(kafka_bootstrap: str, command: str) -> None:
    holder, port = hold_port()
    where: Mapping[str, list[str]] = {"cluster": ["--topics", "a,b"], "node": ["--topic", "a"]}
    try:
        out = run_cli(
            command,
            "--bootstrap-server",
            kafka_bootstrap,
            *where[command],
            "--metrics-port",
            str(port),
            "--metrics-host",
            "127.0.0.1",
            timeout=60,
        )
    finally:
        holder.close()
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if "cannot serve metrics" in line]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0], out.stderr
    assert "Traceback" not in out.stderr
