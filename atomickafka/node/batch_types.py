"""The values the node's batch layer (:mod:`atomickafka.node.batch`) and the merger's
take and give: the node's spec, the records to write (:class:`OutRecord`, by
:class:`OutKind`), a step's :class:`Ready`, the errors that stop a start, and the part
of taking snapshots both batch layers share (:class:`SnapshotTaker`). No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol

from mypy_extensions import mypyc_attr

from atomickafka.core.compact import BINARY
from atomickafka.core.engine import Algorithm
from atomickafka.core.protocols import CARRIER
from atomickafka.core.reasons import Reason
from atomickafka.core.signing import Signer
from atomickafka.core.wire import MAX_RECORD_BYTES
from atomickafka.errors import AtomicKafkaError
from atomickafka.node.snapshots import SnapshotSchedule, encode_snapshot

__all__ = [
    "HOW_TO_RECONFIGURE",
    "JSON",
    "RAW",
    "NodeSpec",
    "NodeStartError",
    "OutKind",
    "OutRecord",
    "Place",
    "Ready",
    "SettingsChangedError",
    "SnapshotTaker",
    "signed",
]

#: What a refusal to go on with changed settings tells the operator to do (§6.6).
HOW_TO_RECONFIGURE: Final = (
    "a node cannot change these while messages may be in flight. To change them "
    "safely: stop the clients, wait until `atomickafka status` shows nothing pending, "
    "stop every node (a clean stop takes a snapshot), then start each with the new "
    "settings and --reconfigure"
)
#: A record's place in its node's input order (§7.1): the origin its messages are
#: numbered with (§4.12), the log time they are applied at, and, for an input-log record
#: a control log's marker applies, when it reached the input log (``None``: a record of
#: the log the node applies in order, applied where it stands).
Place = tuple[int, int | None, int | None]
#: The delivery formats (§3.8).
RAW: Final = "raw"
JSON: Final = "json"


class OutKind(StrEnum):
    """What a record written by a node is."""

    CONTROL = "control"
    DELIVERY = "delivery"
    WATERMARK = "watermark"
    DEAD_LETTER = "dead-letter"
    TICK = "tick"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True, init=False)
class OutRecord:
    """A record to write (``reason``: why, for a dead letter)."""

    kind: OutKind
    topic: str
    value: bytes | None
    partition: int | None
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    #: A delivery's send time (ms since the epoch), as its message said: the metrics'
    #: latency, without reading it back from the bytes (``None``: read them).
    sent_at: int | None
    reason: Reason | None

    # Written out rather than generated: ``dataclasses`` makes its ``__init__`` from
    # source text at import time, which mypyc cannot compile (2.1 against 0.6 µs per
    # record in the wheel), and a node builds one per record it writes. Frozen, so each
    # field is set as the generated one sets it.
    def __init__(
        self,
        kind: OutKind,
        topic: str,
        value: bytes | None,
        partition: int | None = None,
        key: bytes | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        sent_at: int | None = None,
        reason: Reason | None = None,
    ) -> None:
        _set(self, "kind", kind)
        _set(self, "topic", topic)
        _set(self, "value", value)
        _set(self, "partition", partition)
        _set(self, "key", key)
        _set(self, "headers", headers)
        _set(self, "sent_at", sent_at)
        _set(self, "reason", reason)


_set = object.__setattr__


@dataclass(slots=True)
class Ready:
    """What one step decided: write ``records`` (in order), then commit ``commit`` (the
    next input offset). ``snapshot_offset`` is the offset a snapshot among ``records``
    covers; in at-least-once mode its records are written only once ``commit`` has
    passed it (:meth:`snapshot_records`)."""

    records: list[OutRecord] = field(default_factory=list)
    commit: int | None = None
    snapshot_offset: int | None = None
    replayed: int = 0  # input records replayed (outputs dropped)
    #: With a control log (§7): the next unapplied input-log offset, committed beside
    #: ``commit`` (the control log's).
    commit_input: int | None = None

    def outputs(self) -> list[OutRecord]:
        """Everything but the snapshot."""
        return [r for r in self.records if r.kind is not OutKind.SNAPSHOT]

    def snapshot_records(self) -> list[OutRecord]:
        """The snapshot's records, if one is due."""
        return [r for r in self.records if r.kind is OutKind.SNAPSHOT]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What the batch layer needs to know about its node (names resolved by the shell)."""

    topic: str
    node_id: str
    role: str  # the node's key: T, or T/layer
    algorithm: Algorithm
    input_topic: str
    input_partition: int
    delivery_topic: str
    dead_letter_topic: str
    snapshot_topic: str
    #: Where each peer's input log is: the prefix before its topic ("" in the shared
    #: layout, where the input log is the topic itself).
    input_prefix: str
    #: With control logs (§7, the default): the prefix of each peer's control log, where
    #: this node's bundles go (relayed client copies still go to the peer's input log),
    #: and this node's own control log, where its ticks, members records and apply
    #: markers go. ``None``: no control logs, everything goes to the input logs.
    control_prefix: str | None = None
    control_topic: str | None = None
    layer: int | None = None
    layers_topic: str | None = None
    shared_layout: bool = False
    max_value_bytes: int = 900_000
    max_record_bytes: int = MAX_RECORD_BYTES
    window_ms: int = 60_000
    snapshot_every_records: int = 50_000
    snapshot_every_s: float = 30.0
    tick_every_s: float = 0.1
    signer: Signer | None = None
    #: How deliveries are written to the topic: ``raw`` (the value as sent, metadata in
    #: headers) or ``json`` (the JSON envelope, the node's default), §3.8.
    delivery_format: str = JSON
    #: Take up settings (protocol, delivery format, signing) other than those the node's
    #: state was built with, when it is drained (§6.6); otherwise such a start is refused.
    reconfigure: bool = False
    #: How control records (bundles, ticks) are written (§3.9): ``binary`` (the compact
    #: form) or ``json`` (what releases before it read). Both are read either way.
    control_format: str = BINARY
    #: What a ``direct`` node's Notifies carry (§4.16): ``carrier`` or ``every``. Both
    #: are read either way.
    notify_values: str = CARRIER


class NodeStartError(AtomicKafkaError):
    """The node cannot start safely; the message says why and what to do."""


class SettingsChangedError(NodeStartError):
    """The node is configured with another protocol, delivery format or signing than
    its state was built with (§6.6): going on would run two protocols under one state.
    The message says what differs and how to change it safely."""


def signed(record: OutRecord, signer: Signer | None) -> OutRecord:
    """``record`` with its signature headers (§4.14), or as it is without a secret."""
    if signer is None:
        return record
    headers = signer.signed_headers(record.topic, record.key, record.value, record.headers)
    return OutRecord(
        record.kind,
        record.topic,
        record.value,
        record.partition,
        record.key,
        tuple(headers),
        record.sent_at,
        record.reason,
    )


class _SnapshotSpec(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def snapshot_topic(self) -> str: ...
    @property
    def signer(self) -> Signer | None: ...


# the merger's batch layer (not compiled) subclasses it
@mypyc_attr(allow_interpreted_subclasses=True)
class SnapshotTaker:
    """What the node's and the merger's batch layers share of taking snapshots (§6):
    when one is due, its sequence number, its signed records and the mark on
    :class:`Ready`; each layer says what its spec, state and offsets are."""

    snapshot_seq: int
    _schedule: SnapshotSchedule

    def _snapshot_spec(self) -> _SnapshotSpec:
        """The layer's spec (its own type: a compiled subclass may not narrow an
        attribute's type, so this is no ``spec`` attribute)."""
        raise NotImplementedError

    def _snapshot_content(self) -> tuple[Mapping[int, int], dict[str, Any], int]:
        """The input offsets the snapshot covers, its state, and the mark for
        :attr:`Ready.snapshot_offset`."""
        raise NotImplementedError

    def _maybe_snapshot(self, ready: Ready, wall_s: float) -> None:
        if self._schedule.due(wall_s):
            self._snapshot(ready, wall_s)

    def _snapshot(self, ready: Ready, wall_s: float) -> None:
        spec = self._snapshot_spec()
        self.snapshot_seq += 1
        self._schedule.taken(wall_s)
        offsets, state, mark = self._snapshot_content()
        records = encode_snapshot(
            spec.role, self.snapshot_seq, offsets, state, created_ms=int(wall_s * 1000)
        )
        ready.records.extend(
            signed(OutRecord(OutKind.SNAPSHOT, spec.snapshot_topic, r.value, 0, r.key), spec.signer)
            for r in records
        )
        ready.snapshot_offset = mark
