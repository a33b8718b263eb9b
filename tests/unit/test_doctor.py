"""``doctor``'s checks, pure: facts in, findings (with fixes) out."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from atomickafka.core.engine import Algorithm
from atomickafka.doctor import (
    Deployment,
    Severity,
    TopicKind,
    exit_status,
    render_json,
    render_text,
)
from atomickafka.doctor.cluster_checks import check_cluster, kafka_version_floor
from atomickafka.doctor.deployment import CREATE_CONFIGS, DEFAULT_SNAPSHOT_INTERVAL_S
from atomickafka.doctor.facts import (
    ClusterFacts,
    DeploymentFacts,
    PartitionFacts,
    TopicFacts,
    TransactionsProbe,
)
from atomickafka.doctor.findings import Finding
from atomickafka.doctor.node_checks import check_nodes
from atomickafka.doctor.topic_checks import check_topics
from atomickafka.kafka.status import NodeState, Role, Status, WaitingHead
from atomickafka.kafka.topics import Layout
from atomickafka.node.config import NodeConfig
from atomickafka.node.snapshots import LoadedSnapshot

B = "kafka:9092"
NOW = 1_000_000.0


def healthy_topic(
    name: str, kind: TopicKind, partitions: int = 1, rf: int = 3, records: int | None = None
) -> TopicFacts:
    configs = {
        "min.insync.replicas": "2" if rf >= 3 else "1",
        "retention.ms": "604800000",
        "retention.bytes": "-1",
        "cleanup.policy": "delete",
        "message.timestamp.type": "CreateTime",
        "max.message.bytes": "1048588",
        "unclean.leader.election.enable": "false",
        **CREATE_CONFIGS[kind],
    }
    replicas = tuple(range(1, rf + 1))
    if records is None:  # a healthy deployment has set nothing aside
        records = 0 if kind is TopicKind.DEAD_LETTERS else 10
    parts = tuple(PartitionFacts(p, 1, replicas, replicas, 0, records) for p in range(partitions))
    return TopicFacts(name, True, parts, configs)


def healthy(deployment: Deployment, rf: int = 3) -> dict[str, TopicFacts]:
    return {
        name: healthy_topic(name, topic.kind, topic.partitions, rf)
        for name, topic in deployment.kafka_topics().items()
    }


def codes(findings: list[Finding], severity: Severity = Severity.FAIL) -> set[tuple[str, str]]:
    return {(f.code, f.subject) for f in findings if f.severity is severity}


#: One log per node (``--no-control-log``): the checks of control logs are in
#: test_control_log_shell.py.
DEPLOYMENT = Deployment(("orders", "audit"), control_log=False)


def test_a_healthy_deployment_has_no_failure_and_every_topic_is_checked() -> None:
    findings = check_topics(DEPLOYMENT, healthy(DEPLOYMENT), 3, B)
    assert exit_status(findings) == 0
    assert not codes(findings) and not codes(findings, Severity.WARN)
    assert {f.subject for f in findings if f.code == "topic-settings"} == set(
        DEPLOYMENT.kafka_topics()
    )


@pytest.mark.parametrize(
    ("topic", "change", "code"),
    [
        ("atomickafka-in.orders", {"retention.ms": "3600000"}, "retention"),
        ("atomickafka-in.orders", {"retention.bytes": "1000000"}, "retention"),
        ("atomickafka-in.orders", {"message.timestamp.type": "CreateTime"}, "timestamp-type"),
        ("atomickafka-in.orders", {"cleanup.policy": "compact"}, "cleanup-policy"),
        ("orders", {"cleanup.policy": "compact,delete"}, "cleanup-policy"),
        ("orders", {"min.insync.replicas": "1"}, "min-insync-replicas"),
        ("orders", {"min.insync.replicas": "4"}, "min-insync-replicas"),
        ("audit", {"unclean.leader.election.enable": "true"}, "unclean-leader-election"),
        ("atomickafka-dlq.audit", {"max.message.bytes": "1000"}, "max-message-bytes"),
    ],
)
def test_an_unsafe_topic_setting_fails_with_its_fix(
    topic: str, change: dict[str, str], code: str
) -> None:
    facts = healthy(DEPLOYMENT)
    facts[topic] = dataclasses.replace(facts[topic], configs={**facts[topic].configs, **change})
    findings = check_topics(DEPLOYMENT, facts, 3, B)
    failed = [f for f in findings if f.severity is Severity.FAIL]
    assert [(f.code, f.subject) for f in failed] == [(code, topic)]
    assert failed[0].fix and (topic in failed[0].fix or "topics create" in failed[0].fix)
    assert exit_status(findings) == 1


def test_min_insync_replicas_of_one_on_three_brokers_names_the_fix() -> None:
    facts = healthy(DEPLOYMENT)
    facts["orders"] = dataclasses.replace(
        facts["orders"], configs={**facts["orders"].configs, "min.insync.replicas": "1"}
    )
    (finding,) = [f for f in check_topics(DEPLOYMENT, facts, 3, B) if f.severity == "fail"]
    assert "min.insync.replicas=1" in finding.message
    assert finding.fix == (
        f"kafka-configs.sh --bootstrap-server {B} --alter --entity-type topics "
        "--entity-name orders --add-config min.insync.replicas=2"
    )


def test_replication_isr_partitions_truncation_and_missing_topics() -> None:
    layered = Deployment(("orders",), Layout.SPLIT, partitions=2, control_log=False)
    facts = healthy(layered)
    facts.pop("atomickafka-dlq.orders")
    log = facts["atomickafka-in.orders"]
    facts["atomickafka-in.orders"] = dataclasses.replace(
        log,
        partitions=(
            PartitionFacts(0, 1, (1, 2, 3), (1,), 5, 10),  # short of min ISR; truncated
            PartitionFacts(1, -1, (1, 2, 3), (), 0, 10),  # no leader
        ),
    )
    layers = facts["atomickafka-layers.orders"]
    facts["atomickafka-layers.orders"] = dataclasses.replace(
        layers, partitions=layers.partitions[:1]
    )
    facts["orders"] = dataclasses.replace(
        facts["orders"], partitions=(PartitionFacts(0, 1, (1,), (1,)),)
    )
    facts["atomickafka-status"] = dataclasses.replace(
        facts["atomickafka-status"],
        partitions=(PartitionFacts(0, 1, (1, 2, 3), (1, 2), 0, 3),),
    )
    findings = check_topics(layered, facts, 3, B)
    assert codes(findings) == {
        ("topic-missing", "atomickafka-dlq.orders"),
        ("isr", "atomickafka-in.orders"),
        ("truncated-log", "atomickafka-in.orders"),
        ("partitions", "atomickafka-layers.orders"),
        ("replication-factor", "orders"),
        ("min-insync-replicas", "orders"),  # 2 > 1 replica: every write refused
    }
    assert ("isr", "atomickafka-status") in codes(findings, Severity.WARN)
    missing = next(f for f in findings if f.code == "topic-missing")
    assert (
        missing.fix
        == f"atomickafka topics create --bootstrap-server {B} --topics orders --partitions 2"
    )


def _with(facts: dict[str, TopicFacts], topic: str, **configs: str) -> dict[str, TopicFacts]:
    facts[topic] = dataclasses.replace(facts[topic], configs={**facts[topic].configs, **configs})
    return facts


def test_a_finite_retention_passes_when_it_outlasts_two_snapshots_and_the_downtime() -> None:
    """§6.5: input logs may delete records older than twice the snapshot interval plus
    the longest downtime (by default 30 s and one day); never by size."""
    log = "atomickafka-in.orders"
    minimum = DEPLOYMENT.min_retention_ms
    assert minimum == (2 * 30 + 86_400) * 1000
    assert NodeConfig("b", "t").snapshot_every_s == DEFAULT_SNAPSHOT_INTERVAL_S
    for ms, ok in ((minimum, True), (7 * 86_400_000, True), (minimum - 1, False)):
        facts = _with(healthy(DEPLOYMENT), log, **{"retention.ms": str(ms)})
        assert (("retention", log) not in codes(check_topics(DEPLOYMENT, facts, 3, B))) is ok
    facts = _with(healthy(DEPLOYMENT), log, **{"retention.ms": "3600000"})
    (short,) = [f for f in check_topics(DEPLOYMENT, facts, 3, B) if f.severity is Severity.FAIL]
    assert "(1 h)" in short.message and "twice the snapshot interval" in short.message
    assert f"retention.ms={minimum} or more" in short.fix
    # an operator who restarts nodes within the hour may keep logs for two
    quick = dataclasses.replace(DEPLOYMENT, max_downtime_s=3600)
    facts = _with(healthy(quick), log, **{"retention.ms": str(2 * 3_600_000)})
    assert not codes(check_topics(quick, facts, 3, B))
    # a bound by size, however large, can delete records a node still needs
    facts = _with(healthy(DEPLOYMENT), log, **{"retention.bytes": str(10**12)})
    assert ("retention", log) in codes(check_topics(DEPLOYMENT, facts, 3, B))


def _cut_log(deployment: Deployment, name: str, low: int) -> dict[str, TopicFacts]:
    facts = healthy(deployment)
    parts = tuple(
        dataclasses.replace(p, low=low if p.partition == 0 else 0, high=100)
        for p in facts[name].partitions
    )
    facts[name] = dataclasses.replace(facts[name], partitions=parts)
    return facts


def _snapshot(
    role: str, seq: int, offsets: dict[int, int], readable: bool = True
) -> LoadedSnapshot:
    if readable:
        return LoadedSnapshot(role, seq, offsets, {})
    return LoadedSnapshot(role, seq, offsets, None, "bad")


@pytest.mark.parametrize(
    ("snapshots", "ok"),
    [
        ({"orders": (_snapshot("orders", 4, {0: 60}),)}, True),  # covers what is left
        (
            {"orders": (_snapshot("orders", 4, {0: 60}, False), _snapshot("orders", 3, {0: 30}))},
            False,
        ),  # the newest is damaged, the one before it below the cut
        ({"orders": (_snapshot("orders", 4, {0: 30}),)}, False),  # cut above it
        ({"audit": (_snapshot("audit", 4, {0: 60}),)}, False),  # another topic's
        ({}, False),
    ],
)
def test_a_log_cut_by_retention_passes_while_a_readable_snapshot_covers_it(
    snapshots: dict[str, tuple[LoadedSnapshot, ...]], ok: bool
) -> None:
    """§6.5: the rule a node starts by (it refuses to start on a log cut below every
    readable snapshot) is the rule doctor judges a cut log by."""
    log = "atomickafka-in.orders"
    findings = check_topics(DEPLOYMENT, _cut_log(DEPLOYMENT, log, 50), 3, B, snapshots)
    assert (("truncated-log", log) not in codes(findings)) is ok
    if ok:
        (info,) = [f for f in findings if f.code == "truncated-log"]
        assert info.severity is Severity.INFO and "orders from snapshot 4" in info.message


def test_a_cut_layer_stream_needs_a_merger_snapshot_covering_every_layer() -> None:
    layered = Deployment(("orders",), Layout.SPLIT, partitions=2, control_log=False)
    stream, log = "atomickafka-layers.orders", "atomickafka-in.orders"
    merger = {"orders/merger": (_snapshot("orders/merger", 2, {0: 70, 1: 0}),)}
    assert not codes(check_topics(layered, _cut_log(layered, stream, 50), 3, B, merger))
    behind = {"orders/merger": (_snapshot("orders/merger", 2, {0: 40, 1: 0}),)}
    findings = check_topics(layered, _cut_log(layered, stream, 50), 3, B, behind)
    assert codes(findings) == {("truncated-log", stream)}
    # a layer's input log needs that layer's node's snapshot
    layer = {"orders/0": (_snapshot("orders/0", 1, {0: 55}),)}
    assert not codes(check_topics(layered, _cut_log(layered, log, 50), 3, B, layer))
    assert codes(check_topics(layered, _cut_log(layered, log, 50), 3, B, merger))


def test_a_single_broker_is_fine_for_development() -> None:
    facts = healthy(DEPLOYMENT, rf=1)
    findings = check_topics(DEPLOYMENT, facts, 1, B)
    assert exit_status(findings) == 0 and not codes(findings, Severity.WARN)


# --------------------------------------------------------------------- cluster

NEW_KAFKA = {0: (3, 12), 22: (0, 5), 44: (0, 1), 60: (0, 1), 75: (0, 0)}


def test_the_kafka_version_from_protocol_versions() -> None:
    assert kafka_version_floor(NEW_KAFKA) == (4, 0)
    assert kafka_version_floor({0: (0, 9), 22: (0, 4), 60: (0, 1)}) == (2, 8)
    assert kafka_version_floor({0: (0, 8), 22: (0, 2), 44: (0, 1)}) == (2, 3)
    assert kafka_version_floor({}) is None


def test_cluster_findings() -> None:
    good = ClusterFacts(
        (1, 2, 3),
        NEW_KAFKA,
        {b: {"unclean.leader.election.enable": "false"} for b in (1, 2, 3)},
        TransactionsProbe(True, 0.2),
    )
    findings = check_cluster(good, B)
    assert exit_status(findings) == 0
    assert {f.code for f in findings} == {"broker-version", "brokers", "transactions"}
    bad = dataclasses.replace(
        good,
        api_versions={0: (0, 8), 22: (0, 2), 44: (0, 1)},
        broker_configs={1: {"unclean.leader.election.enable": "true"}},
        transactions=TransactionsProbe(False, 10.0, "Local: Timed out"),
    )
    failed = codes(check_cluster(bad, B))
    assert failed == {
        ("broker-version", "brokers"),
        ("unclean-leader-election", "broker 1"),
        ("transactions", B),
    }


# ----------------------------------------------------------------------- nodes


def status(key: str, **changes: object) -> Status:
    topic = key.split("/", maxsplit=1)[0]
    base = Status(
        key=key,
        topic=topic,
        role=Role.MERGER if key.endswith("/merger") else Role.NODE,
        node_id=f"node-{key}",
        algorithm=Algorithm.DIRECT,
        layout=Layout.SPLIT,
        time=NOW - 1,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def facts_with(statuses: dict[str, Status], **extra: object) -> DeploymentFacts:
    topics = healthy(DEPLOYMENT)
    base = DeploymentFacts(topics, statuses, {}, NOW)
    return dataclasses.replace(base, **extra)  # type: ignore[arg-type]


def test_live_nodes_are_fine() -> None:
    facts = facts_with({"orders": status("orders"), "audit": status("audit")})
    findings = check_nodes(DEPLOYMENT, facts, B)
    assert exit_status(findings) == 0
    assert codes(findings, Severity.OK) == {("node", "orders"), ("node", "audit")}


def test_missing_stale_stopped_and_stuck_nodes_fail() -> None:
    stuck = status(
        "audit",
        waiting=(WaitingHead("c-7", 12, decided=False, waiting_for=("orders",)),),
        oldest_pending_age_s=42.0,
    )
    findings = check_nodes(DEPLOYMENT, facts_with({"audit": stuck}), B, stuck_after_s=10)
    assert codes(findings) == {("node-missing", "orders"), ("stuck-head", "audit")}
    head = next(f for f in findings if f.code == "stuck-head")
    assert "c-7" in head.message and "orders" in head.message
    stale = status("orders", time=NOW - 60)
    stopped = status("audit", state=NodeState.STOPPED)
    findings = check_nodes(DEPLOYMENT, facts_with({"orders": stale, "audit": stopped}), B)
    assert codes(findings) == {("node-stale", "orders"), ("node-stopped", "audit")}
    assert "atomickafka node --topic orders" in next(
        iter(f.fix for f in findings if f.code == "node-stale")
    )


def test_protocols_layouts_dead_letters_and_lag() -> None:
    mixed = {
        "orders": status("orders", algorithm=Algorithm.OPTIMIZED, protocol_mismatches=3),
        "audit": status("audit", format_version=2),  # not upgraded yet
    }
    topics = healthy(DEPLOYMENT)
    topics["atomickafka-dlq.audit"] = healthy_topic(
        "atomickafka-dlq.audit", TopicKind.DEAD_LETTERS, records=2
    )
    topics["atomickafka-in.orders"] = dataclasses.replace(
        topics["atomickafka-in.orders"], partitions=(PartitionFacts(0, 1, (1,), (1,), 0, 50_000),)
    )
    facts = facts_with(mixed, topics=topics, committed={"orders": 100})
    findings = check_nodes(DEPLOYMENT, facts, B, max_lag=1000)
    assert codes(findings) == {("protocol", "nodes")}
    assert codes(findings, Severity.WARN) == {
        ("protocol-mismatch", "orders"),
        ("versions", "nodes"),
        ("dead-letters", "atomickafka-dlq.audit"),
        ("lag", "orders"),
    }
    lag = next(f for f in findings if f.code == "lag")
    assert "49900" in lag.message


def test_reports_as_text_and_json() -> None:
    findings = [
        Finding("retention", Severity.FAIL, "atomickafka-in.a", "too short", "make it -1"),
        Finding("brokers", Severity.OK, "brokers", "3 brokers"),
        Finding("dead-letters", Severity.WARN, "atomickafka-dlq.a", "2 set aside", "read them"),
    ]
    text = render_text(findings, "header")
    lines = text.splitlines()
    assert lines[0] == "header" and lines[1].startswith("FAIL  retention")
    assert lines[2].strip() == "fix: make it -1" and "brokers" not in text.split("\n", 4)[3]
    assert lines[-1] == "1 unsafe or failing, 1 warnings, 1 fine"
    assert "3 brokers" in render_text(findings, "h", verbose=True)
    data = orjson.loads(orjson.dumps(render_json(findings, bootstrap=B)))
    assert data["ok"] is False and data["bootstrap"] == B
    assert data["counts"] == {"ok": 1, "info": 0, "warn": 1, "fail": 1}
    assert data["findings"][0] == {
        "code": "retention",
        "severity": "fail",
        "subject": "atomickafka-in.a",
        "message": "too short",
        "fix": "make it -1",
    }


def test_create_specs_carry_what_ordering_needs() -> None:
    specs = Deployment(("a",), Layout.SPLIT, partitions=3).specs()
    log = specs["atomickafka-in.a"]
    assert log.partitions == 3
    assert log.configs["message.timestamp.type"] == "LogAppendTime"
    assert log.configs["retention.ms"] == "-1" and log.configs["retention.bytes"] == "-1"
    assert specs["atomickafka-layers.a"].partitions == 3
    assert specs["atomickafka-status"].configs["cleanup.policy"] == "compact"
    assert int(specs["a"].configs["max.message.bytes"]) >= 1_048_576
    shared = Deployment(("a",), Layout.SHARED).kafka_topics()
    assert shared["a"].kind is TopicKind.INPUT  # the thesis layout: T is its own input log


def test_topics_create_aligns_the_min_insync_replicas_doctor_fails() -> None:
    """Issue 26, item 10: what ``topics create`` sets on an existing topic."""
    from atomickafka.doctor.deployment import aligned_min_insync  # noqa: PLC0415

    assert aligned_min_insync(3, "1") == "2"  # an acks=all write on one broker
    assert aligned_min_insync(3, None) == "2"  # the broker's default
    assert aligned_min_insync(1, "2") == "1"  # above the replicas: every write refused
    assert aligned_min_insync(3, "4") == "2"
    assert aligned_min_insync(3, "2") is None and aligned_min_insync(1, "1") is None
    assert aligned_min_insync(2, "2") is None  # a choice doctor only warns about


def test_lean_notifies_toward_a_release_before_them_fail() -> None:
    """§4.16: a node writing lean Notifies beside one of a release that refuses them (its
    status has no notifyValues) fails; every node upgraded, any mix is fine."""
    mixed = {"orders": status("orders", notify_values="carrier"), "audit": status("audit")}
    findings = check_nodes(DEPLOYMENT, facts_with(mixed), B)
    assert ("notify-values", "nodes") in codes(findings, Severity.FAIL)
    finding = next(f for f in findings if f.code == "notify-values")
    assert "orders" in finding.message and "audit" in finding.message
    assert "--notify-values every" in finding.fix
    upgraded = {
        "orders": status("orders", notify_values="carrier"),
        "audit": status("audit", notify_values="every"),
    }
    findings = check_nodes(DEPLOYMENT, facts_with(upgraded), B)
    assert "notify-values" not in {f.code for f in findings}
