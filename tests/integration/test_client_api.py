"""The client library's public API against a real broker and nodes: the delivery
callback, the errors, leaving a block by an exception, and the reader's lifetime."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from atomickafka.client import (
    AtomicKafkaClient,
    AtomicKafkaError,
    DeliveryError,
    MessageError,
    OfflineDestinationError,
    SentMessage,
)
from tests.integration.harness import running_cluster

pytestmark = pytest.mark.integration

#: librdkafka refuses, on the spot, a record over its producer's message.max.bytes.
SMALL_RECORDS = {"message.max.bytes": "1000"}


def test_the_client_api(
    kafka_bootstrap: str,
    topic_factory: Callable[[], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b, ghost = topic_factory(), topic_factory(), topic_factory()
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path):
        reports: list[tuple[KafkaError | None, SentMessage]] = []
        with AtomicKafkaClient(kafka_bootstrap) as ak:
            first = ak.send({"n": 1}, [a, b], on_delivery=lambda e, s: reports.append((e, s)))
            second = ak.send("two", [a], via=b, key="k")
            ak.flush()
            with pytest.raises(OfflineDestinationError, match=ghost) as offline:
                ak.send("x", [a, ghost])
            assert isinstance(offline.value, AtomicKafkaError)
            assert isinstance(offline.value, ValueError)
            with pytest.raises(MessageError):
                ak.send("x", [a], via="not a topic!")
        assert reports == [(None, SentMessage(first, tuple(sorted((a, b))), {"n": 1}, records=2))]

        with AtomicKafkaClient(kafka_bootstrap).reader(a) as reader:
            got = list(reader.deliveries(timeout_s=15, max_messages=1))
            got += list(reader.deliveries(timeout_s=15, max_messages=1))  # goes on from there
        # two calls, two different deliveries: the second went on where the first stopped
        # (which of the two a's order puts first is the protocol's choice, not send order)
        assert sorted(d.messageID for d in got) == sorted([first, second])
        multicast = next(d for d in got if d.messageID == first)
        assert multicast.value == {"n": 1} and multicast.destinations == tuple(sorted((a, b)))
        with pytest.raises(RuntimeError, match="closed"):
            next(reader.deliveries())

        refused: list[tuple[KafkaError | None, SentMessage]] = []
        small = AtomicKafkaClient(kafka_bootstrap, config=SMALL_RECORDS)
        mid = small.send("x" * 2000, [a], on_delivery=lambda e, s: refused.append((e, s)))
        with pytest.raises(DeliveryError) as failed:
            small.flush(5)
        assert [m for m, _ in failed.value.failures] == [mid]
        assert isinstance(failed.value.failures[0][1], KafkaError)
        assert mid in str(failed.value)
        assert refused[0][0] is not None and refused[0][1].messageID == mid
        small.close()

        # Leaving the block by an exception: that exception goes on, the failed
        # delivery is logged rather than raised over it.
        caplog.set_level(logging.ERROR, logger="atomickafka.client")
        with (
            pytest.raises(KeyError, match="boom"),
            AtomicKafkaClient(kafka_bootstrap, config=SMALL_RECORDS) as leaving,
        ):
            lost = leaving.send("y" * 2000, [a])
            raise KeyError("boom")
        assert any(lost in r.getMessage() for r in caplog.records), caplog.text
