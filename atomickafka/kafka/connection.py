"""One value for how to reach Kafka: the bootstrap servers and the user's librdkafka
settings (security, client properties: ``-X``, the configuration file, the
environment), from which every producer, consumer and admin configuration is built.

A :class:`Connection` travels where ``bootstrap`` and ``overrides`` used to travel as a
pair; the defaults of each role and the routing of a setting to the roles it concerns
stay in :mod:`atomickafka.kafka.settings` and :mod:`atomickafka.kafka.properties`.
Its ``repr`` masks secrets (``sasl.password``...), so a connection can be logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from atomickafka.kafka.properties import masked
from atomickafka.kafka.settings import admin_config, consumer_config, producer_config

__all__ = ["Connection", "Where", "connection_of"]


@dataclass(frozen=True, slots=True, eq=True)
class Connection:
    """Where the brokers are (``bootstrap``, librdkafka's ``bootstrap.servers``) and the
    user's librdkafka ``settings`` (role-prefixed or not, see
    :func:`~atomickafka.kafka.properties.settings_for`). Immutable: ``settings`` is a
    private copy of what it was given."""

    bootstrap: str
    settings: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", dict(self.settings))

    def __hash__(self) -> int:
        return hash((self.bootstrap, tuple(sorted(self.settings.items()))))

    def __repr__(self) -> str:
        return f"Connection({self.bootstrap!r}, {masked(self.settings)!r})"

    def with_settings(self, settings: Mapping[str, str]) -> Connection:
        """This connection with ``settings`` added (they win over its own)."""
        return Connection(self.bootstrap, {**self.settings, **settings})

    def producer_config(self, **extra: str | int | bool) -> dict[str, str | int | bool]:
        """A producer configuration (:func:`~atomickafka.kafka.settings.producer_config`)."""
        return producer_config(self.bootstrap, self.settings, **extra)

    def consumer_config(
        self, group_id: str, **extra: str | int | bool
    ) -> dict[str, str | int | bool]:
        """A consumer configuration (:func:`~atomickafka.kafka.settings.consumer_config`)."""
        return consumer_config(self.bootstrap, group_id, self.settings, **extra)

    def admin_config(self) -> dict[str, str | int | float | bool]:
        """An AdminClient configuration (:func:`~atomickafka.kafka.settings.admin_config`)."""
        return admin_config(self.bootstrap, self.settings)


#: What the Kafka helpers accept: a connection, or a bare bootstrap string (no settings:
#: tests, tools and an embedded broker need none).
Where: TypeAlias = Connection | str


def connection_of(where: Where, settings: Mapping[str, str] | None = None) -> Connection:
    """``where`` as a :class:`Connection`: a connection as it is (``settings``, if any,
    added to its own), a bootstrap string with ``settings``."""
    if isinstance(where, Connection):
        return where.with_settings(settings) if settings else where
    return Connection(where, settings or {})
