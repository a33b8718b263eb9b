"""The cost accounting on a synthetic process tree: which process is which, the CPU
each spent over a window, CPU per delivered message by role, records and bytes by type,
and the projection with one core per process. No real process is measured."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.reader import PlainRecord
from atomickafka.core.wire import client_message, encode_bundle, encode_client
from atomickafka.evaluation.cost.accounting import (
    BROKER_FORMULA,
    PROJECTION_FORMULA,
    RunCost,
    cost_table,
    projection_table,
    traffic_table,
)
from atomickafka.evaluation.cost.processes import (
    CpuMeter,
    CpuWindow,
    ProcessCpu,
    ProcessRole,
    bootstrap_port,
    cluster_processes,
    find_broker,
)
from atomickafka.evaluation.cost.topic_scan import STATUS_KIND, RecordedTopic, Role
from atomickafka.evaluation.cost.traffic import TrafficTally, TypeTraffic
from atomickafka.kafka.status import Role as StatusRole
from atomickafka.kafka.status import Status
from atomickafka.kafka.topics import Layout


@dataclass
class FakeProcess:
    """A process as psutil shows it: CPU readings in turn (user 3/4, system 1/4), its
    command line, children and sockets; ``gone`` once it has exited."""

    pid: int
    cpu: list[float] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    kids: list[FakeProcess] = field(default_factory=list)
    listening: tuple[int, ...] = ()
    gone: bool = False
    denied: bool = False

    def cpu_times(self) -> Any:
        if self.gone:
            raise psutil.NoSuchProcess(self.pid)
        seconds = self.cpu.pop(0)
        return SimpleNamespace(user=seconds * 0.75, system=seconds * 0.25)

    def children(self, recursive: bool = False) -> Sequence[FakeProcess]:
        if not recursive:
            return list(self.kids)
        return [d for kid in self.kids for d in (kid, *kid.children(recursive=True))]

    def cmdline(self) -> list[str]:
        if self.denied:
            raise psutil.AccessDenied(self.pid)
        return self.command

    def net_connections(self, kind: str = "inet") -> Sequence[Any]:
        assert kind in ("inet", "tcp")
        return [
            SimpleNamespace(laddr=SimpleNamespace(ip="127.0.0.1", port=port), status="LISTEN")
            for port in self.listening
        ] + [SimpleNamespace(laddr=SimpleNamespace(ip="127.0.0.1", port=5), status="ESTABLISHED")]


def _status(key: str, pid: int, role: StatusRole = StatusRole.NODE) -> Status:
    topic = key.split("/", maxsplit=1)[0]
    return Status(key, topic, role, f"node-{key}", Algorithm.DIRECT, Layout.SPLIT, 0.0, pid=pid)


JAVA = ["java", "-Xmx512m", "-cp", "lib/*"]


def test_the_broker_is_the_kafka_jvm_listening_on_the_bootstrap_port() -> None:
    other_broker = FakeProcess(
        10, command=[*JAVA, "kafka.Kafka", "a.properties"], listening=(9092,)
    )
    ours = FakeProcess(11, command=[*JAVA, "kafka.Kafka", "b.properties"], listening=(19092,))
    not_kafka = FakeProcess(12, command=[*JAVA, "org.Other"], listening=(19092,))
    hidden = FakeProcess(13, denied=True)
    found = find_broker(19092, [hidden, other_broker, not_kafka, ours])
    assert found is ours
    assert find_broker(29092, [other_broker, ours]) is None
    assert bootstrap_port("127.0.0.1:19092,127.0.0.1:19094") == 19092
    assert bootstrap_port("localhost:9092") == 9092
    assert bootstrap_port("kafka.example.com:9092") is None  # not on this machine


def test_the_supervisors_children_are_named_by_the_pids_in_their_statuses() -> None:
    kids = [
        FakeProcess(21),
        FakeProcess(22),
        FakeProcess(23),
        FakeProcess(24),
        FakeProcess(25, command=["python", "-c", "from multiprocessing.resource_tracker ..."]),
    ]
    supervisor = FakeProcess(20, kids=kids)
    statuses = [
        _status("T1", 21),
        _status("T2/0", 22),
        _status("T2/1", 23),
        _status("T2/merger", 24, StatusRole.MERGER),
        _status("T9", 99),  # another cluster's node: not under this supervisor
    ]
    named = [(p.pid, role, name) for p, role, name in cluster_processes(supervisor, statuses)]
    assert named == [
        (20, ProcessRole.SUPERVISOR, "supervisor"),
        (21, ProcessRole.NODE, "node T1"),
        (22, ProcessRole.NODE, "node T2/0"),
        (23, ProcessRole.NODE, "node T2/1"),
        (24, ProcessRole.MERGER, "merger T2"),
        (25, ProcessRole.OTHER, "resource tracker 25"),
    ]


def _measured_tree() -> CpuWindow:
    """A window over a synthetic run: CPU seconds at its start and its end."""
    tree = {
        1: FakeProcess(1, cpu=[100.0, 104.0]),  # broker: 4 s
        2: FakeProcess(2, cpu=[1.0, 1.1]),  # supervisor: 0.1 s
        3: FakeProcess(3, cpu=[5.0, 7.0]),  # node A: 2 s
        4: FakeProcess(4, cpu=[5.0, 8.0]),  # node B: 3 s, the busiest
        5: FakeProcess(5, cpu=[0.5, 1.5]),  # client: 1 s
        6: FakeProcess(6, cpu=[0.2, 0.7]),  # measuring consumer: 0.5 s
        7: FakeProcess(7, cpu=[3.0]),  # a client that exits before the window ends
    }
    meter = CpuMeter(opener=tree.__getitem__)
    meter.track(1, ProcessRole.BROKER, "broker")
    meter.track_all(
        [
            (tree[2], ProcessRole.SUPERVISOR, "supervisor"),
            (tree[3], ProcessRole.NODE, "node A"),
            (tree[4], ProcessRole.NODE, "node B"),
        ]
    )
    meter.track(5, ProcessRole.CLIENT, "client-1")
    meter.track(6, ProcessRole.MEASURER, "measuring consumer")
    meter.track(7, ProcessRole.CLIENT, "client-2")
    meter.start()
    tree[7].gone = True
    return meter.stop()


def test_cpu_per_message_by_role_and_the_projection() -> None:
    window = _measured_tree()
    processes = window.processes
    assert window.seconds >= 0 and window.end_ms >= window.start_ms
    spent = {p.name: p.cpu_s for p in processes}
    assert spent == pytest.approx(
        {
            "broker": 4.0,
            "supervisor": 0.1,
            "node A": 2.0,
            "node B": 3.0,
            "client-1": 1.0,
            "measuring consumer": 0.5,
            "client-2": None,
        }
    )
    traffic = {
        "ClientMessage": TypeTraffic(10_000, 10_000, 2_000_000),
        "DeliveryMessage": TypeTraffic(10_000, 10_000, 3_000_000),
    }
    cost = RunCost("atomickafka", 10_000, 2.0, tuple(processes), traffic)
    assert cost.role_us(ProcessRole.NODE) == pytest.approx(500.0)  # 5 s over 10,000
    assert cost.role_us(ProcessRole.BROKER) == pytest.approx(400.0)
    assert cost.role_us(ProcessRole.CLIENT) == pytest.approx(100.0)  # client-2 unknown
    assert cost.role_us(ProcessRole.SEQUENCER) is None
    assert cost.system_us == pytest.approx(510.0)  # nodes and supervisor
    assert cost.all_but_broker_us == pytest.approx(660.0)
    assert [p.name for p in cost.unmeasured] == ["client-2"]
    busiest = cost.busiest
    assert busiest is not None and busiest.name == "node B"
    assert cost.busiest_us == pytest.approx(300.0)
    assert cost.projected_msgs_per_s == pytest.approx(1e6 / 300.0)
    assert cost.records_per_message == pytest.approx(2.0)
    assert cost.bytes_per_message == pytest.approx(500.0)
    assert cost.broker_us_per_record == pytest.approx(200.0)  # 4 s over 20,000 records
    assert cost.broker_us_per_message == pytest.approx(400.0)
    assert cost.broker_msgs_per_s_per_core == pytest.approx(2500.0)
    assert RunCost.from_dict(cost.to_dict()) == cost


def test_the_tables_put_atomickafka_and_each_baseline_side_by_side() -> None:
    processes = _measured_tree().processes
    ours = RunCost("atomickafka", 10_000, 2.0, tuple(processes))
    theirs = RunCost(
        "seq-eos",
        10_000,
        2.0,
        (ProcessCpu("seq-eos", ProcessRole.SEQUENCER, 9, 6.0),),
    )
    jvm = RunCost(
        "streams",
        10_000,
        2.0,
        (ProcessCpu("streams", ProcessRole.STREAMS, 8, 1.5),),
    )
    bare = RunCost(
        "kafka",
        10_000,
        2.0,
        (ProcessCpu("broker", ProcessRole.BROKER, 1, 1.0),),
        {"DeliveryMessage": TypeTraffic(20_000, 20_000, 4_000_000)},
    )
    baselines = ["seq-eos", "streams"]
    headers, rows = projection_table(
        [
            ("10 %", ours, {"seq-eos": theirs, "streams": jvm}, bare),
            ("50 %", ours, {"seq-eos": None}, None),
        ],
        baselines,
    )
    assert len(headers) == len(rows[0]) == len(rows[1])
    assert headers[2:6] == [
        "seq-eos: projected msg/s (µs/msg)",
        "AtomicKafka ÷ seq-eos",
        "streams: projected msg/s (µs/msg)",
        "AtomicKafka ÷ streams",
    ]
    # the streams app's JVM is an ordering process: its 150 µs bound its projection
    assert rows[0][:6] == ["10 %", "3,333 (300)", "1,667 (600)", "2.00x", "6,667 (150)", "0.50x"]
    # the broker: unknown for these three (no traffic counted), 100 µs/msg for the pipe
    assert rows[0][6:] == ["- / - / - / 100", "- / - / - / 10,000"]
    assert rows[1][2:6] == ["-", "-", "-", "-"]
    headers, rows = cost_table(
        [("amcast-10%", ours), ("seq-eos-10%", theirs), ("streams-10%", jvm)]
    )
    assert len(headers) == len(rows[0]) == len(rows[1])
    assert rows[0][headers.index("busiest ordering process")] == "node B: 300"
    fan_out = headers.index("fan-out (sequencer or streams app)")
    assert [rows[1][fan_out], rows[2][fan_out]] == ["600", "150"]
    assert rows[2][headers.index("busiest ordering process")] == "streams: 150"
    assert "1,000,000" in PROJECTION_FORMULA and "records written per message" in BROKER_FORMULA
    assert traffic_table([("seq-eos-10%", theirs)])[1] == []  # no traffic counted


def test_records_are_counted_by_type_within_the_window() -> None:
    sent = client_message("c-1", ["A", "B"], {"v": 1}, "c")
    notify = Engine("A").step([sent]).outputs[0].message
    inbox = RecordedTopic("atomickafka-in.B", "B", Role.INPUT)
    status = RecordedTopic("atomickafka-status", "", Role.STATUS)
    tally = TrafficTally(1000, 2000)
    bundle = encode_bundle([notify, notify], sender_id="node-A", sent_from="A", protocol="direct")
    for value, ts in [(encode_client(sent), 1000), (bundle, 1500), (encode_client(sent), 2500)]:
        tally.add_record(inbox, PlainRecord(value, timestamp_ms=ts))
    tally.add_record(status, PlainRecord(b'{"key": "B"}', key=b"B", timestamp_ms=1999))
    counts = tally.result()
    assert counts == {
        "Bundle": TypeTraffic(1, 2, len(bundle)),
        "ClientMessage": TypeTraffic(1, 1, len(encode_client(sent))),  # the 2nd is after
        STATUS_KIND: TypeTraffic(1, 1, len(b'{"key": "B"}')),
    }
