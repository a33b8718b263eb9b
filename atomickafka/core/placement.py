"""Which records belong in which of a node's two logs (docs/DESIGN.md §7.1, "Records in
the wrong log").

With a control log, the node's peers write their control messages (Notify, Ack,
Decided, Abort) to its control log, where the node also writes its own members
records; clients' copies go to either log (the input log, or the control log's direct
lane); a peer's relayed copies go to its input log only. The engine keeps one sequence
per sender for the control messages and another for the relays (§4.12), each assuming
all of its records come through one log, in their writer's order. A record of either
kind read from the other log is never written there honestly, and taken, it would take
a ``seq`` that makes its sender's earlier records in the right log look like repeats:
so it is set aside instead (:func:`misplaced`). Ticks may come through either log (the
node's own, the merger's). With one log, everything is in it and nothing is misplaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.core.wire import CONTROL_TYPES, Message, MessageType

__all__ = ["is_relay", "misplaced"]

#: Read only from a control log, when the node has one.
_CONTROL_LOG_ONLY: Final = CONTROL_TYPES | {MessageType.MEMBERS}


def is_relay(message: Message) -> bool:
    """A peer's relayed copy of a client's message (it carries its relay's ``seq``)."""
    return message.messageType is MessageType.CLIENT and message.seq is not None


def misplaced(messages: Sequence[Message], *, from_input: bool) -> Refusal | None:
    """Why a record holding ``messages``, read from a node's input log (``from_input``)
    or from its control log, is in a log its writer never writes it to; ``None`` when
    it is where it belongs. Only for a node that has a control log."""
    for message in messages:
        kind = message.messageType
        if from_input and kind in _CONTROL_LOG_ONLY:
            return refusal(
                Reason.STRAY,
                f"a {kind.value} in the input log: with control logs a node's peers write "
                "their control messages, and the node its members records, only to its "
                "control log (§7.1); a copy here would make the sender's records there "
                "look like repeats",
            )
        if not from_input and is_relay(message):
            return refusal(
                Reason.STRAY,
                f"a relay of {message.messageID} in the control log: a peer's relays go to "
                "the node's input log only (§7.1); a copy here would make the relay's "
                "earlier ones there look like repeats",
            )
    return None
