"""Run a cluster of nodes in a child process for a block of code (demo, bench,
evaluation, tests).

The child is ``python -m atomickafka.node.launch``: it reads its
:class:`~atomickafka.node.config.ClusterConfig` as JSON on stdin (not on the command
line, where ``ps`` would show the ``-X`` settings) and runs the
:class:`~atomickafka.node.supervisor.Supervisor` until SIGTERM, as ``atomickafka
cluster`` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from atomickafka.kafka.status import wait_for_nodes
from atomickafka.kafka.topics import merger_key, node_key
from atomickafka.node.config import ClusterConfig

__all__ = ["cluster_keys", "running_cluster", "stop_supervisor"]


def cluster_keys(topics: Sequence[str], partitions: int = 1) -> list[str]:
    """The status keys of every node (and merger) of a cluster over ``topics``."""
    if partitions <= 1:
        return [node_key(t) for t in topics]
    keys = [node_key(t, p) for t in topics for p in range(partitions)]
    return keys + [merger_key(t) for t in topics]


@contextmanager
def running_cluster(
    config: ClusterConfig, *, log_path: Path | None = None, wait_s: float | None = 90.0
) -> Iterator[subprocess.Popen[bytes]]:
    """The nodes of ``config`` (and a merger per topic, when partitioned), supervised
    in a child process while the block runs.

    With ``wait_s`` the block starts only once every node has published a live status;
    on exit the cluster gets SIGTERM (then SIGKILL after a minute). Logs (at
    ``config.node.log_level``) go to ``log_path`` when given, else to this process's
    stderr.
    """
    argv = [sys.executable, "-m", "atomickafka.node.launch"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_file = log_path.open("wb") if log_path is not None else None
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT if log_file else None,
            env=env,
        )
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(config.to_dict()).encode())
            proc.stdin.close()
            if wait_s is not None:
                wait_for_nodes(
                    config.node.connection,
                    cluster_keys(config.topics, config.node.partitions),
                    timeout_s=wait_s,
                )
            yield proc
        finally:
            stop_supervisor(proc)
    finally:
        if log_file is not None:
            log_file.close()


def _main() -> int:
    """The child: read the configuration on stdin, supervise until a signal."""
    from atomickafka.logs import configure_logging  # noqa: PLC0415 (the child only)
    from atomickafka.node.supervisor import Supervisor  # noqa: PLC0415

    config = ClusterConfig.from_dict(json.loads(sys.stdin.read()))
    configure_logging(config.node.log_level)
    supervisor = Supervisor(config)
    supervisor.install_signal_handlers()
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(_main())


def stop_supervisor(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """SIGTERM a ``cluster`` supervisor (it stops every child), SIGKILL it if it has not
    exited after ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
