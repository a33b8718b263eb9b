"""What AtomicKafka knows about librdkafka's properties: which client role each one
concerns, how a setting is addressed to one role, and which ones hold secrets.

Settings pass through to librdkafka unchanged; this module only decides *which*
clients get them, so that a producer setting does not make every consumer print a
configuration warning:

- a key with a role prefix, ``producer.``, ``consumer.`` or ``admin.`` (as Kafka
  Connect spells per-client settings), goes to that role only, the prefix removed;
- a key librdkafka documents as producer-only (``P`` in its CONFIGURATION.md) goes to
  producers, a consumer-only one (``C``) to consumers;
- any other key goes to every client.

The admin client is a producer-type handle in librdkafka: it takes the settings every
client takes and its ``admin.`` ones, not the producer-only ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Final, TypeVar

__all__ = [
    "CONSUMER_ONLY",
    "MASK",
    "PRODUCER_ONLY",
    "ClientRole",
    "is_secret",
    "masked",
    "redact",
    "role_of",
    "secret_values",
    "settings_for",
]

V = TypeVar("V")


class ClientRole(StrEnum):
    """The kinds of librdkafka client AtomicKafka creates."""

    PRODUCER = "producer"
    CONSUMER = "consumer"
    ADMIN = "admin"


#: Properties librdkafka applies to producers only (CONFIGURATION.md, ``P``).
PRODUCER_ONLY: Final = frozenset(
    {
        "transactional.id",
        "transaction.timeout.ms",
        "enable.idempotence",
        "enable.gapless.guarantee",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "queue.buffering.max.ms",
        "linger.ms",
        "message.send.max.retries",
        "retries",
        "queue.buffering.backpressure.threshold",
        "compression.codec",
        "compression.type",
        "compression.level",
        "batch.num.messages",
        "batch.size",
        "delivery.report.only.error",
        "sticky.partitioning.linger.ms",
        "request.required.acks",
        "acks",
        "request.timeout.ms",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "queuing.strategy",
        "produce.offset.report",
        "partitioner",
    }
)

#: Properties librdkafka applies to consumers only (CONFIGURATION.md, ``C``).
CONSUMER_ONLY: Final = frozenset(
    {
        "group.id",
        "group.instance.id",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "group.protocol.type",
        "group.protocol",
        "group.remote.assignor",
        "coordinator.query.interval.ms",
        "max.poll.interval.ms",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.wait.max.ms",
        "fetch.queue.backoff.ms",
        "fetch.message.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.max.bytes",
        "fetch.min.bytes",
        "fetch.error.backoff.ms",
        "isolation.level",
        "enable.partition.eof",
        "check.crcs",
        "auto.offset.reset",
        "consume.callback.max.messages",
        "allow.auto.create.topics",
    }
)

_PREFIXES: Final = {f"{role.value}.": role for role in ClientRole}


def role_of(key: str) -> tuple[ClientRole | None, str]:
    """The role a setting is addressed to (``None``: every client) and its librdkafka
    name (the key without its role prefix)."""
    for prefix, role in _PREFIXES.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            return role, key[len(prefix) :]
    if key in PRODUCER_ONLY:
        return ClientRole.PRODUCER, key
    if key in CONSUMER_ONLY:
        return ClientRole.CONSUMER, key
    return None, key


def settings_for(settings: Mapping[str, V], role: ClientRole | str) -> dict[str, V]:
    """The settings of ``settings`` that a client of ``role`` takes, under their
    librdkafka names: those for every client first, then the role's own, which win."""
    wanted = ClientRole(role)
    common: dict[str, V] = {}
    own: dict[str, V] = {}
    for key, value in settings.items():
        target, name = role_of(key)
        if target is None:
            common[name] = value
        elif target is wanted:
            own[name] = value
    return {**common, **own}


# ---------------------------------------------------------------------------- secrets

#: What a secret is shown as.
MASK: Final = "********"
#: Properties that hold a secret although their name does not say "password" or "secret".
_SECRET_NAMES: Final = frozenset(
    {"ssl.key.pem", "ssl.keystore.pem", "sasl.oauthbearer.config", "sasl.jaas.config"}
)


def is_secret(key: str) -> bool:
    """True for a setting whose value must never be shown (``sasl.password``,
    ``ssl.key.password``, ``sasl.oauthbearer.client.secret``..., with or without a role
    prefix)."""
    name = role_of(key)[1].lower()
    return "password" in name or "secret" in name or name in _SECRET_NAMES


def masked(settings: Mapping[str, V]) -> dict[str, V | str]:
    """A copy of ``settings`` with every secret value replaced by :data:`MASK`."""
    return {key: (MASK if is_secret(key) else value) for key, value in settings.items()}


def secret_values(settings: Mapping[str, object]) -> list[str]:
    """The non-empty values of the secrets in ``settings`` (to redact from text)."""
    return [str(v) for k, v in settings.items() if is_secret(k) and str(v)]


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by :data:`MASK` (longest
    first, so that a secret containing another is hidden whole)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
