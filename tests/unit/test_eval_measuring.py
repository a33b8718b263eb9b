"""What the suite and the bench measure while a load runs: probes, the delivery tally and
percentiles (no Kafka: records as the wire format's encoders write them)."""

from __future__ import annotations

import math

import orjson
import pytest

from atomickafka.core.reader import TYPE_HEADER, PlainRecord
from atomickafka.core.signing import Signer
from atomickafka.core.wire import Message, MessageType, client_message, encode_delivery
from atomickafka.evaluation.load.clients import payload
from atomickafka.evaluation.load.measuring import (
    WARMUP_VALUE,
    DeliveryTally,
    Probe,
    delivery_arrival,
    delivery_flow,
    percentile,
    read_probe,
    verified,
)

TOPICS = {"A": "A", "B": "B"}


def _delivered(mid: str, at: str, value: object, dests: tuple[str, ...] = ("A", "B")) -> bytes:
    sent = client_message(mid, dests, value, "client-1")
    message: Message = sent._replace(
        messageType=MessageType.DELIVERY, senderID=f"node-{at}", sentFromTopic=at, timeStamp=5
    )
    return encode_delivery(message)


def _record(raw: bytes, topic: str, at_ms: int | None = None) -> PlainRecord:
    return PlainRecord(raw, topic=topic, timestamp_ms=at_ms)


def test_a_probe_is_read_from_the_value_the_clients_send() -> None:
    value = orjson.dumps(payload(1, 7, True, 1_000_000))
    assert read_probe(value) == Probe(1_000_000, True)
    assert read_probe(orjson.dumps(WARMUP_VALUE)) is None
    for other in (None, b"", b"not json", b"[1]", b'{"t": "soon"}', b'{"t": 1.5}'):
        assert read_probe(other) is None


def test_only_the_topics_own_node_delivers_into_it() -> None:
    raw = _delivered("m1", "A", payload(0, 0, True, 10))
    arrival = delivery_arrival(_record(raw, "A"), "A")
    assert arrival is not None
    assert (arrival.message_id, arrival.destination, arrival.destinations) == ("m1", "A", 2)
    assert delivery_arrival(_record(raw, "B"), "B") is None
    header = PlainRecord(raw, topic="A", headers=[(TYPE_HEADER, b"Bundle")])
    assert delivery_arrival(header, "A") is None


def test_with_a_secret_only_validly_signed_deliveries_count() -> None:
    """``eval --secret-file``: the counter takes a delivery only when its signature holds
    (§4.14); one forged under the node's own id, unsigned or with another secret, is no
    arrival."""
    signer = Signer([b"eval-tests-secret-0123456789abcdef"])
    other = Signer([b"another-secret-0123456789abcdefgh"])
    raw = _delivered("m1", "A", payload(0, 0, True, 10))
    read = verified(delivery_arrival, signer)
    good = PlainRecord(raw, topic="A", headers=signer.signed_headers("A", None, raw))
    assert read(good, "A") is not None
    for forged in (
        _record(raw, "A"),
        PlainRecord(raw, topic="A", headers=other.signed_headers("A", None, raw)),
        PlainRecord(raw + b" ", topic="A", headers=signer.signed_headers("A", None, raw)),
    ):
        assert read(forged, "A") is None
    tally = DeliveryTally(TOPICS, read)
    assert tally.add([_record(raw, "A"), good], 1.0) == 1


def test_a_message_completes_at_its_last_destination_once() -> None:
    tally = DeliveryTally(TOPICS)
    sent_s = 100.0
    multicast = payload(0, 0, True, int(sent_s * 1e6))
    single = payload(0, 1, False, int((sent_s + 1) * 1e6))
    first = [
        _record(_delivered("m1", "A", multicast), "A"),
        _record(_delivered("m1", "A", multicast), "A"),  # written again: counts once
        _record(_delivered("w1", "A", WARMUP_VALUE, ("A",)), "A"),
        _record(_delivered("m2", "B", single, ("B",)), "B"),
        _record(b"not ours", "A"),
        _record(_delivered("m9", "A", multicast), "elsewhere"),  # a topic not counted
    ]
    assert tally.add(first, now=sent_s + 2) == 2
    assert (tally.measured, tally.warmup) == (2, 1)
    assert [(c.message_id, c.multicast) for c in tally.completed] == [("m2", False)]
    assert tally.completed[0].latency_ms == pytest.approx(1000.0)
    assert tally.add([_record(_delivered("m1", "B", multicast), "B")], now=sent_s + 3) == 1
    assert [c.message_id for c in tally.completed] == ["m2", "m1"]
    assert tally.completed[1].latency_ms == pytest.approx(3000.0)
    assert tally.first_send_s == pytest.approx(sent_s)
    assert tally.last_completion_s == pytest.approx(sent_s + 3)


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0], 0.99) == 3.0
    assert math.isnan(percentile([], 0.5))


def test_a_delivery_is_timed_by_its_record_else_by_when_it_was_read() -> None:
    tally = DeliveryTally(TOPICS)
    value = payload(0, 0, True, 100_000_000)
    tally.add([_record(_delivered("m1", "A", value), "A", at_ms=101_500)], now=103.0)
    tally.add([_record(_delivered("m1", "B", value), "B")], now=104.0)  # no timestamp
    tally.add([_record(_delivered("w1", "A", WARMUP_VALUE, ("A",)), "A", 1)], now=105.0)
    assert tally.delivered_s == [pytest.approx(101.5), pytest.approx(104.0)]


def test_a_steady_flow_has_no_bucket_below_half_the_mean() -> None:
    steady = [i / 1000 for i in range(4_000)]  # 1,000 a second for 4 s
    flow = delivery_flow(steady, until_s=4.0)
    assert flow is not None
    assert (flow.buckets, flow.low, flow.longest_low_s) == (10, 0, 0.0)
    assert flow.mean_per_s == pytest.approx(1_000.0)
    assert flow.low_share == 0.0


def test_waves_of_deliveries_show_as_buckets_below_half_the_mean() -> None:
    # 0.4 s of deliveries, then 1.2 s of none, twice, then a last wave
    waves = [w * 1.6 + i / 10_000 for w in range(3) for i in range(4_000)]
    flow = delivery_flow(waves, until_s=4.0)
    assert flow is not None
    assert flow.buckets == 10
    assert flow.low == 7  # two gaps of three buckets, and the last after the third wave
    assert flow.longest_low_s == pytest.approx(1.2)
    assert flow.low_share == pytest.approx(0.7)
    assert "7 of 10 0.4 s buckets (70.0%)" in flow.describe()
    assert flow.to_dict()["longestLowS"] == pytest.approx(1.2)


def test_the_flow_counts_from_the_first_delivery_to_the_clients_stop() -> None:
    # deliveries after the clients stopped (the backlog's tail) are not judged, and
    # nor is a last part bucket
    late = [1.0 + i / 100 for i in range(100)] + [9.0, 9.5]
    flow = delivery_flow(late, until_s=2.1)
    assert flow is not None
    assert flow.buckets == 2  # 1.0-1.4, 1.4-1.8; 1.8-2.1 is not a whole bucket
    assert flow.low == 0
    assert delivery_flow([], until_s=5.0) is None
    assert delivery_flow([3.0], until_s=3.2) is None  # not one whole bucket
