"""Checks of the Kafka cluster itself against what ordering needs. Pure.

Codes: ``broker-version``, ``transactions``, ``brokers``, ``unclean-leader-election``,
``auto-create-topics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from atomickafka.doctor.facts import ClusterFacts
from atomickafka.doctor.findings import Finding, Severity

__all__ = ["MIN_KAFKA", "check_cluster", "kafka_version_floor"]

#: The oldest Kafka AtomicKafka runs on: idempotent producers that survive an unknown
#: producer id (KIP-360) and transactions, Kafka 2.5.
MIN_KAFKA: Final = (2, 5)

_PRODUCE, _INIT_PRODUCER_ID = 0, 22
#: (API key, lowest max version) first offered by a Kafka release, newest first.
_MILESTONES: Final = (
    ((75, 0), (3, 8)),  # DescribeTopicPartitions
    ((60, 0), (2, 8)),  # DescribeCluster
    ((_INIT_PRODUCER_ID, 3), (2, 5)),  # KIP-360
    ((44, 0), (2, 3)),  # IncrementalAlterConfigs
    ((_INIT_PRODUCER_ID, 0), (0, 11)),  # transactions, idempotence
)


def kafka_version_floor(api_versions: Mapping[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The oldest Kafka release that offers these protocol versions (``None``: unknown).
    Kafka 4.0 dropped Produce versions below 3, which older releases all offer."""
    if not api_versions:
        return None
    produce = api_versions.get(_PRODUCE)
    if produce is not None and produce[0] >= 3:
        return (4, 0)
    for (key, version), release in _MILESTONES:
        offered = api_versions.get(key)
        if offered is not None and offered[1] >= version:
            return release
    return (0, 10)


def check_cluster(facts: ClusterFacts, bootstrap: str) -> list[Finding]:
    """The findings about the brokers."""
    out = [*_version(facts), *_brokers(facts)]
    probe = facts.transactions
    if probe is not None and probe.ok:
        out.append(
            Finding(
                "transactions",
                Severity.OK,
                bootstrap,
                f"idempotent and transactional producers work (init_transactions took "
                f"{probe.seconds:.1f} s)",
            )
        )
    elif probe is not None:
        out.append(
            Finding(
                "transactions",
                Severity.FAIL,
                bootstrap,
                f"a transactional producer could not start in {probe.seconds:.0f} s: {probe.error}",
                "check transaction.state.log.replication.factor (at most the brokers "
                "there are) and transaction.state.log.min.isr on the brokers; with ACLs, "
                "allow the principal IdempotentWrite on the cluster and Write, Describe on "
                "its TransactionalId (docs/operators.md, ACLs)",
            )
        )
    for broker, configs in sorted(facts.broker_configs.items()):
        if configs.get("unclean.leader.election.enable", "false").lower() == "true":
            out.append(
                Finding(
                    "unclean-leader-election",
                    Severity.FAIL,
                    f"broker {broker}",
                    "unclean.leader.election.enable=true is the default of every topic: an "
                    "out-of-sync replica may become leader and acknowledged records vanish",
                    f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type "
                    "brokers --entity-default --add-config unclean.leader.election.enable=false",
                )
            )
        if configs.get("auto.create.topics.enable", "false").lower() == "true":
            out.append(
                Finding(
                    "auto-create-topics",
                    Severity.INFO,
                    f"broker {broker}",
                    "auto.create.topics.enable=true: a client that writes before the topics "
                    "exist creates them with the broker's defaults (the node then aligns "
                    "their retention); create them first with atomickafka topics create",
                )
            )
    return out


def _version(facts: ClusterFacts) -> list[Finding]:
    floor = kafka_version_floor(facts.api_versions)
    subject = "brokers"
    if floor is None:
        return [
            Finding(
                "broker-version",
                Severity.WARN,
                subject,
                "could not read the protocol versions the brokers offer",
                "run doctor with --log-level debug to see librdkafka's negotiation",
            )
        ]
    shown = ".".join(map(str, floor))
    if floor < MIN_KAFKA:
        return [
            Finding(
                "broker-version",
                Severity.FAIL,
                subject,
                f"Kafka {shown} or so: AtomicKafka needs Kafka "
                f"{'.'.join(map(str, MIN_KAFKA))} or later (idempotent producers that survive "
                "an unknown producer id, KIP-360)",
                "upgrade the brokers",
            )
        ]
    return [
        Finding(
            "broker-version",
            Severity.OK,
            subject,
            f"Kafka {shown} or later (from the protocol versions the brokers offer)",
        )
    ]


def _brokers(facts: ClusterFacts) -> list[Finding]:
    count = len(facts.brokers)
    if count >= 3:
        return [Finding("brokers", Severity.OK, "brokers", f"{count} brokers")]
    if count == 2:
        return [
            Finding(
                "brokers",
                Severity.WARN,
                "brokers",
                "2 brokers: with 2 replicas, min.insync.replicas=2 stops writes when one is "
                "down and 1 risks acknowledged records",
                "run 3 brokers or more",
            )
        ]
    return [
        Finding(
            "brokers",
            Severity.INFO,
            "brokers",
            "1 broker: nothing is replicated (fine for development only)",
        )
    ]
