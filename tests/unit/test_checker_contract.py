"""The checker keeps its own reading of deliveries (verify/checker/adapters.py); this
holds it to the wire format: the nodes' own Delivery records, in both record forms
(raw and the JSON envelope, docs/DESIGN.md §3.8), read as ``tail --json`` prints them
(``Delivery.to_json_dict``), are what the checker reads -- the same ids, values,
destinations and final timestamps, and a run it accepts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from atomickafka.client import Delivery
from atomickafka.core.raw import encode_raw_delivery
from atomickafka.core.reader import PlainRecord, read_delivery
from atomickafka.core.wire import Message, encode_delivery
from atomickafka.verify.checker import check, deliveries_from_json, sent_from_pairs
from atomickafka.verify.simulator import Send, Simulator

SENDS = [
    Send("c1", "m1", ("A", "B"), {"n": 1}, via="A"),
    Send("c1", "m2", ("A",), "two", via="A"),
    Send("c2", "m3", ("B", "A"), [3, "x"], via="B"),
    Send("c2", "m4", ("B",), None, via="B"),
]


def _record(message: Message, topic: str, offset: int, form: str) -> PlainRecord:
    if form == "raw":
        key, value, headers = encode_raw_delivery(message)
        return PlainRecord(value, topic=topic, offset=offset, key=key, headers=headers)
    return PlainRecord(encode_delivery(message), topic=topic, offset=offset)


def _tail_json(stream: list[Message], topic: str, form: str) -> list[dict[str, Any]]:
    """``topic``'s deliveries as ``atomickafka tail --json`` prints them (one line each)."""
    out = []
    for offset, message in enumerate(stream):
        record = _record(message, topic, offset, form)
        read = read_delivery(record, at=topic)
        assert read is not None, message
        line = orjson.dumps(Delivery.of(read, record, topic).to_json_dict())
        out.append(orjson.loads(line))
    return out


@pytest.mark.parametrize("form", ["raw", "json"])
def test_the_checker_reads_the_nodes_deliveries_as_tail_prints_them(form: str) -> None:
    sim = Simulator(["A", "B"])
    for send in SENDS:
        sim.send(send)
    result = sim.drain()
    streams = {t: result.deliveries[t] for t in ("A", "B")}
    logs = {t: _tail_json(streams[t], t, form) for t in ("A", "B")}
    read = deliveries_from_json(logs)
    for topic, stream in streams.items():
        assert [(d.messageID, d.timeStamp, d.destinations) for d in read[topic]] == [
            (m.messageID, m.timeStamp, tuple(sorted(m.topic))) for m in stream
        ]
    sent = sent_from_pairs({s.messageID: (s.destinations, s.value) for s in SENDS})
    report = check(sent, read)
    assert report.ok, report.summary()
