"""Checks of each Kafka topic of a deployment against what ordering needs. Pure: facts
in, findings out.

Codes (``docs/operators.md`` explains each): ``topic-missing``, ``partitions``,
``replication-factor``, ``min-insync-replicas``, ``isr``, ``unclean-leader-election``,
``retention``, ``truncated-log``, ``cleanup-policy``, ``timestamp-type``,
``max-message-bytes``, ``topic-settings`` (all well).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from atomickafka.doctor.deployment import LOG_APPEND_TIME, Deployment, KafkaTopic, TopicKind
from atomickafka.doctor.facts import TopicFacts
from atomickafka.doctor.findings import Finding, Severity
from atomickafka.kafka.admin import MIN_MESSAGE_BYTES

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
) -> list[Finding]:
    """The findings of every Kafka topic of ``deployment`` (``topics``: what the
    cluster has, by name; a name it lacks counts as missing)."""
    out: list[Finding] = []
    for name, topic in deployment.kafka_topics().items():
        facts = topics.get(name, TopicFacts(name, exists=False))
        out += check_topic(topic, facts, brokers, bootstrap, deployment)
    return out


def check_topic(
    topic: KafkaTopic,
    facts: TopicFacts,
    brokers: int,
    bootstrap: str,
    deployment: Deployment,
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
        *_settings(topic, facts, bootstrap, create),
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


def _settings(topic: KafkaTopic, facts: TopicFacts, bootstrap: str, create: str) -> list[Finding]:
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
    if kind in _REPLAYED:
        out += _replayed(topic, facts, bootstrap, create)
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


def _replayed(topic: KafkaTopic, facts: TopicFacts, bootstrap: str, create: str) -> list[Finding]:
    """An input log (or layer stream) must keep every record: it is replayed from 0."""
    out = []
    ms, size = facts.configs.get("retention.ms", "-1"), facts.configs.get("retention.bytes", "-1")
    if ms != "-1" or size != "-1":
        kept = f"retention.ms={ms} ({_duration(ms)}), retention.bytes={size}"
        out.append(
            Finding(
                "retention",
                Severity.FAIL,
                topic.name,
                f"{kept}: the {topic.kind} is replayed from offset 0 to rebuild state after a "
                "restart; deleted records make that impossible",
                set_config_command(bootstrap, topic.name, "retention.ms=-1,retention.bytes=-1")
                + f", or {create}",
            )
        )
    truncated = [p.partition for p in facts.partitions if p.low is not None and p.low > 0]
    if truncated:
        out.append(
            Finding(
                "truncated-log",
                Severity.FAIL,
                topic.name,
                f"partition(s) {truncated} no longer start at offset 0: records were deleted, "
                f"so the node of {topic.owner} cannot rebuild its state on restart",
                "see docs/operators.md, 'Recover': start the topic over from a new input log",
            )
        )
    return out
