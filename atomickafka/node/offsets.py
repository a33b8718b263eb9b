"""A node's commit bookkeeping for one input partition, as a pure class (§6).

The rules it keeps:

1. On start the node replays its input log from the beginning. Records below the
   committed offset (``replay_until``) were processed before the restart and their
   outputs written: their outputs are dropped. A batch that straddles that boundary
   is split there (:meth:`OffsetsTracker.split`), so that no output of a record past
   the boundary is dropped.
2. Every later batch is a :class:`Ticket` counting its outputs until the broker
   acknowledges them. The commit target is the offset after the last batch whose
   outputs, and those of every batch before it, are all acknowledged: a crash never
   loses an output whose input was committed.
3. An output the broker will never take (too large, invalid) is set aside in the
   dead-letter topic and counts as done once that is acknowledged. Any other failure
   stops the target for good; the node exits and a restart replays from there, writing
   the outputs again (receivers drop repeated messageIDs).

No I/O here: the shell feeds offsets and delivery reports in, and reads targets out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final, Protocol

__all__ = ["UNWRITABLE", "DeliveryReport", "OffsetsTracker", "Ticket"]


class _KafkaErrorLike(Protocol):
    def code(self) -> int: ...
    def __str__(self) -> str: ...


class DeliveryReport(Protocol):
    """What the tracker needs of a delivery report's message (confluent-kafka's fits)."""

    def topic(self) -> str | None: ...
    def value(self) -> bytes | None: ...


#: Broker answers that mean this record can never be written (librdkafka codes):
#: MSG_SIZE_TOO_LARGE, CORRUPT_MESSAGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD, and the
#: local _MSG_SIZE_TOO_LARGE.
UNWRITABLE: Final = frozenset({10, 2, 18, 87, -174})


class Ticket:
    """The outputs of one batch still awaiting the broker's acknowledgement."""

    __slots__ = ("error", "next_offset", "outstanding", "unwritable")

    def __init__(self, next_offset: int) -> None:
        self.next_offset = next_offset
        self.outstanding = 0
        self.error: str | None = None
        #: Outputs the broker refused for good, with why: the shell sets them aside.
        self.unwritable: list[tuple[DeliveryReport, str]] = []

    def sent(self, count: int = 1) -> None:
        """``count`` more outputs of this batch were handed to the producer."""
        self.outstanding += count

    def on_delivery(self, err: _KafkaErrorLike | None, msg: DeliveryReport) -> None:
        """A delivery report (the producer's ``on_delivery`` callback)."""
        self.outstanding -= 1
        if err is None:
            return
        if err.code() in UNWRITABLE:
            self.unwritable.append((msg, str(err)))
        elif self.error is None:
            self.error = str(err)

    @property
    def done(self) -> bool:
        """Every output acknowledged (or refused for good and not set aside yet)."""
        return self.outstanding <= 0


class OffsetsTracker:
    """Replay boundary, open batches and commit target of one input partition."""

    def __init__(self, committed: int) -> None:
        if committed < 0:
            raise ValueError(f"a committed offset is never negative ({committed})")
        self.committed = committed
        self.replay_until = committed
        self.position = 0
        self.failed: str | None = None
        self._tickets: deque[Ticket] = deque()

    def replaying(self) -> bool:
        """Still re-reading records processed before the restart."""
        return self.position < self.replay_until

    def split(self, offsets: Sequence[int]) -> int:
        """Where to cut a batch with these offsets so that no part straddles the replay
        boundary: the index of its first record at or past it (0 or len: no cut)."""
        for index, offset in enumerate(offsets):
            if offset >= self.replay_until:
                return index
        return len(offsets)

    def processed(self, last_offset: int) -> Ticket | None:
        """A batch ending at ``last_offset`` was processed: its ticket, or ``None`` when
        it is a replayed batch whose outputs must be dropped (rule 1)."""
        self.position = last_offset + 1
        if last_offset < self.replay_until:
            return None
        ticket = Ticket(last_offset + 1)
        self._tickets.append(ticket)
        return ticket

    def target(self) -> int | None:
        """The offset to commit now, if it moved (rule 2); ``None`` otherwise. After a
        failure (rule 3) it never moves again: see :attr:`failed`."""
        if self.failed is not None:
            return None
        target = self.committed
        tickets = self._tickets
        while tickets and tickets[0].done and not tickets[0].unwritable:
            if tickets[0].error is not None:
                self.failed = (
                    f"an output of the batch ending at offset {tickets[0].next_offset - 1} "
                    f"failed: {tickets[0].error}"
                )
                break
            target = tickets.popleft().next_offset
        return target if target > self.committed else None

    def committed_at(self, offset: int) -> None:
        """The shell committed ``offset``."""
        self.committed = max(self.committed, offset)

    def unwritable(self) -> list[tuple[Ticket, DeliveryReport, str]]:
        """Outputs refused for good, to set aside now; each is removed from its ticket,
        which the shell charges with the dead letter it sends instead."""
        out = []
        for ticket in self._tickets:
            while ticket.unwritable:
                msg, reason = ticket.unwritable.pop(0)
                out.append((ticket, msg, reason))
        return out

    @property
    def open_batches(self) -> int:
        """Batches processed but not yet committable."""
        return len(self._tickets)
