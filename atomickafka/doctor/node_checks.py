"""Checks of a deployment's nodes and mergers, from their statuses and offsets. Pure.

Codes: ``node-missing``, ``node-stopped``, ``node-stale``, ``node-replaying``,
``stuck-head``, ``protocol``, ``versions``, ``bad-signature``, ``protocol-mismatch``,
``dead-letters``,
``lag``, ``node`` (all well).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from atomickafka.core.protocols import CARRIER
from atomickafka.doctor.deployment import Deployment, committed_log
from atomickafka.doctor.facts import DeploymentFacts, TopicFacts
from atomickafka.doctor.findings import Finding, Severity
from atomickafka.kafka.status import Role, Status, odd_signers
from atomickafka.kafka.topics import dead_letter_topic, merger_key, node_key

__all__ = ["DEFAULT_MAX_LAG", "DEFAULT_STUCK_AFTER_S", "check_nodes", "expected_keys"]

#: A head older than this (seconds) is stuck.
DEFAULT_STUCK_AFTER_S: Final = 10.0
#: More input records than this not yet committed is a lag worth a warning.
DEFAULT_MAX_LAG: Final = 10_000


def expected_keys(deployment: Deployment, topic: str) -> list[str]:
    """The status keys of ``topic``'s nodes (and merger)."""
    if deployment.partitions <= 1:
        return [node_key(topic)]
    return [node_key(topic, p) for p in range(deployment.partitions)] + [merger_key(topic)]


def check_nodes(
    deployment: Deployment,
    facts: DeploymentFacts,
    bootstrap: str,
    *,
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
    max_lag: int = DEFAULT_MAX_LAG,
) -> list[Finding]:
    """The findings about every node and merger of ``deployment``."""
    out: list[Finding] = []
    for topic in deployment.topics:
        for key in expected_keys(deployment, topic):
            status = facts.statuses.get(key)
            out += _one(key, status, facts, deployment, bootstrap, stuck_after_s, max_lag)
        out += _dead_letters(topic, facts.topics.get(dead_letter_topic(topic)), bootstrap)
    out += _consistent(deployment, facts.statuses)
    return out


def _start_hint(deployment: Deployment, key: str) -> str:
    topic = key.split("/", maxsplit=1)[0]
    extra = "" if deployment.layout == "split" else f" --layout {deployment.layout}"
    if deployment.partitions > 1:
        layer = key.split("/")[1]
        extra += f" --partitions {deployment.partitions} " + (
            "--merger" if layer == "merger" else f"--layer {layer}"
        )
    return f"start it: atomickafka node --topic {topic}{extra} (or atomickafka cluster)"


def _one(
    key: str,
    status: Status | None,
    facts: DeploymentFacts,
    deployment: Deployment,
    bootstrap: str,
    stuck_after_s: float,
    max_lag: int,
) -> list[Finding]:
    start = _start_hint(deployment, key)
    if status is None:
        return [
            Finding(
                "node-missing", Severity.FAIL, key, "no node has ever published a status", start
            )
        ]
    not_live = _not_live(key, status, facts, start)
    if not_live is not None:
        return [not_live]
    out = _progress(key, status, stuck_after_s) + _refused_input(key, status)
    out += _lag(key, status, facts, bootstrap, max_lag)
    if not out:
        out.append(
            Finding(
                "node",
                Severity.OK,
                key,
                f"live, {status.algorithm} protocol, {status.pending} pending",
            )
        )
    return out


def _not_live(key: str, status: Status, facts: DeploymentFacts, start: str) -> Finding | None:
    """Why the node of ``key`` does not run now, if it does not: stopped, or stale."""
    age = status.age_s(facts.now)
    if status.is_stopped:
        return Finding(
            "node-stopped",
            Severity.FAIL,
            key,
            f"stopped cleanly {age:.0f} s ago: messages to its topic wait, and clients refuse it",
            start,
        )
    if not status.live(facts.now):
        return Finding(
            "node-stale",
            Severity.FAIL,
            key,
            f"last status {age:.0f} s ago (pid {status.pid}): not running, or cannot reach Kafka",
            f"look at its log; {start}",
        )
    return None


def _progress(key: str, status: Status, stuck_after_s: float) -> list[Finding]:
    """How the node of ``key`` gets on: replaying after a start, or a head that is stuck."""
    out = []
    if status.replaying:
        out.append(
            Finding("node-replaying", Severity.INFO, key, "replaying its input log after a start")
        )
    head, head_age = status.head, status.oldest_pending_age_s or 0.0
    if head is not None and head_age >= stuck_after_s:
        what = ", ".join(head.waiting_for) or "its decision"
        out.append(
            Finding(
                "stuck-head",
                Severity.FAIL,
                key,
                f"message {head.message_id} has held the head for {head_age:.0f} s, waiting "
                f"for {what}; every later delivery waits behind it",
                "start the nodes of the topics it waits for (atomickafka status shows them); "
                "a topic that will never run again: docs/operators.md, 'Recover'",
            )
        )
    return out


def _refused_input(key: str, status: Status) -> list[Finding]:
    """What the node of ``key`` sets aside that an operator must see to: records of
    another secret, of a newer format, of another protocol."""
    out = []
    for sender, count in sorted(status.bad_signatures.items()):
        out.append(
            Finding(
                "bad-signature",
                Severity.FAIL,
                key,
                f"{count} records claiming to come from {sender} failed the signature "
                "check: signed with a secret this node does not hold; messages it shares "
                f"with {sender} wait until the secrets agree",
                f"give {sender} (or this node, if it is the odd one) the deployment's "
                "--secret-file and restart it: a node restarted with the right secret "
                "catches up by itself (docs/operators.md, 'A node with a wrong secret')",
            )
        )
    for sender, count in sorted(status.newer_formats.items()):
        out.append(
            Finding(
                "versions",
                Severity.FAIL,
                key,
                f"{count} records from {sender} are of a newer format than this node reads; "
                f"messages it shares with {sender} wait",
                "upgrade this node to the release the others run (docs/operators.md, 'Upgrade')",
            )
        )
    if status.protocol_mismatches:
        out.append(
            Finding(
                "protocol-mismatch",
                Severity.WARN,
                key,
                f"{status.protocol_mismatches} records of another protocol set aside",
                "run every node with one --algorithm (docs/operators.md, 'Change the protocol')",
            )
        )
    return out


def _lag(
    key: str, status: Status, facts: DeploymentFacts, bootstrap: str, max_lag: int
) -> list[Finding]:
    if status.role is not Role.NODE or key not in facts.committed:
        return []
    log = facts.topics.get(committed_log(status))
    part = status.layer or 0
    high = next(
        (p.high for p in (log.partitions if log else ()) if p.partition == part and p.high),
        None,
    )
    committed = facts.committed[key]
    if high is None or committed < 0 or high - committed <= max_lag:
        return []
    return [
        Finding(
            "lag",
            Severity.WARN,
            key,
            f"{high - committed} input records not yet processed (committed {committed}, "
            f"log end {high})",
            "give the node more CPU, or spread the topic over layers (--partitions); "
            "atomickafka status shows its rates",
        )
    ]


def _dead_letters(topic: str, dlq: TopicFacts | None, bootstrap: str) -> list[Finding]:
    if dlq is None or not dlq.exists or dlq.offsets <= 0 or dlq.records == 0:
        return []
    how_many = (
        f"{dlq.records} records" if dlq.records is not None else f"up to {dlq.offsets} records"
    )
    return [
        Finding(
            "dead-letters",
            Severity.WARN,
            dead_letter_topic(topic),
            f"{how_many} set aside (each with the reason in header atomickafka-error)",
            f"read them: atomickafka broker tool kafka-console-consumer --bootstrap-server "
            f"{bootstrap} --topic {dead_letter_topic(topic)} --from-beginning "
            "--formatter-property print.headers=true (Kafka's kafka-console-consumer.sh takes "
            "the same options, --property before Kafka 4; the tool runs it from Maven's jars)",
        )
    ]


def _consistent(deployment: Deployment, statuses: Mapping[str, Status]) -> list[Finding]:
    """Every running node of the deployment on one protocol, layout and layer count."""
    mine = [
        s
        for s in statuses.values()
        if s.topic in deployment.topics and s.role is Role.NODE and not s.is_stopped
    ]
    if not mine:
        return []
    out = _protocols_agree(mine)
    for key, (theirs, usual) in sorted(odd_signers(mine).items()):
        out.append(
            Finding(
                "bad-signature",
                Severity.FAIL,
                key,
                f"signs with another secret than the other nodes (key id {theirs}, theirs "
                f"{usual}): each side sets the other's records aside, and the messages "
                "they share wait",
                "restart it with the deployment's --secret-file; it catches up by itself "
                "(docs/operators.md, 'A node with a wrong secret')",
            )
        )
    shapes = sorted({(s.layout.value, s.partitions) for s in mine})
    wanted = (deployment.layout.value, deployment.partitions)
    if shapes != [wanted]:
        shown = ", ".join(f"{layout} with {n} layer(s)" for layout, n in shapes)
        out.append(
            Finding(
                "protocol",
                Severity.FAIL,
                "nodes",
                f"nodes run {shown}; this deployment is {wanted[0]} with {wanted[1]} "
                "layer(s): clients write where the nodes do not read",
                "run every node with the same --layout and --partitions",
            )
        )
    out += _control_logs_agree(mine)
    out += _lean_notifies_are_read(mine)
    versions = sorted({s.format_version for s in mine})
    if len(versions) > 1:
        out.append(
            Finding(
                "versions",
                Severity.WARN,
                "nodes",
                f"nodes write status format versions {versions}: an upgrade in progress?",
                "finish the upgrade (docs/operators.md, 'Upgrade')",
            )
        )
    return out


def _protocols_agree(mine: list[Status]) -> list[Finding]:
    """The running nodes ``mine`` all run one protocol."""
    out = []
    algorithms = sorted({s.algorithm.value for s in mine})
    if len(algorithms) > 1:
        by = {a: sorted(s.key for s in mine if s.algorithm == a) for a in algorithms}
        shown = "; ".join(f"{a}: {', '.join(keys)}" for a, keys in by.items())
        out.append(
            Finding(
                "protocol",
                Severity.FAIL,
                "nodes",
                f"nodes run different protocols ({shown}): a message to topics of two "
                "protocols is set aside",
                "run every node with one --algorithm (docs/operators.md, 'Change the protocol')",
            )
        )
    return out


def _control_logs_agree(mine: list[Status]) -> list[Finding]:
    """The running nodes ``mine`` all read control logs, or none does."""
    out = []
    with_log = sorted(s.key for s in mine if s.control_log)
    if with_log and len(with_log) < len(mine):
        without = sorted(s.key for s in mine if not s.control_log)
        out.append(
            Finding(
                "control-log",
                Severity.FAIL,
                "nodes",
                f"nodes {', '.join(with_log)} read control logs (--control-log) and "
                f"{', '.join(without)} do not: what the first write to the others' control "
                "logs is never read, and the messages they share wait",
                "run every node of the deployment with --control-log, or none "
                "(docs/DESIGN.md §7, Switching)",
            )
        )
    return out


def _lean_notifies_are_read(mine: list[Status]) -> list[Finding]:
    """No node writes lean Notifies (``--notify-values carrier``, §4.16) while a node of
    a release before the setting runs: that one refuses them and waits for good."""
    lean = sorted(s.key for s in mine if s.notify_values == CARRIER)
    older = sorted(s.key for s in mine if s.notify_values is None)
    if not (lean and older):
        return []
    return [
        Finding(
            "notify-values",
            Severity.FAIL,
            "nodes",
            f"nodes {', '.join(lean)} write Notifies without the value (--notify-values "
            f"carrier) and {', '.join(older)} run a release before it, which refuses them: "
            "the messages they share wait",
            "run the upgraded nodes with --notify-values every until every node is "
            "upgraded (docs/operators.md, Upgrade; docs/DESIGN.md §4.16)",
        )
    ]
