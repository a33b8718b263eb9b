"""Writing rows as multicasts: ``df.write`` and ``df.writeStream`` of
``format("atomickafka")``. Each row is one message, sent by the project's client
(:class:`~atomickafka.client.AtomicKafkaClient`).

Columns (by name; others are ignored):

- ``value`` (required): ``binary`` is sent as bytes, delivered exactly; ``string`` is
  a JSON text (``to_json(...)``), checked and delivered as that JSON value. Option
  ``valueFormat`` says otherwise: ``bytes`` sends a string's UTF-8 bytes as they are,
  ``json`` takes a binary column's bytes for JSON text.
- ``destinations``: ``array<string>`` or a comma-separated ``string``; without the
  column, option ``destinations`` gives every row's.
- ``key`` (``binary`` or ``string``) and ``headers`` (``array<struct<key: string,
  value: binary or string>>``, as Spark's Kafka sink takes them), optional.
- ``sentAt`` (``timestamp``, or ``bigint`` ms since the epoch), optional: the send time
  the message states (below).

**Exactly once per micro-batch** (docs/DESIGN.md §4.15). A message's id is derived
from the query, the batch and the row: ``sk-<query id>-<batch id>-<partition>-<digest
of the row's value, destinations, key and headers>`` (and ``-<n>`` for the n-th repeat
of the same content in one partition). When Spark runs a micro-batch again after a
failure -- a task retried, a driver restarted from its checkpoint -- the rows get the
same ids, and the nodes, which keep settled ids for the memory window, take them for
the messages already written: each is delivered once. A batch write (``df.write``) has
no batch id: its ids are ``sk-<writeId>-<partition>-<digest>``, ``writeId`` an option
(default: a fresh one per write, so a task Spark retries within the write is written
once, and the same write run twice is written twice).
"""

from __future__ import annotations

import atexit
import hashlib
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from atomickafka.client import AtomicKafkaClient
from atomickafka.client.client import client_id_is_valid
from atomickafka.core.wire import MessageError, check_json_value, parse_destinations
from atomickafka.errors import AtomicKafkaError, ConfigError
from atomickafka.spark import options as opt

__all__ = ["BatchWriter", "RowShape", "StreamWriter", "Written", "message_prefix", "write_rows"]

#: Rows sent in one ``send_batch`` at most (consecutive rows that share destinations,
#: key, headers and send time go together).
CHUNK_ROWS: Final = 500
#: The task properties Spark's micro-batch execution sets (the query id survives a
#: restart from the checkpoint; the batch id is the one the checkpoint replays).
QUERY_ID: Final = "sql.streaming.queryId"
BATCH_ID: Final = "streaming.sql.batchId"

Header = tuple[str, bytes]


class Written(WriterCommitMessage):
    """What one task wrote: its partition and how many messages."""

    def __init__(self, partition: int, messages: int) -> None:
        self.partition, self.messages = partition, messages


@dataclass(frozen=True, slots=True)
class Message:
    """One row as a message: what is sent and what its id is derived from."""

    value: Any
    destinations: tuple[str, ...]
    key: bytes | None
    headers: tuple[Header, ...]
    sent_at: int | None
    digest: str


def _kind(
    schema: StructType, name: str, allowed: dict[type[DataType], str]
) -> tuple[int, str] | None:
    """Where column ``name`` is and its kind, ``None`` when there is none;
    :class:`ConfigError` when its type is not one of ``allowed``."""
    if name not in schema.fieldNames():
        return None
    index = schema.fieldNames().index(name)
    data_type = schema.fields[index].dataType
    for spark_type, kind in allowed.items():
        if isinstance(data_type, spark_type) and _element_ok(data_type, kind):
            return index, kind
    wanted = " or ".join(sorted(set(allowed.values())))
    raise ConfigError(f"column {name} is {data_type.simpleString()}; the sink takes {wanted}")


def _element_ok(data_type: DataType, kind: str) -> bool:
    if kind == "array<string>":
        return isinstance(data_type, ArrayType) and isinstance(data_type.elementType, StringType)
    if kind == "headers":
        element = data_type.elementType if isinstance(data_type, ArrayType) else None
        return (
            isinstance(element, StructType)
            and element.fieldNames()[:2] == ["key", "value"]
            and isinstance(element.fields[0].dataType, StringType)
            and isinstance(element.fields[1].dataType, BinaryType | StringType)
        )
    return True


_STRING_OR_BINARY: Final[dict[type[DataType], str]] = {StringType: "string", BinaryType: "binary"}


@dataclass(frozen=True, slots=True)
class RowShape:
    """Where a row's message is, read from the DataFrame's schema on the driver (so a
    wrong column fails the query before any task runs)."""

    value: int
    value_json: bool
    destinations: tuple[int, str] | None
    default_destinations: tuple[str, ...]
    key: int | None
    headers: int | None
    sent_at: tuple[int, str] | None

    @classmethod
    def of(cls, schema: StructType, options: opt.Options) -> RowShape:
        """The shape of ``schema``'s rows with ``options``; :class:`ConfigError` when
        something the sink needs is missing or of the wrong type."""
        value = _kind(schema, "value", _STRING_OR_BINARY)
        if value is None:
            raise ConfigError(
                f"the sink needs a value column (string or binary): {schema.simpleString()}"
            )
        value_format = {k.lower(): v for k, v in options.items()}.get("valueformat")
        if value_format not in (None, "json", "bytes"):
            raise ConfigError(f"option valueFormat must be json or bytes, not {value_format!r}")
        destinations = _kind(
            schema, "destinations", {ArrayType: "array<string>", StringType: "string"}
        )
        default = opt.topic_list(options, "destinations", required=destinations is None)
        key = _kind(schema, "key", _STRING_OR_BINARY)
        headers = _kind(schema, "headers", {ArrayType: "headers"})
        sent_at = _kind(schema, "sentAt", {TimestampType: "timestamp", LongType: "bigint"})
        return cls(
            value=value[0],
            value_json=value_format == "json" if value_format else value[1] == "string",
            destinations=destinations,
            default_destinations=default,
            key=None if key is None else key[0],
            headers=None if headers is None else headers[0],
            sent_at=sent_at,
        )

    def message(self, row: Sequence[Any]) -> Message:
        """The message ``row`` stands for; :class:`MessageError` naming what is wrong."""
        raw = row[self.value]
        if raw is None:
            raise MessageError("value", "is null")
        data = raw.encode() if isinstance(raw, str) else bytes(raw)
        value: Any = orjson.Fragment(check_json_value(data)) if self.value_json else data
        destinations = self.default_destinations
        if self.destinations is not None and row[self.destinations[0]] is not None:
            given = row[self.destinations[0]]
            destinations = parse_destinations(given.split(",") if isinstance(given, str) else given)
        if not destinations:
            raise MessageError("destinations", "none given (a column or the destinations option)")
        key = None if self.key is None else _bytes(row[self.key])
        headers = () if self.headers is None else _headers(row[self.headers])
        sent_at = None if self.sent_at is None else _millis(row[self.sent_at[0]])
        digest = _digest(data, self.value_json, destinations, key, headers)
        return Message(value, destinations, key, headers, sent_at, digest)


def _bytes(value: str | bytes | bytearray | None) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def _headers(rows: Iterable[Sequence[Any]] | None) -> tuple[Header, ...]:
    return tuple((str(name), _bytes(value) or b"") for name, value, *_ in rows or ())


def _millis(value: datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    return round(value.timestamp() * 1000)


def _digest(
    value: bytes,
    json: bool,
    destinations: tuple[str, ...],
    key: bytes | None,
    headers: tuple[Header, ...],
) -> str:
    """16 hex digits naming a row's content: what a replay must find the same."""
    digest = hashlib.blake2b(digest_size=8)
    parts = [b"j" if json else b"b", value, ",".join(destinations).encode()]
    parts += [b"-" if key is None else b"k" + key]
    for name, data in headers:
        parts += [name.encode(), data]
    for part in parts:
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    return digest.hexdigest()


def write_rows(client: AtomicKafkaClient, shape: RowShape, rows: Iterator[Row], prefix: str) -> int:
    """Send every row as one message with an id under ``prefix`` (the query, batch and
    partition), wait until the broker has them all; return how many."""
    seen: Counter[str] = Counter()
    chunk_ids: list[str] = []
    chunk_values: list[Any] = []
    chunk_of: Message | None = None
    sent = 0

    def send() -> None:
        nonlocal sent
        if chunk_of is not None and chunk_ids:
            client.send_batch(
                chunk_values,
                chunk_of.destinations,
                key=chunk_of.key,
                headers=chunk_of.headers,
                message_ids=chunk_ids,
                sent_at_ms=chunk_of.sent_at,
            )
            sent += len(chunk_ids)
        chunk_ids.clear()
        chunk_values.clear()

    for index, row in enumerate(rows):
        try:
            message = shape.message(row)
        except MessageError as exc:
            raise MessageError(exc.field, f"row {index} of the partition: {exc.reason}") from None
        repeat = seen[message.digest]
        seen[message.digest] += 1
        if chunk_of is None or not _same_group(chunk_of, message) or len(chunk_ids) >= CHUNK_ROWS:
            send()
            chunk_of = message
        chunk_ids.append(f"{prefix}-{message.digest}" + (f"-{repeat}" if repeat else ""))
        chunk_values.append(message.value)
    send()
    client.flush()
    return sent


def _same_group(a: Message, b: Message) -> bool:
    return (a.destinations, a.key, a.headers, a.sent_at) == (
        b.destinations,
        b.key,
        b.headers,
        b.sent_at,
    )


def message_prefix(write_id: str, batch_id: str | None, partition: int) -> str:
    """The ids of one task's messages start so: ``sk-<write>[-<batch>]-<partition>``."""
    batch = "" if batch_id is None else f"-{batch_id}"
    return f"sk-{write_id}{batch}-{partition}"


#: One client per Python worker and connection, kept for the worker's life: making one
#: reads the status topic, which would cost every task (every micro-batch) a second.
_clients: dict[tuple[object, ...], AtomicKafkaClient] = {}


def _client(options: opt.Options) -> AtomicKafkaClient:
    connection, secret_file, layout = (
        opt.connection(options),
        opt.secret_file(options),
        opt.layout(options),
    )
    key = (connection, secret_file, layout)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = AtomicKafkaClient(
            connection, layout=layout, secret_file=secret_file, client_id="spark"
        )
    return client


@atexit.register
def _close_clients() -> None:
    while _clients:
        _, client = _clients.popitem()
        client.close()


class _Sink:
    """What both writers do in a task: the rows of one partition as messages."""

    def __init__(self, options: opt.Options, schema: StructType) -> None:
        self.options = dict(options)
        self.shape = RowShape.of(schema, options)
        opt.connection(options)  # a bad option fails the query now, not in a task

    def write_task(self, rows: Iterator[Row], write_id: str, batch_id: str | None) -> Written:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        prefix = message_prefix(write_id, batch_id, partition)
        return Written(partition, write_rows(_client(self.options), self.shape, rows, prefix))


class BatchWriter(DataSourceWriter):
    """``df.write.format("atomickafka")``: each row one multicast."""

    def __init__(self, options: opt.Options, schema: StructType) -> None:
        self.sink = _Sink(options, schema)
        given = {k.lower(): v for k, v in options.items()}.get("writeid")
        if given is not None and not (client_id_is_valid(given) and len(given) <= 40):
            raise ConfigError(
                f"option writeId must be 1-40 characters of [A-Za-z0-9._-]: {given!r}"
            )
        self.write_id = given or uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Row]) -> Written:
        """Send this partition's rows; return when the broker has them all."""
        return self.sink.write_task(iterator, self.write_id, None)


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("atomickafka")``: each row of each micro-batch one
    multicast, exactly once per micro-batch (the module's docstring)."""

    def __init__(self, options: opt.Options, schema: StructType) -> None:
        self.sink = _Sink(options, schema)

    def write(self, iterator: Iterator[Row]) -> Written:
        """Send this partition's rows of the micro-batch, with ids derived from the
        query, the batch and the row."""
        context = TaskContext.get()
        query = None if context is None else context.getLocalProperty(QUERY_ID)
        batch = None if context is None else context.getLocalProperty(BATCH_ID)
        if not query or not batch:
            raise AtomicKafkaError(
                "the streaming sink runs without Spark's query and batch ids "
                f"({QUERY_ID}, {BATCH_ID}): it needs Spark's micro-batch execution"
            )
        return self.sink.write_task(iterator, query.replace("-", ""), batch)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing left to do: every task waited for the broker before it returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what was written is written again, under the same ids, when
        Spark runs the batch again (and the nodes deliver it once)."""
