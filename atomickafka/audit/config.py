"""The live audit's configuration: every default in one place."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from atomickafka.audit.rules import DEFAULT_BOUND_S
from atomickafka.errors import ConfigError
from atomickafka.kafka.connection import Connection

__all__ = ["AUDIT_GROUP", "AUDIT_TOPIC", "AuditConfig"]

#: Where the audit writes its violations, one JSON record each.
AUDIT_TOPIC: Final = "atomickafka-audit"
#: The consumer group whose committed offsets (and their metadata) hold the audit's
#: position, so that a restarted audit resumes there (§10.5).
AUDIT_GROUP: Final = "atomickafka-audit"


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """Everything one audit process needs."""

    bootstrap: str
    topics: tuple[str, ...]
    #: Seconds a message may take to reach all its destinations after its first one.
    bound_s: float = DEFAULT_BOUND_S
    group: str = AUDIT_GROUP
    #: The topic violations are written to; ``None``: only the log and the metrics.
    audit_topic: str | None = AUDIT_TOPIC
    #: Port of the Prometheus endpoint (``/metrics``); ``None``: no endpoint.
    metrics_port: int | None = None
    #: Address the Prometheus endpoint listens on.
    metrics_host: str = "0.0.0.0"
    overrides: Mapping[str, str] = field(default_factory=dict)
    #: How often the position is committed (seconds).
    commit_interval_s: float = 5.0
    poll_timeout_s: float = 0.2
    batch_size: int = 5000
    log_level: str = "info"
    #: The deployment's signing secrets (docs/DESIGN.md §4.14): only validly signed
    #: deliveries are audited, the others counted as forged. ``None``: no signing.
    secret_file: str | None = None
    #: The sender ids whose deliveries are audited; ``None``: each topic's node and
    #: merger (the evaluation's baselines name theirs).
    writers: tuple[str, ...] | None = None
    #: The nodes write exactly-once (their default): an exact repeat of a delivery is
    #: then an ``aborted-read`` violation, not a crash repeat (docs/DESIGN.md §10.1).
    exactly_once: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(dict.fromkeys(self.topics)))
        if self.writers is not None:
            object.__setattr__(self, "writers", tuple(self.writers))
        object.__setattr__(self, "overrides", dict(self.overrides))
        if not self.topics:
            raise ConfigError("the audit needs at least one topic (--topics)")
        if self.bound_s <= 0:
            raise ConfigError(f"the bound must be positive, not {self.bound_s}")
        if self.audit_topic is not None and self.audit_topic in self.topics:
            raise ConfigError(f"the audit cannot write its violations to {self.audit_topic}")

    @classmethod
    def private(
        cls,
        connection: Connection,
        topics: Iterable[str],
        *,
        bound_s: float = DEFAULT_BOUND_S,
        name: str = "private",
        secret_file: str | None = None,
        writers: Iterable[str] | None = None,
    ) -> AuditConfig:
        """An audit of its own: a fresh consumer group (``atomickafka-audit-<name>-...``),
        and no audit topic (violations go to its log and its caller only)."""
        return cls(
            connection.bootstrap,
            tuple(topics),
            bound_s=bound_s,
            group=f"atomickafka-audit-{name}-{uuid.uuid4().hex[:12]}",
            audit_topic=None,
            overrides=dict(connection.settings),
            secret_file=secret_file,
            writers=None if writers is None else tuple(writers),
        )

    @property
    def connection(self) -> Connection:
        """How the audit reaches Kafka: ``bootstrap`` and the user's ``overrides``."""
        return Connection(self.bootstrap, self.overrides)

    @property
    def key(self) -> str:
        """The audit's name in logs and in the supervisor."""
        return f"audit/{self.group}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (to hand the configuration to a child process)."""
        data = asdict(self)
        data["topics"] = list(self.topics)
        data["overrides"] = dict(self.overrides)
        data["writers"] = None if self.writers is None else list(self.writers)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown audit settings: {', '.join(sorted(unknown))}")
        settings = dict(data)
        settings["topics"] = tuple(settings["topics"])
        return cls(**settings)
