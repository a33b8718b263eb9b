"""Kafka's command-line tools on this machine, from the same Maven repository as the
broker: ``atomickafka broker tool kafka-console-consumer --topic atomickafka-dlq.T ...``
runs what ``kafka-console-consumer.sh`` runs, with no Kafka download (``doctor`` and
the guides name these tools). The broker's jars lack them: their classes are in
``kafka-tools`` (:data:`~atomickafka.localkafka.jars.KAFKA_TOOLS_POM`), fetched once beside
the broker's jars; a tool runs with both on its class path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from atomickafka.localkafka.configs import render_template
from atomickafka.localkafka.errors import BrokerError, Log, log_stderr
from atomickafka.localkafka.jars import fetch_kafka, fetch_kafka_tools, find_java

__all__ = ["TOOLS", "run_tool", "tool_command"]

#: The tools, by the name of Kafka's script (``.sh`` optional), and their main class.
TOOLS: Final[Mapping[str, str]] = {
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
}
_JVM_OPTS: Final = ("-Xmx256m", "-Djava.awt.headless=true")


def tool_command(name: str, args: Sequence[str], log: Log = log_stderr) -> list[str]:
    """The command line that runs Kafka's tool ``name`` with ``args`` (the jars
    fetched first if need be); :class:`BrokerError` for a tool it does not know."""
    main = TOOLS.get(name.removesuffix(".sh"))
    if main is None:
        raise BrokerError(f"no Kafka tool {name!r}; the tools: {', '.join(sorted(TOOLS))}")
    java, lib, tools = find_java(), fetch_kafka(log), fetch_kafka_tools(log)
    config = _log_config(tools.parent)
    return [
        java,
        *_JVM_OPTS,
        f"-Dlog4j2.configurationFile={config}",
        "-cp",
        f"{lib}/*:{tools}/*",
        main,
        *args,
    ]


def _log_config(folder: Path) -> Path:
    """The tools' logging configuration (warnings on stderr), written once."""
    path = folder / "tools-log4j2.xml"
    if not path.exists():
        path.write_text(render_template("tools-log4j2.xml", {"LEVEL": "warn"}), encoding="utf-8")
    return path


def run_tool(name: str, args: Sequence[str], log: Log = log_stderr) -> int:
    """Run Kafka's tool ``name`` with ``args``, its output and input this process's;
    return its exit status."""
    return subprocess.run(tool_command(name, args, log), check=False).returncode
