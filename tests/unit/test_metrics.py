"""The Prometheus metrics of nodes, mergers and cluster (atomickafka/metrics/), updated
from real batch-layer output; no HTTP here (tests/integration/test_metrics.py scrapes)."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from atomickafka.core.compact import encode_compact_bundle, encode_compact_tick
from atomickafka.core.engine import Algorithm
from atomickafka.core.memory import Window
from atomickafka.core.reader import DEAD_LETTER_ERROR_HEADER, TYPE_HEADER, PlainRecord
from atomickafka.core.reasons import LABELS, LEADS, Reason, Refusal, refusal
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    Message,
    MessageError,
    MessageType,
    client_message,
    encode_bundle,
    encode_client,
    encode_delivery,
    encode_members,
    encode_tick,
    encode_watermark,
    value_bytes,
)
from atomickafka.errors import ConfigError
from atomickafka.logs import _JsonFormatter, log_context
from atomickafka.metrics.cluster import RestartsCollector
from atomickafka.metrics.histogram import BatchObserver
from atomickafka.metrics.records import (
    REASON_LABELS,
    SENT_HEADER,
    UNKNOWN,
    dead_letter_reason,
    record_type,
    sent_at_ms,
)
from atomickafka.metrics.shell import DEAD_LETTER, DELIVERY, LATENCY_BUCKETS, ShellMetrics
from atomickafka.node.batch import NodeBatch, NodeSpec, OutKind, OutRecord
from atomickafka.node.config import ClusterConfig, NodeConfig

NOW_MS = 1_795_000_000_000


def node_spec(topic: str = "A") -> NodeSpec:
    return NodeSpec(
        topic=topic,
        node_id=f"node-{topic}",
        role=topic,
        algorithm=Algorithm.DIRECT,
        input_topic=f"atomickafka-in.{topic}",
        input_partition=0,
        delivery_topic=topic,
        dead_letter_topic=f"atomickafka-dlq.{topic}",
        snapshot_topic=f"atomickafka-snap.{topic}",
        input_prefix="atomickafka-in.",
    )


def in_log(values: list[bytes], start: int = 0) -> list[PlainRecord]:
    return [
        PlainRecord(v, topic="atomickafka-in.A", offset=start + i, timestamp_ms=NOW_MS + i)
        for i, v in enumerate(values)
    ]


def single(mid: str, sent_at: int | None = NOW_MS) -> bytes:
    return encode_client(client_message(mid, ["A"], {"n": mid}, "c", sent_at=sent_at))


def value(metrics: ShellMetrics, name: str, **labels: str) -> float:
    got = metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def delivery(mid: str, sent_at: int | None) -> bytes:
    message = client_message(mid, ["A", "B"], "v", "c", sent_at=sent_at)
    return encode_delivery(
        message._replace(messageType=MessageType.DELIVERY, sentFromTopic="A", timeStamp=7)
    )


# ---------------------------------------------------------------------------- records


def test_the_type_of_every_record_a_node_or_merger_reads() -> None:
    notify = Message(
        "m", MessageType.NOTIFY, ("A", "B"), value_bytes("v"), "node-B", "B", 5,
        digest=client_message("m", ["A", "B"], "v", "c").digest, protocol="direct",
    )  # fmt: skip
    seen = {
        "ClientMessage": encode_client(client_message("x" * 500, ["A"], "v", "s" * 500)),
        "Bundle": encode_bundle([notify], sender_id="node-B", sent_from="B", protocol="direct"),
        "TickMessage": encode_tick("node-A", 3),
        "compact Bundle": encode_compact_bundle(
            [notify], sender_id="node-B", sent_from="B", protocol="direct"
        ),
        "compact TickMessage": encode_compact_tick("node-A", 3, 1),
        "MembersMessage": encode_members("node-A", ["A", "B"]),
        "WatermarkMessage": encode_watermark("node-A/0", 3, 0),
        "DeliveryMessage": delivery("d", None),
    }
    for kind, raw in seen.items():
        assert record_type(raw, None) == kind.removeprefix("compact ")
    spaced = b'{"messageID": "m", "messageType" : "ClientMessage", "topic": ["A"]}'
    assert record_type(spaced, []) == "ClientMessage"  # another writer's JSON spacing


def test_a_record_whose_type_cannot_be_seen_is_unknown() -> None:
    assert record_type(b"not json", None) == UNKNOWN
    assert record_type(None, None) == UNKNOWN
    assert record_type(b'{"messageType": "Bogus"}', None) == UNKNOWN
    tick = encode_compact_tick("node-A", 3)
    for compact in (
        tick[:3],
        tick[:1] + b"\x09" + tick[2:],
        tick.replace(b"\x02\x00", b"\x07\x00"),
    ):
        assert record_type(compact, None) == UNKNOWN  # cut, a newer version, another kind
    far = b'{"pad": "' + b"x" * 5000 + b'", "messageType": "ClientMessage"}'
    # past the first bytes the reader decides (tests/unit/test_metrics_contract.py)
    assert record_type(far, None) == "ClientMessage"
    assert record_type(b"anything", [(TYPE_HEADER, b"DeliveryMessage")]) == "DeliveryMessage"
    assert record_type(b"anything", {TYPE_HEADER: b"Nonsense"}) == UNKNOWN


def test_sent_at_is_read_from_the_envelope_tail_or_the_header() -> None:
    assert sent_at_ms(delivery("m", 1_700_000_000_123), ()) == 1_700_000_000_123
    assert sent_at_ms(delivery("m", None), ()) is None
    tricky = client_message("m", ["A"], {"a": 1, "sentAt": 5}, "c")
    inner = encode_delivery(
        tricky._replace(messageType=MessageType.DELIVERY, sentFromTopic="A", timeStamp=7)
    )
    assert b'"sentAt":5}' in inner and sent_at_ms(inner, ()) is None  # the value's own field
    assert sent_at_ms(b"raw bytes", [(SENT_HEADER, b"1700000000999")]) == 1_700_000_000_999
    assert sent_at_ms(b"raw bytes", [(SENT_HEADER, b"soon")]) is None
    assert sent_at_ms(None, ()) is None


def real_reasons() -> dict[Refusal, str]:
    """Dead-letter reasons as the code writes them (each with its code), with the label
    each must get."""
    window = Window(60_000)
    late = window.lateness(NOW_MS - 600_000, NOW_MS)
    skewed = window.lateness(NOW_MS + 600_000, NOW_MS)
    signer = Signer([b"0123456789abcdef0123456789abcdef"])
    unsigned = signer.refusal("t", None, b"v", [])
    forged = signer.refusal("t", None, b"v", [("atomickafka-sig", b"v1:00")])
    assert late is not None and skewed is not None
    assert unsigned is not None and forged is not None
    return {
        late: "late",
        skewed: "clock skew",
        unsigned: "unsigned",
        forged: "bad signature",
        refusal(Reason.INVALID_RECORD, str(MessageError("messageID", "must be a string", 7))): (
            "invalid record"
        ),
        refusal(Reason.PROTOCOL_MISMATCH, "node-B runs poc, this node runs direct"): (
            "protocol mismatch"
        ),
        refusal(Reason.CONFLICT, "messageID 'm' already names a message to A"): "conflict",
        refusal(Reason.ABORTED, "destination X has no node"): "aborted",
        refusal(Reason.MERGER_REFUSED, "backwards"): "merger refused",
        refusal(Reason.STRAY, "TickMessage from intruder: only merger-A may tick"): "stray",
    }


def test_dead_letter_reasons_become_a_few_labels() -> None:
    """The label is the code's, whatever the prose says; the prose keeps its lead."""
    for why, label in real_reasons().items():
        assert dead_letter_reason(why.code) == label, why
        assert why.text.startswith(LEADS[why.code]), why
    late, _, unsigned, forged, *_ = real_reasons()
    assert late.text.startswith("late: sent ") and unsigned.text.startswith("unsigned: no ")
    assert forged.text.startswith("wrong signature")
    assert dead_letter_reason(None) == "other"  # a letter without a code


def test_every_reason_has_a_label_and_a_lead() -> None:
    """Every code a dead letter can carry has a metrics label (a fixed, small set, each
    with a series from the start) and the lead of its prose."""
    assert set(LABELS) == set(LEADS) == set(Reason)
    labels = [LABELS[reason] for reason in Reason]
    assert len(set(labels)) == len(labels) <= 20
    assert (*labels, "other") == REASON_LABELS
    for reason in Reason:
        lead = LEADS[reason]
        assert lead == "" or lead.endswith(": "), reason
        assert refusal(reason, "details") == Refusal(reason, f"{lead}details")


# ---------------------------------------------------------------------------- a node's metrics


def test_a_batch_read_and_written_moves_the_counters() -> None:
    spec = node_spec()
    batch = NodeBatch(spec, NodeBatch.fresh_engine(spec))
    metrics = ShellMetrics("node", "A")
    records = in_log([single("m1"), single("m2"), b"not json", single("m3", None)])
    ready = batch.step(records, wall_s=0)
    metrics.read(records, ready.replayed)
    metrics.wrote(ready.records, NOW_MS / 1000 + 0.004)
    labels = {"topic": "A", "layer": ""}
    assert value(metrics, "atomickafka_node_records_in_total", **labels, type="ClientMessage") == 3
    assert value(metrics, "atomickafka_node_records_in_total", **labels, type=UNKNOWN) == 1
    kinds = [r.kind for r in ready.records]
    assert kinds.count(OutKind.DELIVERY) == 3
    assert value(metrics, "atomickafka_node_deliveries_total", **labels) == 3
    for kind in set(kinds):
        out = value(metrics, "atomickafka_node_records_out_total", **labels, kind=kind.value)
        assert out == kinds.count(kind)
    reason = {**labels, "reason": "invalid record"}
    assert value(metrics, "atomickafka_node_dead_letters_total", **reason) == 1
    latency = "atomickafka_node_delivery_latency_seconds"
    assert value(metrics, f"{latency}_count", **labels) == 2  # m3 has no sentAt
    assert value(metrics, f"{latency}_sum", **labels) == pytest.approx(0.008, abs=1e-5)
    assert value(metrics, f"{latency}_bucket", **labels, le="0.001") == 0
    assert value(metrics, f"{latency}_bucket", **labels, le="0.005") == 2


def test_replayed_records_are_counted_apart() -> None:
    spec = node_spec()
    records = in_log([single("m1"), single("m2"), single("m3")])
    batch = NodeBatch(spec, NodeBatch.fresh_engine(spec), replay_until=2)
    metrics = ShellMetrics("node", "A")
    ready = batch.step(records, wall_s=0)
    metrics.read(records, ready.replayed)
    metrics.wrote(ready.records, NOW_MS / 1000)
    labels = {"topic": "A", "layer": ""}
    assert value(metrics, "atomickafka_node_records_replayed_total", **labels) == 2
    assert value(metrics, "atomickafka_node_records_in_total", **labels, type="ClientMessage") == 1
    assert value(metrics, "atomickafka_node_deliveries_total", **labels) == 1  # m3 only


def test_one_record_rounds_count_as_batches_do() -> None:
    """Issue 38: a round of one record (the usual one at a moderate rate) takes a path
    of its own, and the counters' children are kept between rounds."""
    spec = node_spec()
    batch = NodeBatch(spec, NodeBatch.fresh_engine(spec))
    metrics = ShellMetrics("node", "A")
    labels = {"topic": "A", "layer": ""}
    written: list[OutKind] = []
    for record in in_log([single("m1"), b"not json", single("m2")]):
        ready = batch.step([record], wall_s=0)
        metrics.read([record], ready.replayed)
        metrics.wrote(ready.records, NOW_MS / 1000)
        written += [r.kind for r in ready.records]
    metrics.read([], 0)
    assert value(metrics, "atomickafka_node_records_in_total", **labels, type="ClientMessage") == 2
    assert value(metrics, "atomickafka_node_records_in_total", **labels, type=UNKNOWN) == 1
    assert value(metrics, "atomickafka_node_deliveries_total", **labels) == 2
    for kind in set(written):
        out = value(metrics, "atomickafka_node_records_out_total", **labels, kind=kind.value)
        assert out == written.count(kind)


def test_the_kinds_the_metrics_look_into_are_the_batch_layers() -> None:
    assert OutKind(DELIVERY) is OutKind.DELIVERY and OutKind(DEAD_LETTER) is OutKind.DEAD_LETTER


def test_gauges_active_recovery_and_protocol_mismatches() -> None:
    metrics = ShellMetrics("node", "A", 2)
    labels = {"topic": "A", "layer": "2"}
    assert value(metrics, "atomickafka_node_active", **labels) == 0  # a standby until the lease
    metrics.became_active()
    assert value(metrics, "atomickafka_node_active", **labels) == 1
    metrics.count_protocol_mismatches(5)  # still replaying: what the replay rebuilt
    metrics.recovered(1.25, protocol_mismatches=7)
    metrics.count_protocol_mismatches(9)
    metrics.count_protocol_mismatches(9)
    assert value(metrics, "atomickafka_node_protocol_mismatches_total", **labels) == 2
    assert value(metrics, "atomickafka_node_recovery_seconds", **labels) == 1.25
    metrics.measure(pending=4, head_age_s=2.5, input_lag=-1)
    metrics.measure(pending=4, head_age_s=None, input_lag=None)
    assert value(metrics, "atomickafka_node_pending_messages", **labels) == 4
    assert value(metrics, "atomickafka_node_oldest_pending_age_seconds", **labels) == 0
    assert value(metrics, "atomickafka_node_input_lag_records", **labels) == 0
    metrics.measure(pending=0, head_age_s=None, input_lag=9_000, input_behind_s=2.25)
    assert value(metrics, "atomickafka_node_input_behind_seconds", **labels) == 2.25


def test_a_merger_has_the_same_metrics_under_its_own_names() -> None:
    metrics = ShellMetrics("merger", "A")
    released = OutRecord(OutKind.DELIVERY, "A", delivery("m", NOW_MS), 0)
    refused = OutRecord(
        OutKind.DEAD_LETTER,
        "atomickafka-dlq.A",
        b"x",
        headers=((DEAD_LETTER_ERROR_HEADER, b"merger refused: stale"),),
        reason=Reason.MERGER_REFUSED,
    )
    metrics.wrote([released, refused], NOW_MS / 1000 + 0.5)
    metrics.read(in_log([encode_watermark("node-A/0", 3, 0)]))
    assert value(metrics, "atomickafka_merger_deliveries_total", topic="A") == 1
    latency = value(metrics, "atomickafka_merger_delivery_latency_seconds_sum", topic="A")
    assert latency == pytest.approx(0.5, abs=1e-5)
    reason = {"topic": "A", "reason": "merger refused"}
    assert value(metrics, "atomickafka_merger_dead_letters_total", **reason) == 1
    typed = {"topic": "A", "type": "WatermarkMessage"}
    assert value(metrics, "atomickafka_merger_records_in_total", **typed) == 1
    assert metrics.protocol_mismatches is None and metrics.replayed is None


def test_two_shells_in_one_process_keep_their_own_registries() -> None:
    one, two = ShellMetrics("node", "A"), ShellMetrics("node", "A")
    one.became_active()
    assert value(two, "atomickafka_node_active", topic="A", layer="") == 0


# ---------------------------------------------------------------------------- histograms


def exposition(registry: CollectorRegistry) -> str:
    text = generate_latest(registry).decode()
    return "\n".join(line for line in text.splitlines() if "_created" not in line)


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_observed_at_once_equals_observing_each_value(fast: bool) -> None:
    values = [0.0, 0.0004, 0.001, 0.0011, 0.02, 0.5, 3.0, 59.0, 500.0, 0.001]
    one_by_one, batched = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("lat_seconds", "h", ["t"], buckets=LATENCY_BUCKETS, registry=one_by_one)
    for v in values:
        reference.labels("A").observe(v)
    target = Histogram("lat_seconds", "h", ["t"], buckets=LATENCY_BUCKETS, registry=batched)
    child = target.labels("A")
    observer = BatchObserver(child if fast else _Opaque(child))  # type: ignore[arg-type]
    assert observer.observe_all(values[:4]) == 4
    assert observer.observe_all([]) == 0
    assert observer.observe_all(values[4:]) == 6
    assert exposition(batched) == exposition(one_by_one)


class _Opaque:
    """A histogram child seen only through ``observe`` (a prometheus-client without the
    per-bucket values)."""

    def __init__(self, child: Histogram) -> None:
        self._inner = child

    def observe(self, amount: float) -> None:
        self._inner.observe(amount)


# ---------------------------------------------------------------------------- cluster


def test_restarts_are_collected_from_the_supervisors_count() -> None:
    totals = {("node", "A"): 2, ("merger", "B/merger"): 0}
    registry = CollectorRegistry()
    registry.register(RestartsCollector(lambda: totals))
    get = registry.get_sample_value
    assert get("atomickafka_cluster_restarts_total", {"role": "node", "key": "A"}) == 2
    totals[("node", "A")] = 3
    assert get("atomickafka_cluster_restarts_total", {"role": "node", "key": "A"}) == 3
    assert get("atomickafka_cluster_restarts_total", {"role": "merger", "key": "B/merger"}) == 0


def test_cluster_children_never_serve_the_clusters_port() -> None:
    node = NodeConfig("b:9092", "A", partitions=2, metrics_port=9464, metrics_host="127.0.0.1")
    cluster = ClusterConfig(("A", "B"), node)
    children = cluster.node_configs() + cluster.merger_configs()
    assert len(children) == 6 and all(c.metrics_port is None for c in children)
    assert NodeConfig.from_dict(node.to_dict()) == node
    with pytest.raises(ConfigError, match="metrics port"):
        NodeConfig("b:9092", "A", metrics_port=70000)


# ---------------------------------------------------------------------------- logs


def formatted(logger: logging.Logger, message: str, **extra: Any) -> dict[str, Any]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_JsonFormatter())
    logger.addHandler(handler)
    try:
        logger.warning(message, extra=extra)
    finally:
        logger.removeHandler(handler)
    line: dict[str, Any] = orjson.loads(stream.getvalue())
    return line


def test_log_lines_carry_the_shells_node_topic_layer_and_a_records_offset() -> None:
    logger = logging.getLogger("atomickafka.test-metrics")
    assert "node" not in formatted(logger, "before")
    with log_context(node="A/1", topic="A", layer=1):
        line = formatted(logger, "set aside in %s", fields={"offset": 42})
        with log_context(offset=7):
            inner = formatted(logger, "inner")
        own = formatted(logger, "own", fields={"topic": "other"})
    assert line["msg"] == "set aside in %s" and line["offset"] == 42
    assert (line["node"], line["topic"], line["layer"]) == ("A/1", "A", 1)
    assert inner["offset"] == 7 and inner["node"] == "A/1"
    assert own["topic"] == "other"  # a line's own fields win
    assert "node" not in formatted(logger, "after")


def test_metric_names_follow_prometheus_conventions() -> None:
    registry = CollectorRegistry()
    ShellMetrics("node", "A", registry=registry)
    ShellMetrics("merger", "A", registry=registry)
    for family in registry.collect():
        assert re.fullmatch(r"atomickafka_(node|merger)_[a-z_]+", family.name), family.name
        if family.type in {"gauge", "histogram"}:
            assert not family.name.endswith("_total")
        if any(time in family.name for time in ("latency", "recovery", "_age")):
            assert family.name.endswith("_seconds"), family.name  # base units


def test_every_dead_letter_reason_has_a_series_before_the_first_dead_letter() -> None:
    """Issue 26, item 13: ``increase(atomickafka_node_dead_letters_total[5m]) > 0`` never
    fires on a node's first dead letter when its series appears only then."""
    for role in ("node", "merger"):
        metrics = ShellMetrics(role, "A")
        labels = {"topic": "A", "layer": ""} if role == "node" else {"topic": "A"}
        name = f"atomickafka_{role}_dead_letters_total"
        for reason in REASON_LABELS:
            assert value(metrics, name, **labels, reason=reason) == 0, (role, reason)
    assert {"invalid record", "unsigned", "aborted", "other"} <= set(REASON_LABELS)


def test_a_log_line_names_its_process() -> None:
    """Issue 26, item 13: under ``cluster`` every child logs to one stream."""
    import os  # noqa: PLC0415

    line = formatted(logging.getLogger("atomickafka.test-metrics"), "which process?")
    assert line["pid"] == os.getpid()


def test_a_killed_supervisors_metrics_directory_is_removed_by_the_next(tmp_path: Path) -> None:
    """Issue 26, item 13: a ``cluster`` killed with SIGKILL cannot remove its metrics
    directory; the next one on the host removes those of supervisors that are gone
    (named after their pid), and leaves a running one's alone."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from atomickafka.metrics.cluster import (  # noqa: PLC0415
        DIRECTORY_PREFIX,
        remove_orphaned_directories,
    )

    dead_pid = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_pid.wait()  # reaped: its pid runs nothing now
    stale = tmp_path / f"{DIRECTORY_PREFIX}{dead_pid.pid}-x1y2"
    running = tmp_path / f"{DIRECTORY_PREFIX}{os.getpid()}-a1b2"
    other = tmp_path / f"{DIRECTORY_PREFIX}oldstyle"
    for folder in (stale, running, other):
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"x")
    assert remove_orphaned_directories(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and running.exists() and other.exists()
