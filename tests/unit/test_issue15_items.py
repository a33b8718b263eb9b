# ruff: noqa: E501, N818, PLC0415, RUF028
# mypy: disable-error-code="arg-type,assignment,attr-defined,unused-ignore,no-redef"
# (runs unchanged on fd868a8 too: per-version imports and fakes, see issue15_compat)
"""Issue 15, items 1-7: one scenario each, run unchanged on fd868a8 and on lead.

Each test is the issue's reproduction, through APIs both versions have (Simulator,
LayeredSimulator, Engine, Merger, the wire codec, the runtimes' resume and producer
set-up); compat.py adapts only how records get into logs.
"""

from __future__ import annotations

import orjson
import pytest

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.wire import (
    MAX_TIMESTAMP,
    Message,
    MessageType,
    decode_record,
    encode_bundle,
    value_digest,
)
from tests.unit.issue15_compat import (
    NEW,
    LayeredSimulator,
    LayerSend,
    Send,
    at,
    drain,
    inject_bytes,
    make_sim,
    tick,
)

ALGORITHMS = list(Algorithm)


# ------------------------------------------------------------------ item 1


def stray_ack(
    mid: str,
    dests: tuple[str, ...],
    sender: str,
    ts: int,
    alg: Algorithm,
    partition: int | None = None,
) -> Message:
    return Message(mid, MessageType.ACK, dests, None, senderID=f"node-{sender}",
                   sentFromTopic=sender, timeStamp=ts, partitionID=partition,
                   digest="0" * 16, protocol=alg.value)  # fmt: skip


@pytest.mark.parametrize("kind", ["tick", "ack"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_item1_a_stray_clock_at_one_node_stops_no_topic(algorithm: Algorithm, kind: str) -> None:
    """A has delivered 10 local messages (clock 10); a stray record just under 2^48
    above A's clock is written into A's log; then a multicast {A, B} and one more.
    Both must be delivered at A and at B, nothing left pending."""
    sim = make_sim(["A", "B"], algorithm)
    for i in range(10):
        sim.send(Send("c", f"local-{i}", ("A",), i, "A"))
    drain(sim)
    clock = sim.result().engines["A"].clock
    ts = clock + 2**48 - 1
    stray = tick(ts, "A") if kind == "tick" else stray_ack("x", ("A", "B"), "B", ts, algorithm)
    sim.append("A", stray)
    drain(sim)
    sim.send(Send("c", "m", ("A", "B"), "v", "A"))
    sim.send(Send("c", "after", ("A", "B"), "w", "B"))
    result = drain(sim)
    got = {t: [i for i in result.delivered_ids(t) if not i.startswith("local")] for t in "AB"}
    assert got["A"] == got["B"] == ["m", "after"] or got["A"] == got["B"] == ["after", "m"], (
        got,
        result.stuck(),
        result.rejected_reasons(),
    )


# ------------------------------------------------------------------ item 2


@pytest.mark.parametrize("kind", ["tick", "ack"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_item2_the_mergers_tick_after_a_stray_clock_is_taken(
    algorithm: Algorithm, kind: str
) -> None:
    """(integration test_2's records) A stray record at 2^48 in layer 0 of T's log;
    a message to {T} on layer 0 is delivered at about 2^48; the merger asks idle layer
    1 to tick there. The merged stream of T must deliver the message."""
    sim = LayeredSimulator(["T", "U"], 2, algorithm=algorithm)
    ts = 2**48
    stray = (
        tick(ts, "T", 0) if kind == "tick" else stray_ack("x", ("T", "U"), "U", ts, algorithm, 0)
    )
    sim.sims[0].append("T", stray)
    sim.send(LayerSend("c", "first", ("T",), "on layer 0", "T", layer=0))
    sim.advance(20_000)
    result = sim.result()
    assert result.merged_ids("T") == ["first"], (result.merged_ids("T"), result.stuck())


# ------------------------------------------------------------------ item 3


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_item3_a_notify_at_max_timestamp_makes_no_undecodable_proposal(
    algorithm: Algorithm,
) -> None:
    """A's clock is walked up by stray ticks, each as far as the node accepts (at most
    40 records); then B's Notify at MAX_TIMESTAMP. Every record A writes must carry a
    timestamp <= MAX_TIMESTAMP and decode again (a peer's decoder reads it)."""
    node = Engine("A", algorithm=algorithm)
    for _ in range(40):
        if node.clock >= MAX_TIMESTAMP - 2**48:
            break
        node.step([at(tick(min(node.clock + 2**48, MAX_TIMESTAMP - 1), "A"))])
    value = b'"boom"'
    notify = Message("boom", MessageType.NOTIFY, ("A", "B"), value, "node-B", "B", MAX_TIMESTAMP,
                     digest=value_digest(value), protocol=algorithm.value)  # fmt: skip
    step = node.step([at(notify)])
    for out in step.outputs:
        m = out.message
        assert (m.timeStamp or 0) <= MAX_TIMESTAMP, (node.clock, m)
        if m.messageType is not MessageType.DELIVERY:
            raw = encode_bundle([m], sender_id="node-A", sent_from="A", protocol=algorithm.value)
            decode_record(raw)  # MessageError: what the peer's decoder says


# ------------------------------------------------------------------ item 4

BAD = b'\xff{"a": [}'


def bad_bundle(a: str, b: str) -> bytes:
    """integration test_4's record, byte for byte."""
    header = {
        "messageType": "Bundle", "senderID": "mallory", "sentFromTopic": b,
        "protocol": "direct", "formatVersion": 2,
        "messages": [{"messageID": "bad", "messageType": "ClientMessage",
                      "topic": [a, b], "valueBytes": len(BAD)}],
    }  # fmt: skip
    return orjson.dumps(header) + b"\n" + BAD


def test_item4_a_bundled_value_that_is_not_json_is_never_delivered() -> None:
    sim = make_sim(["A", "B"], Algorithm.DIRECT)
    how = inject_bytes(sim, "A", bad_bundle("A", "B"))
    sim.send(Send("c", "after", ("A", "B"), "w", "A"))
    result = drain(sim)
    for t in "AB":
        for m in result.deliveries[t]:
            assert m.messageID != "bad", (t, how, m.value)
            orjson.loads(m.value or b"")  # a delivered value is valid UTF-8 JSON
    assert result.delivered_ids("A") == result.delivered_ids("B") == ["after"]


# ------------------------------------------------------------------ item 5


def genuine_delivery(mid: str, ts: int) -> bytes:
    """A Delivery as T's merger writes it (JSON form: both versions read it)."""
    from atomickafka.core.wire import encode_delivery

    value = b'"v"'
    return encode_delivery(Message(mid, MessageType.DELIVERY, ("T",), value, "merger-T", "T", ts,
                                   partitionID=0, digest=value_digest(value), protocol="direct"))  # fmt: skip


FOREIGN = {
    "not-json": b"not json",
    "client-message": orjson.dumps(
        {"messageID": "c", "messageType": "ClientMessage", "topic": ["T"], "value": 1}
    ),
    "foreign-delivery": orjson.dumps(
        {
            "messageID": "foreign",
            "senderID": "someone",
            "messageType": "DeliveryMessage",
            "value": 1,
            "topic": ["T"],
            "sentFromTopic": "T",
            "timeStamp": 2**50,
            "formatVersion": 2,
            "digest": "0" * 16,
        }
    ),  # fmt: skip
}


class FakeRecord:
    def __init__(self, value: bytes, offset: int) -> None:
        self._value, self._offset = value, offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None

    def headers(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return 0

    def error(self) -> None:
        return None


class FakeConsumer:
    def __init__(self, high: int) -> None:
        self.high = high

    def get_watermark_offsets(self, *_: object, **__: object) -> tuple[int, int]:
        return 0, self.high

    def consumer_group_metadata(self) -> object:
        return object()

    def assign(self, *_: object) -> None:
        pass

    def unassign(self) -> None:
        pass


def restart_merger_and_release(
    t_records: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The merger of T (2 layers) restarts with ``t_records`` in T, through the real
    runtime's resume code; then layer 0 delivers m1 (already in T) and m2 (new), layer 1
    promises past both. Returns the ids the merger releases."""
    from atomickafka.core.merger import LayerDelivery, LayerWatermark
    from atomickafka.kafka import consumer as consumer_module
    from atomickafka.node import merger_runtime
    from atomickafka.node.config import NodeConfig

    records = [FakeRecord(v, i) for i, v in enumerate(t_records)]
    runtime = merger_runtime.MergerRuntime(
        NodeConfig("localhost:1", "T", partitions=2, create_topics=False)
    )
    consumer = FakeConsumer(len(records))
    if NEW:  # lead: the runtime reads T backwards for its own last Delivery
        monkeypatch.setattr(consumer_module, "read_range", lambda c, p, s, e: records[s:e])
        resume = runtime._last_own_delivery(consumer)
        if resume is not None:
            runtime.batch.resume_after(resume)
        merger = runtime.batch.merger
    else:  # fd868a8: MergerRuntime._start reads T's last record and resumes after it
        monkeypatch.setattr(
            merger_runtime, "last_record", lambda c, t: records[-1] if records else None
        )
        runtime._consumer = consumer
        runtime._start()
        merger = runtime.merger
    out = merger.handle_batch(
        [LayerDelivery(0, 5, "m1"), LayerDelivery(0, 6, "m2"), LayerWatermark(1, 10)]
    )
    return [o.messageID for o in out if hasattr(o, "messageID")]


@pytest.mark.parametrize("foreign", list(FOREIGN))
def test_item5_a_foreign_record_at_the_end_of_t_neither_stops_nor_misleads_the_merger(
    foreign: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = restart_merger_and_release(
        [genuine_delivery("m1", 5), FOREIGN[foreign]], monkeypatch
    )
    assert released == ["m2"]  # m1 was written before the restart, m2 is new


# ------------------------------------------------------------------ item 6


class Spy(Exception):
    pass


def test_item6_every_producer_of_a_nodes_ordered_stream_is_gapless_or_transactional(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The producer settings a node writes its deliveries/control records with must
    rule out a gap (enable.gapless.guarantee, or transactions)."""
    seen: list[dict[str, object]] = []
    if NEW:  # lead: the node writes through one of two writers (node/runtime.py)
        from atomickafka.kafka import producer
        from atomickafka.kafka.connection import Connection
        from atomickafka.node import writers

        class FakeProducer:
            def __init__(self, config: dict[str, object], **_: object) -> None:
                seen.append(dict(config))

            def init_transactions(self, *_: object) -> None:
                pass

        monkeypatch.setattr(producer, "Producer", FakeProducer)  # the writers' one wrapper's
        where = Connection("localhost:1")
        writers.TransactionalWriter(where, "T", FakeConsumer(0), "atomickafka-in.T")  # type: ignore[arg-type]
        writers.AckedWriter(where, FakeConsumer(0), "atomickafka-in.T", 0, None)  # type: ignore[arg-type]
    else:  # fd868a8: NodeRuntime.run builds its RecordProducer right after the admin checks
        from atomickafka.node import runtime
        from atomickafka.node.config import NodeConfig

        def spy(bootstrap: str, overrides: object = None, **extra: object) -> None:
            from atomickafka.kafka.settings import producer_config

            seen.append(producer_config(bootstrap, overrides, **extra))  # type: ignore[arg-type]
            raise Spy

        monkeypatch.setattr(runtime, "RecordProducer", spy)
        monkeypatch.setattr(runtime, "too_small", lambda *a: {})
        with pytest.raises(Spy):
            runtime.NodeRuntime(NodeConfig("localhost:1", "T", create_topics=False)).run()
    assert seen
    for config in seen:
        assert config.get("enable.gapless.guarantee") is True or "transactional.id" in config, (
            config
        )


# ------------------------------------------------------------------ item 7


def test_item7_a_message_whose_destinations_run_different_protocols_stalls_nothing() -> None:
    """A runs direct, B and C poc (lead's test_a_protocol_map_aborts_a_mixed_message_
    everywhere, minus its new-API bookkeeping): the mixed message must be aborted, and
    the message to {B, C} behind it delivered; nothing left pending."""
    protocols = {"A": Algorithm.DIRECT, "B": Algorithm.POC, "C": Algorithm.POC}
    sim = make_sim(["A", "B", "C"], Algorithm.POC, protocols)
    sim.send(Send("c", "mixed", ("A", "B", "C"), 1, "B"))
    sim.send(Send("c", "poc-only", ("B", "C"), 2, "B"))
    result = drain(sim)
    assert result.delivered_ids("B") == result.delivered_ids("C") == ["poc-only"], (
        result.stuck(),
        result.rejected_reasons(),
    )
    assert result.delivered_ids("A") == []
    assert result.stuck() == {}, result.stuck()


@pytest.mark.parametrize("ts", [MAX_TIMESTAMP - 1, MAX_TIMESTAMP])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_item3_at_the_exact_boundary(algorithm: Algorithm, ts: int) -> None:
    """A's clock at MAX_TIMESTAMP - 1 (set directly, as lead's own
    test_an_exhausted_clock_refuses_instead_of_crashing does), then B's Notify at
    ``ts``. On lead the Notify is read at a log time of MAX_TIMESTAMP µs, so the
    log-time bound (§4.11) applies it at once and the exhaustion check alone decides:
    at MAX_TIMESTAMP - 1 A proposes MAX_TIMESTAMP, the largest encodable timestamp; at
    MAX_TIMESTAMP a proposal would be 2^53, so the Notify is refused as exhausted and B
    is told (Abort) not to wait for A. (Checking the clock before applying ``ts`` --
    the off-by-one -- proposes 2^53 here.)"""
    node = Engine("A", algorithm=algorithm)
    node.state.clock = MAX_TIMESTAMP - 1
    value = b'"boom"'
    notify = Message("boom", MessageType.NOTIFY, ("A", "B"), value, "node-B", "B", ts,
                     digest=value_digest(value), protocol=algorithm.value)  # fmt: skip
    if "logTime" in Message._fields:
        notify = notify._replace(logTime=MAX_TIMESTAMP // 1000)
    step = node.step([notify])
    for out in step.outputs:
        m = out.message
        assert (m.timeStamp or 0) <= MAX_TIMESTAMP, m
        if m.messageType is not MessageType.DELIVERY:
            raw = encode_bundle([m], sender_id="node-A", sent_from="A", protocol=algorithm.value)
            decode_record(raw)
    sent = [
        (o.topic, o.message.messageType, o.message.timeStamp)
        for o in step.outputs
        if o.message.messageType is not MessageType.DELIVERY  # poc, direct: decided at once
    ]
    if ts == MAX_TIMESTAMP - 1:  # the last proposal there is
        assert not step.rejected, [r.reason for r in step.rejected]
        kind = MessageType.NOTIFY if algorithm is Algorithm.DIRECT else MessageType.ACK
        assert sent == [("B", kind, MAX_TIMESTAMP)]
        assert node.clock == MAX_TIMESTAMP
        return
    assert [r.message.messageID for r in step.rejected] == ["boom"]
    assert "exhausted" in step.rejected[0].reason, step.rejected[0].reason
    assert [(t, k) for t, k, _ in sent] == [("B", MessageType.ABORT)]
    assert node.clock == MAX_TIMESTAMP - 1 and node.pending_count == 0
