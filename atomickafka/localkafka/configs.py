"""Broker config files, rendered from the templates shipped as package data (``templates/``).

A template is text with ``@NAME@`` placeholders: ``single/server.properties`` (one broker,
every replication factor 1), ``cluster/server.properties`` (three brokers, RF 3, min ISR 2)
and ``log4j2.xml`` (logging to ``logs/server.log``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from atomickafka.localkafka.errors import BrokerError
from atomickafka.localkafka.state import ClusterState, broker_dir

__all__ = ["render_template", "template", "write_configs"]

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def template(name: str) -> Traversable:
    """The packaged template ``name`` (a ``/``-separated path under ``templates/``)."""
    path = resources.files(__package__ or "atomickafka.localkafka") / "templates"
    for part in name.split("/"):
        path = path / part
    return path


def render_template(name: str, values: Mapping[str, object]) -> str:
    """Fill the ``@NAME@`` placeholders of template ``name``; every one must have a value."""
    source = template(name)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(f"cannot read template {source}: {exc}") from exc

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise BrokerError(f"template {source} uses @{key}@, which has no value")
        return str(values[key])

    return _PLACEHOLDER.sub(fill, text)


def write_configs(data_dir: Path, state: ClusterState) -> None:
    """Write ``server.properties`` and ``log4j2.xml`` into the folder of every broker."""
    name = "single/server.properties" if len(state.brokers) == 1 else "cluster/server.properties"
    for spec in state.brokers:
        folder = broker_dir(data_dir, spec.node_id)
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        values = {
            "NODE_ID": spec.node_id,
            "PORT": spec.port,
            "CONTROLLER_PORT": spec.controller_port,
            "VOTERS": state.voters,
            "LOG_DIRS": folder / "data",
        }
        (folder / "server.properties").write_text(render_template(name, values))
        log4j = render_template("log4j2.xml", {"LOG_FILE": folder / "logs" / "server.log"})
        (folder / "log4j2.xml").write_text(log4j)
