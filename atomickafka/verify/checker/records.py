"""The checker's own inputs: what a client sent and what a topic delivered.

:func:`~atomickafka.verify.checker.check` takes only these types; the adapters
(:mod:`atomickafka.verify.checker.adapters`) build them from files, JSON objects, wire
records and client deliveries.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from atomickafka.errors import AtomicKafkaError

__all__ = ["UNSET", "CheckInputError", "DeliveryRecord", "SentMessage"]


class _Unset(Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: Marks a value that is not known (``None`` is a legitimate JSON ``null`` value).
UNSET: Final = _Unset.UNSET


class CheckInputError(AtomicKafkaError, ValueError):
    """The checker's input is malformed (a bad file or record)."""


@dataclass(frozen=True, slots=True)
class SentMessage:
    """A message as its client sent it: id, destination topics and (if known) value."""

    messageID: str
    destinations: frozenset[str]
    value: Any = UNSET


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One delivery as the checker sees it.

    ``destinations`` is the destination list the record carries (the wire field
    ``topic``), ``deliveredAt`` the topic that delivered it; any of the fields but
    ``messageID`` may be unknown (``None`` / :data:`UNSET`). ``layer`` is the partition
    layer that ordered it (0 for a topic with one layer): a merged stream delivers in
    increasing ``(timeStamp, layer, messageID)``.
    """

    messageID: str
    destinations: tuple[str, ...] | None = None
    timeStamp: int | None = None
    value: Any = UNSET
    deliveredAt: str | None = None
    layer: int = 0
