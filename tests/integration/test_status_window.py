"""Start-up that does not grow with the cluster's age: a client reads only the status
topic's live window, and still finds every live node (correctness here; the timing is
measured by ``eval/bench_status_startup.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atomickafka.client import AtomicKafkaClient, OfflineDestinationError
from atomickafka.evaluation.bench.aged_status import fill_old_statuses
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.status import (
    STATUS_TOPIC_CONFIGS,
    StatusWatch,
    read_statuses,
    status_topic_spec,
)
from atomickafka.kafka.topics import STATUS_TOPIC
from tests.integration.harness import running_cluster

pytestmark = pytest.mark.integration

OLD_RECORDS = 100_000


def test_the_broker_takes_the_status_topic_settings(kafka_bootstrap: str, admin: Any) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType  # noqa: PLC0415

    ensure_topics(admin_client(kafka_bootstrap), {STATUS_TOPIC: status_topic_spec()})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, STATUS_TOPIC)]).values()
    configs = future.result(timeout=30)
    assert {k: configs[k].value for k in STATUS_TOPIC_CONFIGS} == dict(STATUS_TOPIC_CONFIGS)


def test_a_client_finds_the_live_nodes_after_100k_old_statuses(
    kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    old_keys = set(fill_old_statuses(kafka_bootstrap, OLD_RECORDS, age_s=3600.0))
    a, b, gone = topic_factory("win"), topic_factory("win"), topic_factory("win")
    # a node of ``gone`` published long ago: its records are older than the window
    fill_old_statuses(kafka_bootstrap, 10, names=[gone], age_s=600.0)
    filled_at = time.time()
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path):
        # The old records were appended just now, after statuses other tests' nodes
        # published: a window reaching back before the fill would take them in too,
        # which a cluster that aged in order never shows. This one starts after it.
        watch = StatusWatch(kafka_bootstrap, window_s=time.time() - filled_at)
        try:
            seen = watch.refresh()
        finally:
            watch.close()
        assert {a, b} <= seen.keys()
        assert not old_keys & seen.keys(), "statuses older than the window were read"
        assert all(s.live() for k, s in seen.items() if k in (a, b))
        everything = read_statuses(kafka_bootstrap, timeout_s=30.0)
        assert old_keys <= everything.keys()  # the status command still reads them all

        with AtomicKafkaClient(kafka_bootstrap) as client:
            client.send({"after": "aging"}, [a, b])
            with pytest.raises(OfflineDestinationError, match=gone):
                client.send({"to": "nowhere"}, [a, gone])
            # a made-up node that published only long ago is not live either
            with pytest.raises(OfflineDestinationError):
                client.send({"to": "the past"}, [sorted(old_keys)[0]])
            client.flush(30)
        delivered = {t: _read_values(kafka_bootstrap, t) for t in (a, b)}
        assert delivered == {a: [{"after": "aging"}], b: [{"after": "aging"}]}


def _read_values(bootstrap: str, topic: str) -> list[object]:
    """``topic``'s delivered values: the first awaited for up to 30 s (a loaded
    machine's first transaction can take seconds), then any more for 2 s."""
    with AtomicKafkaClient(bootstrap).reader(topic) as reader:
        got = list(reader.deliveries(timeout_s=30, max_messages=1))
        got += reader.deliveries(timeout_s=2)
    return [d.value for d in got]
