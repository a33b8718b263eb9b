"""The Prometheus endpoints on the real broker: scraped over HTTP on 127.0.0.1 while
clients send, their delivery counters equal to what the topics delivered, and the
order checker run on those deliveries."""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from atomickafka.client import AtomicKafkaClient, Delivery
from atomickafka.kafka.status import read_statuses, wait_for_nodes
from atomickafka.logs import _JsonFormatter
from atomickafka.node import launch
from atomickafka.node.config import ClusterConfig, NodeConfig
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
    log_path: Path,
    *,
    partitions: int = 1,
    standby: bool = False,
) -> tuple[list[Sent], dict[str, list[Delivery]], Samples]:
    """Run a cluster with its metrics on a free port of 127.0.0.1, send ``workload``,
    read every topic's deliveries, then scrape until ``done`` holds; the order checker
    runs on the deliveries.

    The cluster is up once every node has published a live status and every merger
    shows active on the endpoint. (A merger's own status may say "replaying" until
    traffic arrives: one that opens after a layer's first watermark transaction waits
    for an offset the commit marker holds.)"""
    port = free_port()
    node = NodeConfig(
        bootstrap, topics[0], partitions=partitions, metrics_port=port, metrics_host="127.0.0.1"
    )
    config = ClusterConfig(tuple(topics), node, standby=standby)
    with launch.running_cluster(config, log_path=log_path, wait_s=None):
        keys = [k for k in launch.cluster_keys(topics, partitions) if not k.endswith("/merger")]
        wait_for_nodes(bootstrap, keys, timeout_s=90)
        if partitions > 1:
            up = scrape_until(
                port, lambda s: total(s, "atomickafka_merger_active") == len(topics), 90
            )
            assert total(up, "atomickafka_merger_active") == len(topics), up
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
            and max(values(samples, "atomickafka_node_input_lag_records", topic=t) or [9]) <= 1
            for t in topics
        )

    # keyed, as most production traffic: the latency histogram missed every keyed
    # delivery while it read sentAt only as the envelope's last field (issue 26, item 4)
    workload = Workload(topics, 150, clients=2, seed=17, keys=("k1", "k2", "k3"))
    sent, deliveries, samples = run_and_scrape(
        kafka_bootstrap, topics, workload, settled, tmp_path / "cluster.log", standby=True
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
        assert values(samples, "atomickafka_node_input_behind_seconds", topic=topic)
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
        kafka_bootstrap, topics, workload, settled, tmp_path / "cluster.log", partitions=2
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


def test_counters_go_on_across_a_restart_and_the_restart_is_counted(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """kill -9 a node: cluster restarts it; its counters add up over both processes (the
    replay is not counted again), its dead process's gauges are gone."""
    topic, port = topic_factory(), free_port()
    labels = {"topic": topic, "layer": ""}
    sent: list[Sent] = []

    def send(n: int) -> Samples:
        with AtomicKafkaClient(kafka_bootstrap) as client:
            for _ in range(n):
                value = {"i": len(sent)}
                sent.append(Sent(client.send(value, [topic]), (topic,), value, ""))
        return scrape_until(
            port, lambda s: total(s, "atomickafka_node_deliveries_total", **labels) == len(sent)
        )

    with running_cluster(
        kafka_bootstrap,
        [topic],
        log_dir=tmp_path,
        name="metrics-restart",
        metrics_port=port,
        metrics_host="127.0.0.1",
        snapshot_every_s=3600.0,  # no snapshot before the kill: the restart replays all 20
    ):
        send(20)
        victim = read_statuses(kafka_bootstrap)[topic].pid
        os.kill(victim, signal.SIGKILL)
        restarted = {"role": "node", "key": topic}

        def back(samples: Samples) -> bool:
            return values(samples, "atomickafka_cluster_restarts_total", **restarted) == [1] and (
                values(samples, "atomickafka_node_active", **labels) == [1]
            )

        after_restart = scrape_until(port, back)
        samples = send(20)
        deliveries = collect_deliveries(kafka_bootstrap, [topic], {topic: 40}, "split")
    assert_order_checked(sent, deliveries)
    assert back(after_restart), after_restart
    pids = {dict(k[1])["pid"] for k in after_restart if k[0] == "atomickafka_node_active"}
    assert pids and str(victim) not in pids  # the dead process's gauge is dropped
    assert total(samples, "atomickafka_node_deliveries_total", **labels) == 40
    assert total(samples, "atomickafka_node_delivery_latency_seconds_count", **labels) == 40
    assert total(samples, "atomickafka_node_records_replayed_total", **labels) >= 20
    typed = {**labels, "type": "ClientMessage"}
    assert total(samples, "atomickafka_node_records_in_total", **typed) == 40


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
