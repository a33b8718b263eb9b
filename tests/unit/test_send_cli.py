"""``atomickafka send`` reading stdin in batches, without a broker: stdin's lines are
cut into chunks of what has arrived (never waiting for lines not yet written), each
chunk goes out as one ``send_batch``, and a line that cannot be sent is still reported
with its number and skipped while the rest of its chunk is sent (the integration test
``test_bad_input.py`` runs the same through a cluster)."""

from __future__ import annotations

import io
import os
import threading
from typing import Any

import pytest

from atomickafka.cli import main, send_cmd
from atomickafka.client import AtomicKafkaClient
from atomickafka.core.wire import MAX_VALUE_BYTES
from tests.unit.test_send_batch import Producer, client


def test_lines_are_numbered_and_cut_into_chunks_of_at_most_the_limit() -> None:
    data = b"a\r\nb\n\nc\n" + b"x" * 200_000 + b"\nlast"  # a line longer than a read
    chunks = list(send_cmd._line_chunks(io.BytesIO(data), 2))
    assert chunks == [
        [(1, b"a"), (2, b"b")],
        [(3, b""), (4, b"c")],  # an empty line is an empty value, as before
        [(5, b"x" * 200_000), (6, b"last")],
    ]
    assert list(send_cmd._line_chunks(io.BytesIO(b""), 2)) == []


def test_a_chunk_is_what_has_arrived_it_does_not_wait_for_more() -> None:
    """A writer that has written two lines and waits: the two are a chunk at once (the
    reader would otherwise hang here, the writer's end still open)."""
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as stream, open(write_end, "wb", buffering=0) as writer:
        writer.write(b"one\ntwo\nthr")
        chunks = send_cmd._line_chunks(stream, 500)
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.append(next(chunks)), daemon=True)
        reader.start()
        reader.join(timeout=10)
        assert got == [[(1, b"one"), (2, b"two")]]
        writer.write(b"ee\n")
        assert next(chunks) == [(3, b"three")]
        writer.close()
        assert list(chunks) == []


def run_send(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: bytes, *argv: str
) -> tuple[int, list[str], str, Producer]:
    """``atomickafka send --to A ARGV`` of ``stdin``, its client's producer a stand-in
    that acknowledges every record at close: (status, stdout lines, stderr, producer)."""
    made: list[Producer] = []

    def fake_client(_where: object, **options: Any) -> AtomicKafkaClient:
        options.pop("secret_file")
        sender, producer = client(["A"], **options)
        made.append(producer)
        return sender

    monkeypatch.setattr(send_cmd, "AtomicKafkaClient", fake_client)
    monkeypatch.setattr(send_cmd, "reach", lambda _args: None)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    status = main(["send", "--bootstrap-server", "b:1", "--to", "A", *argv])
    out, err = capsys.readouterr()
    return status, out.split(), err, made[0]


def test_a_bad_line_is_skipped_with_its_number_and_the_rest_of_its_batch_is_sent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    big = b"x" * (MAX_VALUE_BYTES + 1)
    stdin = b"first\n\xff not utf-8\nsecond\n" + big + b"\nthird\n"
    status, ids, err, producer = run_send(monkeypatch, capsys, stdin)
    assert status == 1
    assert [w[1] for w in producer.written] == [b'"first"', b'"second"', b'"third"']
    assert ids == [dict(w[4])["atomickafka-id"].decode() for w in producer.written]
    assert "line 2: not valid UTF-8" in err
    assert f"line 4: field 'value': {MAX_VALUE_BYTES + 3} bytes as JSON" in err  # no index
    assert "values[" not in err and "line 1" not in err and "line 5" not in err


def test_many_lines_go_in_batches_and_every_id_is_printed_in_input_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = 1_234  # three batches of at most 500
    stdin = "".join(f'{{"n": {n}}}\n' for n in range(lines)).encode()
    status, ids, err, producer = run_send(monkeypatch, capsys, stdin, "--json-value")
    assert (status, err) == (0, "")
    assert [w[1] for w in producer.written] == [f'{{"n":{n}}}'.encode() for n in range(lines)]
    assert ids == [dict(w[4])["atomickafka-id"].decode() for w in producer.written]
    sent = {dict(w[4])["atomickafka-sent"] for w in producer.written}
    assert 1 <= len(sent) <= 3  # a send time per batch


def test_a_bad_via_skips_every_line_as_it_did(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, ids, err, producer = run_send(monkeypatch, capsys, b"a\nb\n", "--via", "no such!")
    assert (status, ids, producer.written) == (1, [], [])
    assert err.count("field 'via': not a valid topic name") == 2
    assert "line 1:" in err and "line 2:" in err
