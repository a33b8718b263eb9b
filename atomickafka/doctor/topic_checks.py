"""Checks of each Kafka topic of a deployment against what ordering needs. Pure: facts
in, findings out.

Codes (``docs/operators.md`` explains each): ``topic-missing``, ``partitions``,
``replication-factor``, ``min-insync-replicas``, ``isr``, ``unclean-leader-election``,
``retention``, ``truncated-log``, ``cleanup-policy``, ``timestamp-type``,
``max-message-bytes``, ``topic-settings`` (all well).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from atomickafka.doctor.deployment import LOG_APPEND_TIME, Deployment, KafkaTopic, TopicKind
from atomickafka.doctor.facts import Snapshots, TopicFacts
from atomickafka.doctor.findings import Finding, Severity
from atomickafka.kafka.admin import MIN_MESSAGE_BYTES
from atomickafka.kafka.topics import input_topic, merger_key, node_key
from atomickafka.node.snapshots import LoadedSnapshot, choose_snapshot

__all__ = ["check_topic", "check_topics", "create_command", "set_config_command"]

_REPLAYED: Final = frozenset({TopicKind.INPUT, TopicKind.LAYERS})
_NO_COMPACTION: Final = frozenset({TopicKind.INPUT, TopicKind.LAYERS, TopicKind.DELIVERY})
_WRITTEN: Final = frozenset(set(TopicKind) - {TopicKind.STATUS})


def set_config_command(bootstrap: str, topic: str, settings: str) -> str:
    """The Kafka tool's command that sets ``settings`` (``k=v,k=v``) on ``topic``."""
    return (
        f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
        f"--entity-name {topic} --add-config {settings}"
    )


def create_command(bootstrap: str, deployment: Deployment, topics: tuple[str, ...]) -> str:
    """The ``atomickafka topics create`` command that creates (or aligns) ``topics``."""
    extra = "" if deployment.layout == "split" else f" --layout {deployment.layout}"
    if deployment.partitions > 1:
        extra += f" --partitions {deployment.partitions}"
    names = ",".join(topics)
    return f"atomickafka topics create --bootstrap-server {bootstrap} --topics {names}{extra}"


def _duration(ms: str) -> str:
    try:
        value = int(ms)
    except ValueError:
        return ms
    if value < 0:
        return "forever"
    hours = value / 3_600_000
    return f"{hours / 24:g} days" if hours >= 48 else f"{hours:g} h"


def check_topics(
    deployment: Deployment,
    topics: Mapping[str, TopicFacts],
    brokers: int,
    bootstrap: str,
    snapshots: Snapshots | None = None,
) -> list[Finding]:
    """The findings of every Kafka topic of ``deployment`` (``topics``: what the
    cluster has, by name; a name it lacks counts as missing; ``snapshots``: each role's,
    for the logs that no longer start at offset 0)."""
    out: list[Finding] = []
    for name, topic in deployment.kafka_topics().items():
        facts = topics.get(name, TopicFacts(name, exists=False))
        out += check_topic(topic, facts, brokers, bootstrap, deployment, snapshots or {})
    return out


def check_topic(
    topic: KafkaTopic,
    facts: TopicFacts,
    brokers: int,
    bootstrap: str,
    deployment: Deployment,
    snapshots: Snapshots | None = None,
) -> list[Finding]:
    """The findings of one Kafka topic."""
    name = topic.name
    create = create_command(bootstrap, deployment, (topic.owner or deployment.topics[0],))
    if not facts.exists:
        what = f"the {topic.kind} of {topic.owner}" if topic.owner else f"the {topic.kind}"
        return [
            Finding("topic-missing", Severity.FAIL, name, f"{what} does not exist", f"{create}")
        ]
    found = [
        *_partitions(topic, facts, create),
        *_replication(facts, brokers, bootstrap),
        *_settings(topic, facts, bootstrap, create, deployment),
        *(_cut(topic, facts, deployment, snapshots or {}) if topic.kind in _REPLAYED else []),
    ]
    if not any(f.severity in (Severity.WARN, Severity.FAIL) for f in found):
        rf = facts.replication_factor
        isr = facts.configs.get("min.insync.replicas", "1")
        found.append(
            Finding(
                "topic-settings",
                Severity.OK,
                name,
                f"{topic.kind}: {len(facts.partitions)} partition(s), RF {rf}, min ISR {isr}, "
                f"retention {_duration(facts.configs.get('retention.ms', '?'))}",
            )
        )
    return found


def _partitions(topic: KafkaTopic, facts: TopicFacts, create: str) -> list[Finding]:
    have = len(facts.partitions)
    if have >= topic.partitions:
        return []
    return [
        Finding(
            "partitions",
            Severity.FAIL,
            topic.name,
            f"{have} partition(s), {topic.partitions} needed (one per layer): a layer without "
            "its partition stalls",
            f"kafka-topics.sh --alter --topic {topic.name} --partitions {topic.partitions}, "
            f"or {create}",
        )
    ]


def _replication(facts: TopicFacts, brokers: int, bootstrap: str) -> list[Finding]:
    out: list[Finding] = []
    name, rf = facts.name, facts.replication_factor
    wanted = min(3, brokers)
    if rf < wanted:
        severity = Severity.FAIL if rf < 2 else Severity.WARN
        out.append(
            Finding(
                "replication-factor",
                severity,
                name,
                f"replication factor {rf} on {brokers} brokers: "
                + ("one broker's loss loses records" if rf < 2 else f"{wanted} is safer"),
                f"raise it to {wanted} with kafka-reassign-partitions.sh --bootstrap-server "
                f"{bootstrap} --reassignment-json-file FILE --execute (a plan with {wanted} "
                "replicas per partition)",
            )
        )
    try:
        min_isr = int(facts.configs.get("min.insync.replicas", "1"))
    except ValueError:
        min_isr = 1
    if rf >= 3 and min_isr < 2:
        out.append(
            Finding(
                "min-insync-replicas",
                Severity.FAIL,
                name,
                f"min.insync.replicas={min_isr} with {rf} replicas: an acks=all write is "
                "acknowledged by one broker, and lost with it",
                set_config_command(bootstrap, name, "min.insync.replicas=2"),
            )
        )
    elif min_isr > rf > 0:
        out.append(
            Finding(
                "min-insync-replicas",
                Severity.FAIL,
                name,
                f"min.insync.replicas={min_isr} but only {rf} replicas: every write is refused",
                set_config_command(bootstrap, name, f"min.insync.replicas={max(1, rf - 1)}"),
            )
        )
    elif rf >= 2 and min_isr == rf:
        out.append(
            Finding(
                "min-insync-replicas",
                Severity.WARN,
                name,
                f"min.insync.replicas={min_isr} = replicas: one broker down stops every write",
                set_config_command(bootstrap, name, f"min.insync.replicas={rf - 1}"),
            )
        )
    out += _isr(facts, min(min_isr, rf))  # a min ISR above RF is reported above
    return out


def _isr(facts: TopicFacts, min_isr: int) -> list[Finding]:
    offline = [p.partition for p in facts.partitions if p.leader < 0]
    short = [p.partition for p in facts.partitions if p.leader >= 0 and len(p.isr) < min_isr]
    under = [p.partition for p in facts.partitions if min_isr <= len(p.isr) < len(p.replicas)]
    out = []
    if offline:
        out.append(
            Finding(
                "isr",
                Severity.FAIL,
                facts.name,
                f"partition(s) {offline} have no leader: nothing can be written or read",
                "bring the brokers holding their replicas back (kafka-topics.sh --describe "
                "--unavailable-partitions lists them)",
            )
        )
    if short:
        out.append(
            Finding(
                "isr",
                Severity.FAIL,
                facts.name,
                f"partition(s) {short} have fewer in-sync replicas than min.insync.replicas="
                f"{min_isr}: writes are refused now",
                "bring the lagging or stopped brokers back; kafka-topics.sh --describe "
                "--under-min-isr-partitions lists them",
            )
        )
    if under:
        out.append(
            Finding(
                "isr",
                Severity.WARN,
                facts.name,
                f"partition(s) {under} are under-replicated (a replica is out of sync)",
                "check the brokers' health; kafka-topics.sh --describe "
                "--under-replicated-partitions lists them",
            )
        )
    return out


def _settings(
    topic: KafkaTopic, facts: TopicFacts, bootstrap: str, create: str, deployment: Deployment
) -> list[Finding]:
    name, configs, kind = topic.name, facts.configs, topic.kind
    out = []
    if configs.get("unclean.leader.election.enable", "false").lower() == "true":
        out.append(
            Finding(
                "unclean-leader-election",
                Severity.FAIL,
                name,
                "unclean.leader.election.enable=true: an out-of-sync replica may become "
                "leader and acknowledged records vanish (a node's replay then differs)",
                set_config_command(bootstrap, name, "unclean.leader.election.enable=false"),
            )
        )
    out += _cleanup_policy(name, kind, configs, bootstrap)
    if kind in _REPLAYED:
        out += _retention(topic, facts, bootstrap, create, deployment)
    if kind is TopicKind.INPUT and configs.get("message.timestamp.type") != LOG_APPEND_TIME:
        out.append(
            Finding(
                "timestamp-type",
                Severity.FAIL,
                name,
                f"message.timestamp.type={configs.get('message.timestamp.type', '?')}: the "
                "ordering engine bounds timestamps by the broker's append time (LogAppendTime)",
                set_config_command(bootstrap, name, f"message.timestamp.type={LOG_APPEND_TIME}")
                + f", or {create}",
            )
        )
    max_bytes = configs.get("max.message.bytes")
    if kind in _WRITTEN and max_bytes is not None and int(max_bytes) < MIN_MESSAGE_BYTES:
        out.append(
            Finding(
                "max-message-bytes",
                Severity.FAIL,
                name,
                f"max.message.bytes={max_bytes}: AtomicKafka writes records and batches of up "
                "to 1,000,000 bytes",
                set_config_command(bootstrap, name, f"max.message.bytes={MIN_MESSAGE_BYTES}"),
            )
        )
    return out


def _cleanup_policy(
    name: str, kind: TopicKind, configs: Mapping[str, str], bootstrap: str
) -> list[Finding]:
    """The topic's ``cleanup.policy``: never compacted where every record counts, compacted
    for the statuses."""
    out = []
    policy = configs.get("cleanup.policy", "delete")
    if kind in _NO_COMPACTION and "compact" in policy:
        out.append(
            Finding(
                "cleanup-policy",
                Severity.FAIL,
                name,
                f"cleanup.policy={policy}: compaction deletes records by key, and every record "
                f"of the {kind} counts",
                set_config_command(bootstrap, name, "cleanup.policy=delete"),
            )
        )
    if kind is TopicKind.STATUS and "compact" not in policy:
        out.append(
            Finding(
                "cleanup-policy",
                Severity.WARN,
                name,
                f"cleanup.policy={policy}: statuses (one a second per node) are not compacted",
                set_config_command(bootstrap, name, "cleanup.policy=compact"),
            )
        )
    return out


def _retention(
    topic: KafkaTopic, facts: TopicFacts, bootstrap: str, create: str, deployment: Deployment
) -> list[Finding]:
    """An input log (or layer stream) is replayed from the newest snapshot after a
    restart (docs/DESIGN.md §6.5): it may delete records by time once they are older
    than twice the snapshot interval plus the longest downtime, never by size."""
    ms, size = facts.configs.get("retention.ms", "-1"), facts.configs.get("retention.bytes", "-1")
    minimum = deployment.min_retention_ms
    try:
        short = ms != "-1" and int(ms) < minimum
    except ValueError:
        short = True
    if not short and size == "-1":
        return []
    kept = f"retention.ms={ms} ({_duration(ms)}), retention.bytes={size}"
    why = (
        f"shorter than twice the snapshot interval plus the longest downtime "
        f"({_duration(str(minimum))}: --snapshot-interval {deployment.snapshot_interval_s:g} s, "
        f"--max-downtime {deployment.max_downtime_s:g} s)"
        if short
        else "a size bound deletes records however recent, at a high enough rate"
    )
    return [
        Finding(
            "retention",
            Severity.FAIL,
            topic.name,
            f"{kept}: {why}; a node rebuilds its state from its newest snapshot and the "
            f"records of the {topic.kind} after it, which may then be gone",
            set_config_command(bootstrap, topic.name, "retention.ms=-1,retention.bytes=-1")
            + f" (or retention.ms={minimum} or more, with retention.bytes=-1), or {create}",
        )
    ]


def input_log_view(snapshot: LoadedSnapshot) -> LoadedSnapshot:
    """A snapshot of a node with a control log (§7) as the input log sees it: its
    offsets are the control log's; the input log's next unapplied offset is in its
    state (``ordering.applied``)."""
    if snapshot.state is None:
        return snapshot
    applied = int((snapshot.state.get("ordering") or {}).get("applied", 0))
    return dataclasses.replace(snapshot, offsets=dict.fromkeys(snapshot.offsets, applied))


def _cut(
    topic: KafkaTopic, facts: TopicFacts, deployment: Deployment, snapshots: Snapshots
) -> list[Finding]:
    """A log that no longer starts at offset 0 is fine while a readable snapshot of its
    role covers an offset the log still holds (the choice a node makes at start,
    :func:`~atomickafka.node.snapshots.choose_snapshot`); else the role refuses to
    start."""
    bounds = {
        p.partition: (p.low, p.high if p.high is not None else p.low)
        for p in facts.partitions
        if p.low is not None
    }
    if not any(low for low, _ in bounds.values()):
        return []
    owner, layered = topic.owner, deployment.partitions > 1
    if topic.kind is TopicKind.LAYERS:
        roles = {merger_key(owner): bounds}
    else:
        roles = {node_key(owner, p if layered else None): {p: b} for p, b in bounds.items()}
    uncovered: list[int] = []
    covered: list[str] = []
    applied = deployment.control_log and topic.name == input_topic(owner, deployment.layout)
    for role, logs in roles.items():
        found = snapshots.get(role, ())
        if applied:  # with control logs a snapshot names its input-log offset in its state
            found = tuple(input_log_view(s) for s in found)
        choice = choose_snapshot(found, logs)
        if choice.cut:
            uncovered += sorted(choice.cut)
        elif choice.snapshot is not None and any(low for low, _ in logs.values()):
            covered.append(f"{role} from snapshot {choice.snapshot.seq}")
    if uncovered:
        return [
            Finding(
                "truncated-log",
                Severity.FAIL,
                topic.name,
                f"partition(s) {uncovered} no longer start at offset 0 and no readable "
                f"snapshot covers an offset they still hold: records were deleted, so "
                f"{owner}'s node or merger cannot rebuild its state (it refuses to start)",
                "see docs/operators.md, 'Recover': start the topic over from a new input log",
            )
        ]
    return [
        Finding(
            "truncated-log",
            Severity.INFO,
            topic.name,
            "records were deleted from its start, but snapshots cover what is left: "
            + ", ".join(covered),
        )
    ]
