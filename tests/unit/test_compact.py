"""The compact control form (docs/DESIGN.md §3.9): round trips, the same messages as
the JSON form, hostile bytes (§4.9), signatures, and clusters whose nodes write
different control forms (a rolling upgrade), checked by the order checker."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atomickafka.core.compact import (
    BINARY,
    COMPACT_VERSION,
    JSON,
    MAGIC,
    compact_writer,
    control_encoders,
    decode_compact,
    encode_compact_bundle,
    encode_compact_tick,
    is_compact,
)
from atomickafka.core.engine import Algorithm
from atomickafka.core.raw import decode_any
from atomickafka.core.reader import PlainRecord, peek, read_messages
from atomickafka.core.signing import Signer
from atomickafka.core.wire import (
    MAX_TIMESTAMP,
    Message,
    MessageError,
    MessageType,
    decode_record,
    encode_bundle,
    encode_tick,
    pack_bundles,
    value_digest,
)
from atomickafka.errors import ConfigError
from atomickafka.node.batch import NodeBatch, OutKind
from atomickafka.verify.layered import MergerChaos
from atomickafka.verify.simulator import (
    Chaos,
    SimulationResult,
)
from tests.unit.test_batch import NOW_MS, log, spec
from tests.unit.test_hostile import layered_run, single_run
from tests.unit.test_layered import assert_merged_correct
from tests.unit.test_properties import ALGORITHMS, assert_correct, delivery_modes, examples
from tests.unit.test_wire import control_messages, timestamps

SECRET = b"compact-tests-secret-0123456789ab"
seqs = st.tuples(timestamps, timestamps)


@st.composite
def bundled(draw: st.DrawFn) -> Message:
    """A bundled message with every optional field drawn: ``seq`` (in any order: the
    offsets are delta-coded), ``answers``, ``sentAt``, a digest of any form, the raw
    form's key, headers and encoding."""
    message = draw(control_messages())
    raw = draw(st.booleans()) and message.value is not None
    value = draw(st.binary(max_size=40)) if raw else message.value
    digest = draw(
        st.sampled_from([value_digest(value or b"null"), "not-hex", "ABCDEF0123456789"])
        | st.text(max_size=20)
    )
    return message._replace(
        value=value,
        digest=digest,
        sentAt=draw(st.none() | timestamps),
        seq=draw(st.none() | seqs),
        answers=draw(st.none() | seqs),
        key=draw(st.none() | st.binary(max_size=12)) if raw else None,
        headers=tuple(draw(st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=8)))))
        if raw
        else (),
        encoding="bytes" if raw else None,
    )


def same_version(messages: list[Message]) -> list[Message]:
    """``messages`` with repeats of their ids (as a bundle of Notify then Ack holds)."""
    return messages + [
        m._replace(messageType=MessageType.ACK, value=None, timeStamp=m.timeStamp or 1)
        for m in messages[:2]
    ]


def compact(messages: list[Message], **kw: object) -> bytes:
    return encode_compact_bundle(
        messages,
        sender_id=str(kw.get("sender_id", "node-T1")),
        sent_from=str(kw.get("sent_from", "T1")),
        protocol=kw.get("protocol", "direct"),  # type: ignore[arg-type]
        partition=kw.get("partition"),  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------------------- round trips


@given(
    st.lists(bundled(), min_size=1, max_size=8).map(same_version),
    st.none() | st.integers(0, 2**31 - 1),
    st.none() | st.sampled_from(["direct", "poc", "optimized", ""]),
    st.text(max_size=10),
    st.none() | timestamps,
    st.none() | st.integers(0, 2**40),
)
def test_encode_then_decode_is_the_identity(
    messages: list[Message],
    partition: int | None,
    protocol: str | None,
    sender: str,
    log_time: int | None,
    origin: int | None,
) -> None:
    """Every field of every message comes back, the record's (sender, sending topic,
    protocol, layer) on each, and the log time and offset given to the decoder."""
    encoded = compact(
        messages, sender_id=sender, sent_from="T1", protocol=protocol, partition=partition
    )
    expected = [
        m._replace(
            senderID=sender,
            sentFromTopic="T1",
            protocol=protocol,
            partitionID=partition,
            logTime=log_time,
            origin=origin,
        )
        for m in messages
    ]
    assert decode_compact(encoded, log_time=log_time, origin=origin) == expected
    assert decode_any(encoded, log_time=log_time, origin=origin) == expected
    assert is_compact(encoded) and compact_writer(encoded) == "T1"


@given(st.lists(control_messages(), min_size=1, max_size=8).map(same_version))
def test_both_forms_decode_to_the_same_messages(messages: list[Message]) -> None:
    """What a node takes from a bundle does not depend on the form it came in; the
    compact one is smaller."""
    settings = {"sender_id": "node-T1", "sent_from": "T1", "protocol": "direct"}
    as_json = encode_bundle(messages, **settings)  # type: ignore[arg-type]
    as_binary = encode_compact_bundle(messages, **settings)  # type: ignore[arg-type]
    assert decode_record(as_json) == decode_any(as_binary)
    assert len(as_binary) < len(as_json)


@given(st.text(max_size=20), timestamps, st.none() | st.integers(0, 2**31 - 1))
def test_ticks_round_trip_as_in_json(sender: str, timestamp: int, layer: int | None) -> None:
    assert decode_any(encode_compact_tick(sender, timestamp, layer)) == decode_record(
        encode_tick(sender, timestamp, layer)
    )


@given(st.lists(control_messages(), min_size=1, max_size=20), st.integers(300, 5000))
def test_pack_bundles_in_the_compact_form_keeps_order_and_fits(
    messages: list[Message], limit: int
) -> None:
    encode, _ = control_encoders(BINARY)
    records = list(
        pack_bundles(
            messages,
            sender_id="node-T1",
            sent_from="T1",
            protocol="direct",
            max_bytes=limit,
            encode=encode,
        )
    )
    assert all(is_compact(r) for r in records)
    assert [m for r in records for m in decode_any(r)] == messages
    assert all(len(r) <= limit or len(decode_any(r)) == 1 for r in records)


@pytest.mark.parametrize(
    "offsets", [(MAX_TIMESTAMP, 0, MAX_TIMESTAMP), (2**52, 0), (0, 2**52, 2**52 - 1)]
)
def test_seq_offsets_far_apart_round_trip(offsets: tuple[int, ...]) -> None:
    """Found by the property above: the difference between two entries' seq offsets
    may exceed MAX_TIMESTAMP, either way (zigzag), and still decodes."""
    value = b"1"
    messages = [
        Message(
            f"m{i}",
            MessageType.NOTIFY,
            ("T1", "T2"),
            value,
            timeStamp=1,
            digest=value_digest(value),
            seq=(offset, i),
        )
        for i, offset in enumerate(offsets)
    ]
    assert [m.seq for m in decode_any(compact(messages))] == [m.seq for m in messages]


def test_message_ids_and_destinations_are_written_once_per_bundle() -> None:
    """A Notify and an Ack about one message share its id, destinations and digest."""
    value = b'{"order":42}'
    notify = Message(
        "c3f9a-17", MessageType.NOTIFY, ("audit", "payments"), value, timeStamp=1043,
        digest=value_digest(value), sentAt=NOW_MS, seq=(120, 0),
    )  # fmt: skip
    ack = notify._replace(messageType=MessageType.ACK, value=None, seq=(121, 0))
    encoded = compact([notify, ack], sent_from="audit")
    assert encoded.count(b"c3f9a-17") == 1 and encoded.count(b"payments") == 1
    json_size = len(encode_bundle([notify, ack], sender_id="node-T1", sent_from="audit",
                                  protocol="direct"))  # fmt: skip
    assert len(encoded) * 4 < json_size


def test_control_encoders_name_the_forms() -> None:
    assert control_encoders(JSON) == (encode_bundle, encode_tick)
    assert control_encoders(BINARY) == (encode_compact_bundle, encode_compact_tick)
    with pytest.raises(ConfigError, match="json or binary"):
        control_encoders("xml")


# ---------------------------------------------------------------------------- hostile bytes


@given(st.binary(max_size=300))
def test_any_bytes_after_the_magic_byte_raise_only_message_errors(tail: bytes) -> None:
    """§4.9: whatever a compact-looking record holds, decoding it either works or
    raises :class:`MessageError` (which a node turns into a dead letter)."""
    for raw in (bytes([MAGIC]) + tail, bytes([MAGIC, COMPACT_VERSION]) + tail):
        with contextlib.suppress(MessageError):
            decode_any(raw)
        read_messages(PlainRecord(raw))  # the lenient readers never raise
        peek(PlainRecord(raw))
        compact_writer(raw)


@given(
    st.lists(bundled(), min_size=1, max_size=4),
    st.data(),
)
def test_damaged_bundles_raise_only_message_errors(
    messages: list[Message], data: st.DataObject
) -> None:
    """A valid bundle with bytes changed, cut or added: decoded (as something else, if
    the change happens to be valid) or refused with a MessageError, never a crash."""
    encoded = bytearray(compact(messages))
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(encoded) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            encoded[where] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del encoded[where:]
            if not encoded:
                encoded.append(MAGIC)
        else:
            encoded[where:where] = data.draw(st.binary(min_size=1, max_size=4))
    with contextlib.suppress(MessageError):
        decode_any(bytes(encoded))


@pytest.mark.parametrize(
    ("damage", "field", "reason"),
    [
        (lambda b: b[:-1], "messages[0].value", "does not fit"),
        (lambda b: b + b"x", None, "bytes follow the record's end"),
        (lambda b: b[:1] + bytes([COMPACT_VERSION + 1]) + b[2:], "formatVersion", "upgrade it"),
        (lambda b: b[:1] + b"\x00" + b[2:], "formatVersion", "positive"),
        (lambda b: b[:5] + b"\x09" + b[6:], "messageType", r"Bundle \(1\) or a Tick \(2\)"),
        (lambda b: b[:3] + b"\xff\xfe" + b[5:], "writer", "UTF-8"),
    ],
)
def test_a_damaged_bundle_is_refused_with_a_reason(
    damage: object, field: str | None, reason: str
) -> None:
    value = b'{"a":1}'
    notify = Message("m", MessageType.NOTIFY, ("T1", "T2"), value, timeStamp=5,
                     digest=value_digest(value))  # fmt: skip
    good = compact([notify])
    assert good[2:5] == b"\x02T1"  # the writer's name: T1
    with pytest.raises(MessageError, match=reason) as info:
        decode_any(damage(good))  # type: ignore[operator]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (dict(value=b'\xff{"a": [}'), "not a valid UTF-8 JSON"),
        (dict(timeStamp=MAX_TIMESTAMP + 1), "timeStamp"),
        (dict(timeStamp=None), "required on NotifyMessage"),
        (dict(messageID=""), "1 to 512 characters"),
        (dict(topic=("T1", "bad name")), "not a valid Kafka topic name"),
        (dict(seq=(MAX_TIMESTAMP + 1, 0)), "seq"),
    ],
)
def test_what_the_json_decoder_refuses_the_compact_one_refuses(
    message: dict[str, Any], reason: str
) -> None:
    """The same checks on both forms (§3, §4.9.1): values, bounds, ids, topic names."""
    value = b'{"a":1}'
    notify = Message("m", MessageType.NOTIFY, ("T1", "T2"), value, timeStamp=5,
                     digest=value_digest(value), seq=(1, 0))._replace(**message)  # fmt: skip
    with pytest.raises(MessageError, match=reason):
        decode_any(compact([notify]))
    with pytest.raises(MessageError):
        decode_record(encode_bundle([notify], sender_id="n", sent_from="T1", protocol="direct"))


def test_a_newer_compact_format_is_set_aside_naming_its_writer() -> None:
    """A member of a newer release writing a compact format this node cannot read is
    counted by whom it comes from (status ``newerFormats``) and set aside."""
    value = b"1"
    notify = Message("m", MessageType.NOTIFY, ("A", "B"), value, timeStamp=5,
                     digest=value_digest(value))  # fmt: skip
    good = encode_compact_bundle([notify], sender_id="node-B", sent_from="B", protocol="direct")
    newer = good[:1] + bytes([COMPACT_VERSION + 1]) + good[2:] + b"anything a newer one adds"
    batch = NodeBatch(spec(), NodeBatch.fresh_engine(spec()))
    ready = batch.step(log("A", [newer]), wall_s=0)
    (letter,) = [r for r in ready.records if r.kind is OutKind.DEAD_LETTER]
    assert b"upgrade it" in dict(letter.headers)["atomickafka-error"]
    assert batch.newer_formats == {"B": 1}


def test_a_compact_record_is_peeked_as_a_bundle_or_a_tick() -> None:
    value = b"1"
    notify = Message("m", MessageType.NOTIFY, ("A", "B"), value, timeStamp=5,
                     digest=value_digest(value))  # fmt: skip
    bundle = peek(PlainRecord(compact([notify, notify], sent_from="A")))
    assert (bundle.kind, bundle.is_bundle, bundle.sent_from) == ("Bundle", True, "A")
    assert [(i.kind, i.message_id, i.timestamp) for i in bundle.inner] == [
        ("NotifyMessage", "m", 5)
    ] * 2
    tick = peek(PlainRecord(encode_compact_tick("merger-A", 7, 1)))
    assert (tick.kind, tick.sender_id, tick.message_id) == ("TickMessage", "merger-A", "tick-7")
    broken = peek(PlainRecord(compact([notify], sent_from="A")[:-3]))
    assert (broken.kind, broken.sent_from) == ("<undecodable>", "A")


def test_a_signature_covers_the_compact_bytes_as_written() -> None:
    """§4.14: signed as written; one byte changed anywhere and the signature fails."""
    signer = Signer([SECRET])
    value = b"1"
    notify = Message("m", MessageType.NOTIFY, ("A", "B"), value, timeStamp=5,
                     digest=value_digest(value))  # fmt: skip
    raw = compact([notify], sent_from="B")
    headers = signer.signed_headers("atomickafka-in.A", None, raw, ())
    assert signer.problem("atomickafka-in.A", None, raw, headers) is None
    for where in range(len(raw)):
        changed = raw[:where] + bytes([raw[where] ^ 1]) + raw[where + 1 :]
        assert signer.problem("atomickafka-in.A", None, changed, headers) is not None


# ---------------------------------------------------------------------------- mixed clusters


def mixed_run(
    algorithm: Algorithm,
    seed: int,
    chaos: Chaos,
    mode: tuple[bool, int] = (True, 0),
    *,
    formats: dict[str, str] | None = None,
    signer: Signer | None = None,
) -> SimulationResult:
    """A hostile test's run (five topics T1..T5) with nodes writing ``formats``."""
    return single_run(algorithm, seed, chaos, mode, signer=signer, control_formats=formats)


def record_forms(result: SimulationResult) -> Counter[str]:
    """The control records of every input log by form."""
    seen: Counter[str] = Counter()
    for records in result.records.values():
        for record in records:
            kind = peek(record).kind
            if kind in ("Bundle", "TickMessage"):
                seen[f"{'binary' if is_compact(record.value()) else 'json'} {kind}"] += 1
    return seen


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.15)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes, signed=st.booleans())
def test_nodes_writing_either_form_order_the_same_traffic(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int], signed: bool
) -> None:
    """The mixed-version test: T1 and T2 write JSON control records (a release before
    the compact form, or an upgraded node still run with ``--control-format json``),
    the others binary; with crashes, repeats and delays, the checker passes."""
    chaos = Chaos(crash=0.02, checkpoint=0.1, duplicate=0.05, delay=0.03, unsequenced=0.05)
    result = mixed_run(
        algorithm,
        seed,
        chaos,
        mode,
        formats={"T1": JSON, "T2": JSON},
        signer=Signer([SECRET]) if signed else None,
    )
    assert_correct(result)


UPGRADES = Chaos(
    mixed_formats=True, upgrade=0.03, crash=0.02, checkpoint=0.1, duplicate=0.05, delay=0.03
)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.15)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_a_rolling_upgrade_with_messages_in_flight_keeps_atomic_multicast(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """Each node starts in a drawn form and restarts, by chance, writing the other one
    (an upgrade, or its rollback) while messages are in flight."""
    assert_correct(mixed_run(algorithm, seed, UPGRADES, mode))


def test_mixed_runs_do_write_both_forms_and_upgrade() -> None:
    """The chaos above is not idle: both forms are written, into the same logs, and
    nodes restart in the other form."""
    seen: Counter[str] = Counter()
    for algorithm in ALGORITHMS:
        for seed in range(3):
            result = mixed_run(algorithm, seed, UPGRADES)
            assert_correct(result)
            seen.update(record_forms(result))
            seen["upgrade"] += result.events["upgrade"]
    assert seen["binary Bundle"] and seen["json Bundle"] and seen["upgrade"], seen
    fixed = record_forms(mixed_run(Algorithm.DIRECT, 0, Chaos(), formats={"T1": JSON}))
    assert fixed["json Bundle"] and fixed["binary Bundle"], fixed


STRAYS = Chaos(
    mixed_formats=True, stray=0.2, stray_in_flight=0.1, bad_value=0.1, crash=0.02, checkpoint=0.1
)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.1)
@given(seed=st.integers(0, 2**32 - 1), mode=delivery_modes)
def test_hostile_records_in_either_form_stop_nothing(
    algorithm: Algorithm, seed: int, mode: tuple[bool, int]
) -> None:
    """§4.9 for both forms: strays, strays in flight and bundled values that are not
    JSON, each written in the form of the node it claims to come from."""
    result = mixed_run(algorithm, seed, STRAYS, mode)
    assert_correct(result, honest=False)
    assert not (result.doomed & {m.messageID for ms in result.deliveries.values() for m in ms})


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@examples(0.06)
@given(seed=st.integers(0, 2**32 - 1))
def test_layers_and_mergers_of_either_form_merge_in_order(algorithm: Algorithm, seed: int) -> None:
    """Partitioned topics: each layer's nodes and each merger (its ticks) in a drawn
    form, restarting in the other."""
    result = layered_run(algorithm, seed, UPGRADES, MergerChaos(crash=0.02, checkpoint=0.05))
    assert_merged_correct(result)
