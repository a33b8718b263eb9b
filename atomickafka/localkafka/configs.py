"""Broker config files, rendered from the templates shipped as package data (``templates/``).

A template is text with ``@NAME@`` placeholders: ``single/server.properties`` (one broker,
every replication factor 1), ``cluster/server.properties`` (three brokers, RF 3, min ISR 2)
and ``log4j2.xml`` (logging to ``logs/server.log``). A cluster started with ``--sasl``
takes SASL PLAIN logins (:data:`~atomickafka.localkafka.state.SASL_USERS`, JAAS in
``server.properties``); :func:`write_client_configs` writes the settings a client needs
to log in as ``alice``, for the Kafka tools and for AtomicKafka.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from atomickafka.localkafka.errors import BrokerError
from atomickafka.localkafka.state import SASL_USERS, ClusterState, broker_dir

__all__ = [
    "CLIENT_PROPERTIES",
    "CLIENT_TOML",
    "client_settings",
    "render_template",
    "template",
    "write_client_configs",
    "write_configs",
]

#: In the data dir of a ``--sasl`` cluster: the client settings as a properties file
#: (``--command-config``, the Kafka tools) and as an AtomicKafka configuration file.
CLIENT_PROPERTIES = "client.properties"
CLIENT_TOML = "atomickafka.toml"
#: Who clients log in as.
CLIENT_USER = "alice"


def _security(state: ClusterState) -> str:
    """The SASL block of ``server.properties`` (empty without SASL)."""
    if not state.sasl:
        return ""
    admin = SASL_USERS["admin"]
    users = " ".join(f'user_{name}="{password}"' for name, password in SASL_USERS.items())
    authorizer = ""
    if state.acls:  # the controllers talk PLAINTEXT on loopback: ANONYMOUS among them
        authorizer = (
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
            "super.users=User:admin;User:ANONYMOUS\n"
        )
    return authorizer + (
        "sasl.enabled.mechanisms=PLAIN\n"
        "sasl.mechanism.inter.broker.protocol=PLAIN\n"
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{admin}" {users};\n'
    )


def client_settings(state: ClusterState, user: str = CLIENT_USER) -> dict[str, str]:
    """The librdkafka settings a client of ``state``'s cluster needs (none without SASL)."""
    if not state.sasl:
        return {}
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": SASL_USERS[user],
    }


def write_client_configs(data_dir: Path, state: ClusterState) -> None:
    """Write :data:`CLIENT_PROPERTIES` (the Java clients' form, with ``sasl.jaas.config``,
    which ``--command-config`` also reads) and :data:`CLIENT_TOML` for a ``--sasl``
    cluster (readable by the owner only: they hold a password)."""
    settings = client_settings(state)
    if not settings:
        return
    user, password = settings["sasl.username"], settings["sasl.password"]
    props = (  # as the Kafka tools (and Spark's Kafka source) take it; AtomicKafka too
        f"security.protocol={settings['security.protocol']}\n"
        f"sasl.mechanism={settings['sasl.mechanism']}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{password}";\n'
    )
    toml = f'bootstrap_server = "{state.bootstrap}"\n\n[kafka]\n' + "".join(
        f'"{key}" = "{value}"\n' for key, value in settings.items()
    )
    for name, text in ((CLIENT_PROPERTIES, props), (CLIENT_TOML, toml)):
        path = data_dir / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o600)


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
            "LISTENER": "SASL_PLAINTEXT" if state.sasl else "PLAINTEXT",
            "SECURITY": _security(state),
        }
        (folder / "server.properties").write_text(render_template(name, values))
        log4j = render_template("log4j2.xml", {"LOG_FILE": folder / "logs" / "server.log"})
        (folder / "log4j2.xml").write_text(log4j)
    write_client_configs(data_dir, state)
