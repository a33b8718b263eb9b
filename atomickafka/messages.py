"""The AtomicKafka wire format and its codec.

One Kafka record value is one JSON object (thesis Listings 4.3 and 4.4); the field names
are the thesis's own. :func:`decode` validates strictly and names the offending field;
fields it does not know are tolerated and dropped, so newer writers do not break older
readers. Destination lists are sets: they are normalised to a sorted tuple without
repeats, which is also what makes every node iterate them in the same order.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Final, NamedTuple

import orjson

__all__ = [
    "CONTROL_TYPES",
    "MAX_ID_LENGTH",
    "Message",
    "MessageError",
    "MessageType",
    "decode",
    "encode",
    "is_valid_topic_name",
    "to_dict",
    "validate",
]


class MessageType(StrEnum):
    """The ``messageType`` field: what a record is for."""

    CLIENT = "ClientMessage"
    NOTIFY = "NotifyMessage"
    ACK = "AckMessage"
    DECIDED = "DecidedMessage"
    DELIVERY = "DeliveryMessage"
    PARTITION_DELIVERY = "PartitionDeliveryMessage"


#: Records exchanged between nodes only; a filtering client never shows them.
CONTROL_TYPES: Final = frozenset({MessageType.NOTIFY, MessageType.ACK, MessageType.DECIDED})

#: Types whose ``timeStamp`` is mandatory.
_TIMESTAMPED: Final = frozenset(
    {
        MessageType.NOTIFY,
        MessageType.ACK,
        MessageType.DECIDED,
        MessageType.DELIVERY,
        MessageType.PARTITION_DELIVERY,
    }
)

MAX_ID_LENGTH: Final = 512
_TOPIC_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SHOWN: Final = 60


class MessageError(ValueError):
    """A record that is not a valid AtomicKafka message.

    ``field`` names the offending field (``None`` when the record is not a JSON object at
    all) and ``reason`` says what was wrong; ``str(error)`` shows both and the offending
    value, shortened.
    """

    def __init__(self, field: str | None, reason: str, value: object = None) -> None:
        self.field = field
        self.reason = reason
        shown = repr(value)
        if len(shown) > _SHOWN:
            shown = shown[: _SHOWN - 3] + "..."
        where = f"field {field!r}" if field else "record"
        text = f"{where}: {reason}"
        if value is not None:
            text += f" (got {shown})"
        super().__init__(text)


class Message(NamedTuple):
    """One AtomicKafka record.

    ``topic`` is the destination set (sorted, no repeats). ``timeStamp`` is a Lamport
    timestamp: a proposal on Notify/Ack, the final timestamp on Decided/Delivery.
    A message's place in the final order is ``(timeStamp, messageID)``.
    """

    messageID: str
    messageType: MessageType
    topic: tuple[str, ...]
    value: Any = None
    senderID: str = ""
    sentFromTopic: str | None = None
    timeStamp: int | None = None
    partitionID: int | None = None


def validate(message: Message) -> Message:
    """Check ``message`` as :func:`decode` would; return it, or raise :class:`MessageError`.

    Constructing a :class:`Message` does not validate it (the engine builds very many
    from values it already checked); use this for messages built from user input.
    """
    _check_destinations(message.topic)
    if message.topic != tuple(sorted(set(message.topic))):
        raise MessageError("topic", "must be sorted and without repeats", list(message.topic))
    return _check_fields(message)


def _check_fields(message: Message) -> Message:
    """The checks of :func:`validate` other than the destination list's."""
    _check_id("messageID", message.messageID)
    if message.messageType in _TIMESTAMPED and message.timeStamp is None:
        raise MessageError("timeStamp", f"required on {message.messageType.value}")
    if message.messageType in CONTROL_TYPES and message.sentFromTopic is None:
        raise MessageError("sentFromTopic", f"required on {message.messageType.value}")
    return message


def is_valid_topic_name(name: object) -> bool:
    """True when ``name`` is a legal Kafka topic name."""
    return (
        isinstance(name, str)
        and _TOPIC_NAME.fullmatch(name) is not None
        and name
        not in {
            ".",
            "..",
        }
    )


def _check_id(field: str, value: object) -> None:
    if not isinstance(value, str):
        raise MessageError(field, "must be a string", value)
    if not value or len(value) > MAX_ID_LENGTH:
        raise MessageError(field, f"must have 1 to {MAX_ID_LENGTH} characters", value)


def _check_destinations(topics: tuple[str, ...]) -> None:
    if not topics:
        raise MessageError("topic", "must name at least one destination topic", list(topics))
    for name in topics:
        if not is_valid_topic_name(name):
            raise MessageError("topic", "destination is not a valid Kafka topic name", name)


#: Destination lists already validated and normalised; a node sees the same few sets
#: over and over, so this spares a regex match per topic per record.
_KNOWN_DESTINATIONS: dict[tuple[str, ...], tuple[str, ...]] = {}
_KNOWN_DESTINATIONS_MAX = 4096


def _destinations(raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise MessageError("topic", "must be a list of topic names", raw)
    for name in raw:
        if not isinstance(name, str):
            raise MessageError("topic", "destination is not a valid Kafka topic name", name)
    key = tuple(raw)
    known = _KNOWN_DESTINATIONS.get(key)
    if known is not None:
        return known
    if not raw:
        raise MessageError("topic", "must name at least one destination topic", raw)
    for name in raw:
        if not is_valid_topic_name(name):
            raise MessageError("topic", "destination is not a valid Kafka topic name", name)
    normalised = tuple(sorted(set(raw)))
    if len(_KNOWN_DESTINATIONS) >= _KNOWN_DESTINATIONS_MAX:
        _KNOWN_DESTINATIONS.clear()
    _KNOWN_DESTINATIONS[key] = normalised
    return normalised


def _optional_int(obj: dict[str, Any], field: str) -> int | None:
    value = obj.get(field)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise MessageError(field, "must be a non-negative integer", value)
    return value


def _optional_str(obj: dict[str, Any], field: str) -> str | None:
    value = obj.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MessageError(field, "must be a string", value)
    return value


def decode(data: bytes | str) -> Message:
    """Parse and validate one record value; raise :class:`MessageError` if invalid."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MessageError(None, f"not valid JSON: {exc}", data) from None
    if not isinstance(obj, dict):
        raise MessageError(None, "must be a JSON object", obj)
    raw_type = obj.get("messageType")
    try:
        message_type = MessageType(str(raw_type))
    except ValueError:
        raise MessageError(
            "messageType", f"must be one of {', '.join(t.value for t in MessageType)}", raw_type
        ) from None
    if "messageID" not in obj:
        raise MessageError("messageID", "is missing")
    if "topic" not in obj:
        raise MessageError("topic", "is missing")
    sender = obj.get("senderID", "")
    if isinstance(sender, int) and not isinstance(sender, bool):
        sender = str(sender)  # the thesis examples use numeric sender ids
    if not isinstance(sender, str):
        raise MessageError("senderID", "must be a string", sender)
    return _check_fields(
        Message(
            messageID=obj["messageID"],
            messageType=message_type,
            topic=_destinations(obj["topic"]),
            value=obj.get("value"),
            senderID=sender,
            sentFromTopic=_optional_str(obj, "sentFromTopic"),
            timeStamp=_optional_int(obj, "timeStamp"),
            partitionID=_optional_int(obj, "partitionID"),
        )
    )


def to_dict(message: Message) -> dict[str, Any]:
    """The JSON object for ``message``, leaving out absent optional fields."""
    out: dict[str, Any] = {
        "messageID": message.messageID,
        "senderID": message.senderID,
        "messageType": message.messageType.value,
        "value": message.value,
        "topic": list(message.topic),
    }
    if message.sentFromTopic is not None:
        out["sentFromTopic"] = message.sentFromTopic
    if message.timeStamp is not None:
        out["timeStamp"] = message.timeStamp
    if message.partitionID is not None:
        out["partitionID"] = message.partitionID
    return out


def encode(message: Message) -> bytes:
    """Serialise ``message`` to the bytes of one Kafka record value."""
    return orjson.dumps(to_dict(message))
