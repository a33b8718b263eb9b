"""``docs/json.md`` in step with the code: every field table lists exactly the fields the
output it documents has (from the code's own ``to_dict()``s and writers), and every
name AtomicKafka gives follows the one convention (:mod:`atomickafka.jsonnames`)."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from atomickafka.audit.records import Kind, Violation
from atomickafka.cli.send_cmd import sent_record
from atomickafka.cli.status_cmd import status_entry
from atomickafka.cli.topics_cmd import describe_row
from atomickafka.client import Delivery
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.reasons import Reason
from atomickafka.core.wire import client_message, encode_delivery
from atomickafka.doctor import render_json
from atomickafka.doctor.deployment import KafkaTopic, TopicKind
from atomickafka.doctor.facts import TopicFacts
from atomickafka.doctor.findings import Finding, Severity
from atomickafka.evaluation.bench.command import BenchResult
from atomickafka.evaluation.cost.accounting import RunCost
from atomickafka.evaluation.cost.processes import ProcessCpu, ProcessRole
from atomickafka.evaluation.cost.traffic import TypeTraffic
from atomickafka.evaluation.load.measuring import LatencyStats
from atomickafka.evaluation.suite.command import suite_summary
from atomickafka.evaluation.suite.report import ReportInput
from atomickafka.evaluation.suite.results import LatencySummary, RunInfo, RunMetrics, RunResult
from atomickafka.evaluation.suite.spark import load_job
from atomickafka.jsonnames import JSON_NAME, camel_keys, json_name
from atomickafka.kafka.status import LayerState, Role, Status, WaitingHead
from atomickafka.kafka.topics import Layout
from atomickafka.verify.checker import CheckReport
from atomickafka.verify.checker.report import Violation as CheckViolation
from atomickafka.verify.checker.report import ViolationKind

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "json.md"
METRICS_JOB = ROOT / "atomickafka" / "evaluation" / "suite" / "metrics_job.py"

#: The wire's names (fixed, DESIGN §3) and the one kept for readers of status format 2.
WIRE_NAMES = {"messageID", "senderID", "messageType", "timeStamp", "sentFromTopic"}
KEPT = {"node_id"}


def field_tables(text: str) -> dict[str, list[set[str]]]:
    """Each section's (``##``) field tables, in order, as the names in their first
    column (a cell may name several: ``p50Ms``, ``p99Ms``)."""
    tables: dict[str, list[set[str]]] = {}
    section = ""
    current: set[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            section, current = line[3:].strip(), None
            continue
        if line.startswith("| Field |"):
            current = set()
            tables.setdefault(section, []).append(current)
            continue
        if current is not None and line.startswith("|"):
            cell = line.split("|")[1]
            if not set(cell.strip()) <= {"-"}:
                current.update(re.findall(r"`([^`]+)`", cell))
        else:
            current = None
    return tables


# ----------------------------------------------------------- the outputs, from the code


def _status() -> Status:
    head = WaitingHead("m-1", 12, decided=False, waiting_for=("B",))
    return Status(
        "A/merger", "A", Role.MERGER, "merger-A", Algorithm.DIRECT, Layout.SPLIT, 100.0,
        partitions=2, waiting=(head,), layers=(LayerState(0, 15, False), LayerState(1, 9, True)),
    )  # fmt: skip


def _deliveries() -> list[dict[str, Any]]:
    common = {"timeStamp": 3, "destinations": ("A", "B"), "topic": "A", "partition": 0}
    as_json = Delivery("m-1", {"v": 1}, offset=1, **common)  # type: ignore[arg-type]
    as_bytes = Delivery(
        "m-2", b"\x00", offset=2, layer=1, key=b"k", headers=(("h", b"v"),), raw=b"\x00",
        **common,  # type: ignore[arg-type]
    )  # fmt: skip
    return [as_json.to_json_dict(), as_bytes.to_json_dict()]


def _envelopes() -> list[dict[str, Any]]:
    out = []
    for value, extra in (({"v": 1}, {}), (b"\x00", {"key": b"k", "headers": (("h", b"v"),)})):
        message = client_message("m", ["A", "B"], value, "c", sent_at=5, **extra)  # type: ignore[arg-type]
        (done,) = Engine("A", algorithm=Algorithm.DIRECT).handle_batch([message])
        assert done.message.timeStamp is not None
        layered = done.message._replace(partitionID=1)
        out.append(orjson.loads(encode_delivery(layered)))
    return out


def _cost() -> RunCost:
    cpu = ProcessCpu("node A", ProcessRole.NODE, 7, 1.5)
    return RunCost("atomickafka", 10, 2.0, (cpu,), {"ClientMessage": TypeTraffic(10, 10, 90)})


def _run_info() -> RunInfo:
    return RunInfo("r", "90-10", 10, "direct/split", "atomickafka", "direct", "split", ["A"],
                   2, 10, 0.0, cost=_cost().to_dict())  # fmt: skip


def _report() -> CheckReport:
    violation = CheckViolation(ViolationKind.LOST, "lost", ("m-1",), ("B",))
    return CheckReport(True, ("A", "B"), 1, 1, {"A": 1}, [violation], {ViolationKind.LOST: 1})


def _metrics_keys() -> set[str]:
    """The keys of the object the metrics job writes per run (built inside ``compute``,
    which needs Spark: read from its source)."""
    for node in ast.walk(ast.parse(METRICS_JOB.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if "runTimeSeconds" in keys:
                return {str(k) for k in keys}
    raise AssertionError("the metrics job writes no object with runTimeSeconds")


def _metrics_node_keys() -> set[str]:
    job = load_job()
    windows = {kind: {"A": [1.0]} for kind in ("incoming", "outgoing", "deliveries")}
    totals = {(kind, "A"): [1, 1] for kind in windows}
    (row,) = job._node_rows(totals, 1.0, windows)
    return set(row)


#: (section heading, table index) -> the fields the output has.
OUTPUTS: dict[tuple[str, int], Callable[[], set[str]]] = {
    ("`send --json`", 0): lambda: set(sent_record("m", ["A"], 1)),
    ("`tail --json`", 0): lambda: {k for d in _deliveries() for k in d},
    ("`check --json`", 0): lambda: set(_report().to_dict()),
    ("`check --json`", 1): lambda: set(_report().violations[0].to_dict()),
    ("`status --json` and the status topic", 0): lambda: (
        set(_status().to_record()) | set(status_entry(_status(), 101.0, "live"))
    ),
    ("`status --json` and the status topic", 1): lambda: set(_status().waiting[0].to_dict()),
    ("`doctor --json` and `topics check --json`", 0): lambda: set(
        render_json([], bootstrap="b", topics=["A"], layout="split", partitions=1)
    ),
    ("`doctor --json` and `topics check --json`", 1): lambda: set(
        Finding("c", Severity.OK, "s", "m").to_dict()
    ),
    ("`topics describe --json`", 0): lambda: set(
        describe_row("A", KafkaTopic("A", TopicKind.DELIVERY, "A"), TopicFacts("A", True))
    ),
    ("`bench --json PATH`", 0): lambda: set(
        BenchResult("kafka", 1, 1.0, 1.0, 1.0, 1.0, 1.0, None, True, cost=_cost()).to_dict()
    ),
    ("`bench --json PATH`", 1): lambda: set(_cost().to_dict()),
    ("`bench --json PATH`", 2): lambda: set(_cost().processes[0].to_dict()),
    ("`bench --json PATH`", 3): lambda: set(TypeTraffic(1, 1, 1).to_dict()),
    ("`bench --json PATH`", 4): lambda: set(LatencyStats(1, 1.0, 1.0, 1.0, 1.0).to_dict()),
    ("Audit violations", 0): lambda: set(
        Violation(Kind.ORDER, "A", "m", "t", 0, 4, 1000, (3, 0, "m"), {}).to_json()
    ),
    ("Evaluation files", 0): lambda: set(_run_info().to_dict()),
    ("Evaluation files", 1): _metrics_keys,
    ("Evaluation files", 2): _metrics_node_keys,
    ("Evaluation files", 3): lambda: {f.name for f in dataclasses.fields(LatencySummary)},
    ("Evaluation files", 4): lambda: set(
        suite_summary(ReportInput([RunResult(_run_info(), None)], "direct/split", [], [], 1.0))
    ),
    ("Records in Kafka", 0): lambda: {k for e in _envelopes() for k in e},
}


def test_every_field_table_is_held_to_its_output() -> None:
    tables = field_tables(REFERENCE.read_text(encoding="utf-8"))
    documented = {(section, i) for section, found in tables.items() for i in range(len(found))}
    assert documented == set(OUTPUTS), "a field table without a test here, or the reverse"


@pytest.mark.parametrize(("section", "index"), sorted(OUTPUTS), ids=str)
def test_a_field_table_lists_exactly_the_outputs_fields(section: str, index: int) -> None:
    documented = field_tables(REFERENCE.read_text(encoding="utf-8"))[section][index]
    real = OUTPUTS[(section, index)]()
    assert documented == real, (
        f"docs/json.md, {section}, table {index + 1}: "
        f"not documented {sorted(real - documented)}, not written {sorted(documented - real)}"
    )


@pytest.mark.parametrize(("section", "index"), sorted(OUTPUTS), ids=str)
def test_every_name_follows_the_convention(section: str, index: int) -> None:
    names = OUTPUTS[(section, index)]() - KEPT
    assert all(JSON_NAME.fullmatch(n) for n in names), sorted(names)
    assert {n for n in names if json_name(n) != n} == set()


def test_json_names_of_attributes() -> None:
    assert json_name("node_id") == "nodeID"
    assert json_name("oldest_pending_age_s") == "oldestPendingAgeSeconds"
    assert json_name("records_in_per_s") == "recordsInPerSecond"
    assert json_name("multicast_p99_ms") == "multicastP99Ms"
    assert json_name("messageID") == "messageID"  # already a JSON name
    assert camel_keys({"wall_s": 1, "cpuSeconds": 2, "kind": 3}) == {
        "wallSeconds": 1, "cpuSeconds": 2, "kind": 3,
    }  # fmt: skip


def test_stored_files_of_the_snake_case_versions_still_read() -> None:
    info = _run_info()
    snake = dataclasses.asdict(info)  # the run.json of earlier versions
    assert RunInfo.from_dict(snake) == info == RunInfo.from_dict(info.to_dict())
    cost = _cost()
    old_cost = {**cost.to_dict(), "window_s": 2.0}
    del old_cost["windowSeconds"]
    old_cost["processes"] = [{"name": "node A", "role": "node", "pid": 7, "cpu_s": 1.5}]
    old_cost["traffic"] = {"ClientMessage": {"records": 10, "messages": 10, "value_bytes": 90}}
    assert RunCost.from_dict(old_cost) == cost
    latency = {"n": 1, "p50": 1, "p90": 1, "p99": 1, "max": 1, "mean": 1}
    node = {
        "node": "A", "incoming": 1, "incoming_records": 1, "outgoing": 1,
        "outgoing_records": 1, "deliveries": 1, "incoming_per_s": 1.0,
        "outgoing_per_s": 1.0, "deliveries_per_s": 1.0, "window_max": {"incoming": 1.0},
    }  # fmt: skip
    old_metrics = {
        "run": "r", "start_ms": 1, "end_ms": 2, "run_time_s": 0.001, "messages": 1,
        "multicast": 0, "delivered_messages": 1, "deliveries": 1, "missing_deliveries": 0,
        "messages_per_s": 1.0, "deliveries_per_s": 1.0, "records": 2, "nodes": [node],
        "by_type": {"ClientMessage": 1}, "latency_ms": {"all": latency, "multicast": None},
        "series": {"bucket_s": 0.5, "incoming": {"my_topic": [1.0]}},
        "windows": {"window_s": 5.0, "incoming": {"my_topic": [1.0]}},
    }  # fmt: skip
    new_metrics = camel_keys(old_metrics) | {
        "nodes": [camel_keys(node)],
        "series": {"bucketSeconds": 0.5, "incoming": {"my_topic": [1.0]}},
        "windows": {"windowSeconds": 5.0, "incoming": {"my_topic": [1.0]}},
    }
    before, now = RunMetrics.from_dict(old_metrics), RunMetrics.from_dict(new_metrics)
    assert before == now and now.series == {"incoming": {"my_topic": [1.0]}}  # data keys kept
    assert now.nodes[0].incoming_per_s == 1.0 and now.latency["all"].n == 1


def test_the_audits_spark_job_writes_what_the_live_audit_writes() -> None:
    from atomickafka.audit import spark_job  # noqa: PLC0415 (pyspark and pandas)

    record = {"topic": "A", "partition": 0, "offset": 4, "time_ms": 1000, "message_id": "m",
              "ts": 3, "layer": 0}  # fmt: skip
    reference = {"previousKey": [5, 0, "m2"]}
    row = spark_job._violation(record, "order", "t", reference)
    live = Violation(Kind.ORDER, "A", "m", "t", 0, 4, 1000, (3, 0, "m"), reference)
    assert orjson.loads(row["json"]) == live.to_json()


def test_the_dead_letter_headers_name_every_reason_code() -> None:
    """The dead-letter table lists every code a letter can carry (``core/reasons.py``),
    and only those: a program matches on them."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("| `atomickafka-error-code` |"))
    assert set(re.findall(r"`([a-z-]+)`", row.split("|")[2])) == {r.value for r in Reason}
