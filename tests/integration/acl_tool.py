"""A stand-in for Kafka's ``kafka-acls.sh --add`` (its options as ``deploy/acls.sh``
uses them), for tests: the embedded broker ships no Kafka tools. Each rule becomes
confluent-kafka's ``create_acls``, so the ACL examples are checked against a real
authorizer.

Run as a program: ``python -m tests.integration.acl_tool --bootstrap-server B ...``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from atomickafka.config.files import load_properties
from atomickafka.config.kafka_layers import Level

#: kafka-acls' resource options and the resource type each names (--cluster: the one).
_RESOURCES = {
    "--topic": ResourceType.TOPIC,
    "--group": ResourceType.GROUP,
    "--transactional-id": ResourceType.TRANSACTIONAL_ID,
}


def _operation(name: str) -> AclOperation:
    """``DescribeConfigs`` -> ``AclOperation.DESCRIBE_CONFIGS``."""
    return AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def bindings(argv: Sequence[str]) -> tuple[str, str | None, list[AclBinding]]:
    """The bootstrap, the command config and the ACL bindings of one command line."""
    bootstrap, config, principal = "", None, ""
    operations: list[AclOperation] = []
    resources: list[tuple[ResourceType, str]] = []
    pattern = ResourcePatternType.LITERAL
    args = iter(argv)
    for arg in args:
        if arg == "--bootstrap-server":
            bootstrap = next(args)
        elif arg == "--command-config":
            config = next(args)
        elif arg == "--allow-principal":
            principal = next(args)
        elif arg == "--operation":
            operations.append(_operation(next(args)))
        elif arg in _RESOURCES:
            resources.append((_RESOURCES[arg], next(args)))
        elif arg == "--cluster":
            resources.append((ResourceType.BROKER, "kafka-cluster"))
        elif arg == "--resource-pattern-type":
            pattern = ResourcePatternType[next(args).upper()]
        elif arg not in ("--add", "--force"):
            raise SystemExit(f"acl_tool: unknown option {arg}")
    if not (bootstrap and principal and operations and resources):
        raise SystemExit("acl_tool: needs --bootstrap-server, a principal, operations, resources")
    out = [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL if kind is ResourceType.BROKER else pattern,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for kind, name in resources
        for operation in operations
    ]
    return bootstrap, config, out


def main(argv: Sequence[str]) -> int:
    """Add the ACLs of one ``kafka-acls.sh --add`` command line."""
    bootstrap, config, acls = bindings(argv)
    settings = (
        {s.key: s.value for s in load_properties(config, Level.COMMAND_LINE)} if config else {}
    )
    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
