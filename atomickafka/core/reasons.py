"""Why a record was set aside: a code from a fixed set, and the prose derived from it.

Every refusal (the engine's :class:`~atomickafka.core.engine_types.Rejection`, a bad
signature, a record that does not decode, an output too large or refused by the broker,
a merger's refusal) carries a :class:`Reason`. The dead letter says it twice: the code
in header ``atomickafka-error-code`` (what a program matches on), the prose in
``atomickafka-error`` (what a person reads). The prose is :func:`refusal`'s: the code's
lead (:data:`LEADS`, empty where the details already say what happened) followed by the
details of this refusal. The metrics label a dead letter with :data:`LABELS` of its code,
never by reading its prose (docs/DESIGN.md §6.3, §11).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NamedTuple

__all__ = ["LABELS", "LEADS", "Reason", "Refusal", "refusal"]


class Reason(StrEnum):
    """Why a record was set aside (its value is the ``atomickafka-error-code`` header)."""

    PROTOCOL_MISMATCH = "protocol-mismatch"  # a peer runs another protocol (§4.9.6)
    CONFLICT = "conflict"  # a messageID reused for another message
    UNSIGNED = "unsigned"  # signing is on and the record carries no signature (§4.14)
    BAD_SIGNATURE = "bad-signature"  # a signature that does not verify, or of a bad form
    LATE = "late"  # a client copy that reached the log too late (§4.13)
    CLOCK_SKEW = "clock-skew"  # a client copy dated ahead of the broker's clock (§4.13)
    TIMESTAMP_AHEAD = "timestamp-ahead"  # a timestamp over an hour ahead (§4.11)
    HELD_OVERFLOW = "held-overflow"  # pushed out of the full set of held messages (§4.11)
    CLOCK_EXHAUSTED = "clock-exhausted"  # the clock would pass MAX_TIMESTAMP (§4.9.3)
    NO_NODE = "no-node"  # a destination no node serves (§4.9.5)
    TOO_LARGE = "too-large"  # a value or an output over the size limits (§4.9.2)
    OUTPUT_REFUSED = "output-refused"  # the broker refused an output for good (§6.3)
    ABORTED = "aborted"  # a held message dropped: a destination refused it (§4.9.4)
    WRONG_LAYER = "wrong-layer"  # a record of another layer (§8)
    MERGER_REFUSED = "merger-refused"  # the merger's own rules (§8, rule 4)
    NOT_A_LAYER_RECORD = "not-a-layer-record"  # in a layers topic, not a layer's record
    MISADDRESSED = "misaddressed"  # a control message not meant for this node
    INVALID_RECORD = "invalid-record"  # does not decode, or a field of the wrong form
    STRAY = "stray"  # a control record no honest member writes here: a stray or a forgery


#: How the prose of each reason begins: its details follow.
LEADS: Final[dict[Reason, str]] = {
    Reason.PROTOCOL_MISMATCH: "protocol mismatch: ",
    Reason.CONFLICT: "conflict: ",
    Reason.UNSIGNED: "unsigned: ",
    Reason.BAD_SIGNATURE: "",
    Reason.LATE: "late: ",
    Reason.CLOCK_SKEW: "",
    Reason.TIMESTAMP_AHEAD: "",
    Reason.HELD_OVERFLOW: "",
    Reason.CLOCK_EXHAUSTED: "",
    Reason.NO_NODE: "",
    Reason.TOO_LARGE: "",
    Reason.OUTPUT_REFUSED: "",
    Reason.ABORTED: "aborted: ",
    Reason.WRONG_LAYER: "",
    Reason.MERGER_REFUSED: "merger refused: ",
    Reason.NOT_A_LAYER_RECORD: "",
    Reason.MISADDRESSED: "",
    Reason.INVALID_RECORD: "",
    Reason.STRAY: "",
}

#: Each reason's metrics label (``reason`` of ``atomickafka_*_dead_letters_total``): a
#: fixed set, so that a metric's label values stay few whatever the input holds.
LABELS: Final[dict[Reason, str]] = {
    Reason.PROTOCOL_MISMATCH: "protocol mismatch",
    Reason.CONFLICT: "conflict",
    Reason.UNSIGNED: "unsigned",
    Reason.BAD_SIGNATURE: "bad signature",
    Reason.LATE: "late",
    Reason.CLOCK_SKEW: "clock skew",
    Reason.TIMESTAMP_AHEAD: "timestamp ahead",
    Reason.HELD_OVERFLOW: "held overflow",
    Reason.CLOCK_EXHAUSTED: "clock exhausted",
    Reason.NO_NODE: "no node",
    Reason.TOO_LARGE: "too large",
    Reason.OUTPUT_REFUSED: "output refused",
    Reason.ABORTED: "aborted",
    Reason.WRONG_LAYER: "wrong layer",
    Reason.MERGER_REFUSED: "merger refused",
    Reason.NOT_A_LAYER_RECORD: "not a layer record",
    Reason.MISADDRESSED: "misaddressed",
    Reason.INVALID_RECORD: "invalid record",
    Reason.STRAY: "stray",
}


class Refusal(NamedTuple):
    """A reason and its prose (what the ``atomickafka-error`` header says)."""

    code: Reason
    text: str


def refusal(code: Reason, details: str) -> Refusal:
    """The refusal for ``code`` whose prose is the code's lead and then ``details``."""
    return Refusal(code, LEADS[code] + details)
