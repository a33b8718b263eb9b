"""The exact configuration of a suite's runs: versions, machine, broker, client settings."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from atomickafka.core import core_form
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.settings import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS

__all__ = ["describe_environment"]


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


#: The folder holding the ``atomickafka`` package: a source checkout's root, or
#: ``site-packages`` of an installation.
_ROOT = Path(__file__).resolve().parents[3]


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout.strip()


def _git_commit() -> str:
    """The checkout's commit, when the package runs from one (not when it is installed
    into an environment that merely sits inside some repository)."""
    try:
        if Path(_git("rev-parse", "--show-toplevel")).resolve() != _ROOT:
            return "unknown (installed, not run from a git checkout)"
        commit = _git("rev-parse", "--short=12", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{commit}{' with uncommitted changes' if dirty else ''}"


def _proc_field(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        return None
    return None


def _memory() -> str:
    total = _proc_field("/proc/meminfo", "MemTotal")
    if total is None or not total.split()[0].isdigit():
        return "unknown"
    return f"{int(total.split()[0]) / 1024 / 1024:.1f} GiB"


def _java() -> str:
    try:
        from atomickafka.localkafka import find_java  # noqa: PLC0415

        out = subprocess.run(
            [find_java(), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except Exception as exc:  # a report line, not a reason to stop
        return f"unknown ({exc})"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _broker(connection: Connection, embedded: bool) -> str:
    from atomickafka.kafka.admin import admin_client  # noqa: PLC0415

    try:
        brokers = len(admin_client(connection).list_topics(timeout=10).brokers)
    except Exception:  # a report line, not a reason to stop
        brokers = 0
    count = f"{brokers} broker{'s' if brokers != 1 else ''}" if brokers else "brokers unknown"
    if embedded:
        from atomickafka.localkafka import kafka_version  # noqa: PLC0415

        return f"embedded Apache Kafka {kafka_version()} (KRaft, {count}) at {connection.bootstrap}"
    return f"{connection.bootstrap} ({count})"


def _settings(values: dict[str, str | int | bool]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def describe_environment(connection: Connection, *, embedded: bool) -> list[tuple[str, str]]:
    """``(what, value)`` rows: code version, interpreter, machine, broker (reached
    through ``connection``), libraries."""
    import confluent_kafka  # noqa: PLC0415

    cpus = os.cpu_count() or 0
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("atomickafka", f"{_package('atomickafka')}, commit {_git_commit()}"),
        # the nodes a suite starts run this interpreter and import the same package
        ("ordering core", f"{core_form()} (this run and the nodes it starts)"),
        ("python", f"{platform.python_implementation()} {sys.version.split()[0]}"),
        ("platform", platform.platform()),
        (
            "cpu",
            f"{_proc_field('/proc/cpuinfo', 'model name') or platform.processor()} "
            f"({cpus} logical CPUs, shared with the broker, nodes, clients)",
        ),
        ("memory", _memory()),
        ("load average at start (1/5/15 min)", load),
        ("kafka", _broker(connection, embedded)),
        ("java", _java()),
        (
            "confluent-kafka",
            f"{_package('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]})",
        ),
        ("pyspark", _package("pyspark")),
        ("pyarrow", _package("pyarrow")),
        ("matplotlib", _package("matplotlib")),
        ("producer settings (nodes, clients)", _settings(dict(PRODUCER_DEFAULTS))),
        ("consumer settings (nodes)", _settings(dict(CONSUMER_DEFAULTS))),
    ]
