"""The values the ordering engine takes and returns (see :mod:`atomickafka.core.engine`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, NamedTuple

from atomickafka.core.memory import Version
from atomickafka.core.reasons import Reason
from atomickafka.core.wire import Message

__all__ = [
    "DEFAULT_ALGORITHM",
    "Aborted",
    "Algorithm",
    "EngineStats",
    "Output",
    "PendingMessage",
    "Rejection",
    "Step",
    "Waiting",
]


class Algorithm(StrEnum):
    """Which ordering protocol a node runs."""

    POC = "poc"
    OPTIMIZED = "optimized"
    DIRECT = "direct"


DEFAULT_ALGORITHM: Final = Algorithm.DIRECT


class Output(NamedTuple):
    """A message to send: ``message`` addressed to AtomicKafka topic ``topic``.

    A Delivery goes to the topic's delivery stream; anything else into the topic's
    input log (bundled per batch and destination by the shell).
    """

    topic: str
    message: Message


class Rejection(NamedTuple):
    """An input message, refused: it changed nothing (but the Aborts it caused).

    ``position`` is its index in the batch, or ``None`` when it was held (§4.11) in an
    earlier batch and refused when its time came. ``reason`` is the prose of ``code``
    (:func:`~atomickafka.core.reasons.refusal`).
    """

    position: int | None
    message: Message
    reason: str
    code: Reason


class Aborted(NamedTuple):
    """A message this node held and dropped because a destination refused it."""

    messageID: str
    destinations: tuple[str, ...]
    reason: str


@dataclass(slots=True)
class Step:
    """What one batch produced."""

    outputs: list[Output] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    aborted: list[Aborted] = field(default_factory=list)
    #: Positions of input messages kept for later (held, §4.11, or waiting for members,
    #: §4.9.5): a later batch may refuse them, with :attr:`Rejection.position` ``None``.
    deferred: list[int] = field(default_factory=list)
    #: Input offsets (``origin``) of kept messages taken up again in this batch.
    released: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A queued message and what it waits for."""

    messageID: str
    timeStamp: int
    decided: bool
    missing: tuple[str, ...]  # destinations whose proposal has not arrived here


@dataclass(slots=True, init=False)
class PendingMessage:
    """What a node knows about one undelivered message (the engine's own record)."""

    destinations: tuple[str, ...]
    digest: str | None
    value: bytes | None  # None: not known here yet
    sent_at: int | None
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    encoding: str | None
    proposals: dict[str, int]
    local: int | None  # this node's proposal
    final: int | None
    coordinator: bool
    acked_to: set[str]  # optimized: coordinators acked
    #: The ``seq`` of the last proposal record (Notify or Ack) this node wrote about this
    #: version to each peer: an Abort that echoes it answers this node's proposal and
    #: may drop the version here (§4.9.4).
    sent: dict[str, tuple[int, int]]
    #: The ``seq`` of the last proposal record each peer wrote here about this version:
    #: what this node's Aborts to that peer echo.
    heard: dict[str, tuple[int, int]]

    # Written out rather than generated: ``dataclasses`` makes its ``__init__`` from
    # source text at import time, which mypyc cannot compile, and an engine builds one of
    # these per message it hears of (docs/performance.md, the profile at capacity).
    def __init__(
        self,
        destinations: tuple[str, ...],
        digest: str | None,
        value: bytes | None,
        sent_at: int | None = None,
        key: bytes | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        encoding: str | None = None,
        proposals: dict[str, int] | None = None,
        local: int | None = None,
        final: int | None = None,
        coordinator: bool = False,
        acked_to: set[str] | None = None,
        sent: dict[str, tuple[int, int]] | None = None,
        heard: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        self.destinations = destinations
        self.digest = digest
        self.value = value
        self.sent_at = sent_at
        self.key = key
        self.headers = headers
        self.encoding = encoding
        self.proposals = {} if proposals is None else proposals
        self.local = local
        self.final = final
        self.coordinator = coordinator
        self.acked_to = set() if acked_to is None else acked_to
        self.sent = {} if sent is None else sent
        self.heard = {} if heard is None else heard

    @property
    def key_ts(self) -> int | None:
        return self.final if self.final is not None else self.local

    @property
    def version(self) -> Version:
        return self.destinations, self.digest


@dataclass(slots=True)
class EngineStats:
    """Counters since the engine started (or since the snapshot it was restored from)."""

    records_in: int = 0
    records_out: int = 0
    deliveries: int = 0
    relayed: int = 0
    duplicates: int = 0
    ignored: int = 0  # deliveries (the shared layout shows them), Aborts of other versions
    rejected: int = 0
    protocol_mismatches: int = 0
    conflicts: int = 0
    aborted: int = 0
    #: Aborts about a version this node proposed for that answer none of its proposals:
    #: set aside, the version goes on (§4.9.4).
    unconfirmed_aborts: int = 0
    held: int = 0  # messages held until the log's time reached their timestamp (§4.11)
    late: int = 0  # late client copies set aside (§4.13)
    forgotten: int = 0  # settled ids forgotten after the memory window (§4.13)
