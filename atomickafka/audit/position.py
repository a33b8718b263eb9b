"""The live audit's position: what it commits, and where a restart reads again
(``docs/DESIGN.md`` §10.5).

The audit commits, in its own consumer group, the offset after the last record it
checked of each partition, with metadata holding that topic's last key (rule 1's
state) and the event time then. The message state (rules 2-4) is not committed: a
restarted audit rebuilds it by reading again, without reporting, the records written
within two bounds (and a second) before the committed event time: every message the
state held at the commit was first delivered after ``clock - bound - 1 s`` (older ones
had expired), and the deliveries of one message are assumed to be written within a
bound of each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import orjson

from atomickafka.audit.records import Key
from atomickafka.audit.rules import BUCKET_MS

__all__ = ["Committed", "decode_metadata", "encode_metadata", "replay_from_ms"]

#: The metadata's own version, so that a later audit can read an older commit.
_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class Committed:
    """What a commit of one partition says."""

    offset: int
    last_key: Key | None
    clock_ms: int


def encode_metadata(last_key: Key | None, clock_ms: int) -> str:
    """The metadata committed with a partition's offset."""
    return orjson.dumps(
        {"v": _VERSION, "lastKey": list(last_key) if last_key else None, "clock": clock_ms}
    ).decode()


def decode_metadata(offset: int, metadata: str | None) -> Committed:
    """A committed offset and its metadata; metadata the audit did not write (or cannot
    read) restores only the offset."""
    try:
        data = orjson.loads(metadata or "")
    except orjson.JSONDecodeError:
        return Committed(offset, None, 0)
    if not isinstance(data, dict) or data.get("v") != _VERSION:
        return Committed(offset, None, 0)
    raw_key, clock = data.get("lastKey"), data.get("clock")
    key: Key | None = None
    if isinstance(raw_key, list) and len(raw_key) == 3:
        timestamp, layer, message_id = raw_key
        if type(timestamp) is int and type(layer) is int and isinstance(message_id, str):
            key = (timestamp, layer, message_id)
    return Committed(offset, key, clock if type(clock) is int else 0)


def replay_from_ms(clock_ms: int, bound_ms: int) -> int:
    """The record time from which a restart reads again to rebuild the message state."""
    return max(0, clock_ms - 2 * bound_ms - BUCKET_MS)
