"""The independent checker catches each kind of violation, at scale, from files too."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import random
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from atomickafka.cli import check_cmd, main
from atomickafka.client import Delivery
from atomickafka.core.wire import Message, MessageType
from atomickafka.verify import checker as checker_package
from atomickafka.verify.checker import (
    UNSET,
    CheckInputError,
    CheckReport,
    DeliveryRecord,
    SentMessage,
    ViolationKind,
    check,
    check_files,
    deliveries_from_client,
    deliveries_from_ids,
    deliveries_from_json,
    deliveries_from_wire,
    load_deliveries,
    load_sent,
    sent_from_destinations,
    sent_from_pairs,
)

K = ViolationKind

SENT: dict[str, set[str]] = {
    "x": {"A", "B"},
    "y": {"A", "B", "C"},
    "z": {"B", "C"},
    "s": {"A"},
}
GOOD: dict[str, list[str]] = {"A": ["x", "s", "y"], "B": ["x", "y", "z"], "C": ["y", "z"]}


def check_ids(
    sent: Mapping[str, Iterable[str]], logs: Mapping[str, Iterable[str]], **options: Any
) -> CheckReport:
    """:func:`check` on ``{id: destinations}`` and ``{topic: [id, ...]}``, converted
    explicitly."""
    return check(sent_from_destinations(sent), deliveries_from_ids(logs), **options)


def with_changes(**topics: list[str]) -> dict[str, list[str]]:
    out = {t: list(ids) for t, ids in GOOD.items()}
    out.update(topics)
    return out


# ---------------------------------------------------------------------------- each kind


def test_correct_logs_pass() -> None:
    report = check_ids(SENT, GOOD)
    assert report.ok, report
    assert report.first is None
    assert (report.sent, report.multicast, report.deliveries) == (4, 3, 8)
    assert report.delivered == {"A": 3, "B": 3, "C": 2}
    assert "OK" in report.summary()


def test_duplicate_delivery() -> None:
    report = check_ids(SENT, with_changes(B=["x", "y", "x", "z"]))
    assert report.kinds() == {K.DUPLICATE}
    first = report.first
    assert first is not None and first.kind is K.DUPLICATE
    assert first.message_ids == ("x",) and first.topics == ("B",)
    assert "B delivered 'x' twice (positions 0 and 2)" in first.text


def test_invented_message() -> None:
    report = check_ids(SENT, with_changes(C=["y", "ghost", "z"]))
    assert report.kinds() == {K.INVENTED}
    assert report.first is not None and report.first.message_ids == ("ghost",)


def test_delivery_at_a_non_destination() -> None:
    report = check_ids(SENT, with_changes(C=["x", "y", "z"]))
    assert K.NOT_A_DESTINATION in report.kinds()
    violation = report.of_kind(K.NOT_A_DESTINATION)[0]
    assert violation.topics == ("C",) and violation.message_ids == ("x",)


def test_loss() -> None:
    report = check_ids(SENT, with_changes(C=["y"]))
    assert report.kinds() == {K.LOST}
    assert report.first is not None
    assert report.first.message_ids == ("z",) and report.first.topics == ("C",)
    assert "never delivered at C" in report.first.text


def test_loss_at_a_topic_with_no_log_at_all() -> None:
    report = check_ids(SENT, {"A": GOOD["A"], "B": GOOD["B"]})
    assert report.kinds() == {K.LOST}
    assert report.missing_topics == ("C",)


def test_prefix_mode_does_not_require_delivery() -> None:
    prefix = {"A": ["x"], "B": ["x", "y"], "C": []}
    assert not check_ids(SENT, prefix).ok
    assert check_ids(SENT, prefix, complete=False).ok


def test_pairwise_order_inversion() -> None:
    report = check_ids(SENT, with_changes(B=["y", "x", "z"]))
    assert K.ORDER in report.kinds()
    first = report.first
    assert first is not None and first.kind is K.ORDER
    assert set(first.message_ids) == {"x", "y"} and first.topics == ("A", "B")
    assert "A delivered 'x' before 'y', B delivered 'y' before 'x'" in first.text


def test_three_topic_cycle_that_pairwise_checks_miss() -> None:
    # A delivers x<y, B y<z, C z<x: every pair shares one message, so every pairwise
    # comparison agrees, yet no single order extends all three.
    sent = {"x": {"A", "C"}, "y": {"A", "B"}, "z": {"B", "C"}}
    report = check_ids(sent, {"A": ["x", "y"], "B": ["y", "z"], "C": ["z", "x"]})
    assert report.kinds() == {K.CYCLE}
    assert not report.of_kind(K.ORDER, K.GAP)
    cycle = report.first
    assert cycle is not None and cycle.kind is K.CYCLE
    assert set(cycle.message_ids) == {"x", "y", "z"}
    assert set(cycle.topics) == {"A", "B", "C"}
    assert "A delivered 'x' before 'y'" in cycle.text
    assert "C delivered 'z' before 'x'" in cycle.text


def test_long_cycle_is_found_and_named() -> None:
    n = 50
    sent = {f"m{i}": {f"T{i}", f"T{(i + 1) % n}"} for i in range(n)}
    # Topic T(i+1) delivers m(i) then m(i+1): a cycle through all n messages.
    deliveries = {f"T{(i + 1) % n}": [f"m{i}", f"m{(i + 1) % n}"] for i in range(n)}
    report = check_ids(sent, deliveries)
    assert report.kinds() == {K.CYCLE}
    assert report.first is not None and len(report.first.message_ids) == n
    assert "more steps" in report.first.text


def test_gap_is_an_order_violation_even_in_a_prefix() -> None:
    # B delivered y; x, addressed to B too, came before y at A and is missing at B.
    report = check_ids(SENT, {"A": ["x", "s", "y"], "B": ["y"], "C": []}, complete=False)
    assert report.kinds() == {K.GAP}
    assert report.first is not None and report.first.message_ids == ("x", "y")
    assert "B delivered 'y' without delivering 'x' first" in report.first.text


def test_diverging_prefixes() -> None:
    report = check_ids({"x": {"A", "B"}, "y": {"A", "B"}}, {"A": ["x"], "B": ["y"]}, complete=False)
    assert report.kinds() == {K.GAP}


def test_value_and_destination_mismatch() -> None:
    sent = [SentMessage("m", frozenset({"A", "B"}), {"v": 1})]
    deliveries = {
        "A": [DeliveryRecord("m", ("A", "B"), 3, {"v": 1})],
        "B": [DeliveryRecord("m", ("A", "B", "C"), 3, {"v": 2})],
    }
    report = check(sent, deliveries)
    assert report.kinds() == {K.VALUE_MISMATCH, K.DESTINATIONS_MISMATCH}
    assert all(v.topics == ("B",) for v in report.violations)


def test_unknown_values_are_not_compared() -> None:
    sent = [SentMessage("m", frozenset({"A"}))]
    assert check(sent, {"A": [DeliveryRecord("m", value="anything")]}).ok
    assert check(sent_from_destinations({"m": {"A"}}), {"A": [DeliveryRecord("m", value=None)]}).ok
    none = [SentMessage("m", frozenset({"A"}), None)]
    assert check(none, deliveries_from_json({"A": [{"messageID": "m"}]})).ok


def test_null_is_a_value() -> None:
    sent = [SentMessage("m", frozenset({"A"}), None)]
    report = check(sent, {"A": [DeliveryRecord("m", value="x")]})
    assert report.kinds() == {K.VALUE_MISMATCH}


def test_id_reuse_in_what_was_sent() -> None:
    sent = [
        SentMessage("1", frozenset({"A"}), "from c0"),
        SentMessage("1", frozenset({"A"}), "from c1"),
        SentMessage("2", frozenset({"A"}), "same"),
        SentMessage("2", frozenset({"A"}), "same"),  # a retry, not a reuse
    ]
    report = check(sent, deliveries_from_ids({"A": ["1", "2"]}))
    assert report.kinds() == {K.ID_REUSE}
    assert report.first is not None and report.first.message_ids == ("1",)


def test_timestamp_diagnostics() -> None:
    sent = sent_from_destinations({"x": {"A", "B"}, "y": {"A", "B"}})

    def rec(mid: str, ts: int) -> dict[str, Any]:
        return {"messageID": mid, "timeStamp": ts}

    report = check(
        sent,
        deliveries_from_json({"A": [rec("x", 1), rec("y", 5)], "B": [rec("x", 2), rec("y", 5)]}),
    )
    assert report.kinds() == {K.TIMESTAMP_MISMATCH}
    report = check(
        sent,
        deliveries_from_json({"A": [rec("x", 6), rec("y", 5)], "B": [rec("x", 6), rec("y", 5)]}),
    )
    assert report.kinds() == {K.TIMESTAMP_ORDER}
    report = check(
        sent,
        deliveries_from_json({"A": [rec("x", 6), rec("y", 5)], "B": [rec("x", 6), rec("y", 5)]}),
        check_timestamps=False,
    )
    assert report.ok


def test_first_violation_is_named_and_violations_are_capped() -> None:
    deliveries = with_changes(B=["y", "x", "z", "z"], C=[])
    report = check_ids(SENT, deliveries, max_violations=2)
    assert len(report.violations) == 2
    assert report.total_violations > 2
    first = report.first
    assert first is not None and first.kind is K.DUPLICATE  # integrity comes first
    summary = report.summary()
    assert f"FIRST VIOLATION (integrity): {first}" in summary
    assert "more" in summary
    data = report.to_dict()
    assert data["ok"] is False and data["first"]["kind"] == "duplicate"
    orjson.dumps(data)


def test_accepts_wire_records_and_client_deliveries() -> None:
    def wire(mid: str, ts: int) -> Message:
        return Message(mid, MessageType.DELIVERY, ("A", "B"), b'"v"', "node", "A", ts)

    sent = sent_from_pairs({"a": (("A", "B"), "v"), "b": (("A", "B"), "v")})
    logs = {"A": [wire("a", 1), wire("b", 2)], "B": [wire("a", 1), wire("b", 2)]}
    assert check(sent, deliveries_from_wire(logs)).ok

    class ClientDelivery:  # the shape of atomickafka.client.Delivery
        def __init__(self, mid: str, topic: str) -> None:
            self.messageID = mid
            self.value = "v"
            self.timeStamp = 1
            self.destinations = ("A",)
            self.topic = topic
            self.layer: int | None = None

    one = sent_from_destinations({"m": {"A"}})
    assert check(one, deliveries_from_client({"A": [ClientDelivery("m", "A")]})).ok


def test_bad_records_raise() -> None:
    sent = sent_from_destinations({"m": {"A"}})
    with pytest.raises(CheckInputError):
        check(sent, deliveries_from_json({"A": [42]}))
    with pytest.raises(CheckInputError):
        check(sent, deliveries_from_json({"A": [{"messageID": 1}]}))
    with pytest.raises(CheckInputError):
        check(sent, deliveries_from_json({"A": [{"messageID": "m", "timeStamp": "1"}]}))


def test_check_takes_only_the_checkers_records() -> None:
    """``check()`` refuses, with :class:`TypeError`, anything but its own records: a
    tuple (or a bare id) where a DeliveryRecord belongs, a tuple where a SentMessage
    belongs; a mapping of sent messages must file each under its own id."""
    sent = [SentMessage("m", frozenset({"A"}))]
    not_records: list[Any] = [("m", ("A",), 1), "m", {"messageID": "m"}]
    for entry in not_records:
        with pytest.raises(TypeError, match=r"delivery 0 at 'A' is a \w+, not a DeliveryRecord"):
            check(sent, {"A": [entry]})
    tuples: list[Any] = [("m", {"A"})]
    with pytest.raises(TypeError, match="not a SentMessage"):
        check(tuples, {"A": [DeliveryRecord("m")]})
    assert check({"m": sent[0]}, {"A": [DeliveryRecord("m")]}).ok
    with pytest.raises(CheckInputError, match="'m' is filed under 'x'"):
        check({"x": sent[0]}, {"A": [DeliveryRecord("m")]})


# ---------------------------------------------------------------------------- adapters


def test_adapters_build_records_from_plain_data() -> None:
    assert sent_from_destinations({"m": ["A", "B"], "s": "C"}) == [
        SentMessage("m", frozenset({"A", "B"})),
        SentMessage("s", frozenset({"C"})),
    ]
    assert sent_from_pairs({"m": (("A",), None)}) == [SentMessage("m", frozenset({"A"}), None)]
    assert deliveries_from_ids({"A": ["x", "y"]}) == {
        "A": [DeliveryRecord("x", deliveredAt="A"), DeliveryRecord("y", deliveredAt="A")]
    }
    objects = {
        "A": [
            {"messageID": "x", "topic": ["A", "B"], "timeStamp": 3, "value": None},
            {"messageID": "y", "destinations": "A", "layer": 2, "deliveredAt": "A"},
            {"messageID": "z", "partitionID": 1, "messageType": "DeliveryMessage"},
        ]
    }
    assert deliveries_from_json(objects) == {
        "A": [
            DeliveryRecord("x", ("A", "B"), 3, None, "A"),
            DeliveryRecord("y", ("A",), deliveredAt="A", layer=2),
            DeliveryRecord("z", deliveredAt="A", layer=1),
        ]
    }


def test_adapters_read_wire_records_and_client_deliveries() -> None:
    wire = [
        Message("x", MessageType.DELIVERY, ("A", "B"), b'{"v": 1}', "n", "A", 4, 2),
        Message("y", MessageType.DELIVERY, ("A",), None, "n", "A", 5),
    ]
    assert deliveries_from_wire({"A": wire}) == {
        "A": [
            DeliveryRecord("x", ("A", "B"), 4, {"v": 1}, "A", layer=2),
            DeliveryRecord("y", ("A",), 5, None, "A"),  # no value carried: compared as null
        ]
    }
    delivery = Delivery("x", [1], 7, ("A", "B"), "A", partition=0, offset=3, layer=None)
    assert deliveries_from_client({"A": [delivery]}) == {
        "A": [DeliveryRecord("x", ("A", "B"), 7, [1], "A", layer=0)]
    }
    layered = dataclasses.replace(delivery, layer=1)
    assert deliveries_from_client({"A": [layered]})["A"][0].layer == 1


@pytest.mark.parametrize(
    ("convert", "message"),
    [
        (lambda: sent_from_destinations({"m": []}), "sent message 'm': 'topic' must be"),
        (lambda: sent_from_destinations({"m": ["no spaces!"]}), "non-empty list of topic"),
        (lambda: sent_from_destinations({"m": 5}), "sent message 'm': 'topic' must be"),  # type: ignore[dict-item]
        (lambda: sent_from_destinations({"": {"A"}}), "sent message '': the id must be"),
        (lambda: sent_from_pairs({"m": ((), 1)}), "sent message 'm': 'topic' must be"),
        (lambda: deliveries_from_ids({"A": ["x", ""]}), "delivery 1 at 'A': a message id"),
        (lambda: deliveries_from_ids({"A": [7]}), "delivery 0 at 'A': a message id"),  # type: ignore[list-item]
        (lambda: deliveries_from_json({"A": [42]}), "delivery 0 at 'A': not a JSON object"),
        (
            lambda: deliveries_from_json({"A": [{"messageID": "m", "deliveredAt": "B"}]}),
            "delivery 0 at 'A': 'deliveredAt' is 'B'",
        ),
        (
            lambda: deliveries_from_json({"A": [{"messageID": "m", "messageType": "AckMessage"}]}),
            "not a delivery record (messageType 'AckMessage')",
        ),
        (
            lambda: deliveries_from_json({"A": [{"messageID": "m"}, {"messageID": ""}]}),
            "delivery 1 at 'A': 'messageID' must be a non-empty string",
        ),
        (
            lambda: deliveries_from_json({"A": [{"messageID": "m", "topic": [1]}]}),
            "'topic' must be a list of topic names",
        ),
        (
            lambda: deliveries_from_json({"A": [{"messageID": "m", "timeStamp": -1}]}),
            "'timeStamp' must be a non-negative integer",
        ),
        (
            lambda: deliveries_from_wire(
                {"A": [Message("m", MessageType.DELIVERY, ("A",), b"{not json")]}
            ),
            "delivery 0 at 'A': the value is not JSON text",
        ),
    ],
)
def test_adapters_refuse_bad_input(convert: Callable[[], object], message: str) -> None:
    with pytest.raises(CheckInputError, match=re.escape(message)):
        convert()


def test_file_adapters_name_the_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(CheckInputError, match=r"cannot read .*nope\.jsonl"):
        load_sent(tmp_path / "nope.jsonl")
    sent = tmp_path / "SENT.jsonl"
    sent.write_bytes(b'{"messageID": "m", "topic": ["A"]}\n\n{"messageID": "n", "topic": "A"}\n')
    assert load_sent(sent) == [
        SentMessage("m", frozenset({"A"})),
        SentMessage("n", frozenset({"A"})),
    ]
    sent.write_bytes(b'{"messageID": "m", "topic": ["A"]}\n{"messageID": "n"}\n')
    with pytest.raises(CheckInputError, match=re.escape(f"{sent}:2: 'topic' must be")):
        load_sent(sent)
    deliveries = write_jsonl(tmp_path / "A.jsonl", [{"messageID": "m"}, {"messageID": 3}])
    with pytest.raises(CheckInputError, match=re.escape(f"{deliveries}:2: 'messageID' must be")):
        load_deliveries([deliveries])


def test_the_checker_imports_neither_engine_nor_codec() -> None:
    """Independence: of the project, the checker uses only ``is_valid_topic_name`` (and
    the project's error base class, which holds no logic)."""
    package = Path(checker_package.__file__).parent
    used: set[str] = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("atomickafka"):
                if not (node.module or "").startswith("atomickafka.verify.checker"):
                    used.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("atomickafka") for a in node.names), path
    assert used == {
        "atomickafka.core.wire.is_valid_topic_name",
        "atomickafka.errors.AtomicKafkaError",
    }


# ---------------------------------------------------------------------------- scale


def big_run(n: int, topics: list[str]) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    rng = random.Random(n)
    sent: dict[str, set[str]] = {}
    for i in range(n):
        if i % 2:
            sent[f"m{i}"] = set(topics)
        else:
            sent[f"m{i}"] = set(rng.sample(topics, rng.randint(1, len(topics))))
    deliveries = {t: [m for m in sent if t in sent[m]] for t in topics}
    return sent, deliveries


def test_scale_100k_messages_5_topics() -> None:
    topics = [f"T{i}" for i in range(5)]
    sent, deliveries = big_run(100_000, topics)
    report = check_ids(sent, deliveries)  # (how long it takes: eval/ benchmarks, not a test)
    assert report.ok, report
    assert report.deliveries > 300_000
    # A single late swap deep in one log is still found, and named.
    b = deliveries["T3"]
    b[-10], b[-20] = b[-20], b[-10]
    report = check_ids(sent, deliveries)
    assert K.ORDER in report.kinds() and K.CYCLE in report.kinds()
    assert report.first is not None and set(report.first.message_ids) == {b[-10], b[-20]}


# ---------------------------------------------------------------------------- files and CLI


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def sent_file(tmp_path: Path) -> Path:
    rows: list[dict[str, Any]] = [
        {"messageID": mid, "topic": sorted(dests), "value": mid.upper()}
        for mid, dests in SENT.items()
    ]
    rows.append({"messageID": "x", "topic": ["B", "A"]})  # a retry, value unknown
    return write_jsonl(tmp_path / "SENT.jsonl", rows)


def delivery_rows(topic: str, ids: list[str], *, named: bool) -> list[dict[str, Any]]:
    rows = []
    for i, mid in enumerate(ids):
        row: dict[str, Any] = {
            "messageID": mid,
            "value": mid.upper(),
            "timeStamp": 10 * (i + 1) if topic == "A" else None,
            "topic": sorted(SENT[mid]),
        }
        if row["timeStamp"] is None:
            del row["timeStamp"]
        if named:
            row["deliveredAt"] = topic
            row["partition"] = 0
            row["offset"] = i
        rows.append(row)
    return rows


def test_loaders_accept_deliveredat_and_file_names(tmp_path: Path) -> None:
    sent = load_sent(sent_file(tmp_path))
    assert len(sent) == 5 and sent[-1].value is UNSET
    mixed = write_jsonl(
        tmp_path / "tail-output.jsonl",
        delivery_rows("A", GOOD["A"], named=True) + delivery_rows("B", GOOD["B"], named=True),
    )
    by_name = write_jsonl(tmp_path / "C.jsonl", delivery_rows("C", GOOD["C"], named=False))
    loaded = load_deliveries([mixed, by_name])
    assert {t: [d.messageID for d in ds] for t, ds in loaded.items()} == GOOD
    assert loaded["A"][0].timeStamp == 10 and loaded["B"][0].timeStamp is None
    report = check_files(tmp_path / "SENT.jsonl", [mixed, by_name])
    assert report.ok, report


def run_cli(*args: str | Path) -> int:
    """``atomickafka check ...`` through the sub-command's own parser (so that other
    sub-commands, built elsewhere, cannot break these tests)."""
    parser = argparse.ArgumentParser(prog="atomickafka")
    check_cmd.register(parser.add_subparsers(dest="command", required=True))
    namespace = parser.parse_args(["check", *map(str, args)])
    status: int = namespace.func(namespace)
    return status


def test_check_is_a_sub_command_of_atomickafka(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", "--help"])
    assert info.value.code == 0
    assert "Exit status: 0 ok, 1 violation, 2 bad input." in capsys.readouterr().out


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sent = sent_file(tmp_path)
    files = [
        write_jsonl(tmp_path / f"{t}.jsonl", delivery_rows(t, ids, named=False))
        for t, ids in GOOD.items()
    ]
    assert run_cli(sent, *files) == 0
    assert "OK" in capsys.readouterr().out

    write_jsonl(tmp_path / "B.jsonl", delivery_rows("B", ["y", "x", "z"], named=False))
    assert run_cli(sent, *files) == 1
    out = capsys.readouterr().out
    assert "FIRST VIOLATION (total order): [order]" in out

    write_jsonl(tmp_path / "C.jsonl", delivery_rows("C", ["y"], named=False))
    write_jsonl(tmp_path / "B.jsonl", delivery_rows("B", GOOD["B"], named=False))
    assert run_cli(sent, *files) == 1
    assert "[lost]" in capsys.readouterr().out
    assert run_cli("--prefix", sent, *files) == 0
    capsys.readouterr()

    assert run_cli("--json", sent, *files) == 1
    data = orjson.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["first"]["kind"] == "lost"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("A.jsonl", b"{not json\n"),
        ("A.jsonl", b"[1]\n"),
        ("A.jsonl", b'{"value": 1}\n'),
        ("A.jsonl", b'{"messageID": "x", "timeStamp": -1}\n'),
        ("A.jsonl", b'{"messageID": "x", "messageType": "AckMessage"}\n'),
        ("not a topic!.jsonl", b'{"messageID": "x"}\n'),
        ("A.jsonl", b'{"messageID": "x", "deliveredAt": "bad topic"}\n'),
    ],
)
def test_cli_bad_deliveries_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes
) -> None:
    bad = tmp_path / name
    bad.write_bytes(content)
    assert run_cli(sent_file(tmp_path), bad) == 2
    err = capsys.readouterr().err
    assert "bad input" in err and str(bad) in err


@pytest.mark.parametrize(
    "line",
    [b"{", b'{"topic": ["A"]}', b'{"messageID": "m"}', b'{"messageID": "m", "topic": []}'],
)
def test_cli_bad_sent_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: bytes
) -> None:
    sent = tmp_path / "SENT.jsonl"
    sent.write_bytes(line + b"\n")
    assert run_cli(sent, write_jsonl(tmp_path / "A.jsonl", [])) == 2
    assert "SENT.jsonl:1" in capsys.readouterr().err


def test_cli_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(tmp_path / "nope.jsonl", tmp_path / "A.jsonl") == 2
    assert "cannot read" in capsys.readouterr().err
