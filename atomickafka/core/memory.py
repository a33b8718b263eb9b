"""What a node remembers of messages it is done with: bounded (docs/DESIGN.md §4.12-13).

A node must recognise a record about a message it has already delivered, aborted or
relayed, or it would take the message up again. Remembering every id forever makes
memory and snapshots grow with every message ever sent; this module bounds both.

Control records between nodes (§4.12). Every control message a node writes carries a
``seq``: the offset of the input record that caused it and its index among that
record's outputs. A node processes its log in order and its outputs are a pure
function of the log (§4.8), so the messages one node writes to another carry strictly
increasing ``seq`` -- also when a replay writes them again, with the same ``seq``, after
the originals (node producers are gapless: nothing later is written before something
earlier is). :class:`LinkSequences` keeps the last ``seq`` per sending topic and drops
anything at or below it: exact duplicate detection in one integer pair per peer.

Client records (§4.13). A ClientMessage states when it was sent (``sentAt``, the
client's clock, ms). A copy that reaches a log more than ``max_age`` after that, or
dated more than ``max_skew`` ahead of the log's time, is *late* and set aside when its
id is unknown here -- without an Abort: the message's other destinations, if any took
it up, tell this node through control records, which are never late. A settled id is
remembered for ``window`` of log time (:class:`SettledMemory`), with ``window >= max_age
+ max_skew``: a copy that is not late reaches the log at most ``max_age`` after it was
sent, and the message was first heard of here at least ``max_skew`` before it was sent
(by the log's clock), so no more than ``window`` after that; by then it is still
remembered. The same bound holds for a relay's copies, which keep the client's
``sentAt``. An id reused after ``window`` names a new message everywhere.

Control records can be late too: a peer that was down between reading a message and
writing its proposal writes its first Notify for it as late as it was down, and no
window covers that. A node that aborted the message and forgot it would take it up
again and propose for a version it refused (and its peers dropped on its Abort), so
:attr:`SettledMemory.forgot_aborted` keeps the latest expiry of an abort forgotten here:
a version aborted here was sent before it expired (``sentAt`` is at most ``max_skew``
after the first hearing), so a late proposal sent no later than that may be about one
(§4.13).
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum
from typing import Any, Final, NamedTuple

from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.errors import ConfigError

__all__ = [
    "DEFAULT_WINDOW_MS",
    "LinkSequences",
    "Outcome",
    "SettledMemory",
    "Version",
    "Window",
]

#: Default time a settled id is remembered (log time): one minute; a client copy may be
#: 30 s late and its sender's clock 15 s ahead (:class:`Window`).
DEFAULT_WINDOW_MS: Final = 60_000

#: A message version: its destinations and its digest (§3.2).
Version = tuple[tuple[str, ...], str | None]


class Window(NamedTuple):
    """The time bounds of §4.13, from one setting: ``window`` (ms)."""

    window_ms: int

    @property
    def max_age_ms(self) -> int:
        """A client copy reaching a log later than this after ``sentAt`` is late."""
        return self.window_ms // 2

    @property
    def max_skew_ms(self) -> int:
        """A ``sentAt`` further than this ahead of the log's time is refused."""
        return self.window_ms // 4

    def lateness(self, sent_at: int | None, log_time: int | None) -> Refusal | None:
        """Why a client copy sent at ``sent_at`` that reached the log at ``log_time`` is
        late (or dated ahead), or ``None`` when it is not (or either time is unknown)."""
        if sent_at is None or log_time is None:
            return None
        age = log_time - sent_at
        if age > self.max_age_ms:
            return refusal(
                Reason.LATE,
                f"sent {age} ms before it reached this log, more than the "
                f"{self.max_age_ms} ms a client copy may take (§4.13); a copy of a message "
                "this node may have finished with",
            )
        if -age > self.max_skew_ms:
            return refusal(
                Reason.CLOCK_SKEW,
                f"dated {-age} ms ahead of the broker's clock, more than the "
                f"{self.max_skew_ms} ms allowed (§4.13): is the sender's clock right?",
            )
        return None


class Outcome(StrEnum):
    """How a node finished with a message."""

    DELIVERED = "delivered"
    ABORTED = "aborted"
    RELAYED = "relayed"


class _Entry(NamedTuple):
    outcome: Outcome
    version: Version
    expires: int


_new_tuple: Final = tuple.__new__


class SettledMemory:
    """Settled ids and refused versions, each forgotten ``window_ms`` after it settled
    (by the log's time, so replays forget the same things at the same records)."""

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        if window_ms <= 0:
            raise ConfigError(f"the memory window must be positive ({window_ms} ms)")
        self.window_ms = window_ms
        self._settled: dict[str, _Entry] = {}
        self._refused: dict[tuple[str, Version], int] = {}
        self._expiry: deque[tuple[int, str, Any]] = deque()
        #: The latest expiry (log time) of an aborted id or refused version forgotten
        #: here, if any: a message sent no later may have been aborted here (§4.13).
        self.forgot_aborted: int | None = None

    def __len__(self) -> int:
        return len(self._settled) + len(self._refused)

    def outcome(self, mid: str) -> tuple[Outcome, Version] | None:
        """How this node finished with ``mid`` and which version, if it remembers."""
        entry = self._settled.get(mid)
        return None if entry is None else (entry.outcome, entry.version)

    def outcome_of(self, mid: str) -> Outcome | None:
        """How this node finished with ``mid``, if it remembers (no tuple built: every
        record asks)."""
        entry = self._settled.get(mid)
        return None if entry is None else entry.outcome

    def settle(self, mid: str, outcome: Outcome, version: Version, now_ms: int) -> None:
        """This node finished with ``mid`` at log time ``now_ms``."""
        expires = now_ms + self.window_ms
        # by position, with tuple.__new__: a NamedTuple's own constructor is Python code
        # (every message settles once)
        self._settled[mid] = _new_tuple(_Entry, (outcome, version, expires))
        self._expiry.append((expires, "s", mid))

    def is_refused(self, mid: str, version: Version) -> bool:
        """True while this node remembers refusing that version."""
        return (mid, version) in self._refused

    def refuse(self, mid: str, version: Version, now_ms: int) -> None:
        """This node refused ``mid``'s ``version`` for good (§4.9.4)."""
        expires = now_ms + self.window_ms
        self._refused[(mid, version)] = expires
        self._expiry.append((expires, "r", (mid, version)))

    def expire(self, now_ms: int) -> int:
        """Forget what settled ``window_ms`` or more before ``now_ms``; return how many."""
        forgotten = 0
        expiry = self._expiry
        while expiry and expiry[0][0] <= now_ms:
            expires, kind, key = expiry.popleft()
            if kind == "s":
                entry = self._settled.get(key)
                if entry is not None and entry.expires == expires:
                    del self._settled[key]
                    forgotten += 1
                    if entry.outcome is Outcome.ABORTED:
                        self.forgot_aborted = expires
            elif self._refused.get(key) == expires:
                del self._refused[key]
                forgotten += 1
                self.forgot_aborted = expires
        return forgotten

    def may_have_aborted(self, sent_at: int | None) -> bool:
        """True when a message sent at ``sent_at`` may have been aborted here and
        forgotten since: it was sent no later than such an abort expired."""
        horizon = self.forgot_aborted
        return horizon is not None and sent_at is not None and sent_at <= horizon

    # ------------------------------------------------------------------ snapshots

    def to_data(self) -> dict[str, Any]:
        """Plain JSON data (see :meth:`from_data`); ``forgot_aborted`` only once an abort
        was forgotten (the format is otherwise that of snapshots before it)."""
        data: dict[str, Any] = {
            "window_ms": self.window_ms,
            "settled": [
                [mid, e.outcome.value, list(e.version[0]), e.version[1], e.expires]
                for mid, e in self._settled.items()
            ],
            "refused": [
                [mid, list(version[0]), version[1], expires]
                for (mid, version), expires in self._refused.items()
            ],
        }
        if self.forgot_aborted is not None:
            data["forgot_aborted"] = self.forgot_aborted
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> SettledMemory:
        """Rebuild from :meth:`to_data` output."""
        memory = cls(int(data["window_ms"]))
        entries: list[tuple[int, str, Any]] = []
        for mid, outcome, destinations, digest, expires in data["settled"]:
            version = (tuple(destinations), digest)
            memory._settled[mid] = _Entry(Outcome(outcome), version, int(expires))
            entries.append((int(expires), "s", mid))
        for mid, destinations, digest, expires in data["refused"]:
            key = (mid, (tuple(destinations), digest))
            memory._refused[key] = int(expires)
            entries.append((int(expires), "r", key))
        entries.sort(key=lambda e: e[0])
        memory._expiry.extend(entries)
        horizon = data.get("forgot_aborted")  # (absent from snapshots before it)
        memory.forgot_aborted = None if horizon is None else int(horizon)
        return memory


class LinkSequences:
    """The last ``seq`` taken from each sending topic (§4.12)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}

    def seen(self, sender: str, seq: tuple[int, int]) -> bool:
        """True when ``seq`` from ``sender`` was taken already (it is at or below the last
        one taken)."""
        last = self._last.get(sender)
        return last is not None and seq <= last

    def take(self, sender: str, seq: tuple[int, int]) -> None:
        """``seq`` from ``sender`` was taken: anything at or below it is a repeat. Only
        records that passed the engine's checks are taken, so a stray with a high
        ``seq`` that is set aside silences nobody (§4.12)."""
        last = self._last.get(sender)
        if last is None or seq > last:
            self._last[sender] = seq

    def repeat(self, sender: str, seq: tuple[int, int]) -> bool:
        """:meth:`seen`, taking ``seq`` when it was not."""
        if self.seen(sender, seq):
            return True
        self.take(sender, seq)
        return False

    def to_data(self) -> dict[str, list[int]]:
        """Plain JSON data."""
        return {sender: list(seq) for sender, seq in self._last.items()}

    @classmethod
    def from_data(cls, data: dict[str, list[int]]) -> LinkSequences:
        """Rebuild from :meth:`to_data` output."""
        links = cls()
        links._last = {str(k): (int(v[0]), int(v[1])) for k, v in data.items()}
        return links
