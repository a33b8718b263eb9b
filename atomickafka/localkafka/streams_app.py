"""The Kafka Streams baseline's JVM: its command line, started and stopped.

The application (``java/StreamsFanOut.java``, package data) reads a sequencer topic and
writes each message to each of its destinations with ``exactly_once_v2``; its jars are
built once by :func:`~atomickafka.localkafka.jars.fetch_streams_app`. It prints
:data:`READY_LINE` on stdout once its stream thread runs. Its ``application.id`` names
its consumer group and its transactional producer's prefix, so a process started again
with the same id resumes where the last one committed.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from atomickafka.localkafka.configs import render_template
from atomickafka.localkafka.errors import BrokerError, Log, log_stderr
from atomickafka.localkafka.jars import fetch_streams_app, find_java

__all__ = ["MAIN_CLASS", "READY_LINE", "StreamsProcess", "streams_command"]

MAIN_CLASS: Final = "io.atomickafka.baseline.StreamsFanOut"
#: What the application prints once its stream thread runs.
READY_LINE: Final = "atomickafka-streams: RUNNING"
#: Kafka Streams' default commit interval under exactly-once (ms).
DEFAULT_COMMIT_MS: Final = 100
_JVM_OPTS: Final = ("-Xmx384m", "-Djava.awt.headless=true")


def streams_command(
    bootstrap: str,
    source_topic: str,
    application_id: str,
    state_dir: Path,
    sender_id: str,
    *,
    commit_ms: int = DEFAULT_COMMIT_MS,
    log: Log = log_stderr,
) -> list[str]:
    """The command line that runs the fan-out application (built first if need be)."""
    java, lib = find_java(), fetch_streams_app(log)
    config = lib.parent / "log4j2.xml"
    if not config.exists():
        config.write_text(render_template("tools-log4j2.xml", {"LEVEL": "warn"}), encoding="utf-8")
    return [
        java,
        *_JVM_OPTS,
        f"-Dlog4j2.configurationFile={config}",
        "-cp",
        f"{lib}/*",
        MAIN_CLASS,
        bootstrap,
        source_topic,
        application_id,
        str(state_dir),
        sender_id,
        str(commit_ms),
    ]


class StreamsProcess:
    """One run of the application: :meth:`start` waits until it says it runs,
    :meth:`kill` ends it with SIGKILL (a crash), :meth:`stop` with SIGTERM (it closes,
    committing what it wrote). Its stderr (warnings and errors) goes to ``log_path``."""

    def __init__(self, command: Sequence[str], log_path: Path) -> None:
        self._command = list(command)
        self._log_path = log_path
        self._proc: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return None if self._proc is None else self._proc.pid

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the JVM and wait (at most ``timeout_s``) until its stream thread runs;
        :class:`BrokerError` when it exits or does not get there in time."""
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("a", encoding="utf-8") as err:
            proc = subprocess.Popen(
                self._command, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1
            )
        self._proc, self._ready = proc, threading.Event()
        threading.Thread(target=self._watch, args=(proc, self._ready), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise BrokerError(
                    f"the Kafka Streams baseline did not start within {timeout_s:.0f} s "
                    f"(exit status {proc.returncode}); its log: {self._log_path}"
                )

    @staticmethod
    def _watch(proc: subprocess.Popen[str], ready: threading.Event) -> None:
        """Read the application's stdout until it ends; set ``ready`` at its line."""
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == READY_LINE:
                ready.set()

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is committed or closed."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)

    def stop(self, timeout_s: float = 45.0) -> int | None:
        """SIGTERM, and wait for it to close (SIGKILL after ``timeout_s``); its exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        return proc.returncode
