"""The apply marker of a node's control log (docs/DESIGN.md §7).

A node with a control log ``atomickafka-ctl.T`` reads client records from its input log
``atomickafka-in.T`` but applies them only where its own marker ``apply in.T [a, b)``
comes back through its control log: the control log is the node's one input order
(rule 8). A marker is one JSON object::

    {"messageType": "ApplyMarker", "senderID": <node id>, "sentFromTopic": <T>,
     "from": a, "until": b, "formatVersion": 1}

(``partitionID`` too for a layer's node). It is decoded with the hostile-input rules
(§4.9): :func:`decode_marker` answers ``None`` for a record that is no marker (the node
takes it as any other control record) and raises :class:`MarkerError` for one that
claims to be a marker but is malformed; the node sets that aside with the reason, as it
does a marker from another sender than itself.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import orjson

from atomickafka.core.compact import is_compact
from atomickafka.core.wire import FORMAT_VERSION, MessageError, is_valid_topic_name
from atomickafka.errors import ConfigError

__all__ = [
    "MARKER_LEAD_MS",
    "MARKER_TYPE",
    "MAX_MARKER_RANGE",
    "Marker",
    "MarkerError",
    "decode_marker",
    "encode_marker",
]

MARKER_TYPE: Final = "ApplyMarker"
_MARKER_TAG: Final = b'"ApplyMarker"'
#: The most input offsets one marker may name: a marker names what one read batch of
#: the input log held, and a larger one is a stray's (it would make the node wait for
#: offsets nobody wrote).
MAX_MARKER_RANGE: Final = 1 << 20
#: How much later than its marker an input-log record the marker names may have been
#: appended (log times of two partitions, whose leaders' clocks may differ): a node
#: marks what it has read, so a record appended later than this is not one its marker
#: stands for, and the marker is a stray's or a forgery (docs/DESIGN.md §7.1). A
#: forged marker stops the control log for about this long.
MARKER_LEAD_MS: Final = 10_000
#: The largest offset a marker may name (Kafka's offsets are signed 64-bit).
_MAX_OFFSET: Final = (1 << 63) - 1


class MarkerError(MessageError):
    """A record that claims to be a marker but is not a valid one."""


class Marker(NamedTuple):
    """``sender`` (a node id, of the node of ``topic``) applies its input log's offsets
    ``[start, end)`` here."""

    sender: str
    topic: str
    start: int
    end: int
    partition: int | None = None


def encode_marker(
    sender_id: str, topic: str, start: int, end: int, partition: int | None = None
) -> bytes:
    """The marker ``apply in.T [start, end)`` of the node ``sender_id`` of ``topic``."""
    if not 0 <= start < end or end - start > MAX_MARKER_RANGE:
        raise ConfigError(
            f"a marker names a non-empty range of input offsets, not [{start}, {end})"
        )
    out: dict[str, Any] = {
        "messageType": MARKER_TYPE,
        "senderID": sender_id,
        "sentFromTopic": topic,
        "from": start,
        "until": end,
        "formatVersion": FORMAT_VERSION,
    }
    if partition is not None:
        out["partitionID"] = partition
    return orjson.dumps(out)


def _offset(obj: dict[str, Any], field: str) -> int:
    value = obj.get(field)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MarkerError(field, "must be an integer offset", value)
    if not 0 <= value <= _MAX_OFFSET:
        raise MarkerError(field, "is not a Kafka offset", value)
    return value


def decode_marker(raw: bytes | None) -> Marker | None:
    """The marker ``raw`` holds; ``None`` when it is no marker (any other record, valid
    or not: the node decodes it as a control record); :class:`MarkerError` when it says
    it is a marker and is not a valid one."""
    if raw is None or is_compact(raw) or _MARKER_TAG not in raw:
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # not JSON: the control decoder sets it aside with its own reason
    if not isinstance(obj, dict) or obj.get("messageType") != MARKER_TYPE:
        return None
    version = obj.get("formatVersion")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise MarkerError("formatVersion", "must be a positive integer", version)
    if version > FORMAT_VERSION:
        raise MarkerError("formatVersion", f"is newer than {FORMAT_VERSION}", version)
    sender = obj.get("senderID")
    if not isinstance(sender, str) or not sender:
        raise MarkerError("senderID", "must be a non-empty string", sender)
    topic = obj.get("sentFromTopic")
    if not is_valid_topic_name(topic):
        raise MarkerError("sentFromTopic", "must be a topic name", topic)
    assert isinstance(topic, str)
    start, end = _offset(obj, "from"), _offset(obj, "until")
    if end <= start:
        raise MarkerError("until", f"must be above 'from' ({start})", end)
    if end - start > MAX_MARKER_RANGE:
        raise MarkerError("until", f"names more than {MAX_MARKER_RANGE} offsets", end)
    partition = obj.get("partitionID")
    if partition is not None and (
        isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
    ):
        raise MarkerError("partitionID", "must be a non-negative integer", partition)
    return Marker(sender, topic, start, end, partition)
