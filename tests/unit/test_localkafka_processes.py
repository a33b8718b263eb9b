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
