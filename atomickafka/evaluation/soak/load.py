"""The soak's load: client processes sending a bench-shaped plan, paced or not.

Each sender is a separate process (multiprocessing ``spawn``, as the evaluation's
clients: a fresh interpreter whose Kafka clients are made after the start, and no GIL
shared with the measuring process) with its own :class:`~atomickafka.client.
AtomicKafkaClient`. What it sends is a :class:`~atomickafka.evaluation.bench.command.BenchLoad`
plan (every ``1/share``-th message a multicast, to ``fanout`` topics drawn with the
load's seed; the others to one topic, round-robin), each value a probe with its send
time (:func:`~atomickafka.evaluation.load.clients.payload`), so a
:class:`~atomickafka.evaluation.load.measuring.DeliveryCounter` measures its latency. A
load of N messages at R msg/s is split over the processes (:func:`split_load`); the
ids and destinations of what each sent are rebuilt from its plan
(:func:`sent_destinations`), as the order checker's ground truth.

A sender stops at the end of its plan, after ``max_seconds``, or when the parent sets
``stop`` (the trickle of the fault phases runs until the measurement is over).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any, Final

from atomickafka.errors import ConfigError, TimedOutError
from atomickafka.evaluation.bench.command import BenchLoad
from atomickafka.evaluation.errors import RunError
from atomickafka.evaluation.load.clients import payload
from atomickafka.kafka.connection import Connection

__all__ = [
    "SendJob",
    "SendResult",
    "Senders",
    "expected_deliveries",
    "make_jobs",
    "pace_delay",
    "running_senders",
    "sent_destinations",
    "split_load",
]

#: How many sends between two looks at the stop flag and the clock.
_CHECK_EVERY: Final = 100


@dataclass(frozen=True, slots=True)
class SendJob:
    """One sender process's work (picklable), and how it reaches Kafka."""

    connection: Connection
    topics: tuple[str, ...]
    index: int
    load: BenchLoad
    #: Send to topics whose node is not live too (a node being restarted).
    allow_offline: bool = False
    max_seconds: float = 3600.0


@dataclass(frozen=True, slots=True)
class SendResult:
    """What a sender sent: its id prefix and how many of its plan's messages (the
    first ``sent``), or the error that stopped it."""

    index: int
    id_prefix: str
    sent: int
    seconds: float = 0.0
    error: str | None = None


def split_load(load: BenchLoad, senders: int) -> list[BenchLoad]:
    """``load`` shared by ``senders`` processes: the messages (the first ones take the
    remainder) and the rate divided, each with its own seed."""
    if senders < 1:
        raise ConfigError(f"at least one sender, not {senders}")
    base, extra = divmod(load.messages, senders)
    rate = None if load.rate is None else load.rate / senders
    return [
        dataclasses.replace(load, messages=base + (i < extra), rate=rate, seed=load.seed * 1000 + i)
        for i in range(senders)
    ]


def pace_delay(start_s: float, index: int, rate: float | None, now_s: float) -> float:
    """Seconds to wait before message ``index`` of a load paced at ``rate`` msg/s that
    started at ``start_s`` (0 when it is due, or unpaced)."""
    if not rate:
        return 0.0
    return max(0.0, start_s + index / rate - now_s)


def sent_destinations(
    jobs: Sequence[SendJob], results: Sequence[SendResult]
) -> dict[str, tuple[str, ...]]:
    """Each sent message's id and destinations, rebuilt from the senders' plans."""
    by_index = {r.index: r for r in results}
    out: dict[str, tuple[str, ...]] = {}
    for job in jobs:
        result = by_index.get(job.index)
        if result is None or not result.id_prefix:
            continue
        plan = job.load.plan(result.id_prefix, job.topics)
        out.update(plan[: result.sent])
    return out


def _send_plan(client: Any, job: SendJob, stop: Any) -> int:
    """Send ``job``'s plan through ``client`` until done, out of time or stopped."""
    load = job.load
    plan = load.plan(client.id_prefix, job.topics)
    start = time.monotonic()
    deadline = start + job.max_seconds
    for i, (mid, dests) in enumerate(plan):
        if i % _CHECK_EVERY == 0 and (stop.is_set() or time.monotonic() > deadline):
            return i
        delay = pace_delay(start, i, load.rate, time.monotonic())
        if delay > 0:
            time.sleep(delay)
        value = payload(job.index, i, len(dests) > 1, time.time_ns() // 1000, load.record_size)
        sent_id = client.send(value, dests)
        if sent_id != mid:
            raise RunError(f"sent {sent_id}, the plan says {mid}")
    return len(plan)


def sender_process(job: SendJob, ready: Any, go: Any, stop: Any, results: Any) -> None:
    """Child process body: connect and warm up, signal ``ready``, wait for ``go``, send,
    flush, and put a :class:`SendResult` on ``results``."""
    from atomickafka.client import AtomicKafkaClient  # noqa: PLC0415 (the child only)

    prefix = ""
    try:
        with AtomicKafkaClient(
            job.connection, client_id=f"soak{job.index}", allow_offline=job.allow_offline
        ) as client:
            prefix = client.id_prefix
            client.warm_up(job.topics)
            ready.set()
            if not go.wait(600):
                raise TimedOutError("no start signal within 600 s")
            began = time.monotonic()
            sent = _send_plan(client, job, stop)
            client.flush(300)
        results.put(SendResult(job.index, prefix, sent, time.monotonic() - began))
    except Exception:
        results.put(SendResult(job.index, prefix, 0, error=traceback.format_exc()))


class Senders:
    """The sender processes of ``jobs``: started and warmed up together, then let go."""

    def __init__(self, jobs: Sequence[SendJob]) -> None:
        ctx = mp.get_context("spawn")
        self.jobs = list(jobs)
        self._ready = [ctx.Event() for _ in self.jobs]
        self._go, self._stop = ctx.Event(), ctx.Event()
        self._queue: Any = ctx.Queue()
        self._results: dict[int, SendResult] = {}
        self._procs: list[BaseProcess] = [
            ctx.Process(
                target=sender_process,
                args=(job, ready, self._go, self._stop, self._queue),
                name=f"atomickafka-soak-sender-{job.index}",
                daemon=True,
            )
            for job, ready in zip(self.jobs, self._ready, strict=True)
        ]

    @property
    def pids(self) -> list[int]:
        """The started senders' pids."""
        return [p.pid for p in self._procs if p.pid is not None]

    def start(self, timeout_s: float = 120.0) -> None:
        """Start every sender and wait until each is ready to send."""
        for proc in self._procs:
            proc.start()
        deadline = time.monotonic() + timeout_s
        while not all(r.is_set() for r in self._ready):
            self._take()
            failed = [r for r in self._results.values() if r.error]
            if failed:
                raise RunError(f"sender {failed[0].index} failed:\n{failed[0].error}")
            if time.monotonic() > deadline:
                raise TimedOutError(f"senders not ready within {timeout_s:.0f} s")
            time.sleep(0.05)

    def go(self) -> None:
        """Let every sender start sending."""
        self._go.set()

    def stop(self) -> None:
        """Ask every sender to stop after its current message."""
        self._stop.set()

    def _take(self) -> None:
        while True:
            try:
                result: SendResult = self._queue.get_nowait()
            except queue.Empty:
                return
            self._results[result.index] = result

    def errors(self) -> list[str]:
        """The errors senders reported so far."""
        self._take()
        return [r.error for r in self._results.values() if r.error]

    def finished(self) -> bool:
        """Every sender has reported."""
        self._take()
        return len(self._results) == len(self.jobs)

    def results(self, timeout_s: float = 360.0) -> list[SendResult]:
        """Every sender's result (waiting at most ``timeout_s``); raises if one failed
        or did not report."""
        deadline = time.monotonic() + timeout_s
        while not self.finished() and time.monotonic() < deadline:
            time.sleep(0.1)
        failed = self.errors()
        if failed:
            raise RunError(f"a sender failed:\n{failed[0]}")
        if not self.finished():
            raise TimedOutError(f"{len(self.jobs) - len(self._results)} senders did not report")
        return [self._results[job.index] for job in self.jobs]

    def close(self) -> None:
        """Stop the senders and reap them (terminated after 30 s)."""
        self._stop.set()
        self._go.set()  # one still waiting for the start ends at once
        for proc in self._procs:
            if proc.pid is None:
                continue
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)

    def sent(self) -> dict[str, tuple[str, ...]]:
        """What the senders sent so far reported: id -> destinations."""
        self._take()
        return sent_destinations(self.jobs, list(self._results.values()))


@contextlib.contextmanager
def running_senders(jobs: Sequence[SendJob]) -> Iterator[Senders]:
    """:class:`Senders` of ``jobs`` for a block, started and ready (not yet let go)."""
    senders = Senders(jobs)
    try:
        senders.start()
        yield senders
    finally:
        senders.close()


def make_jobs(
    connection: Connection,
    topics: Sequence[str],
    load: BenchLoad,
    senders: int,
    *,
    first_index: int = 0,
    allow_offline: bool = False,
    max_seconds: float = 3600.0,
) -> list[SendJob]:
    """``load`` split over ``senders`` jobs numbered from ``first_index``, sending
    through ``connection``."""
    return [
        SendJob(connection, tuple(topics), first_index + i, part, allow_offline, max_seconds)
        for i, part in enumerate(split_load(load, senders))
    ]


def expected_deliveries(sent: Mapping[str, tuple[str, ...]]) -> int:
    """Deliveries the sent messages make: one per destination."""
    return sum(len(dests) for dests in sent.values())
