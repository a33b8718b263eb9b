"""Host processes on the real broker (``cluster --topics-per-process``, docs/DESIGN.md
§6.7): several topics' nodes in one process sharing one consumer, one control producer,
one transactional producer (one transaction per commit interval, each node's offset
committed to its own group) and one lease. Each test runs the order checker on what
the client reads and reads every delivery topic with a plain ``read_committed``
consumer, as test_faults.py does for a process per node: a host SIGKILLed at random
moments and restarted, a standby host taking over, and a paused host fenced when it
wakes (a zombie), each losing and repeating nothing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from atomickafka.kafka.status import wait_for_nodes
from atomickafka.node.role_shell import EXIT_FENCED
from tests.integration.harness import (
    Workload,
    assert_order_checked,
    running_cluster,
    send_concurrently,
)
from tests.integration.test_faults import (
    BOUND_S,
    FAST,
    _alive,
    delivered_once,
    kill_at_random,
    pause_past_takeover,
    send_during,
    statuses_of,
)

pytestmark = pytest.mark.integration


@pytest.mark.timeout(BOUND_S)
def test_hosted_nodes_order_multicasts_within_and_across_hosts(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """Four topics, two per process: multicasts within one host and across both are
    delivered once everywhere, in one order; the two nodes of a host report one pid."""
    topics = [topic_factory() for _ in range(4)]
    with running_cluster(
        kafka_bootstrap, topics, log_dir=tmp_path, name="hosts", topics_per_process=2
    ):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        workload = Workload(topics, 3000, clients=2, seed=5, single_share=0.3, multicast_min=2)
        sent = send_concurrently(kafka_bootstrap, workload, "split")
        deliveries = delivered_once(kafka_bootstrap, topics, sent)
        statuses = statuses_of(kafka_bootstrap)
    pids = [statuses[t].pid for t in topics]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2], pids
    assert_order_checked(sent, deliveries)


@pytest.mark.timeout(BOUND_S)
def test_a_host_killed_at_random_moments_loses_nothing_and_repeats_nothing(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """Four topics in one host process, half the messages multicast, while the host is
    SIGKILLed at random moments four times; the supervisor restarts it and every node
    recovers from its snapshot and its own group's committed offset (the shared
    transaction committed them together). A 120 s memory window, as in test_faults."""
    topics = [topic_factory() for _ in range(4)]
    rng = random.Random(3)
    with running_cluster(
        kafka_bootstrap,
        topics,
        log_dir=tmp_path,
        name="host-kills",
        topics_per_process=4,
        **FAST,
        window_ms=120_000,
    ):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        workload = Workload(topics, 8000, clients=3, seed=13, single_share=0.5, multicast_min=2)
        sent, kills = send_during(
            kafka_bootstrap,
            workload,
            lambda: kill_at_random(
                kafka_bootstrap, topics, rng, kills=4, pauses=(1.0, 4.0), within_s=200
            ),
        )
        deliveries = delivered_once(kafka_bootstrap, topics, sent, timeout_s=300)
    assert kills >= 3
    assert len(sent) == 8000
    assert_order_checked(sent, deliveries)


@pytest.mark.timeout(BOUND_S)
def test_a_standby_host_takes_over_and_the_paused_host_is_fenced(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """`cluster --standby --topics-per-process 2`: the active host is paused (SIGSTOP)
    past its lease; the standby host takes the group's lease, initialises the group's
    transactional producer (fencing the paused one) and recovers both nodes. The paused
    host wakes (SIGCONT) while traffic flows and stops as fenced (exit status 4); plain
    consumers see every delivery once, and the order holds."""
    topics = [topic_factory() for _ in range(2)]
    with running_cluster(
        kafka_bootstrap,
        topics,
        log_dir=tmp_path,
        standby=True,
        name="host-zombie",
        topics_per_process=2,
        **FAST,
    ):
        wait_for_nodes(kafka_bootstrap, topics, timeout_s=60)
        sent = send_concurrently(
            kafka_bootstrap, Workload(topics, 1000, clients=2, seed=8), "split"
        )
        zombie = statuses_of(kafka_bootstrap)[topics[0]]
        started = time.monotonic()
        sent += pause_past_takeover(kafka_bootstrap, topics, zombie.pid, topics)
        took_s = time.monotonic() - started
        deliveries = delivered_once(kafka_bootstrap, topics, sent)
        after = statuses_of(kafka_bootstrap)
    print(f"standby host: took over and the paused one stopped {took_s:.1f} s after SIGSTOP")
    assert after[topics[0]].pid == after[topics[1]].pid != zombie.pid
    assert not _alive(zombie.pid), "the fenced host stopped"
    log = (tmp_path / "cluster-host-zombie.log").read_text()
    key = "+".join(topics)
    assert f"host {key} (pid {zombie.pid}) exited with {EXIT_FENCED}" in log, log[-3000:]
    assert_order_checked(sent, deliveries)
