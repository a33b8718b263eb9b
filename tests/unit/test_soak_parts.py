"""The soak's pure parts (eval/soak.py): memory readings and their summary, the spread
of repeated timings, the delivery-mode rule, the load's split, the cluster's command
line and metrics, and the summary's rendering (no Kafka, no processes)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from atomickafka.config.files import parse_properties
from atomickafka.config.kafka_layers import Level
from atomickafka.errors import ConfigError
from atomickafka.evaluation.bench.command import BenchLoad, BenchSetup
from atomickafka.evaluation.cost.rss import (
    MemorySample,
    least_squares_slope,
    parse_vm_rss_kib,
    summarise_memory,
)
from atomickafka.evaluation.soak.cluster import (
    NEVER_RECORDS,
    ClusterOptions,
    cluster_argv,
    metric_value,
    node_of_cmdline,
    write_settings,
)
from atomickafka.evaluation.soak.common import LoadShape
from atomickafka.evaluation.soak.figures import ModeFigures, judge_modes, spread
from atomickafka.evaluation.soak.load import (
    SendJob,
    SendResult,
    pace_delay,
    sent_destinations,
    split_load,
)
from atomickafka.evaluation.soak.report import markdown
from atomickafka.kafka.connection import Connection

STATUS = """Name:\tpython3
State:\tS (sleeping)
VmPeak:\t  250000 kB
VmRSS:\t   81234 kB
RssAnon:\t   60000 kB
"""


def test_vm_rss_is_read_in_kib_and_absent_for_a_zombie() -> None:
    assert parse_vm_rss_kib(STATUS) == 81234
    assert parse_vm_rss_kib("Name:\tx\nState:\tZ (zombie)\n") is None
    assert parse_vm_rss_kib("VmRSS:\n") is None


def test_the_slope_is_the_least_squares_line() -> None:
    assert least_squares_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert least_squares_slope([0, 1, 2], [5, 5, 5]) == 0.0
    assert least_squares_slope([4], [1]) == 0.0
    assert least_squares_slope([2, 2], [1, 9]) == 0.0
    with pytest.raises(ValueError):
        least_squares_slope([1, 2], [1])


def _samples(rss: list[float], step: int = 100_000) -> list[MemorySample]:
    return [MemorySample(10.0 * i, step * i, {"A": mib, "B": 50.0}) for i, mib in enumerate(rss)]


def test_memory_is_summed_up_after_the_warm_up() -> None:
    samples = _samples([20, 60, 80, 81, 80, 82, 81])  # grows while the window fills
    a, b = summarise_memory(samples, warmup_s=20.0)
    assert (a.node, a.start_mib, a.end_mib, a.max_mib) == ("A", 80, 81, 82)
    assert (a.start_delivered, a.middle_delivered, a.end_delivered) == (200_000, 400_000, 600_000)
    assert a.middle_mib == 80
    assert abs(a.growth_mib_per_100k) < 0.5
    assert a.flat and b.flat and b.growth_mib_per_100k == 0.0


def test_memory_that_grows_with_deliveries_is_not_flat() -> None:
    (a, _) = summarise_memory(_samples([80, 84, 88, 92, 96, 100]), warmup_s=0.0)
    assert a.growth_mib_per_100k == pytest.approx(4.0)
    assert not a.flat  # 20 MiB on 80 is more than a tenth
    slow = summarise_memory(_samples([80, 81, 82, 83, 84, 85]), warmup_s=0.0)[0]
    assert slow.end_mib - slow.start_mib <= 8  # within a tenth so far, but the line
    assert not slow.flat  # projects +10 MiB over 1,000,000 more messages
    slower = summarise_memory(_samples([80, 80.5, 81, 81.5, 82, 82.5]), warmup_s=0.0)[0]
    assert slower.flat and slower.growth_mib_per_100k == pytest.approx(0.5)


def test_a_node_read_only_sometimes_is_summed_up_from_its_own_samples() -> None:
    samples = [
        MemorySample(0.0, 0, {"A": 10.0}),
        MemorySample(50.0, 10, {"A": 12.0, "B": 30.0}),
        MemorySample(60.0, 20, {"A": 12.0}),
    ]
    by_node = {m.node: m for m in summarise_memory(samples, warmup_s=100.0)}
    assert by_node["A"].start_mib == 12.0 and by_node["B"].start_mib == 30.0
    assert by_node["B"].max_mib == 30.0


def test_a_spread_has_the_median_and_largest_of_what_was_measured() -> None:
    found = spread([7.0, None, 6.1, 9.5])
    assert found.values == (7.0, 6.1, 9.5)
    assert (found.median, found.max) == (7.0, 9.5)
    assert spread([]).to_dict() == {"values": [], "median": None, "max": None}
    assert math.isnan(spread([None]).median)


def test_the_mode_rule_keeps_exactly_once_within_its_costs() -> None:
    alo = ModeFigures(8000, 20, 50, 55)
    keeps = judge_modes(ModeFigures(6500, 22, 54, 58), alo)
    assert keeps.keeps_default and keeps.capacity_cost == pytest.approx(0.1875)
    assert "stays the default" in keeps.summary()
    costly = judge_modes(ModeFigures(5900, 22, 54, 58), alo)
    assert costly.capacity_clause_broken and not costly.keeps_default
    slow = judge_modes(ModeFigures(7000, 22, 70, 61), alo)
    assert slow.latency_clause_broken and not slow.keeps_default


def test_the_mode_rule_does_not_blame_exactly_once_for_a_p99_both_modes_have() -> None:
    verdict = judge_modes(ModeFigures(7000, 22, 90, 80), ModeFigures(7500, 20, 85, 75))
    assert verdict.eos_p99_above_limit and verdict.alo_p99_above_limit
    assert not verdict.latency_clause_broken and verdict.keeps_default
    assert "both modes" in verdict.summary()
    median = ModeFigures.median_of([ModeFigures(1, 2, 3, 4), ModeFigures(3, 4, 5, 6)])
    assert median == ModeFigures(2, 3, 4, 5)


def test_a_load_is_split_over_senders_with_their_own_seeds() -> None:
    parts = split_load(BenchLoad(10, 0.5, rate=1000.0, fanout=(2, 2), seed=1), 3)
    assert [p.messages for p in parts] == [4, 3, 3]
    assert [p.rate for p in parts] == [pytest.approx(1000 / 3)] * 3
    assert len({p.seed for p in parts}) == 3
    assert split_load(BenchLoad(5, 0.5), 2)[0].rate is None
    with pytest.raises(ValueError):
        split_load(BenchLoad(5, 0.5), 0)


def test_pacing_waits_until_a_message_is_due() -> None:
    assert pace_delay(100.0, 50, 100.0, 100.2) == pytest.approx(0.3)
    assert pace_delay(100.0, 50, 100.0, 101.0) == 0.0
    assert pace_delay(100.0, 50, None, 100.0) == 0.0


def test_what_was_sent_is_rebuilt_from_the_plans() -> None:
    topics = ("t1", "t2", "t3")
    jobs = [
        SendJob(Connection("b"), topics, i, BenchLoad(4, 0.5, fanout=(2, 2), seed=i))
        for i in (0, 1)
    ]
    results = [SendResult(0, "p0", 3), SendResult(1, "", 0, error="boom")]
    sent = sent_destinations(jobs, results)
    assert sorted(sent) == ["p0-0", "p0-1", "p0-2"]
    assert len(sent["p0-0"]) == 2 and sent["p0-1"] == ("t2",)


def test_the_cluster_command_line_turns_snapshots_off_and_sets_the_takeover() -> None:
    plain = cluster_argv(Connection("127.0.0.1:9"), ["a", "b"], ClusterOptions(), 2000)
    assert plain[1:4] == ["-m", "atomickafka", "cluster"]
    assert plain[plain.index("--topics") + 1] == "a,b"
    assert plain[plain.index("--metrics-port") + 1] == "2000"
    assert "--standby" not in plain and "--snapshot-every" not in plain
    options = ClusterOptions(
        standby=True, exactly_once=False, snapshots=False, takeover_after_s=2.0
    )
    argv = cluster_argv(Connection("127.0.0.1:9"), ["a"], options, 2000)
    assert "--standby" in argv and "--at-least-once" in argv
    assert int(argv[argv.index("--snapshot-every") + 1]) == NEVER_RECORDS
    assert float(argv[argv.index("--snapshot-interval") + 1]) >= 1e9
    assert argv[argv.index("--takeover-after") + 1] == "2"
    assert options.describe() == "at-least-once, no snapshots, standby (2 s)"


def test_the_cluster_gets_the_connections_settings_in_a_file_never_on_its_command_line(
    tmp_path: Path,
) -> None:
    where = Connection("b:1", {"security.protocol": "SASL_PLAINTEXT", "sasl.password": "pw"})
    path = tmp_path / "c.properties"
    argv = cluster_argv(where, ["a"], ClusterOptions(), 2000, path)
    assert argv[argv.index("--bootstrap-server") + 1] == "b:1"
    assert argv[argv.index("--command-config") + 1] == str(path)
    assert not any("pw" in word or "SASL" in word for word in argv)
    with pytest.raises(ConfigError):
        cluster_argv(where, ["a"], ClusterOptions(), 2000)  # nowhere to put the settings
    write_settings(where, path)
    assert path.stat().st_mode & 0o777 == 0o600
    read = parse_properties(path.read_text(), str(path), Level.COMMAND_LINE)
    assert {s.key: s.value for s in read} == dict(where.settings)


def test_node_processes_are_known_by_their_title() -> None:
    assert node_of_cmdline(["atomickafka node soak-t1"]) == "soak-t1"
    assert node_of_cmdline(["atomickafka", "node", "t/1"]) == "t/1"
    assert node_of_cmdline(["atomickafka merger t"]) is None
    assert node_of_cmdline(["python", "-m", "atomickafka.node.launch"]) is None


METRICS = """# HELP atomickafka_node_recovery_seconds How long the last start took
# TYPE atomickafka_node_recovery_seconds gauge
atomickafka_node_recovery_seconds{layer="",topic="a"} 1.25
atomickafka_node_recovery_seconds{layer="",topic="b"} 0.5
# HELP atomickafka_node_active 1 for the active instance
# TYPE atomickafka_node_active gauge
atomickafka_node_active{layer="",pid="10",topic="a"} 1.0
atomickafka_node_active{layer="",pid="11",topic="a"} 0.0
# HELP atomickafka_node_records_replayed_total Input records re-read on recovery
# TYPE atomickafka_node_records_replayed_total counter
atomickafka_node_records_replayed_total{layer="",topic="a"} 51234.0
"""


def test_a_metric_is_read_by_name_and_labels() -> None:
    assert metric_value(METRICS, "atomickafka_node_recovery_seconds", topic="a") == 1.25
    assert metric_value(METRICS, "atomickafka_node_active", topic="a") == 1.0
    assert metric_value(METRICS, "atomickafka_node_active", topic="a", pid="11") == 0.0
    assert metric_value(METRICS, "atomickafka_node_records_replayed_total") == 51234
    assert metric_value(METRICS, "atomickafka_node_recovery_seconds", topic="z") is None
    assert metric_value("", "anything") is None


def test_the_bench_runs_its_nodes_in_either_mode() -> None:
    where = Connection("b:1", {"security.protocol": "SASL_PLAINTEXT"})
    assert BenchSetup(where).node_config(["t1", "t2"]).exactly_once
    at_least_once = BenchSetup(where, exactly_once=False).node_config(["t1", "t2"])
    assert not at_least_once.exactly_once and at_least_once.topic == "t1"
    assert at_least_once.connection == where  # the nodes take the bench's -X settings


def test_the_shape_says_what_it_sends() -> None:
    assert LoadShape().describe().startswith("5 topics, 50% multicast to 2 topics")
    assert "every topic" in LoadShape(fanout=None).describe()
    load = LoadShape(3, 0.5, (2, 2), 100).load(10, 50.0, seed=4)
    assert (load.messages, load.rate, load.record_size, load.seed) == (10, 50.0, 100, 4)


def _kill(live: float | None) -> dict[str, Any]:
    return {
        "topic": "soak-x-t1",
        "killed_pid": 1,
        "new_pid": 2,
        "first_status_s": 1.0,
        "live_s": live,
        "delivery_s": 2.5,
        "replaying_seen": True,
        "standby_took_over": True,
    }


def _results() -> dict[str, Any]:
    check = {"ok": True, "summary": "OK: 10 messages\nmore", "counts": {}}
    load = {"load_before": [1.0, 1.0, 1.0], "load_after": [2.0, 2.0, 2.0]}
    figures = {"capacity_msg_s": 6000.0, "p50_ms": 20.0, "p99_ms": 50.0, "multicast_p99_ms": 55.0}
    verdict = judge_modes(ModeFigures(**figures), ModeFigures(**figures)).to_dict()
    samples = [s.to_dict() for s in _samples([20, 60, 80, 81])]
    soak = {
        "settings": {
            "messages": 10,
            "rate": 4000.0,
            "senders": 2,
            "warmup_s": 90.0,
            "sample_s": 2.0,
        },
        "shape": LoadShape().describe(),
        "cluster": "exactly-once, snapshots",
        "latency": {
            "delivered": 10,
            "seconds": 1.0,
            "messages_per_s": 10.0,
            "p50_ms": 5.0,
            "p99_ms": 9.0,
            "multicast_p99_ms": 9.0,
        },
        "check": check,
        "restarts": 0.0,
        "memory": [m.to_dict() for m in summarise_memory(_samples([20, 60, 80, 81]), 20.0)],
        "samples": samples,
        **load,
    }
    recovery = {
        "messages": 100_000,
        "snapshots": False,
        "victim_input_records": 123_456,
        "kill": _kill(7.5),
        "recovery_seconds_metric": 1.2,
        "records_replayed": 120_000.0,
        "check": check,
        **load,
    }
    takeover = {
        "takeover_after_s": 2.0,
        "kills": [_kill(3.0), _kill(None)],
        "live_s": spread([3.0, None]).to_dict(),
        "delivery_s": spread([2.5, 2.5]).to_dict(),
        "check": check,
        **load,
    }
    run = {"figures": figures}
    modes = {
        "settings": {
            "share": 0.5,
            "fanout": None,
            "topics": 5,
            "messages": 20_000,
            "paced_rate": 1000.0,
            "repeats": 1,
        },
        "runs": {"exactly-once": [run], "at-least-once": [run]},
        "median": {"exactly-once": figures, "at-least-once": figures},
        "verdict": verdict,
        **load,
    }
    return {
        "started": "2024-01-01T00:00:00+00:00",
        "machine": "test, 2 CPUs",
        "command": "python eval/soak.py",
        "phases": {"soak": soak, "recovery": [recovery], "takeover": [takeover], "modes": modes},
        **load,
    }


def test_the_summary_has_a_table_per_phase_and_the_load() -> None:
    text = markdown(_results(), "out/soak-memory.png")
    assert "## 1. Soak" in text and "| A | 80" in text and "out/soak-memory.png" in text
    assert "| 100,000 | off | 123,456 | 7.50 s | 2.50 s | 1.20 s | 120,000 |" in text
    assert "| 2 s | 2 | kill → standby" not in text
    assert "| 2 s | 2 | 3.00 s / 3.00 s | 2.50 s / 2.50 s | 2 of 2 |" in text
    assert "live not seen" in text
    assert "exactly-once stays the default" in text
    assert "recovery 100,000 no snapshots: [1.0, 1.0, 1.0] → [2.0, 2.0, 2.0]" in text


def test_the_memory_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from atomickafka.evaluation.soak.report import plot_memory  # noqa: PLC0415

    path = tmp_path / "memory.png"
    plot_memory([s.to_dict() for s in _samples([20, 60, 80, 81])], 20.0, "title", path)
    assert path.read_bytes().startswith(b"\x89PNG")
