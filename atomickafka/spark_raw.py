"""The raw record form (docs/DESIGN.md §3.8) as the two Spark jobs read it, and the
compact control form (§3.9) as the evaluation's metrics job reads it
(:func:`compact_as_json`, at the end).

A raw record's value is the user's and its metadata is in headers; Spark's Kafka source
(``includeHeaders``) hands those over as an array of ``(key, value)`` structs. The
evaluation's metrics job (``evaluation/suite/metrics_job.py``) and the audit's streaming job
(``audit/spark_job.py``) both turn a raw record's metadata into the JSON object the
JSON forms hold, so that one ``from_json`` parses either form; this module is that one
reading. It imports only pyspark: next to the jobs it runs wherever they do (pass it to
``spark-submit --py-files`` on a cluster without the atomickafka package). A unit test
holds its header names to the codec's (``atomickafka.core.raw``).
"""

from __future__ import annotations

import json
from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the usual spelling)

__all__ = ["COMPACT_MAGIC", "RAW_FORMAT", "RAW_FORMAT_HEADER", "compact_as_json", "raw_as_json"]

#: The header that marks the raw form, and its value.
RAW_FORMAT_HEADER: Final = "atomickafka-format"
RAW_FORMAT: Final = "3"


def raw_as_json(raw: DataFrame, value: Column) -> Column:
    """For a raw-form record (by its ``headers``), its metadata as the JSON object the
    JSON forms hold (``messageID``, ``messageType``, ...), with ``value`` as its
    ``value`` field; ``None`` for other records. The Kafka source must read headers
    (``includeHeaders``); without them every record is taken for a JSON one."""
    if "headers" not in raw.columns:
        return F.lit(None).cast("string")
    h = F.map_from_entries(
        F.transform(
            F.coalesce(F.col("headers"), F.array()),
            lambda e: F.struct(e["key"].alias("k"), e["value"].cast("string").alias("v")),
        )
    )
    fields = F.struct(
        h["atomickafka-id"].alias("messageID"),
        h["atomickafka-type"].alias("messageType"),
        h["atomickafka-sender"].alias("senderID"),
        h["atomickafka-from"].alias("sentFromTopic"),
        F.split(h["atomickafka-to"], ",").alias("topic"),
        h["atomickafka-ts"].cast("long").alias("timeStamp"),
        h["atomickafka-layer"].cast("int").alias("partitionID"),
        h["atomickafka-digest"].alias("digest"),
        F.lit(2).alias("formatVersion"),
        value.alias("value"),
    )
    return F.when(h[RAW_FORMAT_HEADER] == RAW_FORMAT, F.to_json(fields))


# ---------------------------------------------------------------------------- compact form

#: The first byte of a compact control record (docs/DESIGN.md §3.9), and the version read.
COMPACT_MAGIC: Final = 0xAC
COMPACT_VERSION: Final = 1
_COMPACT_TYPES: Final = (
    "NotifyMessage",
    "AckMessage",
    "DecidedMessage",
    "AbortMessage",
    "ClientMessage",
)


def compact_as_json(value: Column) -> Column:
    """For a compact control record (a bundle or a tick whose value starts with
    :data:`COMPACT_MAGIC`), the JSON object its JSON form's header line holds as far
    as the jobs read it (``messageType``, ``senderID``, ``sentFromTopic``, and each inner
    message's type, id and timestamp); ``None`` for other records and for compact ones
    it cannot read. A Python UDF: the form has varints and tables no SQL function
    reads."""
    return F.when(
        F.substring(value, 1, 1) == F.unhex(F.lit(f"{COMPACT_MAGIC:02X}")),
        F.udf(compact_json, "string")(value),
    )


def compact_json(raw: bytes | bytearray | None) -> str | None:
    """:func:`compact_as_json` of one record value, in plain Python."""
    try:
        found = _read_compact(bytes(raw or b""))
    except (IndexError, ValueError, _CutShortError):  # cut short, not UTF-8: not counted
        return None
    return None if found is None else json.dumps(found)


class _CutShortError(Exception):
    """A compact record ends before what it says it holds."""


class _Bytes:
    """A position in a record value; reading past its end raises ``IndexError`` (a
    byte) or :class:`_CutShortError` (more bytes)."""

    def __init__(self, raw: bytes, at: int) -> None:
        self.raw, self.at = raw, at

    def byte(self) -> int:
        self.at += 1
        return self.raw[self.at - 1]

    def varint(self) -> int:
        result, shift = 0, 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def skip(self, size: int) -> bytes:
        self.at += size
        if self.at > len(self.raw):
            raise _CutShortError(self.at)
        return self.raw[self.at - size : self.at]

    def text(self) -> str:
        return self.skip(self.varint()).decode()


def _read_compact(raw: bytes) -> dict[str, object] | None:
    """What the jobs read of a compact record; ``None`` when it is not one of this
    version. Its own parser, on purpose (as ``from_json`` is for the JSON form): a unit
    test holds it to the codec, ``atomickafka/core/compact.py``."""
    if len(raw) < 3 or raw[0] != COMPACT_MAGIC or raw[1] != COMPACT_VERSION:
        return None
    read = _Bytes(raw, 2)
    writer, kind = read.text(), read.byte()
    if kind == 2:  # a tick: flags, timestamp
        read.byte()
        stamp = read.varint()
        return {"messageType": "TickMessage", "messageID": f"tick-{stamp}",
                "senderID": writer, "timeStamp": stamp}  # fmt: skip
    flags = read.byte()
    sender = read.text()
    if flags & 1:
        read.text()  # protocol
    if flags & 2:
        read.varint()  # layer
    read.skip(read.varint())  # topic names and destination sets
    ids = []
    for _ in range(read.varint()):
        ids.append(read.text())
        read.varint()  # destination set
        digest = read.byte()
        if digest & 3 == 1:
            read.skip(8)
        elif digest & 3 == 2:
            read.text()
        if digest & 4:
            read.varint()  # send time
    previous = [0]
    messages = [_compact_entry(read, ids, previous) for _ in range(read.varint())]
    return {"messageType": "Bundle", "senderID": sender, "sentFromTopic": writer,
            "messages": messages}  # fmt: skip


def _compact_entry(read: _Bytes, ids: list[str], stamp: list[int]) -> dict[str, object]:
    """One entry of a compact bundle: its type, id and timestamp (``stamp``: the
    previous entry's, which it is written relative to)."""
    code = read.byte()
    message: dict[str, object] = {"messageType": _COMPACT_TYPES[code & 7],
                                  "messageID": ids[read.varint()]}  # fmt: skip
    if code & 0x08:  # the timestamp, as the difference from the previous one
        step = read.varint()
        stamp[0] += -((step + 1) >> 1) if step & 1 else step >> 1
        message["timeStamp"] = stamp[0]
    if code & 0x10:
        read.skip(read.varint())  # the value
    for present in (code & 0x20, code & 0x40):  # seq, answers
        if present:
            read.varint()
            read.varint()
    if code & 0x80:  # key, headers, encoding
        if read.byte() & 2:
            read.skip(read.varint())
        for _ in range(read.varint()):
            read.text()
            read.skip(read.varint())
    return message
