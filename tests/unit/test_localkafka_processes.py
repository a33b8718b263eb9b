"""Telling whether a broker started here still runs: a live child is believed alive
whatever ``/proc`` shows at that instant, a dead one is reaped and its end told."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from atomickafka.localkafka import processes
from atomickafka.localkafka.processes import exit_note, is_our_broker


def _child(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code])
    processes._CHILDREN[proc.pid] = proc
    return proc


def _ended(proc: subprocess.Popen[bytes], data_dir: Path) -> bool:
    """Whether ``is_our_broker`` sees ``proc`` ended within 10 s (it reaps it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not is_our_broker(proc.pid, data_dir, 1):
            return True
        time.sleep(0.02)
    return False


def test_a_running_child_is_alive_and_a_killed_one_is_reaped_with_its_signal(
    tmp_path: Path,
) -> None:
    proc = _child("import time; time.sleep(30)")
    try:
        # its command line is not a broker's: only being our running child counts
        assert is_our_broker(proc.pid, tmp_path, 1)
        assert exit_note(proc.pid) == ""
    finally:
        proc.kill()
    assert _ended(proc, tmp_path)
    assert proc.pid not in processes._CHILDREN
    assert exit_note(proc.pid) == " (killed by signal 9)"


def test_an_exit_code_is_told(tmp_path: Path) -> None:
    proc = _child("raise SystemExit(3)")
    assert _ended(proc, tmp_path)
    assert exit_note(proc.pid) == " (exit code 3)"
    assert exit_note(None) == ""


def test_a_new_cluster_refuses_ports_in_the_ephemeral_range(tmp_path: Path) -> None:
    """Issue 26, item 12: a cluster on ports the kernel hands out to client connections
    could not restart a broker (a client's socket held its port: 13 failed restarts).
    Refused before anything starts, naming the range and a port that fits."""
    import pytest  # noqa: PLC0415

    from atomickafka.localkafka import BrokerError, ensure_broker  # noqa: PLC0415
    from atomickafka.localkafka.ports import ephemeral_range, in_ephemeral_range  # noqa: PLC0415

    low, high = ephemeral_range()
    with pytest.raises(BrokerError, match=rf"ephemeral range \({low}-{high}") as refused:
        ensure_broker(3, tmp_path / "cluster", port=low + 10, log=lambda _: None)
    assert f"--port at most {low - 6}" in str(refused.value)
    assert not (tmp_path / "cluster" / "state.json").exists()  # nothing was started
    ranges = tmp_path / "range"
    ranges.write_text("40000\t50000\n")
    assert in_ephemeral_range([39999, 40000, 50000, 50001], ranges) == [40000, 50000]
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)


def test_an_unknown_kafka_tool_is_named_with_the_tools_there_are() -> None:
    """``atomickafka broker tool`` (issue 26, item 13): Kafka's scripts by name, with or
    without ``.sh``; anything else is one line naming the tools, before any download."""
    import pytest  # noqa: PLC0415

    from atomickafka.localkafka import BrokerError  # noqa: PLC0415
    from atomickafka.localkafka.tools import TOOLS, tool_command  # noqa: PLC0415

    with pytest.raises(BrokerError, match=r"'kafka-nosuch\.sh'; the tools: kafka-acls"):
        tool_command("kafka-nosuch.sh", [])
    assert TOOLS["kafka-console-consumer"] == "org.apache.kafka.tools.consumer.ConsoleConsumer"
