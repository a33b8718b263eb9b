"""Turning what callers hold into the checker's records, explicitly.

:func:`~atomickafka.verify.checker.check` takes only :class:`SentMessage` and
:class:`DeliveryRecord`; these functions build them, and raise :class:`CheckInputError`
naming the file and line (or the topic and position) of anything malformed:

- files of JSON lines: :func:`load_sent` (``SENT.jsonl``) and :func:`load_deliveries`
  (as ``atomickafka tail --json`` prints them);
- plain data: :func:`sent_from_destinations` (``{id: destinations}``),
  :func:`sent_from_pairs` (``{id: (destinations, value)}``), :func:`deliveries_from_ids`
  (``{topic: [id, ...]}``) and :func:`deliveries_from_json` (``{topic: [object, ...]}``,
  objects with the wire names);
- the running system's records: :func:`deliveries_from_wire` (records shaped as
  :class:`atomickafka.core.wire.Message`, the value as JSON text) and
  :func:`deliveries_from_client` (``atomickafka.client.Delivery``). Both are described by protocols,
  so the checker imports neither the engine, the codec nor the client.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import orjson

from atomickafka.core.wire import is_valid_topic_name
from atomickafka.verify.checker.records import (
    UNSET,
    CheckInputError,
    DeliveryRecord,
    SentMessage,
)

__all__ = [
    "ClientDelivery",
    "WireDelivery",
    "deliveries_from_client",
    "deliveries_from_ids",
    "deliveries_from_json",
    "deliveries_from_wire",
    "load_deliveries",
    "load_sent",
    "sent_from_destinations",
    "sent_from_pairs",
]

#: Delivery logs as the checker takes them: per delivering topic, in delivery order.
DeliveryLogs = dict[str, list[DeliveryRecord]]

_DELIVERY_FILE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".txt")


class WireDelivery(Protocol):
    """What the checker reads of a wire record (:class:`atomickafka.core.wire.Message`)."""

    @property
    def messageID(self) -> str: ...  # noqa: N802

    @property
    def topic(self) -> tuple[str, ...]: ...  # the destination list

    @property
    def value(self) -> bytes | None: ...  # JSON text

    @property
    def timeStamp(self) -> int | None: ...  # noqa: N802

    @property
    def partitionID(self) -> int | None: ...  # noqa: N802 -- the layer, if any


class ClientDelivery(Protocol):
    """What the checker reads of a client's delivery (``atomickafka.client.Delivery``)."""

    @property
    def messageID(self) -> str: ...  # noqa: N802

    @property
    def value(self) -> Any: ...  # the JSON value

    @property
    def timeStamp(self) -> int: ...  # noqa: N802

    @property
    def destinations(self) -> tuple[str, ...]: ...

    @property
    def layer(self) -> int | None: ...


# ---------------------------------------------------------------------------- sent


def sent_from_destinations(destinations: Mapping[str, Iterable[str]]) -> list[SentMessage]:
    """One :class:`SentMessage` per ``messageID -> destinations`` entry, value unknown."""
    return [_sent(mid, dests, UNSET) for mid, dests in destinations.items()]


def sent_from_pairs(sends: Mapping[str, tuple[Iterable[str], Any]]) -> list[SentMessage]:
    """One :class:`SentMessage` per ``messageID -> (destinations, value)`` entry."""
    return [_sent(mid, dests, value) for mid, (dests, value) in sends.items()]


def load_sent(path: str | os.PathLike[str]) -> list[SentMessage]:
    """Read ``SENT.jsonl``: one JSON object per line with ``messageID`` and ``topic``.

    ``topic`` (or ``destinations``) is the destination list; ``value`` is optional.
    Blank lines are skipped. Raises :class:`CheckInputError` naming file and line.
    """
    out: list[SentMessage] = []
    for where, obj in _json_lines(path):
        mid = _message_id(obj.get("messageID"), where)
        raw = obj.get("topic", obj.get("destinations"))
        out.append(SentMessage(mid, _destination_set(raw, where), _file_value(obj, where)))
    return out


def _file_value(obj: Mapping[str, Any], where: str) -> Any:
    """A line's value: ``value`` (JSON), or ``valueBase64`` for bytes sent as bytes."""
    if "valueBase64" in obj:
        try:
            return base64.b64decode(obj["valueBase64"], validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise CheckInputError(f"{where}: 'valueBase64' is not base64") from None
    return obj.get("value", UNSET)


def _sent(mid: object, destinations: object, value: Any) -> SentMessage:
    if not isinstance(mid, str) or not mid:
        raise CheckInputError(f"sent message {mid!r}: the id must be a non-empty string")
    return SentMessage(mid, _destination_set(destinations, lambda: f"sent message {mid!r}"), value)


def _destination_set(raw: object, where: str | Callable[[], str]) -> frozenset[str]:
    """A non-empty collection of topic names (one name alone counts as a list of one);
    ``where`` names the place in an error (a function when naming it costs)."""
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, list | tuple | set | frozenset):
        names = frozenset(raw)
        if names and all(_is_topic_name(t) for t in names):
            return names
    place = where if isinstance(where, str) else where()
    raise CheckInputError(f"{place}: 'topic' must be a non-empty list of topic names")


@lru_cache(maxsize=4096)
def _is_topic_name(name: object) -> bool:
    """:func:`is_valid_topic_name`, remembered: the same few names come again and again."""
    return is_valid_topic_name(name)


def _message_id(mid: object, where: str) -> str:
    if not isinstance(mid, str) or not mid:
        raise CheckInputError(f"{where}: 'messageID' must be a non-empty string")
    return mid


# ---------------------------------------------------------------------------- deliveries


def deliveries_from_ids(logs: Mapping[str, Iterable[str]]) -> DeliveryLogs:
    """Logs of bare message ids: nothing is known of a delivery but its id."""
    return {topic: _id_log(topic, ids) for topic, ids in logs.items()}


def _id_log(topic: str, ids: Iterable[str]) -> list[DeliveryRecord]:
    records: list[DeliveryRecord] = []
    for position, mid in enumerate(ids):
        if not isinstance(mid, str) or not mid:
            raise CheckInputError(
                f"{_delivery_where(topic, position)}: a message id must be a non-empty string"
            )
        records.append(DeliveryRecord(mid, None, None, UNSET, topic))
    return records


def deliveries_from_json(logs: Mapping[str, Iterable[object]]) -> DeliveryLogs:
    """Logs of JSON objects with the wire names (``messageID``, ``topic`` or
    ``destinations``, ``timeStamp``, ``value``, and ``layer`` or ``partitionID`` for a
    partitioned topic's layer), as :func:`load_deliveries` reads them from files.

    The mapping's key is the delivering topic; a record's ``deliveredAt``, when it has
    one, must name the same topic.
    """
    out: DeliveryLogs = {}
    for topic, objects in logs.items():
        records = out[topic] = []
        for position, obj in enumerate(objects):
            where = _delivery_where(topic, position)
            if not isinstance(obj, Mapping):
                raise CheckInputError(f"{where}: not a JSON object")
            _require_delivery_type(obj, where)
            if obj.get("deliveredAt", topic) != topic:
                raise CheckInputError(f"{where}: 'deliveredAt' is {obj['deliveredAt']!r}")
            records.append(_delivery_from_json(obj, where, topic))
    return out


def deliveries_from_wire(logs: Mapping[str, Iterable[WireDelivery]]) -> DeliveryLogs:
    """Logs of wire records (a simulator's delivery streams).

    The value is the record's JSON text, decoded here; a record that carries no value
    (``None``) is compared as JSON ``null``, so a delivery that lost its value does not
    pass unnoticed. The layer is the record's ``partitionID`` (0 when it has none).
    """
    return {
        topic: [
            DeliveryRecord(
                record.messageID,
                record.topic,
                record.timeStamp,
                _wire_value(record, _delivery_where(topic, position)),
                topic,
                record.partitionID or 0,
            )
            for position, record in enumerate(records)
        ]
        for topic, records in logs.items()
    }


def deliveries_from_client(logs: Mapping[str, Iterable[ClientDelivery]]) -> DeliveryLogs:
    """Logs of ``atomickafka.client.Delivery`` objects (what ``AtomicKafkaClient.deliveries()``
    returns), keyed by the topic that delivered them."""
    return {
        topic: [
            DeliveryRecord(d.messageID, d.destinations, d.timeStamp, d.value, topic, d.layer or 0)
            for d in deliveries
        ]
        for topic, deliveries in logs.items()
    }


def load_deliveries(paths: Iterable[str | os.PathLike[str]]) -> DeliveryLogs:
    """Read delivery files (JSON lines, one Delivery record each) into per-topic logs.

    The delivering topic is the record's ``deliveredAt`` field or, without one, the file
    name (``T1.jsonl`` holds deliveries at ``T1``). Records of other message types
    (``messageType`` present and not ``DeliveryMessage``) are rejected. Order within a
    topic is file order; several files may add to the same topic, in the order given.
    """
    out: DeliveryLogs = {}
    for path in paths:
        file_topic = _topic_of_file(path)
        for where, obj in _json_lines(path):
            _require_delivery_type(obj, where)
            topic = _delivering_topic(obj, file_topic, where)
            out.setdefault(topic, []).append(_delivery_from_json(obj, where, topic))
    return out


def _delivery_where(topic: str, position: int) -> str:
    return f"delivery {position} at {topic!r}"


def _topic_of_file(path: str | os.PathLike[str]) -> str:
    """The topic a delivery file's name names: ``T1.jsonl`` -> ``T1``."""
    name = Path(path).name
    for suffix in _DELIVERY_FILE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _require_delivery_type(obj: Mapping[str, Any], where: str) -> None:
    kind = obj.get("messageType")
    if kind is not None and kind != "DeliveryMessage":
        raise CheckInputError(f"{where}: not a delivery record (messageType {kind!r})")


def _delivering_topic(obj: Mapping[str, Any], file_topic: str, where: str) -> str:
    topic: object = obj.get("deliveredAt")
    if topic is None:
        if not is_valid_topic_name(file_topic):
            raise CheckInputError(
                f"{where}: no 'deliveredAt' field and the file name does not name a "
                "topic (<topic>.jsonl)"
            )
        return file_topic
    if not isinstance(topic, str) or not is_valid_topic_name(topic):
        raise CheckInputError(f"{where}: 'deliveredAt' is not a topic name: {topic!r}")
    return topic


def _delivery_from_json(obj: Mapping[str, Any], where: str, topic: str) -> DeliveryRecord:
    """One delivery from a JSON object whose type and delivering topic are known."""
    mid = _message_id(obj.get("messageID"), where)
    raw = obj.get("topic", obj.get("destinations"))
    if isinstance(raw, str):
        raw = [raw]
    if raw is not None and not (
        isinstance(raw, list | tuple) and all(isinstance(t, str) for t in raw)
    ):
        raise CheckInputError(f"{where}: 'topic' must be a list of topic names")
    ts = obj.get("timeStamp")
    if ts is not None and (type(ts) is not int or ts < 0):
        raise CheckInputError(f"{where}: 'timeStamp' must be a non-negative integer")
    layer = obj.get("layer", obj.get("partitionID"))
    return DeliveryRecord(
        mid,
        tuple(raw) if raw is not None else None,
        ts,
        _file_value(obj, where),
        topic,
        layer if type(layer) is int else 0,
    )


def _wire_value(record: WireDelivery, where: str) -> Any:
    """A wire record's value: bytes sent as bytes stay bytes, JSON text is decoded."""
    if getattr(record, "encoding", None) == "bytes":
        return record.value
    return _json_value(record.value, where)


def _json_value(value: bytes | None, where: str) -> Any:
    """The JSON value a wire record's JSON text spells (``None`` stays ``None``)."""
    if value is None:
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise CheckInputError(f"{where}: the value is not JSON text ({exc})") from None


def _json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, object)`` for each non-blank line of a JSON-lines file."""
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{os.fspath(path)}:{number}"
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise CheckInputError(f"{where}: not valid JSON ({exc})") from None
                if not isinstance(obj, dict):
                    raise CheckInputError(f"{where}: not a JSON object")
                yield where, obj
    except OSError as exc:
        raise CheckInputError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None
