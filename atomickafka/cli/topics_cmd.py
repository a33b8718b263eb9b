"""``atomickafka topics create|describe|check``: the Kafka topics of AtomicKafka topics,
with the settings ordering needs.

``create`` creates every Kafka topic the nodes of ``--topics`` use (input logs kept
forever -- a finite retention of at least twice the snapshot interval plus the longest
downtime is fine too -- and stamped with the broker's time, deliveries, dead letters,
layer streams,
the status topic) and aligns the settings of those that exist; ``describe`` shows
them; ``check`` judges them as ``doctor`` does (exit status 1 when one is unsafe).
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from atomickafka.cli.doctor_cmd import add_retention_rule, with_retention_rule
from atomickafka.cli.options import add_bootstrap, add_overrides, connection, guarded, reach
from atomickafka.doctor import Deployment, exit_status, render_json, render_text
from atomickafka.doctor.deployment import KafkaTopic, aligned_min_insync
from atomickafka.doctor.facts import TopicFacts
from atomickafka.doctor.findings import Finding, Severity
from atomickafka.doctor.gather import gather_snapshots, gather_topics
from atomickafka.doctor.topic_checks import check_topics
from atomickafka.errors import ConfigError
from atomickafka.kafka.admin import TopicSpec, admin_client, await_configs, ensure_topics
from atomickafka.kafka.topics import Layout

__all__ = ["describe_row", "register"]


def _common(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    add_overrides(parser)
    parser.add_argument(
        "--topics", required=True, metavar="T1,T2,...", help="AtomicKafka topics, comma-separated"
    )
    parser.add_argument(
        "--layout",
        choices=[x.value for x in Layout],
        default=Layout.SPLIT.value,
        help="the nodes' layout",
    )
    parser.add_argument("--partitions", type=int, default=1, help="partition layers per topic")
    parser.add_argument(
        "--control-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the nodes run with control logs, the default: their control logs too "
        "(atomickafka-ctl.T); --no-control-log for nodes run with --no-control-log",
    )
    add_retention_rule(parser)


def register(subparsers: Any) -> None:
    """Add the ``topics`` sub-command (create/describe/check)."""
    parser = subparsers.add_parser(
        "topics",
        help="create, describe or check the Kafka topics of AtomicKafka topics",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    actions = parser.add_subparsers(dest="topics_action", metavar="ACTION")
    actions.required = True

    create = actions.add_parser("create", help="create the topics (align existing ones)")
    _common(create)
    create.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help="replicas of new topics (default: min(3, brokers))",
    )
    create.add_argument(
        "--min-insync-replicas",
        type=int,
        default=None,
        help="min.insync.replicas of every topic (default: 2 on new topics of 3+ replicas)",
    )
    create.set_defaults(func=guarded("topics create", _create))

    describe = actions.add_parser("describe", help="show the topics and their settings")
    _common(describe)
    describe.add_argument("--json", action="store_true", help="one JSON object per topic")
    describe.set_defaults(func=guarded("topics describe", _describe))

    check = actions.add_parser("check", help="check the topics' settings (exit 1: unsafe)")
    _common(check)
    check.add_argument("--json", action="store_true", help="the findings as one JSON object")
    check.add_argument("--verbose", action="store_true", help="also list what is fine")
    check.set_defaults(func=guarded("topics check", _check))


def _deployment(args: argparse.Namespace) -> Deployment:
    topics = tuple(dict.fromkeys(t.strip() for t in args.topics.split(",") if t.strip()))
    if not topics:
        raise ConfigError("--topics names no topic")
    if args.partitions < 1:
        raise ConfigError("--partitions must be at least 1")
    from atomickafka.core.wire import parse_destinations  # noqa: PLC0415

    parse_destinations(list(topics))  # the same name rules as destinations
    deployment = Deployment(
        topics, Layout(args.layout), args.partitions, control_log=args.control_log
    )
    return with_retention_rule(deployment, args)


def _create(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    for name, value in (("replication-factor", args.replication_factor),
                        ("min-insync-replicas", args.min_insync_replicas)):  # fmt: skip
        if value is not None and value < 1:
            raise ConfigError(f"--{name} must be at least 1")
    metadata = reach(args)
    before = gather_topics(connection(args), deployment.specs())
    specs = _aligned(deployment.specs(), before, args.min_insync_replicas)
    admin = admin_client(connection(args))
    created = set(ensure_topics(admin, specs, replication_factor=args.replication_factor))
    # each broker applies the change a moment after Kafka accepts it: return only once
    # every one shows it, or a check run next may read the old values from one that lags
    await_configs(admin, {name: spec.configs for name, spec in specs.items()})
    after = gather_topics(connection(args), deployment.kafka_topics())
    findings = _findings(args, deployment, after, len(metadata.brokers))
    for name, spec in specs.items():
        print(f"{name}: {_outcome(name, spec, before[name], after.get(name), created, findings)}")
    return _report(args, deployment, findings, title="after create")


def _aligned(
    specs: dict[str, TopicSpec], before: dict[str, TopicFacts], min_insync: int | None
) -> dict[str, TopicSpec]:
    """The specs to create or align: ``--min-insync-replicas`` everywhere when given;
    else, on a topic that exists, the ``min.insync.replicas`` doctor would not fail
    (:func:`~atomickafka.doctor.deployment.aligned_min_insync`)."""
    out = {}
    for name, spec in specs.items():
        configs = dict(spec.configs)
        fact = before[name]
        if min_insync is not None:
            configs["min.insync.replicas"] = str(min_insync)
        elif fact.exists:
            wanted = aligned_min_insync(
                fact.replication_factor, fact.configs.get("min.insync.replicas")
            )
            if wanted is not None:
                configs["min.insync.replicas"] = wanted
        out[name] = TopicSpec(spec.partitions, configs)
    return out


def _outcome(
    name: str,
    spec: TopicSpec,
    before: TopicFacts,
    after: TopicFacts | None,
    created: set[str],
    findings: list[Finding],
) -> str:
    """What ``topics create`` did to ``name`` and whether it is safe now: created; or
    the settings it changed (``key old -> new``); and what it could not fix."""
    if name in created:
        done = "created"
    else:
        now = after.configs if after is not None else {}
        changed = [
            f"{key} {before.configs.get(key, '(unset)')} -> {now.get(key, value)}"
            for key, value in spec.configs.items()
            if before.configs.get(key) != now.get(key, value)
        ]
        done = "exists, settings " + (
            f"aligned ({', '.join(changed)})" if changed else "already aligned"
        )
    left = sorted({f.code for f in findings if f.subject == name and f.severity is Severity.FAIL})
    if left:
        return f"{done}; still unsafe: {', '.join(left)} (see below)"
    return done


def _check(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    metadata = reach(args)
    facts = gather_topics(connection(args), deployment.kafka_topics())
    findings = _findings(args, deployment, facts, len(metadata.brokers))
    return _report(args, deployment, findings, title="check")


def _findings(
    args: argparse.Namespace,
    deployment: Deployment,
    facts: dict[str, TopicFacts],
    brokers: int,
) -> list[Finding]:
    snapshots = gather_snapshots(connection(args), deployment, facts)
    return check_topics(deployment, facts, brokers, args.bootstrap_server, snapshots)


def _report(
    args: argparse.Namespace, deployment: Deployment, findings: list[Finding], title: str
) -> int:
    if getattr(args, "json", False):
        data = render_json(findings, bootstrap=args.bootstrap_server, topics=deployment.topics)
        print(orjson.dumps(data).decode())
    else:
        header = f"topics {title}: {', '.join(deployment.topics)} on {args.bootstrap_server}"
        print(render_text(findings, header, verbose=getattr(args, "verbose", False)))
    return exit_status(findings)


def describe_row(name: str, topic: KafkaTopic, fact: TopicFacts) -> dict[str, Any]:
    """What ``topics describe`` shows of Kafka topic ``name`` (``--json``: this object)."""
    configs = fact.configs
    return {
        "topic": name,
        "kind": topic.kind.value,
        "serves": topic.owner,
        "exists": fact.exists,
        "partitions": len(fact.partitions),
        "replicationFactor": fact.replication_factor,
        "minInsyncReplicas": configs.get("min.insync.replicas"),
        "inSync": min((len(p.isr) for p in fact.partitions), default=0),
        "retentionMs": configs.get("retention.ms"),
        "retentionBytes": configs.get("retention.bytes"),
        "timestampType": configs.get("message.timestamp.type"),
        "cleanupPolicy": configs.get("cleanup.policy"),
        "maxMessageBytes": configs.get("max.message.bytes"),
        "records": fact.records,
        "offsets": fact.offsets,
    }


def _records(row: dict[str, Any]) -> str:
    """The RECORDS column: the count, or ``<=N`` (the offsets, an upper bound) when
    the topic was too large to count."""
    return str(row["records"]) if row["records"] is not None else f"<={row['offsets']}"


def _describe(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    reach(args)
    known = deployment.kafka_topics()
    facts = gather_topics(connection(args), known, count=known)
    rows = [describe_row(name, topic, facts[name]) for name, topic in known.items()]
    if args.json:
        for row in rows:
            print(orjson.dumps(row).decode())
        return 0
    print(
        f"{'TOPIC':<36} {'KIND':<13} {'PARTS':>5} {'RF':>3} {'MIN-ISR':>7} {'ISR':>4} "
        f"{'RETENTION-MS':>13} {'TIMESTAMPS':<14} {'CLEANUP':<8} {'RECORDS':>8}"
    )
    for row in rows:
        if not row["exists"]:
            print(f"{row['topic']:<36} {row['kind']:<13} (does not exist)")
            continue
        print(
            f"{row['topic']:<36} {row['kind']:<13} {row['partitions']:>5} "
            f"{row['replicationFactor']:>3} {row['minInsyncReplicas'] or '-':>7} "
            f"{row['inSync']:>4} {row['retentionMs'] or '-':>13} "
            f"{row['timestampType'] or '-':<14} {row['cleanupPolicy'] or '-':<8} "
            f"{_records(row):>8}"
        )
    return 0
