"""``atomickafka doctor`` and ``atomickafka topics``: a Kafka cluster and an AtomicKafka
deployment checked against what ordering needs, each finding with its fix.

Gathering (:mod:`~atomickafka.doctor.gather`, the only module that talks to Kafka)
fills plain facts (:mod:`~atomickafka.doctor.facts`); pure checks turn them into
:class:`~atomickafka.doctor.findings.Finding` s: the brokers
(:mod:`~atomickafka.doctor.cluster_checks`), every Kafka topic of the deployment
(:mod:`~atomickafka.doctor.topic_checks`, what each needs in
:mod:`~atomickafka.doctor.deployment`), and the nodes
(:mod:`~atomickafka.doctor.node_checks`).
"""

from __future__ import annotations

from atomickafka.doctor.cluster_checks import check_cluster
from atomickafka.doctor.deployment import (
    DEFAULT_MAX_DOWNTIME_S,
    DEFAULT_SNAPSHOT_INTERVAL_S,
    Deployment,
    KafkaTopic,
    TopicKind,
)
from atomickafka.doctor.findings import Finding, Severity, exit_status, render_json, render_text
from atomickafka.doctor.gather import discover, gather_cluster, gather_deployment
from atomickafka.doctor.node_checks import DEFAULT_MAX_LAG, DEFAULT_STUCK_AFTER_S, check_nodes
from atomickafka.doctor.topic_checks import check_topics
from atomickafka.kafka.connection import Connection

__all__ = [
    "DEFAULT_MAX_DOWNTIME_S",
    "DEFAULT_MAX_LAG",
    "DEFAULT_SNAPSHOT_INTERVAL_S",
    "DEFAULT_STUCK_AFTER_S",
    "Deployment",
    "Finding",
    "KafkaTopic",
    "Severity",
    "TopicKind",
    "diagnose",
    "discover",
    "exit_status",
    "render_json",
    "render_text",
]


def diagnose(
    connection: Connection,
    deployment: Deployment | None,
    *,
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
    max_lag: int = DEFAULT_MAX_LAG,
    transactions: bool = True,
) -> list[Finding]:
    """Every finding about the cluster ``connection`` reaches and ``deployment``
    (``None``: the cluster alone)."""
    bootstrap = connection.bootstrap  # the hints name it (kafka-configs.sh ...)
    cluster = gather_cluster(connection, transactions=transactions)
    findings = check_cluster(cluster, bootstrap)
    if deployment is None:
        return findings
    facts = gather_deployment(connection, deployment)
    findings += check_topics(
        deployment, facts.topics, len(cluster.brokers), bootstrap, facts.snapshots
    )
    findings += check_nodes(
        deployment, facts, bootstrap, stuck_after_s=stuck_after_s, max_lag=max_lag
    )
    return findings
