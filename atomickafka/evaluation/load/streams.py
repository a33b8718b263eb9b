"""The Kafka Streams baseline (``streams``): the exactly-once fan-out most Kafka teams
would reach for, as one JVM process.

The application's Java source and its build are the embedded broker's tooling
(:mod:`atomickafka.localkafka.streams_app`: compiled once with Maven against
``kafka-streams`` of the broker's version): it reads the sequencer topic and writes each
message to each of its destinations (a ``TopicNameExtractor`` sink), with
``processing.guarantee=exactly_once_v2`` and Kafka Streams' defaults otherwise (a commit
every 100 ms). Its ``application.id`` is fixed per sequencer topic, so a process started
again after a crash resumes from the offsets the last one committed.

It reaches Kafka with the bootstrap servers alone: librdkafka's ``-X`` settings are not
the Java client's, so a connection that has some is refused with a clear error.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Final

from atomickafka.errors import ConfigError
from atomickafka.kafka.connection import Connection
from atomickafka.localkafka.streams_app import StreamsProcess, streams_command

__all__ = ["STREAMS_ID", "streams_application_id", "streams_process"]

#: ``senderID`` of its deliveries (and its name in the metrics).
STREAMS_ID: Final = "streams"


def streams_application_id(topic: str) -> str:
    """The ``application.id`` of the fan-out of sequencer topic ``topic``."""
    return f"atomickafka-streams-{topic}"


def streams_process(
    connection: Connection, topic: str, work_dir: Path | None = None
) -> StreamsProcess:
    """The application over sequencer topic ``topic`` (not started), its state folder
    and log (``streams.log``) in ``work_dir``."""
    if connection.settings:  # said before any run by baselines.check_reachable
        raise ConfigError(
            "the Kafka Streams baseline reaches Kafka with the bootstrap servers only; it "
            f"cannot take librdkafka settings ({', '.join(sorted(connection.settings))})"
        )
    folder = work_dir or Path(tempfile.gettempdir()) / "atomickafka-streams" / topic
    command = streams_command(
        connection.bootstrap, topic, streams_application_id(topic), folder / "state", STREAMS_ID
    )
    return StreamsProcess(command, folder / "streams.log")
