"""The environment variables settings come from.

- ``ATOMICKAFKA_CONFIG``: the configuration file (as ``--config``);
- ``ATOMICKAFKA_<OPTION>``: any option of the command being run, named after its long
  flag (``--stuck-after`` is ``ATOMICKAFKA_STUCK_AFTER``; ``true``/``false`` for flags
  that take no value);
- ``KAFKA_BOOTSTRAP_SERVERS``: the bootstrap, as many Kafka tools and images read it
  (``ATOMICKAFKA_BOOTSTRAP_SERVER`` wins over it);
- ``ATOMICKAFKA_X_<KEY>``: a librdkafka setting, its dots written as underscores
  (``ATOMICKAFKA_X_SASL_PASSWORD``, ``ATOMICKAFKA_X_PRODUCER_LINGER_MS``,
  ``ATOMICKAFKA_X_SASL_PASSWORD_FILE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from atomickafka.config.kafka_layers import KafkaSetting, Level

__all__ = [
    "BOOTSTRAP_ENV",
    "CONFIG_ENV",
    "ENV_PREFIX",
    "KAFKA_ENV_PREFIX",
    "kafka_from_environment",
    "option_env_name",
]

ENV_PREFIX: Final = "ATOMICKAFKA_"
CONFIG_ENV: Final = "ATOMICKAFKA_CONFIG"
KAFKA_ENV_PREFIX: Final = "ATOMICKAFKA_X_"
#: The bootstrap as the Kafka tools' images and scripts name it.
BOOTSTRAP_ENV: Final = "KAFKA_BOOTSTRAP_SERVERS"


def option_env_name(dest: str) -> str:
    """The variable of an option: ``stuck_after`` is ``ATOMICKAFKA_STUCK_AFTER``."""
    return ENV_PREFIX + dest.upper()


def kafka_from_environment(env: Mapping[str, str]) -> list[KafkaSetting]:
    """The librdkafka settings of ``ATOMICKAFKA_X_*`` variables, in name order."""
    out = []
    for name in sorted(env):
        if name.startswith(KAFKA_ENV_PREFIX) and len(name) > len(KAFKA_ENV_PREFIX):
            key = name[len(KAFKA_ENV_PREFIX) :].lower().replace("_", ".")
            out.append(KafkaSetting(key, env[name], Level.ENVIRONMENT, name))
    return out
