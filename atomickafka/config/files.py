"""The files settings come from: the TOML configuration file, a properties file as the
Kafka tools take (``--command-config``), and files holding one secret.

The TOML file (an example: ``deploy/atomickafka.example.toml``)::

    bootstrap_server = "kafka1:9092,kafka2:9092"   # any option of any command
    log_level = "info"

    [kafka]                       # librdkafka settings for every client (as -X)
    "security.protocol" = "SASL_SSL"
    sasl.mechanism = "SCRAM-SHA-512"              # dotted keys work too
    sasl.username = "atomickafka"
    sasl.password.file = "/run/secrets/kafka-password"

    [producer]                    # only producers; [consumer] and [admin] likewise
    linger.ms = 5

    [node]                        # the options of one command, over the top level;
    algorithm = "direct"          # [node] applies to cluster's nodes too, under [cluster]

    [cluster]
    topics = ["orders", "payments", "audit"]

Option names are the long flags without dashes (``bootstrap_server`` or
``bootstrap-server``); booleans are ``true``/``false``, lists join with commas.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from atomickafka.config.kafka_layers import KafkaSetting, Level
from atomickafka.errors import ConfigError
from atomickafka.kafka.properties import ClientRole

__all__ = [
    "KAFKA_TABLE",
    "ConfigFile",
    "load_config_file",
    "load_properties",
    "parse_properties",
    "read_secret_file",
    "setting_text",
]

#: The table of librdkafka settings for every client; ``[producer]`` etc. for one role.
KAFKA_TABLE: Final = "kafka"
_ROLE_TABLES: Final = frozenset(role.value for role in ClientRole)
#: Commands that take a table of another command too, under their own: ``cluster`` runs
#: nodes, so the ``[node]`` table (the protocol, the delivery mode, ...) applies to the
#: nodes it runs, and ``[cluster]`` over it. A key of the other table that the command
#: does not have (``[node] topic``) is not its option and is left out.
INHERITED_TABLES: Final[Mapping[str, tuple[str, ...]]] = {"cluster": ("node",)}


def read_secret_file(path: str | Path) -> str:
    """The content of a file holding one secret, without its final newline. Raises
    ``OSError`` when it cannot be read."""
    text = Path(path).expanduser().read_text(encoding="utf-8")
    return text.removesuffix("\n").removesuffix("\r")


def setting_text(value: object) -> str:
    """A TOML value as librdkafka and argparse take it: ``true``/``false`` for booleans,
    comma-joined lists, other values as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(setting_text(v) for v in value)
    return str(value)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"sasl": {"mechanism": "PLAIN"}}`` (TOML's dotted keys) as ``sasl.mechanism``."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A parsed configuration file: options for every command (``options``), each
    command's table (``commands``), and librdkafka settings (``kafka``)."""

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    commands: dict[str, dict[str, Any]] = field(default_factory=dict)
    kafka: tuple[KafkaSetting, ...] = ()

    def options_for(self, command: str) -> dict[str, tuple[Any, str]]:
        """The options the file sets for ``command`` (``"broker start"``: its ``[broker]``
        table applies, then ``[broker.start]``; ``"cluster"``: ``[node]``, then
        ``[cluster]``, :data:`INHERITED_TABLES`), each with where it was written."""
        out = {key: (value, str(self.path)) for key, value in self.options.items()}
        words = command.split()
        tables = [*INHERITED_TABLES.get(command, ())]
        tables += [".".join(words[:depth]) for depth in range(1, len(words) + 1)]
        for name in tables:
            for key, value in self.commands.get(name, {}).items():
                out[key] = (value, f"{self.path} [{name}]")
        return out


def load_config_file(path: str | Path, commands: Mapping[str, frozenset[str]]) -> ConfigFile:
    """Read and check the TOML configuration file at ``path``.

    ``commands`` maps each command name (``"tail"``, ``"broker start"``) to its option
    names; a table must name a command and its keys must be its options. Raises
    :class:`~atomickafka.errors.ConfigError` in one line for anything else.
    """
    where = Path(path).expanduser()
    try:
        with where.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {where}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {where}: not valid TOML: {exc}") from None
    every_option = frozenset().union(*commands.values()) if commands else frozenset()
    options: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    kafka: list[KafkaSetting] = []
    for key, value in data.items():
        if key == KAFKA_TABLE or key in _ROLE_TABLES:
            kafka += _kafka_table(where, key, value)
        elif isinstance(value, dict) and key in {c.split()[0] for c in commands}:
            _command_tables(where, key, value, commands, tables)
        elif isinstance(value, dict):
            raise ConfigError(
                f"config file {where}: [{key}] is not a command nor one of [kafka], "
                "[producer], [consumer], [admin]"
            )
        else:
            name = key.replace("-", "_")
            if name not in every_option:
                raise ConfigError(f"config file {where}: no command has an option {key!r}")
            options[name] = value
    return ConfigFile(where, options, tables, tuple(kafka))


def _kafka_table(where: Path, name: str, value: object) -> list[KafkaSetting]:
    if not isinstance(value, dict):
        raise ConfigError(f"config file {where}: {name} must be a table ([{name}])")
    prefix = "" if name == KAFKA_TABLE else f"{name}."
    return [
        KafkaSetting(prefix + key, setting_text(v), Level.FILE, f"{where} [{name}]")
        for key, v in _flatten(value).items()
    ]


def _command_tables(
    where: Path,
    command: str,
    table: dict[str, Any],
    commands: Mapping[str, frozenset[str]],
    out: dict[str, dict[str, Any]],
) -> None:
    """Check and keep the table of ``command`` (and its sub-tables: ``[broker.start]``)."""
    own: dict[str, Any] = {}
    known = commands.get(command)
    subcommands = {c.split()[1] for c in commands if c.startswith(command + " ")}
    allowed = (
        known
        if known is not None
        else frozenset().union(*(v for c, v in commands.items() if c.startswith(command + " ")))
    )
    for key, value in table.items():
        if isinstance(value, dict) and key in subcommands:
            _command_tables(where, f"{command} {key}", value, commands, out)
            continue
        name = key.replace("-", "_")
        if name not in allowed:
            raise ConfigError(f"config file {where}: [{command}] has no option {key!r}")
        own[name] = value
    out[command.replace(" ", ".")] = own


_JAAS_LOGIN: Final = re.compile(r"(\w+)\s*=\s*\"((?:[^\"\\]|\\.)*)\"")


def parse_properties(text: str, origin: str, level: Level) -> list[KafkaSetting]:
    """Settings of a Java-style properties file (``key=value``, ``key: value``; ``#`` and
    ``!`` comments; a line ending in ``\\`` goes on). A Java client's
    ``sasl.jaas.config`` with a ``username`` and ``password`` (PLAIN, SCRAM) becomes
    librdkafka's ``sasl.username`` and ``sasl.password``."""
    out: list[KafkaSetting] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            out.append(KafkaSetting(line, "", level, origin))
            continue
        key, value = match.group(1), match.group(2)
        if key == "sasl.jaas.config":
            found = dict(_JAAS_LOGIN.findall(value))
            if "username" not in found or "password" not in found:
                raise ConfigError(
                    f"{origin}: sasl.jaas.config: only a login module with username and "
                    "password is understood (librdkafka takes sasl.username, sasl.password)"
                )
            out.append(KafkaSetting("sasl.username", found["username"], level, origin))
            out.append(KafkaSetting("sasl.password", found["password"], level, origin))
            continue
        out.append(KafkaSetting(key, value, level, origin))
    return out


def load_properties(path: str | Path, level: Level) -> list[KafkaSetting]:
    """The settings of the properties file at ``path`` (see :func:`parse_properties`)."""
    where = Path(path).expanduser()
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"properties file {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"properties file {where}: not UTF-8 text ({exc.reason})") from None
    return parse_properties(text, str(where), level)
