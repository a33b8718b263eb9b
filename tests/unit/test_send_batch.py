"""``AtomicKafkaClient.send_batch`` (issue 25 item 3) without a broker: the status watch
and the producer are stand-ins that record what would be written. A batch writes, byte
for byte, the records ``send`` writes for the same ids and send time; its ids come back
in order; a value that cannot be sent names its index and nothing of the batch is
written; each message keeps its own layer."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.client import AtomicKafkaClient, MessageError, SentMessage
from atomickafka.core.engine import Algorithm
from atomickafka.core.raw import H_ENCODING, H_LAYER, H_SENT, raw_client_record
from atomickafka.core.signing import Signer, parse_secrets
from atomickafka.kafka.topics import Layout, input_topic
from tests.unit.test_client_statuses import NOWHERE, SECRET, Watch, status

#: (topic, value, key, partition, headers) of one produced record.
Written = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes]]]


class Producer:
    """Records every record produced; ``flush`` acknowledges them all."""

    def __init__(self) -> None:
        self.written: list[Written] = []
        self.reports: list[Any] = []

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        on_delivery: Any = None,
    ) -> None:
        self.written.append((topic, value, key, partition, list(headers or [])))
        self.reports.append(on_delivery)

    def poll(self, _timeout_s: float = 0.0) -> int:
        return 0

    def flush(self, _timeout_s: float = 0.0) -> int:
        reports, self.reports = self.reports, []
        for report in reports:
            report(None, None)
        return 0

    def close(self, _timeout_s: float = 0.0) -> int:
        return self.flush()


def client(
    topics: list[str],
    *,
    algorithm: Algorithm = Algorithm.DIRECT,
    partitions: int = 1,
    secret: str | None = None,
    **options: Any,
) -> tuple[AtomicKafkaClient, Producer]:
    """A client whose destinations' nodes are live (``algorithm``, ``partitions``
    layers; checking signatures when ``secret`` is given) and whose producer records."""
    keys = () if secret is None else Signer(parse_secrets(secret)).key_ids()
    watch = Watch(
        [
            status(t, 1, algorithm=algorithm, partitions=partitions, signing_keys=keys)
            for t in topics
        ]
    )
    made = AtomicKafkaClient(NOWHERE, client_id="c1", secret=secret, **options)
    made.id_prefix = "c1-test"  # the same ids in every client made here
    made._watch = watch  # type: ignore[assignment]
    producer = Producer()
    made._producer = producer  # type: ignore[assignment]
    return made, producer


@contextmanager
def frozen_clock(ms: int = 1_764_000_000_123) -> Iterator[None]:
    """Every read of the wall clock returns ``ms`` (the send time)."""
    with mock.patch("time.time", return_value=ms / 1000):
        yield


VALUES = st.lists(
    st.one_of(
        st.binary(max_size=30),
        st.text(max_size=20),
        st.integers(-(2**63), 2**63 - 1),
        st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=3),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    VALUES,
    st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=3, unique=True),
    st.sampled_from([None, "A", "C"]),
    st.sampled_from(list(Algorithm)),
    st.sampled_from([1, 3]),
    st.one_of(st.none(), st.text("kx", min_size=1, max_size=3), st.binary(max_size=3)),
    st.lists(st.tuples(st.sampled_from(["trace", "x"]), st.binary(max_size=4)), max_size=2),
    st.booleans(),
)
def test_a_batch_writes_what_send_writes_for_the_same_ids_and_send_time(
    values: list[Any],
    destinations: list[str],
    via: str | None,
    algorithm: Algorithm,
    partitions: int,
    key: str | bytes | None,
    headers: list[tuple[str, bytes]],
    signing: bool,
) -> None:
    """Twin clients, one calling ``send`` per value, the other ``send_batch`` once, under
    one frozen clock: the same records, byte for byte (value, key, layer, headers and
    signature), to the same input logs, in the same order; and each record is
    ``raw_client_record`` of its message (signed when signing)."""
    secret = SECRET if signing else None
    with frozen_clock(1_764_000_000_123):
        one, by_one = client(
            ["A", "B", "C"], algorithm=algorithm, partitions=partitions, secret=secret
        )
        ids_one = [one.send(v, destinations, via=via, key=key, headers=headers) for v in values]
        batch, by_batch = client(
            ["A", "B", "C"], algorithm=algorithm, partitions=partitions, secret=secret
        )
        ids = batch.send_batch(values, destinations, via=via, key=key, headers=headers)
    assert ids == ids_one == [f"c1-test-{n}" for n in range(len(values))]
    assert by_batch.written == by_one.written
    signer = None if secret is None else Signer(parse_secrets(secret))
    record_key = key.encode() if isinstance(key, str) else key
    topics = tuple(sorted(destinations))
    firsts = list(_first_of_each(by_batch, ids))
    expected = []
    for message_id, value, (topic, *_) in zip(ids, values, firsts, strict=True):
        layer = _expected_layer(record_key, int(message_id.rsplit("-", 1)[1]), partitions)
        _, payload, raw_headers = raw_client_record(
            message_id, topics, value, "c1", layer,
            sent_at=1_764_000_000_123, key=record_key, headers=tuple(headers),
        )  # fmt: skip
        if signer is not None:
            raw_headers = signer.signed_headers(topic, record_key, payload, raw_headers)
        expected.append((topic, payload, record_key, layer, raw_headers))
    assert firsts == expected


def _first_of_each(producer: Producer, ids: list[str]) -> Iterator[Written]:
    """The first record written of each message (its records carry the same id)."""
    seen: set[bytes] = set()
    for record in producer.written:
        message_id = dict(record[4])["atomickafka-id"]
        if message_id not in seen:
            seen.add(message_id)
            yield record
    assert len(seen) == len(ids)


def _expected_layer(key: bytes | None, seq: int, partitions: int) -> int | None:
    if partitions <= 1:
        return None
    return seq % partitions if key is None else zlib.crc32(key) % partitions


def test_ids_come_back_in_order_and_the_records_are_written_in_that_order() -> None:
    sender, producer = client(["A", "B"])
    ids = sender.send_batch((f"v{n}" for n in range(5)), ["A", "B"])  # any iterable
    assert ids == [f"c1-test-{n}" for n in range(5)]
    assert [(w[0], dict(w[4])["atomickafka-id"].decode()) for w in producer.written] == [
        (input_topic(t, Layout.SPLIT), m) for m in ids for t in ("A", "B")
    ]  # direct: every destination's input log, message after message
    assert [w[1] for w in producer.written[::2]] == [f'"v{n}"'.encode() for n in range(5)]
    assert sender.send("after", ["A"]) == "c1-test-5"  # one sequence for both calls
    assert sender.send_batch([], ["A"]) == []


def test_every_message_of_a_batch_has_the_batchs_send_time() -> None:
    sender, producer = client(["A"])
    sender.send_batch(list(range(50)), ["A"])
    sent = {dict(w[4])[H_SENT] for w in producer.written}
    assert len(sent) == 1 and abs(int(sent.pop()) - time.time() * 1000) < 60_000


@pytest.mark.parametrize(
    ("bad", "reason"),
    [("x" * 200, "bytes as JSON; AtomicKafka carries at most 100"), ({1, 2}, "not a JSON value")],
)
def test_a_value_that_cannot_be_sent_names_its_index_and_nothing_is_written(
    bad: Any, reason: str
) -> None:
    sender, producer = client(["A", "B"], max_value_bytes=100)
    with pytest.raises(MessageError, match=reason) as raised:
        sender.send_batch(["ok", "fine", bad, "never checked"], ["A", "B"])
    assert raised.value.index == 2 and str(raised.value).startswith("values[2]: field 'value'")
    assert producer.written == []  # all or nothing: the first two were not written either
    assert sender.send_batch(["ok"], ["A", "B"]) and len(producer.written) == 2


def test_send_names_no_index_and_says_what_it_said_before() -> None:
    sender, producer = client(["A"], max_value_bytes=100)
    with pytest.raises(MessageError) as raised:
        sender.send("x" * 200, ["A"])
    assert raised.value.index is None
    assert str(raised.value) == (
        "field 'value': 202 bytes as JSON; AtomicKafka carries at most 100 bytes (MAX_VALUE_BYTES)"
    )
    with pytest.raises(MessageError, match="field 'via'") as bad_via:
        sender.send_batch(["ok"], ["A"], via="not a topic!")
    assert bad_via.value.index is None and producer.written == []


def test_without_a_key_each_message_takes_its_own_layer_and_says_so() -> None:
    """On a partitioned topic a batch without a key is spread round-robin, message by
    message, as ``send`` spreads them; with a key every message is in the key's layer.
    A bytes value says so in its own record only."""
    sender, producer = client(["A"], partitions=3)
    sender.send_batch(["a", b"\x00raw", "c", "d"], ["A"])
    layers = [w[3] for w in producer.written]
    assert layers == [0, 1, 2, 0]
    assert [dict(w[4])[H_LAYER] for w in producer.written] == [b"0", b"1", b"2", b"0"]
    assert [H_ENCODING in dict(w[4]) for w in producer.written] == [False, True, False, False]
    producer.written.clear()
    sender.send_batch(["e", "f", "g"], ["A"], key="customer-7")
    layer = zlib.crc32(b"customer-7") % 3
    assert [w[3] for w in producer.written] == [layer] * 3
    assert {dict(w[4])[H_LAYER] for w in producer.written} == {str(layer).encode()}


def test_on_delivery_runs_once_per_message_with_its_own_sent_message() -> None:
    sender, producer = client(["A", "B"])
    reports: list[tuple[KafkaError | None, SentMessage]] = []
    ids = sender.send_batch(
        [{"n": 1}, {"n": 2}], ["B", "A"], key="k", on_delivery=lambda e, s: reports.append((e, s))
    )
    assert reports == []  # none acknowledged yet
    producer.flush()
    assert reports == [
        (None, SentMessage(ids[0], ("A", "B"), {"n": 1}, None, "k", None, records=2)),
        (None, SentMessage(ids[1], ("A", "B"), {"n": 2}, None, "k", None, records=2)),
    ]


def test_the_route_and_the_back_pressure_are_judged_once_per_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sender, producer = client(["A"])
    routes: list[object] = []
    holds: list[object] = []
    judge, hold = sender._route, sender._hold_back

    def counted_route(*args: Any) -> Any:
        routes.append(args)
        return judge(*args)._replace(lagging=True)

    def counted_hold(topics: list[str]) -> None:
        holds.append(topics)
        hold(topics)

    monkeypatch.setattr(sender, "_route", counted_route)
    monkeypatch.setattr(sender, "_hold_back", counted_hold)
    sender.send_batch(list(range(100)), ["A"])
    assert len(routes) == len(holds) == 1 and len(producer.written) == 100


def test_messages_of_one_millisecond_keep_their_own_destinations_key_and_headers() -> None:
    """The headers messages share are built once per millisecond for each destination
    set, key and headers (the client keeps them): a message with other ones in the same
    millisecond gets its own."""
    with frozen_clock():
        sender, producer = client(["A", "B"])
        sender.send("1", ["A"], key="k1", headers={"h": "1"})
        sender.send_batch(["2"], ["A", "B"], key=b"k2")
        sender.send("3", ["A"], headers=[("h", b"3")])
        sender.send("4", ["A"], key="k1", headers={"h": "1"})
    got = [(w[2], dict(w[4]).get("h"), dict(w[4])["atomickafka-to"]) for w in producer.written]
    assert got == [
        (b"k1", b"1", b"A"),
        (b"k2", None, b"A,B"),
        (b"k2", None, b"A,B"),
        (None, b"3", b"A"),
        (b"k1", b"1", b"A"),
    ]


def test_a_callers_ids_and_send_time_make_the_same_records_again() -> None:
    """A producer that sends a batch again after a failure (a replayed Spark batch) gives
    the messages the same ids and send time: a second client writes the same records,
    byte for byte, so every node takes them for the same messages (DESIGN §4.13)."""
    ids = ["spark-q-0-0-a", "spark-q-0-0-b", "spark-q-0-0-c"]
    written = []
    for _ in range(2):
        sender, producer = client(["A", "B"], partitions=3)
        sent = sender.send_batch(
            ["x", b"y", {"z": 1}], ["A", "B"], message_ids=ids, sent_at_ms=None
        )
        assert sent == ids
        written.append(producer.written)
    assert written[0] == written[1]
    assert [dict(w[4])["atomickafka-id"].decode() for w in written[0][::2]] == ids
    assert all(H_SENT not in dict(w[4]) for w in written[0])  # none stated
    layers = [w[3] for w in written[0][::2]]
    assert layers == [zlib.crc32(i.encode()) % 3 for i in ids]  # by id, not by sequence
    sender, producer = client(["A"])
    sender.send_batch(["x"], ["A"], message_ids=["m-1"], sent_at_ms=1_764_000_000_000)
    assert dict(producer.written[0][4])[H_SENT] == b"1764000000000"


def test_a_callers_ids_must_be_one_per_value_and_valid() -> None:
    sender, producer = client(["A"])
    with pytest.raises(MessageError, match="2 ids for 3 values"):
        sender.send_batch(["a", "b", "c"], ["A"], message_ids=["m-1", "m-2"])
    with pytest.raises(MessageError, match="messageID"):
        sender.send_batch(["a"], ["A"], message_ids=[""])
    assert producer.written == []
