"""The live audit beside an evaluation run (issue 18).

Each run of ``eval`` runs the in-process live audit (:class:`~atomickafka.audit.service.
LiveAudit`) in a child process of its own while the run goes on: started once the run's
system is up (its delivery topics exist) and before any client sends, reading the run's
delivery topics as they are written. When the measuring consumer has counted the last
delivery, the runner marks the moment (:meth:`RunAudit.mark`): the audit notes the
topics' ends then and how long after that it had read up to them (its lag behind the
run). Once the run's system has stopped, :meth:`RunAudit.finish` has it read on to the
topics' ends, let the bound pass (what is still incomplete then is ``missing``) and
report (:class:`AuditOutcome`).

The bound is the run's own (:data:`RUN_BOUND_S`, longer than any run): a message may
take as long as the run lasts to reach all its destinations, however slow the machine,
and ``missing`` means still missing once the run's system has stopped and the audit has
read every audited topic to its end. So a correct run is never reported failed (issue
24: an overloaded run on a busy machine took more than 10 s to deliver some messages
everywhere, and the audit's fixed 10 s bound called them missing while the order check
passed).

The audit is not part of what a run measures: its process is none of the processes the
run's CPU meter tracks (it is a child of the suite, whose own CPU the meter reads
without its children's), it runs at a lower scheduling priority (``nice``) so that on a
busy machine it yields the CPU to the measured processes and catches up afterwards, and
it reports its own CPU time beside its verdict. Its violations go to ``audit.log`` in the
run's folder (one JSON line each) and the first few to the report; none to Kafka.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final

from atomickafka.audit.config import AuditConfig
from atomickafka.audit.service import LiveAudit
from atomickafka.errors import TimedOutError
from atomickafka.evaluation.errors import RunError
from atomickafka.kafka.connection import Connection
from atomickafka.logs import configure_logging

__all__ = [
    "AUDIT_NICE",
    "KEPT_VIOLATIONS",
    "RUN_BOUND_S",
    "AuditOutcome",
    "RunAudit",
    "running_audit",
]

log = logging.getLogger("atomickafka.eval.audit")

#: How much lower than the run's processes the audit is scheduled (``os.nice``).
AUDIT_NICE: Final = 10
#: How many violations an outcome carries as JSON (its counts are complete).
KEPT_VIOLATIONS: Final = 20
#: How long the audit may take to start (topics' metadata, its consumer), to read on to
#: the topics' ends once the run stopped, and to hand over its outcome (seconds).
_START_TIMEOUT_S: Final = 60.0
#: The audit's bound beside a run (s): longer than any run, so that only what is still
#: incomplete when the run ended and the audit read everything is ``missing``.
RUN_BOUND_S: Final = 86_400.0
_DRAIN_TIMEOUT_S: Final = 120.0
_RESULT_TIMEOUT_S: Final = 60.0


@dataclass(slots=True)
class AuditOutcome:
    """What the audit beside a run found, and what it cost."""

    ok: bool
    summary: str
    #: Violations by kind.
    counts: dict[str, int] = field(default_factory=dict)
    #: Delivery records checked (exact repeats excluded), and exact repeats dropped.
    checked: int = 0
    repeats: int = 0
    #: The first :data:`KEPT_VIOLATIONS` violations, as the audit's JSON records.
    violations: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds from the last delivery counted by the run to the audit having read every
    #: record written up to then (``None``: not marked, or not reached).
    lag_s: float | None = None
    #: Whether the audit read every topic to its end once the run stopped.
    read_to_end: bool = False
    #: CPU seconds of the audit's process from its start (its imports aside) to its
    #: report: every thread's, librdkafka's included.
    cpu_s: float = 0.0

    @property
    def us_per_record(self) -> float | None:
        """The audit's CPU-µs per delivery record it checked."""
        return self.cpu_s * 1e6 / self.checked if self.checked else None


@dataclass(frozen=True, slots=True)
class _Job:
    """Everything the audit's process needs (picklable)."""

    config: dict[str, Any]
    log_path: str
    quiet: bool
    keep: int


def _audit_process(job: _Job, ready: Any, mark: Any, stop: Any, results: Any) -> None:
    """The child: audit until told to stop, then read to the end, finish and report."""
    with contextlib.suppress(OSError):
        os.nice(AUDIT_NICE)
    with open(job.log_path, "ab") as log_file:
        os.dup2(log_file.fileno(), 2)
    configure_logging("warning")
    if job.quiet:  # every violation is expected: counted, not logged one by one
        logging.getLogger("atomickafka.audit").setLevel(logging.ERROR)
    try:
        results.put(_audit(job, ready, mark, stop))
    except Exception as exc:  # reported to the run, which goes on without a verdict
        log.exception("the live audit failed")
        results.put(f"{type(exc).__name__}: {exc}")


def _audit(job: _Job, ready: Any, mark: Any, stop: Any) -> AuditOutcome:
    cpu_at_start = time.process_time()  # the imports of a new process are not the audit's
    audit = LiveAudit(AuditConfig.from_dict(job.config), commits=False, keep_violations=job.keep)
    audit.start()
    try:
        ready.set()
        marked: tuple[float, dict[tuple[str, int], int]] | None = None
        lag_s = None
        while not stop.is_set():
            audit.step()
            if marked is None and mark.is_set():
                marked = (time.monotonic(), audit.end_offsets())
            if marked is not None and lag_s is None and audit.has_read(marked[1]):
                lag_s = time.monotonic() - marked[0]
        read_to_end = audit.read_to(audit.end_offsets(), _DRAIN_TIMEOUT_S)
        if marked is not None and lag_s is None and audit.has_read(marked[1]):
            lag_s = time.monotonic() - marked[0]
        audit.finish()
    finally:
        audit.close()
    report = audit.report
    totals = report.totals
    return AuditOutcome(
        ok=report.ok,
        summary=report.summary(),
        counts=totals.by_kind(),
        checked=sum(totals.checked.values()),
        repeats=sum(totals.repeats.values()),
        violations=[v.to_json() for v in report.violations],
        lag_s=lag_s,
        read_to_end=read_to_end,
        cpu_s=time.process_time() - cpu_at_start,
    )


class RunAudit:
    """The live audit's process beside one run (see the module docstring)."""

    def __init__(
        self,
        connection: Connection,
        topics: Sequence[str],
        log_path: Path,
        *,
        bound_s: float = RUN_BOUND_S,
        quiet: bool = False,
        writers: Sequence[str] | None = None,
    ) -> None:
        config = AuditConfig.private(
            connection, topics, bound_s=bound_s, name="eval", writers=writers
        )
        self._job = _Job(config.to_dict(), str(log_path), quiet, KEPT_VIOLATIONS)
        ctx = mp.get_context("spawn")
        self._ready, self._mark, self._stop = ctx.Event(), ctx.Event(), ctx.Event()
        self._results = ctx.Queue()
        self._proc: BaseProcess = ctx.Process(
            target=_audit_process,
            args=(self._job, self._ready, self._mark, self._stop, self._results),
            name="atomickafka-eval-audit",
        )

    @property
    def pid(self) -> int | None:
        """The audit process's id (``None`` before it started)."""
        return self._proc.pid

    def start(self, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Start the audit and wait until it reads (:class:`~atomickafka.errors.TimedOutError`
        if it does not; :class:`~atomickafka.evaluation.errors.RunError` if it failed)."""
        self._proc.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.2):
            failure = self._failure()
            if failure is not None:
                raise RunError(failure)
            if not self._proc.is_alive():
                raise RunError(f"the live audit exited ({self._proc.exitcode}) before it read")
            if time.monotonic() > deadline:
                raise TimedOutError(f"the live audit did not start within {timeout_s:.0f} s")

    def _failure(self) -> str | None:
        try:
            got = self._results.get_nowait()
        except queue.Empty:
            return None
        return got if isinstance(got, str) else None

    def mark(self) -> None:
        """The run has counted its last delivery (the audit measures its lag from here)."""
        self._mark.set()

    def finish(self, timeout_s: float = _DRAIN_TIMEOUT_S + _RESULT_TIMEOUT_S) -> AuditOutcome:
        """Stop auditing: read to the topics' ends, let the bound pass, report."""
        self._stop.set()
        try:
            got = self._results.get(timeout=timeout_s)
        except queue.Empty:
            raise TimedOutError(f"the live audit did not report within {timeout_s:.0f} s") from None
        if isinstance(got, str):
            raise RunError(got)
        outcome: AuditOutcome = got
        return outcome

    def close(self) -> None:
        """End the process (at once if it is still running)."""
        self._stop.set()
        if self._proc.pid is None:
            return
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10)


@contextlib.contextmanager
def running_audit(
    connection: Connection,
    topics: Sequence[str],
    log_path: Path,
    *,
    quiet: bool = False,
    writers: Sequence[str] | None = None,
) -> Iterator[RunAudit]:
    """A started :class:`RunAudit` for the block; its process is ended on exit.
    ``writers``: the sender ids of the run's deliveries (a baseline's; ``None``: each
    topic's node or merger)."""
    audit = RunAudit(connection, topics, log_path, quiet=quiet, writers=writers)
    try:
        audit.start()
        yield audit
    finally:
        audit.close()
