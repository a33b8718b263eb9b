"""Merging librdkafka settings from several levels (file, environment, command line).

A :class:`KafkaSetting` is one ``key = value`` with where it came from. Keys may carry a
role prefix (``producer.linger.ms``: :mod:`atomickafka.kafka.properties`); a key
ending in ``.file`` names a file whose content is the value of the key without that
suffix (``sasl.password.file`` gives ``sasl.password``). Pure but for reading those
files, which :func:`merge_kafka_settings` takes as a function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from atomickafka.errors import ConfigError
from atomickafka.kafka.properties import ClientRole

__all__ = ["FILE_SUFFIX", "KafkaSetting", "Level", "merge_kafka_settings"]

#: A key ending in this reads its value from the file it names.
FILE_SUFFIX: Final = ".file"


class Level(IntEnum):
    """Where a setting came from; a higher level wins."""

    DEFAULT = 0
    FILE = 1
    ENVIRONMENT = 2
    COMMAND_LINE = 3


@dataclass(frozen=True, slots=True)
class KafkaSetting:
    """One librdkafka setting as given: ``key`` (maybe role-prefixed, maybe ``.file``),
    ``value``, the ``level`` it came from and ``origin``, which names the place for
    messages (``-X``, ``ATOMICKAFKA_X_ACKS``, ``ak.toml [kafka]``...)."""

    key: str
    value: str
    level: Level
    origin: str


_PREFIXES: Final = tuple(f"{role.value}." for role in ClientRole)


def _role_prefixed(key: str) -> bool:
    return any(key.startswith(prefix) for prefix in _PREFIXES)


def _read_value(setting: KafkaSetting, read_file: Callable[[str], str]) -> tuple[str, str]:
    """The setting's key and value, a ``.file`` key replaced by the file's content."""
    if not setting.key.endswith(FILE_SUFFIX) or len(setting.key) <= len(FILE_SUFFIX):
        return setting.key, setting.value
    key = setting.key[: -len(FILE_SUFFIX)]
    try:
        return key, read_file(setting.value)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"{setting.origin}: {setting.key}: cannot read {setting.value}: {reason}"
        ) from None


def merge_kafka_settings(
    settings: Iterable[KafkaSetting], read_file: Callable[[str], str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Merge ``settings`` by precedence; return ``(values, origins)`` keyed alike.

    Settings are applied level by level (lowest first) and, within a level, those for
    every client before the role-prefixed ones, so that a role's own setting wins at
    its level. A setting for every client removes the role-prefixed settings of the
    same name from lower levels: ``-X linger.ms=20`` beats a file's
    ``[producer] linger.ms = 5``. A ``.file`` setting counts as the setting it names;
    only the files of the settings that win are read.
    """
    ordered: Sequence[KafkaSetting] = sorted(
        settings, key=lambda s: (s.level, _role_prefixed(s.key))
    )
    winners: dict[str, KafkaSetting] = {}
    for setting in ordered:
        key = setting.key.removesuffix(FILE_SUFFIX) if setting.key != FILE_SUFFIX else ""
        if not key.strip():
            raise ConfigError(f"{setting.origin}: empty setting name")
        if not _role_prefixed(key):
            for prefix in _PREFIXES:
                winners.pop(prefix + key, None)
        winners[key] = setting
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    for key, setting in winners.items():
        values[key] = _read_value(setting, read_file)[1]
        origins[key] = setting.origin
    return values, origins
