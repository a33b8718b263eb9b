"""librdkafka settings that would break AtomicKafka's guarantees, refused with the reason.

The user's settings pass through to librdkafka unchanged (:mod:`atomickafka.kafka.
settings`), and most of them are theirs to choose. A few would silently break what the
ordering rests on (``docs/DESIGN.md`` §6): a producer that may duplicate or lose an
acknowledged record, a node consumer that commits on its own or starts anywhere but
offset 0, a reader that sees records of aborted transactions. :func:`unsafe_settings`
names each such setting with the reason; :func:`refuse_unsafe` raises them as one
:class:`~atomickafka.errors.ConfigError`. Pure: no Kafka is contacted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from atomickafka.errors import ConfigError
from atomickafka.kafka.properties import ClientRole, settings_for

__all__ = ["Rule", "refuse_unsafe", "unsafe_settings"]

_TRUE: Final = frozenset({"true", "1", "yes", "on"})


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip().lower()


def _is_false(value: object) -> bool:
    return _text(value) not in _TRUE


def _is_true(value: object) -> bool:
    return _text(value) in _TRUE


@dataclass(frozen=True, slots=True)
class Rule:
    """One setting that must not take certain values.

    ``bad(value)`` says whether a value breaks a guarantee; ``nodes_only`` rules apply to
    the nodes' and mergers' clients, the others to every client AtomicKafka creates.
    """

    role: ClientRole
    key: str
    bad: Callable[[object], bool]
    reason: str
    nodes_only: bool = False


RULES: Final[tuple[Rule, ...]] = (
    Rule(
        ClientRole.PRODUCER,
        "enable.idempotence",
        _is_false,
        "without the idempotent producer a retried write can be duplicated or reordered "
        "in a topic's log, and nodes replay that log",
    ),
    Rule(
        ClientRole.PRODUCER,
        "acks",
        lambda v: _text(v) not in ("all", "-1"),
        "a record acknowledged by the leader alone is lost when that broker fails; "
        "AtomicKafka needs acks=all",
    ),
    Rule(
        ClientRole.PRODUCER,
        "request.required.acks",
        lambda v: _text(v) not in ("all", "-1"),
        "a record acknowledged by the leader alone is lost when that broker fails; "
        "AtomicKafka needs acks=all",
    ),
    Rule(
        ClientRole.PRODUCER,
        "queuing.strategy",
        lambda v: _text(v) != "fifo",
        "records must leave in the order they were queued",
    ),
    Rule(
        ClientRole.PRODUCER,
        "transactional.id",
        lambda v: bool(_text(v)),
        "AtomicKafka chooses the transactional ids of the clients that use transactions; "
        "one set by hand fences or is fenced by another client",
    ),
    Rule(
        ClientRole.PRODUCER,
        "enable.gapless.guarantee",
        _is_false,
        "a merger writes its stream without gaps; it sets this itself",
        nodes_only=True,
    ),
    Rule(
        ClientRole.CONSUMER,
        "isolation.level",
        lambda v: _text(v) != "read_committed",
        "read_uncommitted would show records of transactions that were aborted",
    ),
    Rule(
        ClientRole.CONSUMER,
        "enable.auto.commit",
        _is_true,
        "a node commits its input offset only once the outputs of everything before it "
        "are acknowledged (DESIGN §6.2); an automatic commit could skip inputs after a crash",
        nodes_only=True,
    ),
    Rule(
        ClientRole.CONSUMER,
        "auto.offset.reset",
        lambda v: _text(v) not in ("earliest", "smallest", "beginning"),
        "a node rebuilds its state by reading its input log from offset 0",
        nodes_only=True,
    ),
    Rule(
        ClientRole.CONSUMER,
        "group.id",
        lambda v: bool(_text(v)),
        "each node keeps its progress in its own consumer group; a shared one would mix "
        "their committed offsets",
        nodes_only=True,
    ),
)


def unsafe_settings(overrides: Mapping[str, object], *, node: bool) -> list[str]:
    """Each setting of ``overrides`` that breaks a guarantee, as ``key=value: reason``.

    ``node`` says whether the settings are a node's or merger's (every rule applies) or a
    client's, ``send``'s or a reader's (the rules for every client apply). A setting is
    judged as the client of its role would take it (a ``producer.`` prefix counts, a
    ``consumer.acks`` does not).
    """
    found: list[str] = []
    by_role = {role: settings_for(overrides, role) for role in ClientRole}
    for rule in RULES:
        if rule.nodes_only and not node:
            continue
        value = by_role[rule.role].get(rule.key)
        if value is not None and rule.bad(value):
            found.append(f"{rule.key}={value}: {rule.reason}")
    return found


def refuse_unsafe(overrides: Mapping[str, object], *, node: bool) -> None:
    """Raise :class:`~atomickafka.errors.ConfigError` naming every setting of
    ``overrides`` that breaks a guarantee (see :func:`unsafe_settings`)."""
    found = unsafe_settings(overrides, node=node)
    if found:
        what = "this setting" if len(found) == 1 else "these settings"
        raise ConfigError(
            f"refused, {what} would break AtomicKafka's guarantees: {'; '.join(found)}"
        )
