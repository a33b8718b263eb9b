"""Hostile records for the simulators (issue 15): what a stray or careless writer of
AtomicKafka's topics may put there, built exactly as it would reach the broker.

- :func:`stray_timestamp`: a timestamp at one of the edges of the §4.11 bounds of a
  record appended at a given log time (:class:`StrayBound`).
- :func:`stray_tick`, :func:`stray_control`: a ``TickMessage`` (from the merger's id or
  an intruder's) or an Ack/Notify about a message its reader has already delivered,
  carrying such a timestamp and no ``seq``.
- :func:`stray_in_flight`: a Notify, Ack or Abort about a message in flight, naming
  another protocol, none (format 1), or answering nothing its reader wrote (§4.9).
- :func:`bad_value_bundle`: a Bundle whose ClientMessage value is not JSON.
- :func:`foreign_delivery_records`: what a plain producer might append to a delivery
  topic ``T``: a record that is not JSON, a ClientMessage, and (the forged one) a
  DeliveryMessage with a huge ``timeStamp`` under the merger's sender id.

Nothing here is signed: a writer that holds the secret is a member, not a stray.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

import orjson

from atomickafka.core.compact import JSON, control_encoders
from atomickafka.core.timebounds import CLOCK_HOLD_US, CLOCK_LEAD_US
from atomickafka.core.wire import (
    MAX_TIMESTAMP,
    Message,
    MessageType,
    client_message,
    encode_client,
    encode_delivery,
    value_digest,
)

__all__ = [
    "BAD_VALUE",
    "INTRUDER",
    "StrayBound",
    "bad_value_bundle",
    "foreign_delivery_records",
    "stray_control",
    "stray_in_flight",
    "stray_tick",
    "stray_timestamp",
]

#: A value that is neither UTF-8 nor JSON (issue 15, item 4).
BAD_VALUE: Final = b'\xff{"a": [}'
#: The sender id of a writer that is no member.
INTRUDER: Final = "intruder"


class StrayBound(StrEnum):
    """Where a stray timestamp sits against the §4.11 bounds of its record's log time."""

    UNDER_LEAD = "under-lead"  # log time + CLOCK_LEAD_US: applied at once
    OVER_LEAD = "over-lead"  # one µs more: held until the log's time moves on
    UNDER_HOLD = "under-hold"  # log time + CLOCK_HOLD_US: held for an hour of log time
    OVER_HOLD = "over-hold"  # one µs more: refused
    MAXIMUM = "maximum"  # MAX_TIMESTAMP: refused

    @property
    def applied(self) -> bool:
        """True when the record is taken in (at once or after waiting)."""
        return self in (StrayBound.UNDER_LEAD, StrayBound.OVER_LEAD, StrayBound.UNDER_HOLD)


_OFFSETS: Final = {
    StrayBound.UNDER_LEAD: CLOCK_LEAD_US,
    StrayBound.OVER_LEAD: CLOCK_LEAD_US + 1,
    StrayBound.UNDER_HOLD: CLOCK_HOLD_US,
    StrayBound.OVER_HOLD: CLOCK_HOLD_US + 1,
}


def stray_timestamp(log_time_ms: int, bound: StrayBound) -> int:
    """A timestamp at ``bound`` for a record appended at ``log_time_ms``."""
    offset = _OFFSETS.get(bound)
    if offset is None:
        return MAX_TIMESTAMP
    return min(MAX_TIMESTAMP, log_time_ms * 1000 + offset)


def stray_tick(
    sender_id: str, timestamp: int, layer: int | None, control_format: str = JSON
) -> bytes:
    """A TickMessage record from ``sender_id``, in ``control_format`` (§3.9)."""
    _, tick = control_encoders(control_format)
    return tick(sender_id, timestamp, layer)


def stray_control(
    kind: MessageType,
    about: Message,
    sender: str,
    timestamp: int,
    *,
    protocol: str,
    layer: int | None,
    control_format: str = JSON,
) -> bytes:
    """An Ack or Notify (no ``seq``) from ``sender``'s node about the delivered message
    ``about`` (its version: destinations, digest and send time), at ``timestamp``, in
    ``control_format`` (§3.9)."""
    return stray_in_flight(
        kind,
        about,
        sender,
        timestamp,
        protocol=protocol,
        layer=layer,
        control_format=control_format,
    )


def stray_in_flight(
    kind: MessageType,
    about: Message,
    sender: str,
    timestamp: int | None,
    *,
    protocol: str | None,
    layer: int | None,
    seq: tuple[int, int] | None = None,
    answers: tuple[int, int] | None = None,
    control_format: str = JSON,
) -> bytes:
    """A Notify, Ack or Abort from ``sender``'s node about ``about`` (its version), as a
    stray or careless writer might append it while the message is in flight (§4.9):
    naming ``protocol`` (``None``: a format-1 record, which names none and is one
    record per message), with ``seq`` and, on an Abort, ``answers`` as given; a bundle
    in ``control_format`` (§3.9)."""
    node = f"node-{sender}" if layer is None else f"node-{sender}/{layer}"
    if protocol is None:
        record: dict[str, object] = {
            "messageID": about.messageID,
            "senderID": node,
            "sentFromTopic": sender,
            "messageType": kind,
            "topic": list(about.topic),
            "digest": about.digest,
        }
        if about.sentAt is not None:
            record["sentAt"] = about.sentAt
        if kind is MessageType.NOTIFY and about.value is not None:
            record["value"] = orjson.Fragment(about.value)
        if timestamp is not None:
            record["timeStamp"] = timestamp
        if layer is not None:
            record["partitionID"] = layer
        return orjson.dumps(record)
    message = Message(
        about.messageID,
        kind,
        about.topic,
        about.value if kind is MessageType.NOTIFY else None,
        senderID=node,
        sentFromTopic=sender,
        timeStamp=None if kind is MessageType.ABORT else timestamp,
        partitionID=layer,
        digest=about.digest,
        protocol=protocol,
        sentAt=about.sentAt,
        seq=seq,
        answers=answers if kind is MessageType.ABORT else None,
    )
    encode, _ = control_encoders(control_format)
    return encode([message], sender_id=node, sent_from=sender, protocol=protocol, partition=layer)


def bad_value_bundle(
    message_id: str,
    destinations: tuple[str, ...],
    sent_from: str,
    *,
    protocol: str,
    layer: int | None,
    control_format: str = JSON,
) -> bytes:
    """A Bundle holding a relayed ClientMessage whose value bytes are :data:`BAD_VALUE`,
    in ``control_format`` (§3.9)."""
    message = Message(
        message_id,
        MessageType.CLIENT,
        destinations,
        BAD_VALUE,
        senderID=INTRUDER,
        sentFromTopic=sent_from,
        partitionID=layer,
        digest=value_digest(BAD_VALUE),
    )
    encode, _ = control_encoders(control_format)
    return encode(
        [message], sender_id=INTRUDER, sent_from=sent_from, protocol=protocol, partition=layer
    )


def foreign_delivery_records(topic: str, merger_id: str, *, forged: bool) -> list[bytes]:
    """Records a plain producer might append to ``topic``'s delivery topic: not JSON, a
    ClientMessage and, with ``forged``, a DeliveryMessage under the merger's sender id
    with a timestamp above anything real."""
    out = [
        b"\x00plain producer record, not JSON",
        encode_client(client_message(f"foreign-{topic}", [topic], {"by": "mistake"}, INTRUDER)),
        orjson.dumps({"messageType": MessageType.DELIVERY, "note": "no id"}),
    ]
    if forged:
        value = orjson.dumps("forged")
        forged_delivery = Message(
            f"forged-{topic}",
            MessageType.DELIVERY,
            (topic,),
            value,
            senderID=merger_id,
            sentFromTopic=topic,
            timeStamp=MAX_TIMESTAMP - 1,
            partitionID=0,
            digest=value_digest(value),
            protocol="direct",
        )
        out.append(encode_delivery(forged_delivery))
    return out
