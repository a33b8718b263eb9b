"""Snapshots as Kafka records, and finding the newest readable one (docs/DESIGN.md §6).

A snapshot is a role's whole state (a node's engine, a merger's buffers) with the input
offsets it covers, written to the role's topic's compacted snapshot topic
(``atomickafka-snap.T``) -- in the same transaction as the outputs of the batch it
follows, in exactly-once mode. It is a *manifest* record and one or more *chunk*
records (compressed JSON, split to fit a record), keyed ``<role>|<slot>|m`` and
``<role>|<slot>|<i>``. Snapshots alternate between two slots, so compaction always
keeps the newest two: when the newest cannot be read (cut short, corrupted, of a newer
format, wrongly signed), the one before it is used, and when neither can, recovery
replays the whole log. Nothing here raises on what it reads: it reports.

Pure: records in, state out.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

__all__ = [
    "SNAPSHOT_FORMAT",
    "LoadedSnapshot",
    "SnapshotChoice",
    "SnapshotFollower",
    "SnapshotRecord",
    "SnapshotSchedule",
    "choose_snapshot",
    "encode_snapshot",
    "newest_snapshots",
    "snapshots_of_mode",
]

#: The record format of a snapshot (the state inside has its own version).
SNAPSHOT_FORMAT: Final = 1
_CHUNK_BYTES: Final = 900_000


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """One record of a snapshot: its key and value."""

    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """A snapshot read back: its sequence number, the input offsets it covers (the next
    offset to read, per input partition) and the state, or why it could not be read."""

    role: str
    seq: int
    offsets: dict[int, int]
    state: dict[str, Any] | None
    problem: str | None = None


class SnapshotSchedule:
    """When a role's next snapshot is due: once ``every_records`` records were taken
    since the last one, or ``every_s`` seconds after it if any record was (the node's
    and the merger's batch layers share this rule, docs/DESIGN.md §6)."""

    def __init__(self, every_records: int, every_s: float) -> None:
        self.every_records = every_records
        self.every_s = every_s
        self.since = 0  # records taken since the last snapshot
        self._last_s: float | None = None

    def took(self, records: int) -> None:
        """``records`` more records were taken."""
        self.since += records

    def due(self, wall_s: float) -> bool:
        """Whether a snapshot is due at ``wall_s`` (the first call starts the clock)."""
        if self._last_s is None:
            self._last_s = wall_s
        if self.since >= self.every_records:
            return True
        return self.since > 0 and wall_s - self._last_s >= self.every_s

    def taken(self, wall_s: float) -> None:
        """A snapshot was taken at ``wall_s``."""
        self.since = 0
        self._last_s = wall_s


def _key(role: str, slot: int, part: str) -> bytes:
    return f"{role}|{slot}|{part}".encode()


def encode_snapshot(
    role: str,
    seq: int,
    offsets: Mapping[int, int],
    state: Mapping[str, Any],
    *,
    created_ms: int | None = None,
    chunk_bytes: int = _CHUNK_BYTES,
) -> list[SnapshotRecord]:
    """The records of snapshot number ``seq`` of ``role``: the chunks, then the
    manifest (written last, so a manifest never names chunks not written before it)."""
    payload = zlib.compress(orjson.dumps(state), 3)
    slot = seq % 2
    chunks = [payload[i : i + chunk_bytes] for i in range(0, len(payload), chunk_bytes)] or [b""]
    out = [
        SnapshotRecord(
            _key(role, slot, str(i)),
            orjson.dumps({"role": role, "seq": seq, "i": i}) + b"\n" + chunk,
        )
        for i, chunk in enumerate(chunks)
    ]
    manifest = {
        "format": SNAPSHOT_FORMAT,
        "role": role,
        "seq": seq,
        "offsets": {str(p): o for p, o in offsets.items()},
        "chunks": len(chunks),
        "bytes": len(payload),
        "digest": hashlib.blake2b(payload, digest_size=16).hexdigest(),
        "created_ms": created_ms,
    }
    out.append(SnapshotRecord(_key(role, slot, "m"), orjson.dumps(manifest)))
    return out


def newest_snapshots(
    records: Iterable[tuple[bytes | None, bytes | None]], role: str
) -> list[LoadedSnapshot]:
    """The snapshots of ``role`` found in a snapshot topic's records (read in order,
    later records replacing earlier ones with the same key), newest first; each either
    with its state or with the problem that makes it unusable."""
    follower = SnapshotFollower(role)
    follower.add(records)
    return follower.snapshots()


class SnapshotFollower:
    """The snapshot topic as a role's standby follows it (docs/DESIGN.md §6.4): rows
    fed in as they are read, only the role's newest record per key kept (two slots'
    worth), the snapshots loaded only when asked for."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._prefix = f"{role}|".encode()
        self._latest: dict[bytes, bytes] = {}
        #: True when a manifest arrived since :meth:`snapshots` was last called.
        self.changed = False

    def add(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        """Take rows ``(key, value)`` in the topic's order."""
        prefix, latest = self._prefix, self._latest
        for key, value in records:
            if key is None or not key.startswith(prefix):
                continue
            if value is None:
                latest.pop(key, None)  # a tombstone
            else:
                latest[key] = value
            if key.endswith(b"|m"):
                self.changed = True

    @property
    def newest_seq(self) -> int:
        """The highest sequence number a manifest names (readable or not; -1: none)."""
        seqs = [-1]
        for slot in (0, 1):
            manifest = self._latest.get(_key(self.role, slot, "m"))
            if manifest is not None:
                try:
                    seqs.append(int(orjson.loads(manifest)["seq"]))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue
        return max(seqs)

    def snapshots(self) -> list[LoadedSnapshot]:
        """The role's snapshots, newest first (see :func:`newest_snapshots`)."""
        self.changed = False
        found = []
        for slot in (0, 1):
            manifest = self._latest.get(_key(self.role, slot, "m"))
            if manifest is not None:
                found.append(_load(self.role, slot, manifest, self._latest))
        return sorted(found, key=lambda s: s.seq, reverse=True)


@dataclass(frozen=True, slots=True)
class SnapshotChoice:
    """What a role starts from (:func:`choose_snapshot`): a snapshot (``None``: the
    start of its logs), why newer ones were passed over, and -- when no snapshot will
    do and a log no longer starts at 0 -- the partitions cut below every snapshot, by
    their first offset: the role must not start (its state cannot be rebuilt)."""

    snapshot: LoadedSnapshot | None
    skipped: tuple[str, ...] = ()
    cut: Mapping[int, int] = field(default_factory=dict)


def choose_snapshot(
    found: Iterable[LoadedSnapshot], logs: Mapping[int, tuple[int, int]]
) -> SnapshotChoice:
    """The newest readable snapshot whose offsets the role's input partitions still
    hold: ``logs`` maps each partition the role reads to its ``(first, next)`` offsets
    (docs/DESIGN.md §6.5). A snapshot is passed over when it cannot be read, when it
    covers an offset past a log's end (the topic was re-created), or when a log was cut
    above its offset (retention). Without one, the role replays its logs from 0 --
    unless some log no longer starts at 0: then :attr:`SnapshotChoice.cut` says where."""
    skipped: list[str] = []
    for snapshot in found:
        if snapshot.state is None:
            why = f"snapshot {snapshot.seq} of {snapshot.role} unusable: {snapshot.problem}"
            skipped.append(why)
            continue
        offsets = {p: snapshot.offsets.get(p, 0) for p in logs}
        if any(offsets[p] > high for p, (_, high) in logs.items()):
            skipped.append(f"snapshot {snapshot.seq} of {snapshot.role} is past a log's end")
        elif all(offsets[p] >= low for p, (low, _) in logs.items()):
            return SnapshotChoice(snapshot, tuple(skipped))
        else:
            skipped.append(f"snapshot {snapshot.seq} of {snapshot.role} is below a log's start")
    cut = {p: low for p, (low, _) in logs.items() if low > 0}
    return SnapshotChoice(None, tuple(skipped), cut)


def _load(role: str, slot: int, raw: bytes, latest: Mapping[bytes, bytes]) -> LoadedSnapshot:
    try:
        manifest = orjson.loads(raw)
        seq = int(manifest["seq"])
        offsets = {int(p): int(o) for p, o in manifest["offsets"].items()}
        chunks, digest, fmt = int(manifest["chunks"]), str(manifest["digest"]), manifest["format"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        return LoadedSnapshot(role, -1, {}, None, f"unreadable manifest in slot {slot}: {exc}")
    if fmt != SNAPSHOT_FORMAT:
        return LoadedSnapshot(role, seq, offsets, None, f"snapshot format {fmt!r} not known")
    parts: list[bytes] = []
    for i in range(chunks):
        chunk = latest.get(_key(role, slot, str(i)))
        payload = None if chunk is None else _chunk_payload(chunk, seq, i)
        if payload is None:
            return LoadedSnapshot(role, seq, offsets, None, f"chunk {i} of {chunks} missing")
        parts.append(payload)
    payload = b"".join(parts)
    if hashlib.blake2b(payload, digest_size=16).hexdigest() != digest:
        return LoadedSnapshot(role, seq, offsets, None, "digest mismatch: the snapshot is damaged")
    try:
        state = orjson.loads(zlib.decompress(payload))
    except (zlib.error, orjson.JSONDecodeError) as exc:
        return LoadedSnapshot(role, seq, offsets, None, f"state unreadable: {exc}")
    if not isinstance(state, dict):
        return LoadedSnapshot(role, seq, offsets, None, "state is not a JSON object")
    return LoadedSnapshot(role, seq, offsets, state)


def _chunk_payload(raw: bytes, seq: int, index: int) -> bytes | None:
    end = raw.find(b"\n")
    if end < 0:
        return None
    try:
        head = orjson.loads(raw[:end])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(head, dict) or head.get("seq") != seq or head.get("i") != index:
        return None  # a chunk of another snapshot in the same slot
    return raw[end + 1 :]


def snapshots_of_mode(found: list[LoadedSnapshot], *, marked: bool) -> list[LoadedSnapshot]:
    """The snapshots taken in a mode (``marked``: with a control log, whose states have
    ``ordering``, §7.1), and the unreadable ones (for the choice's reasons)."""
    return [s for s in found if s.state is None or ("ordering" in s.state) == marked]
