"""End-to-end harness: run a cluster of nodes, drive clients, collect deliveries."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Message as KafkaMessage

from atomickafka.client import AtomicKafkaClient, Delivery
from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.kafka.consumer import read_to_end
from atomickafka.kafka.topics import Layout, control_topic, input_topic
from atomickafka.node import launch
from atomickafka.node.config import DEFAULT_STUCK_AFTER_S, ClusterConfig, NodeConfig
from atomickafka.verify.checker import DeliveryRecord, SentMessage, check, deliveries_from_client


@dataclass(frozen=True, slots=True)
class Sent:
    """What a client sent: the checker's ground truth."""

    messageID: str
    destinations: tuple[str, ...]
    value: Any
    via: str


@dataclass(slots=True)
class Workload:
    """Random overlapping destination sets, relays and single-destination messages."""

    topics: Sequence[str]
    messages: int
    clients: int = 4
    relay_share: float = 0.1
    single_share: float = 0.3
    seed: int = 0
    #: The fewest destinations of a message that is not single-destination.
    multicast_min: int = 1
    #: Partition keys to draw from (``None``: no key, round-robin over layers).
    keys: Sequence[str] | None = None
    sent: list[Sent] = field(default_factory=list)

    def plan(self, client_index: int) -> list[tuple[tuple[str, ...], str | None, Any, str | None]]:
        """This client's messages: (destinations, via, value, key)."""
        rng = random.Random(f"{self.seed}-{client_index}")
        share = self.messages // self.clients + (client_index < self.messages % self.clients)
        out: list[tuple[tuple[str, ...], str | None, Any, str | None]] = []
        for i in range(share):
            dests: tuple[str, ...]
            if rng.random() < self.single_share:
                dests = (rng.choice(self.topics),)
            else:
                k = rng.randint(min(self.multicast_min, len(self.topics)), len(self.topics))
                dests = tuple(sorted(rng.sample(list(self.topics), k)))
            others = [t for t in self.topics if t not in dests]
            via = rng.choice(others) if others and rng.random() < self.relay_share else None
            value = {"client": client_index, "i": i, "pad": "x" * rng.randint(0, 64)}
            out.append((dests, via, value, rng.choice(self.keys) if self.keys else None))
        return out


def in_threads(count: int, run: Callable[[int], None], timeout_s: float = 300) -> None:
    """Run ``run(0)`` ... ``run(count - 1)`` in parallel threads; raise the first error."""
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            run(index)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    if errors:
        raise errors[0]


def send_concurrently(bootstrap: str, workload: Workload, layout: str) -> list[Sent]:
    """Run ``workload.clients`` clients in parallel threads; return everything sent."""
    results: list[list[Sent]] = [[] for _ in range(workload.clients)]

    def run(index: int) -> None:
        with AtomicKafkaClient(bootstrap, layout=layout) as client:
            for dests, via, value, key in workload.plan(index):
                mid = client.send(value, dests, via=via, key=key)
                results[index].append(Sent(mid, dests, value, via or ""))

    in_threads(workload.clients, run)
    sent = [s for per_client in results for s in per_client]
    workload.sent = sent
    return sent


def collect_deliveries(
    bootstrap: str,
    topics: Sequence[str],
    expected: dict[str, int],
    layout: str,
    *,
    timeout_s: float = 180.0,
) -> dict[str, list[Delivery]]:
    """Each topic's deliveries as :meth:`AtomicKafkaClient.deliveries` returns them.

    Re-reads a topic from the beginning until it holds the expected count (or time runs
    out); the final read goes on until the topic has been idle for a few seconds, so a
    stray extra delivery would be seen too.
    """
    out: dict[str, list[Delivery]] = {}
    deadline = time.monotonic() + timeout_s
    reader = AtomicKafkaClient(bootstrap, layout=layout)
    for topic in topics:
        want = expected.get(topic, 0)
        while True:
            with reader.reader(topic, from_beginning=True) as topic_reader:
                got = list(topic_reader.deliveries(timeout_s=3.0))
            if len(got) >= want or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        out[topic] = got
    return out


def node_log_records(bootstrap: str, topic: str) -> Iterator[KafkaMessage]:
    """Every committed record of ``topic``'s node's logs: its input log (the split
    layout), then its control log (§7)."""
    for log in (input_topic(topic, "split"), control_topic(topic)):
        yield from read_to_end(bootstrap, log, [0], timeout_s=20)


@contextmanager
def running_cluster(
    bootstrap: str,
    topics: Sequence[str],
    *,
    algorithm: str = DEFAULT_ALGORITHM.value,
    layout: str = "split",
    partitions: int = 1,
    log_dir: Path,
    log_level: str = "warning",
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
    standby: bool = False,
    name: str | None = None,
    topics_per_process: int = 1,
    **node_settings: Any,
) -> Iterator[subprocess.Popen[bytes]]:
    """A cluster of nodes for ``topics``, its log kept in ``log_dir``; ``node_settings``
    are further :class:`NodeConfig` fields (``exactly_once``, ``secret_file``, ...);
    ``topics_per_process`` above 1 hosts that many topics' nodes per process."""
    node = NodeConfig(
        bootstrap,
        topics[0],
        algorithm=Algorithm(algorithm),
        layout=Layout(layout),
        partitions=partitions,
        stuck_after_s=stuck_after_s,
        log_level=log_level,
        **node_settings,
    )
    label = name or f"{algorithm}-{layout}-{partitions}"
    log_path = log_dir / f"cluster-{label}.log"
    config = ClusterConfig(
        tuple(topics), node, standby=standby, topics_per_process=topics_per_process
    )
    with launch.running_cluster(config, log_path=log_path) as proc:
        yield proc


def run_cli(
    *args: str, stdin: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``atomickafka ARGS…`` in a child process, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "atomickafka", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_cli_raw(
    *args: str, stdin: bytes, timeout: float = 300
) -> subprocess.CompletedProcess[bytes]:
    """``atomickafka ARGS…`` fed raw bytes on stdin (not necessarily UTF-8)."""
    return subprocess.run(
        [sys.executable, "-m", "atomickafka", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def assert_order_checked(
    sent: Sequence[Sent], deliveries: Mapping[str, Sequence[Delivery]]
) -> None:
    """Run the independent checker on what the clients were delivered; fail with its
    first violation."""
    assert_records_checked(sent, deliveries_from_client(deliveries))


def assert_records_checked(
    sent: Sequence[Sent], records: Mapping[str, Sequence[DeliveryRecord]]
) -> None:
    """Run the independent checker on delivery records; fail with its first violation."""
    report = check(
        [SentMessage(s.messageID, frozenset(s.destinations), s.value) for s in sent], records
    )
    assert report.ok, report
