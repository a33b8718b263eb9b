"""Where every command's settings come from: a TOML file, the environment and the
command line, with one precedence.

**Precedence** (highest first), for each option of the command being run:

1. the command line (``--bootstrap-server``, ``-X key=value``...);
2. the environment: ``ATOMICKAFKA_<OPTION>`` (``ATOMICKAFKA_BOOTSTRAP_SERVER``,
   ``ATOMICKAFKA_LOG_LEVEL``...), and ``KAFKA_BOOTSTRAP_SERVERS`` for the bootstrap;
3. the configuration file (``--config PATH`` or ``ATOMICKAFKA_CONFIG``): the table of
   the command (``[tail]``, ``[cluster]``...) over its top level;
4. the built-in defaults (``atomickafka CMD --help`` lists them).

**librdkafka settings** pass through unchanged, SASL and SSL included, and merge key by
key at the same levels: the file's ``[kafka]`` table (every client) and ``[producer]``,
``[consumer]``, ``[admin]`` tables (one kind of client); ``ATOMICKAFKA_X_<KEY>`` in the
environment (dots as underscores: ``ATOMICKAFKA_X_SECURITY_PROTOCOL``,
``ATOMICKAFKA_X_PRODUCER_LINGER_MS``); on the command line ``-X key=value``,
``--producer-property``, ``--consumer-property``, ``--admin-property``. A properties
file as the Kafka tools take (``--command-config PATH``, or ``command_config`` in the
file or the environment) counts at the level that named it, below that level's own
pairs. At one level a role's own setting beats the one for every client; a higher
level's setting for every client replaces the lower levels' role settings of that key.

**Secrets** (any setting whose name says ``password`` or ``secret``, a JAAS config, a
PEM key) are never printed or logged: ``--print-config`` and every ``repr`` show
``********`` and log lines have them replaced. Any setting can be read from a file by
adding ``.file`` to its name (``sasl.password.file = "/run/secrets/kafka"``: the file's
content, without its final newline, becomes ``sasl.password``), which keeps passwords
out of ``ps`` and out of the configuration file. ``secret_file`` names the file holding
the signing secret (read by whoever signs; only its path is ever shown).

Invalid settings (an unknown option in the file, a value of the wrong type, an
unreadable file) are reported in one line, naming where they came from, before
anything starts (exit status 2).

Modules: :mod:`~atomickafka.config.files` (the TOML and properties files, secret
files), :mod:`~atomickafka.config.environment` (the variables),
:mod:`~atomickafka.config.kafka_layers` (merging librdkafka settings by level),
:mod:`~atomickafka.config.commands` (applying it all to a command's options).
"""

from __future__ import annotations

from atomickafka.config.commands import (
    KafkaPairAction,
    Origin,
    ResolvedConfig,
    apply_to_parser,
    command_options,
    config_path,
    find_command,
    resolve_kafka,
)
from atomickafka.config.environment import (
    BOOTSTRAP_ENV,
    CONFIG_ENV,
    ENV_PREFIX,
    KAFKA_ENV_PREFIX,
    kafka_from_environment,
    option_env_name,
)
from atomickafka.config.files import (
    ConfigFile,
    load_config_file,
    load_properties,
    read_secret_file,
)
from atomickafka.config.kafka_layers import KafkaSetting, Level, merge_kafka_settings

__all__ = [
    "BOOTSTRAP_ENV",
    "CONFIG_ENV",
    "ENV_PREFIX",
    "KAFKA_ENV_PREFIX",
    "ConfigFile",
    "KafkaPairAction",
    "KafkaSetting",
    "Level",
    "Origin",
    "ResolvedConfig",
    "apply_to_parser",
    "command_options",
    "config_path",
    "find_command",
    "kafka_from_environment",
    "load_config_file",
    "load_properties",
    "merge_kafka_settings",
    "option_env_name",
    "read_secret_file",
    "resolve_kafka",
]
