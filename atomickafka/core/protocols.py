"""The three protocols as data (docs/DESIGN.md §4.2): one table each, read by the engine,
which has no branch per protocol of its own, and the one routing rule that says where a
client's record is written, used by the client, the engine's relay and the simulators.

Every protocol is Skeen's algorithm: each destination proposes a timestamp from its
Lamport clock and the message is delivered at the largest proposal. They differ in who
tells whom:

======================  ==================  ======================  ====================
                        ``direct``          ``poc``                 ``optimized``
======================  ==================  ======================  ====================
a client writes to      every destination   one (by id, or ``via``)  one (by id, or ``via``)
that destination        proposes, Notifies  coordinates: proposes,  coordinates: proposes,
                        every other one     Notifies the others     Notifies the others
a first Notify makes    propose, Notify     propose, Ack every      propose, Ack the
a destination           every other one     other destination       coordinator
who decides             every destination   every destination       the coordinator, and
                        (all proposals)     (all proposals)         writes a Decided
======================  ==================  ======================  ====================
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from atomickafka.core.engine_types import Algorithm

__all__ = [
    "CARRIER",
    "EVERY",
    "NOTIFY_VALUES",
    "PROTOCOLS",
    "ProtocolRules",
    "Reply",
    "route",
    "routed_by_id",
]

#: What a ``direct`` node's Notifies carry (``--notify-values``, §4.16): the value only
#: from and to the message's carrier (:func:`routed_by_id` of its destinations), the
#: default; or the value in every Notify, the only form releases before it accept, for a
#: rolling upgrade from such a release. Every node of this release reads both.
CARRIER: Final = "carrier"
EVERY: Final = "every"
NOTIFY_VALUES: Final = (CARRIER, EVERY)


class Reply(StrEnum):
    """What a destination sends when a Notify makes it propose (it had not yet)."""

    NOTIFY_EVERY_OTHER = "notify every other destination"
    ACK_EVERY_OTHER = "ack every other destination"
    ACK_THE_SENDER = "ack the coordinator that notified it"


@dataclass(frozen=True, slots=True)
class ProtocolRules:
    """One protocol's table: who proposes, who decides, what each record triggers."""

    algorithm: Algorithm
    #: A client (and a relay) writes the message to every destination, each of which
    #: proposes on reading it; otherwise to one, which coordinates.
    client_writes_every_destination: bool
    #: What a first Notify makes a destination send (besides proposing).
    reply_to_notify: Reply
    #: Only the coordinator decides, and it tells the others in a Decided record; an
    #: Ack goes to a coordinator only. Otherwise every destination decides alone once
    #: it holds every destination's proposal, and nobody writes a Decided.
    coordinator_decides: bool

    @property
    def entry_coordinates(self) -> bool:
        """The destination that reads the client's record coordinates the message."""
        return not self.client_writes_every_destination

    @property
    def notifies_are_proposals(self) -> bool:
        """Every destination Notifies every other one: a Notify is one more proposal,
        never a request to answer."""
        return self.reply_to_notify is Reply.NOTIFY_EVERY_OTHER


PROTOCOLS: Final[dict[Algorithm, ProtocolRules]] = {
    Algorithm.DIRECT: ProtocolRules(Algorithm.DIRECT, True, Reply.NOTIFY_EVERY_OTHER, False),
    Algorithm.POC: ProtocolRules(Algorithm.POC, False, Reply.ACK_EVERY_OTHER, False),
    Algorithm.OPTIMIZED: ProtocolRules(Algorithm.OPTIMIZED, False, Reply.ACK_THE_SENDER, True),
}


def route(
    destinations: Sequence[str], via: str | None, algorithm: Algorithm
) -> tuple[tuple[str, ...], bool]:
    """Where a client's record of a message to ``destinations`` is written: the topics
    whose input logs take it, and whether only one of them does, chosen by the message's
    id (:func:`routed_by_id`). ``via`` writes it to that topic instead, which relays it
    if it is not a destination (``direct`` then writes to every destination all the
    same: each one proposes on reading its own copy)."""
    every = PROTOCOLS[algorithm].client_writes_every_destination
    if via is not None:
        if via in destinations and every:
            return tuple(destinations), False
        return (via,), False
    return tuple(destinations), not every


def routed_by_id(targets: Sequence[str], message_id: str) -> str:
    """The one of ``targets`` a message written to one destination goes to: the same at
    every client and relay (a CRC-32 of the id), so that retries land in the same log."""
    return targets[zlib.crc32(message_id.encode()) % len(targets)]
