"""Run ``atomickafka cluster`` in a child process for a block of code (demo, bench, tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from atomickafka.node.status_reader import wait_for_nodes

__all__ = ["running_cluster"]


@contextmanager
def running_cluster(
    bootstrap: str,
    topics: Sequence[str],
    *,
    algorithm: str = "optimized",
    layout: str = "split",
    log_path: Path | None = None,
    wait_s: float | None = 90.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """One node per topic under ``atomickafka cluster`` while the block runs.

    With ``wait_s`` the block starts only once every node has published a live status;
    on exit the cluster gets SIGTERM (then SIGKILL after a minute). Node logs go to
    ``log_path`` when given, else to this process's stderr.
    """
    argv = [
        sys.executable,
        "-m",
        "atomickafka",
        "cluster",
        "--bootstrap-server",
        bootstrap,
        "--topics",
        ",".join(topics),
        "--algorithm",
        algorithm,
        "--layout",
        layout,
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_file = log_path.open("wb") if log_path is not None else None
    try:
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT if log_file else None, env=env
        )
        try:
            if wait_s is not None:
                wait_for_nodes(bootstrap, topics, timeout_s=wait_s)
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    finally:
        if log_file is not None:
            log_file.close()
