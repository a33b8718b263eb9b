"""Run ``atomickafka cluster`` in a child process for a block of code (demo, bench,
evaluation, tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from atomickafka.core.engine import DEFAULT_ALGORITHM
from atomickafka.kafka.status import wait_for_nodes
from atomickafka.kafka.topics import merger_key, node_key

__all__ = ["cluster_keys", "running_cluster"]


def cluster_keys(topics: Sequence[str], partitions: int = 1) -> list[str]:
    """The status keys of every node (and merger) of a cluster over ``topics``."""
    if partitions <= 1:
        return [node_key(t) for t in topics]
    keys = [node_key(t, p) for t in topics for p in range(partitions)]
    return keys + [merger_key(t) for t in topics]


@contextmanager
def running_cluster(
    bootstrap: str,
    topics: Sequence[str],
    *,
    algorithm: str = DEFAULT_ALGORITHM.value,
    layout: str = "split",
    partitions: int = 1,
    overrides: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    log_level: str = "warning",
    extra_args: Sequence[str] = (),
    wait_s: float | None = 90.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """One node per topic (per layer, plus a merger per topic, when partitioned) under
    ``atomickafka cluster`` while the block runs.

    With ``wait_s`` the block starts only once every node has published a live status;
    on exit the cluster gets SIGTERM (then SIGKILL after a minute). Logs go to
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
        "--partitions",
        str(partitions),
        "--log-level",
        log_level,
        *extra_args,
    ]
    for key, value in (overrides or {}).items():
        argv += ["-X", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_file = log_path.open("wb") if log_path is not None else None
    try:
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT if log_file else None, env=env
        )
        try:
            if wait_s is not None:
                wait_for_nodes(
                    bootstrap,
                    cluster_keys(topics, partitions),
                    timeout_s=wait_s,
                    overrides=overrides,
                )
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
