"""One run of the suite: a scenario through one variant, checked and recorded.

A run gets fresh topic names, starts its system (one AtomicKafka node per topic under
``running_cluster``, or a sequencer baseline's fan-out process) and the live audit beside it
(:mod:`~atomickafka.evaluation.suite.run_audit`), sends one unmeasured warm-up multicast
through every topic, then starts the client processes together and counts deliveries as
they arrive (a progress bar per run) until every destination of every message has
delivered, or nothing arrives for ``stall_timeout_s``. Then it stops the system and the
audit (which reads on to the topics' ends and gives its verdict), runs the order checker
on everything ``AtomicKafkaClient.deliveries()`` returns at every topic, and records
every record of the run (see :mod:`~atomickafka.evaluation.suite.recording`). The outcome is
a :class:`~atomickafka.evaluation.suite.results.RunInfo`, also written as ``run.json``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaException
from tqdm import tqdm

from atomickafka.audit.records import Kind
from atomickafka.client import (
    Delivery,
    DeliveryError,
    DeliveryReader,
    DestinationError,
)
from atomickafka.errors import TimedOutError
from atomickafka.evaluation.cost.accounting import RunCost
from atomickafka.evaluation.cost.processes import CpuMeter, ProcessRole, track_broker, track_cluster
from atomickafka.evaluation.cost.topic_scan import (
    cluster_topics,
    destination_topics,
    end_offset,
    sequencer_topics,
)
from atomickafka.evaluation.errors import RunError
from atomickafka.evaluation.load.bare import BARE_ID, UNORDERED
from atomickafka.evaluation.load.baselines import Baseline, running_baseline
from atomickafka.evaluation.load.clients import ClientJob, ClientResult, client_process, make_sender
from atomickafka.evaluation.load.clients import payload as measured_value
from atomickafka.evaluation.load.destinations import DestinationMix
from atomickafka.evaluation.load.measuring import (
    WARMUP_VALUE,
    DeliveryCounter,
    delivery_flow,
    warm_up,
)
from atomickafka.evaluation.load.scenarios import ClientPlan, Scenario, plan_clients
from atomickafka.evaluation.load.variants import System, Variant
from atomickafka.evaluation.suite.recording import (
    RecordedTopic,
    SentRow,
    record_run,
    recorded_traffic,
)
from atomickafka.evaluation.suite.results import RunInfo
from atomickafka.evaluation.suite.run_audit import AuditOutcome, RunAudit, running_audit
from atomickafka.kafka.admin import admin_client, ensure_topics
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.status import STATUS_READ_WINDOW_S, read_statuses
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    delivery_topic,
)
from atomickafka.localkafka.errors import BrokerError
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.node.launch import cluster_keys, running_cluster
from atomickafka.verify.checker import check, deliveries_from_client, sent_from_pairs

__all__ = ["RunError", "RunSpec", "run_one"]

log = logging.getLogger("atomickafka.eval.runner")


#: What ends a run as failed (reported in its RunInfo) while the suite goes on: the
#: run's own failures, Kafka's, time-outs and I/O, writes the broker did not accept, a
#: destination whose node went away, and a Kafka Streams baseline that could not be
#: built or started. Anything else is a bug and is raised.
_RUN_FAILURES = (RunError, KafkaException, OSError, DeliveryError, DestinationError, BrokerError)

#: What the order check of the bare pipe says first: it is held to less.
_BARE_PIPE_CHECK = (
    "bare pipe: nothing orders it, so only integrity and validity are held against it "
    "(order, gap, cycle and timestamp-order findings are expected)"
)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: a scenario, a variant, the load's size, where the run's files go, and
    how the run reaches Kafka (its nodes, clients, readers and audit alike)."""

    run: str
    scenario: Scenario
    variant: Variant
    topics: tuple[str, ...]
    clients: int
    messages_per_client: int
    run_dir: Path
    connection: Connection
    pace_ms: float = 0.0
    stall_timeout_s: float = 120.0
    max_run_s: float = 3600.0
    progress: bool = True
    record: bool = True
    partitions: int = 1
    #: The suite's unmeasured warm-up run (it says so on its progress bar).
    warmup: bool = False
    #: Bytes of each measured value (0: the probe alone); each multicast's destination
    #: count drawn from ``fanout`` (``None``: every topic) with ``seed``.
    record_size: int = 0
    fanout: tuple[int, int] | None = None
    seed: int = 0
    #: The many-topic workload: each message's destinations drawn from this mix.
    mix: DestinationMix | None = None
    #: Signing secrets (§4.14): AtomicKafka's nodes and clients sign, its readers verify.
    secret_file: str | None = None
    #: AtomicKafka's nodes read proposals from control logs (§7).
    control_log: bool = True
    #: Topics whose nodes share a process (``--topics-per-process``, §6.7).
    topics_per_process: int = 1

    @property
    def signing(self) -> str | None:
        """The secret file this run's nodes, clients and readers use: the baselines
        (the sequencers, the bare pipe) are no AtomicKafka members and write nothing
        signed."""
        return self.secret_file if self.variant.system is System.ATOMICKAFKA else None

    @property
    def title(self) -> str:
        """What the run is called on its progress bar."""
        if self.warmup:
            return f"warm-up run (unmeasured, {self.variant.label})"
        return f"{self.variant.label} {self.scenario.name}"

    @property
    def plans(self) -> list[ClientPlan]:
        """Every client's messages."""
        return plan_clients(
            self.scenario,
            self.topics,
            self.clients,
            self.messages_per_client,
            fanout=self.fanout,
            seed=self.seed,
            mix=self.mix,
        )

    @property
    def sequencer_topic(self) -> str:
        """The one-partition topic of a sequencer baseline (used by those variants only)."""
        return f"{self.topics[0].rsplit('-', 1)[0]}-seq"

    @property
    def layout(self) -> Layout:
        """The layout clients and readers use."""
        return self.variant.layout

    def delivery_topics(self) -> dict[str, str]:
        """Kafka topic holding each AtomicKafka topic's deliveries -> that topic."""
        return {delivery_topic(t): t for t in self.topics}

    def recorded_topics(self, status_start: int) -> list[RecordedTopic]:
        """Every Kafka topic the run writes, with its owner and role."""
        baseline = self.variant.system.baseline
        if baseline is not None:
            return sequencer_topics(self.sequencer_topic, baseline.sender_id, self.topics)
        if self.variant.system is System.KAFKA:
            return destination_topics(self.topics)
        return cluster_topics(
            self.topics,
            self.layout,
            self.partitions,
            status_start,
            control_log=self.control_log,
        )


@contextlib.contextmanager
def _running_system(spec: RunSpec, meter: CpuMeter) -> Iterator[None]:
    """The run's system for the block, its processes tracked by ``meter``."""
    algorithm = spec.variant.algorithm
    if spec.variant.system is System.KAFKA:  # the bare pipe: topics, and no process
        ensure_topics(admin_client(spec.connection), spec.topics)
        yield
        return
    baseline = spec.variant.system.baseline
    if baseline is not None:  # a sequencer
        where = spec.connection
        ensure_topics(admin_client(where), [spec.sequencer_topic, *spec.topics])
        work_dir = spec.run_dir / baseline.value
        with running_baseline(baseline, where, spec.sequencer_topic, work_dir) as proc:
            if proc.pid is not None:
                role = ProcessRole.STREAMS if baseline.jvm else ProcessRole.SEQUENCER
                meter.track(proc.pid, role, baseline.value)
            yield
        return
    assert algorithm is not None
    node = NodeConfig(
        spec.connection.bootstrap,
        spec.topics[0],
        algorithm=algorithm,
        layout=spec.layout,
        partitions=spec.partitions,
        overrides=spec.connection.settings,
        log_level="warning",
        secret_file=spec.signing,
        control_log=spec.control_log,
    )
    with running_cluster(
        ClusterConfig(tuple(spec.topics), node, topics_per_process=spec.topics_per_process),
        log_path=spec.run_dir / "nodes.log",
    ) as cluster:
        keys = set(cluster_keys(spec.topics, spec.partitions))
        statuses = read_statuses(spec.connection, window_s=STATUS_READ_WINDOW_S)
        track_cluster(meter, cluster.pid, [s for k, s in statuses.items() if k in keys])
        yield


def _job(spec: RunSpec, plan: ClientPlan) -> ClientJob:
    return ClientJob(
        connection=spec.connection,
        plan=plan,
        system=spec.variant.system,
        layout=spec.layout,
        pace_ms=spec.pace_ms,
        record_size=spec.record_size,
        sequencer_topic=spec.sequencer_topic,
        secret_file=spec.signing,
    )


def _warm_up(spec: RunSpec, counter: DeliveryCounter) -> list[SentRow]:
    """The suite's warm-up multicasts (:func:`~atomickafka.evaluation.load.measuring.warm_up`),
    as recording rows."""
    topics = spec.topics
    sender = make_sender(_job(spec, ClientPlan(-1, "warmup", topics[0], ())))
    sent = warm_up(sender, topics, counter)
    return [SentRow(w.message_id, "warmup", w.via, topics, w.send_us, warmup=True) for w in sent]


def _drain(results_queue: Any, into: dict[str, ClientResult]) -> None:
    while True:
        try:
            result: ClientResult = results_queue.get_nowait()
        except queue.Empty:
            return
        if result.error is not None:
            raise RunError(f"{result.client_id} failed:\n{result.error}")
        into[result.client_id] = result


def _wait_until_ready(
    readies: Sequence[Any], results_queue: Any, results: dict[str, ClientResult]
) -> None:
    """Wait (at most 120 s) until every client process is ready to send; a client that
    failed to start says why (:class:`RunError`)."""
    deadline = time.monotonic() + 120
    while not all(r.is_set() for r in readies):
        _drain(results_queue, results)
        if time.monotonic() > deadline:
            raise RunError("client processes not ready within 120s")
        time.sleep(0.05)


def _wait_for_warm_ups(counter: DeliveryCounter, total: int, timeout_s: float = 60) -> None:
    """Wait until the clients' warm-up messages (one each, to its home topic) are
    delivered: one delivered after the start signal would fall into the measured window
    and count as traffic of the run."""
    deadline = time.monotonic() + timeout_s
    while counter.warmup < total:
        if time.monotonic() > deadline:
            raise RunError(f"the clients' warm-up messages not delivered within {timeout_s:.0f}s")
        counter.poll(0.05)


def _count_deliveries(
    spec: RunSpec,
    counter: DeliveryCounter,
    expected: int,
    results_queue: Any,
    results: dict[str, ClientResult],
) -> None:
    """Count deliveries on a progress bar until ``expected`` came, or none came for
    ``spec.stall_timeout_s``, or the run took ``spec.max_run_s``; meanwhile take the
    clients' reports (a failed client ends the run)."""
    with tqdm(
        total=expected,
        desc=spec.title,
        unit="dlv",
        disable=not spec.progress,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,
        file=sys.stderr,
    ) as bar:
        started = last_progress = time.monotonic()
        while counter.measured < expected:
            now = time.monotonic()
            if now - last_progress > spec.stall_timeout_s or now - started > spec.max_run_s:
                break
            new = counter.poll(0.2)
            if new:
                bar.update(new)
                last_progress = time.monotonic()
            _drain(results_queue, results)


def _collect_results(results_queue: Any, results: dict[str, ClientResult], clients: int) -> None:
    """Wait (at most 120 s) until all ``clients`` have reported what they sent."""
    deadline = time.monotonic() + 120
    while len(results) < clients and time.monotonic() < deadline:
        _drain(results_queue, results)
        time.sleep(0.05)
    if len(results) < clients:
        raise RunError(f"only {len(results)} of {clients} clients reported")


def _stop_clients(procs: Sequence[BaseProcess]) -> None:
    """Join every started client process; terminate one that does not end in 30 s."""
    for proc in procs:
        if proc.pid is None:
            continue  # never started
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
            proc.join(10)


def _drive_clients(
    spec: RunSpec,
    plans: Sequence[ClientPlan],
    counter: DeliveryCounter,
    meter: CpuMeter,
    on_counted: Callable[[], None] | None = None,
) -> tuple[list[ClientResult], bool]:
    """Start the clients together; count deliveries until all came or progress stalled.
    ``meter`` measures the window from the start signal to that moment, when
    ``on_counted`` is called."""
    expected = sum(len(d) for plan in plans for d in plan.destinations)
    ctx = mp.get_context("spawn")
    results_queue = ctx.Queue()
    go, done = ctx.Event(), ctx.Event()
    readies = [ctx.Event() for _ in plans]
    procs = [
        ctx.Process(
            target=client_process,
            args=(_job(spec, plan), ready, go, results_queue, done),
            name=f"atomickafka-eval-{plan.client_id}",
        )
        for plan, ready in zip(plans, readies, strict=True)
    ]
    results: dict[str, ClientResult] = {}
    try:
        warm_before = counter.warmup
        for proc in procs:
            proc.start()
        _wait_until_ready(readies, results_queue, results)
        _wait_for_warm_ups(counter, warm_before + len(plans))
        for plan, proc in zip(plans, procs, strict=True):
            if proc.pid is not None:
                meter.track(proc.pid, ProcessRole.CLIENT, plan.client_id)
        meter.start()
        go.set()
        _count_deliveries(spec, counter, expected, results_queue, results)
        meter.stop()
        if on_counted is not None:
            on_counted()
        done.set()
        _collect_results(results_queue, results, len(plans))
        return [results[plan.client_id] for plan in plans], counter.measured >= expected
    finally:
        done.set()
        _stop_clients(procs)


#: Who writes a baseline's deliveries (AtomicKafka's are its nodes' and mergers').
_BASELINE_WRITERS: Final = {
    **{System(b.value): (b.sender_id,) for b in Baseline},
    System.KAFKA: (BARE_ID,),
}


def _read_deliveries(
    spec: RunSpec, expected: Mapping[str, int], idle_s: float = 1.5
) -> dict[str, list[Delivery]]:
    """Every topic's deliveries as ``AtomicKafkaClient.deliveries()`` returns them, read
    in parallel; a topic that shows fewer than expected is read again (a slow first
    fetch is not a lost message), at most three times."""
    writers = _BASELINE_WRITERS.get(spec.variant.system)  # None: the topic's node or merger
    ordered = spec.variant.system is not System.KAFKA  # the bare pipe orders nothing

    def read(topic: str) -> list[Delivery]:
        got: list[Delivery] = []
        for _ in range(3):
            reader = DeliveryReader(
                spec.connection,
                topic,
                secret_file=spec.signing,
                writers=writers,
                ordered=ordered,
            )
            with reader:
                got = list(reader.deliveries(timeout_s=idle_s))
            if reader.forged:  # not validly signed: dropped, never checked as a delivery
                log.warning(
                    "forged deliveries dropped",
                    extra={"fields": {"topic": topic, "forged": reader.forged}},
                )
            if len(got) >= expected.get(topic, 0):
                break
        return got

    with ThreadPoolExecutor(max_workers=len(spec.topics)) as pool:
        lists = pool.map(read, spec.topics)
        return dict(zip(spec.topics, lists, strict=True))


def _sent_rows(
    plans: Sequence[ClientPlan], results: Sequence[ClientResult], record_size: int
) -> tuple[list[SentRow], dict[str, tuple[tuple[str, ...], Any]]]:
    """What the clients sent, as recording rows and as the checker's ground truth (the
    value rebuilt exactly as the client built it)."""
    rows: list[SentRow] = []
    values: dict[str, tuple[tuple[str, ...], Any]] = {}
    for plan, result in zip(plans, results, strict=True):
        if len(result.message_ids) != len(plan.destinations):
            raise RunError(
                f"{plan.client_id} sent {len(result.message_ids)} of "
                f"{len(plan.destinations)} messages"
            )
        home = (plan.home_topic,)
        rows.append(
            SentRow(
                result.warmup_id,
                plan.client_id,
                plan.home_topic,
                home,
                result.warmup_us,
                warmup=True,
            )
        )
        values[result.warmup_id] = (home, WARMUP_VALUE)
        sends = zip(result.message_ids, plan.destinations, result.send_us, strict=True)
        for seq, (mid, dests, sent) in enumerate(sends):
            rows.append(SentRow(mid, plan.client_id, plan.home_topic, dests, sent))
            values[mid] = (
                dests,
                measured_value(plan.index, seq, len(dests) > 1, sent, record_size),
            )
    return rows, values


def _cost(spec: RunSpec, meter: CpuMeter, delivered: int, records: Path) -> RunCost:
    """The run's cost over the window from the clients' start to the last delivery
    counted: every process's CPU, and the recorded records written in it by type."""
    window = meter.window
    if window is None:
        raise RunError("the run's window was never measured")
    traffic = recorded_traffic(records, window.start_ms, window.end_ms)
    return RunCost(spec.variant.system.value, delivered, window.seconds, window.processes, traffic)


#: What the live audit's process may fail with; the run goes on without its verdict.
_AUDIT_FAILURES = (RunError, TimedOutError, KafkaException, OSError)
#: What the audit is expected to find in the bare pipe, which orders nothing.
_BARE_PIPE_AUDIT_KINDS: Final = frozenset({Kind.ORDER.value})
_BARE_PIPE_AUDIT: Final = (
    "nothing orders the bare pipe, so the audit is expected to find its topics out of "
    "order; only a missing, duplicate, mismatched or misaddressed delivery fails it"
)
#: How many of the audit's violations a run's facts keep.
_AUDIT_EXAMPLES: Final = 5


def _start_audit(spec: RunSpec, info: RunInfo, stack: contextlib.ExitStack) -> RunAudit | None:
    """The live audit beside the run, reading its delivery topics (they exist once its
    system is up), ended when ``stack`` closes; ``None`` when it could not start."""
    try:
        return stack.enter_context(
            running_audit(
                spec.connection,
                list(spec.delivery_topics()),
                spec.run_dir / "audit.log",
                quiet=spec.variant.system is System.KAFKA,
                writers=_BASELINE_WRITERS.get(spec.variant.system),
            )
        )
    except _AUDIT_FAILURES as exc:
        log.warning("live audit not started: %s", exc)
        info.audit_summary = f"audit not run: {exc}"
        return None


def _finish_audit(audit: RunAudit | None, spec: RunSpec, info: RunInfo) -> None:
    """Stop the audit once the run's system stopped; its verdict beside the checker's."""
    if audit is None:
        return
    try:
        outcome = audit.finish()
    except _AUDIT_FAILURES as exc:
        log.warning("live audit failed: %s", exc)
        info.audit_summary = f"audit failed: {exc}"
        return
    _take_audit(outcome, spec.variant.system, info)


def _take_audit(outcome: AuditOutcome, system: System, info: RunInfo) -> None:
    """The audit's outcome into the run's facts. The bare pipe orders nothing: the
    audit's ``order`` findings are expected there, and only other kinds fail it."""
    info.audit_counts = dict(outcome.counts)
    info.audit_checked = outcome.checked
    info.audit_lag_s = None if outcome.lag_s is None else round(outcome.lag_s, 3)
    info.audit_cpu_s = round(outcome.cpu_s, 3)
    info.audit_examples = outcome.violations[:_AUDIT_EXAMPLES]
    unexpected = set(outcome.counts)
    if system is System.KAFKA:
        unexpected -= _BARE_PIPE_AUDIT_KINDS
    info.audit_ok = outcome.read_to_end and not unexpected
    summary = outcome.summary
    if system is System.KAFKA and info.audit_ok:
        findings = outcome.counts.get(Kind.ORDER.value, 0)
        summary = (
            f"audit not applicable to order: {_BARE_PIPE_AUDIT}; {findings:,} order findings, "
            f"no other kind, {outcome.checked:,} deliveries checked"
        )
    if not outcome.read_to_end:
        summary = f"audit incomplete: not every topic read to its end ({summary})"
    lag = (
        "not caught up when the run stopped"
        if outcome.lag_s is None
        else f"had read everything {outcome.lag_s:.2f} s after the last delivery was counted"
    )
    cost = "" if outcome.us_per_record is None else f", {outcome.us_per_record:,.0f} CPU-µs"
    info.audit_summary = (
        f"{summary}; live beside the run: {lag}; its own process{cost} per delivery "
        f"({outcome.cpu_s:.2f} CPU-s, in no cost of the run)"
    )


def run_one(spec: RunSpec) -> RunInfo:
    """Run ``spec`` on its connection's Kafka: load, wait, check, record. Never raises
    for a failed run: the returned (and saved) :class:`RunInfo` says what went wrong."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    variant = spec.variant
    plans = spec.plans
    info = _new_info(spec, variant, plans)
    started = time.monotonic()
    fields = {"run": spec.run, "topics": list(spec.topics)}
    log.info("run starting", extra={"fields": fields})
    try:
        where = spec.connection
        status_start = end_offset(where, STATUS_TOPIC)
        counter = DeliveryCounter(where, spec.delivery_topics(), secret_file=spec.signing)
        meter = CpuMeter()
        track_broker(meter, where)
        meter.track(os.getpid(), ProcessRole.MEASURER, "measuring consumer (the suite)")
        with contextlib.closing(counter), contextlib.ExitStack() as beside:
            with _running_system(spec, meter):
                audit = _start_audit(spec, info, beside)
                warm = _warm_up(spec, counter)
                results, info.complete = _drive_clients(
                    spec, plans, counter, meter, audit.mark if audit else None
                )
            info.counted_deliveries = counter.measured
            info.flow = _flow(counter, results)
            delivered = len(counter.completed)
            _finish_audit(audit, spec, info)
        rows, values = _sent_rows(plans, results, spec.record_size)
        sent = {row.message_id: (row.destinations, WARMUP_VALUE) for row in warm}
        sent.update(values)
        per_topic = {t: sum(t in dests for dests, _ in sent.values()) for t in spec.topics}
        deliveries = _read_deliveries(spec, per_topic)
        report = check(sent_from_pairs(sent), deliveries_from_client(deliveries))
        info.check_ok = report.ok
        info.check_summary = report.summary()
        if variant.system is System.KAFKA:  # orders nothing: integrity and validity only
            info.check_ok = not set(report.counts) - UNORDERED
            info.check_summary = f"{_BARE_PIPE_CHECK}\n{info.check_summary}"
        info.check_counts = {k.value: n for k, n in report.counts.items()}
        if spec.record:
            recording = record_run(
                where, spec.run, spec.recorded_topics(status_start), [*warm, *rows], spec.run_dir
            )
            info.cost = _cost(spec, meter, delivered, recording.records_path).to_dict()
    except _RUN_FAILURES as exc:
        log.exception("run failed", extra={"fields": fields})
        info.error = f"{type(exc).__name__}: {exc}"
    info.wall_s = round(time.monotonic() - started, 2)
    info.save(spec.run_dir / "run.json")
    level = logging.INFO if info.ok else logging.ERROR
    log.log(level, "run finished", extra={"fields": {**fields, "verdict": info.verdict}})
    return info


def _flow(counter: DeliveryCounter, results: Sequence[ClientResult]) -> dict[str, Any] | None:
    """How steadily the deliveries came until the last client's last send
    (:func:`~atomickafka.evaluation.load.measuring.delivery_flow`)."""
    stop_us = max((r.send_us[-1] for r in results if r.send_us), default=None)
    flow = None if stop_us is None else delivery_flow(counter.delivered_s, stop_us / 1e6)
    return None if flow is None else flow.to_dict()


def _new_info(spec: RunSpec, variant: Variant, plans: Sequence[ClientPlan]) -> RunInfo:
    """The run's record before it runs: what it is, what it will send, when it began."""
    return RunInfo(
        run=spec.run,
        scenario=spec.scenario.name,
        multicast_percent=spec.scenario.multicast_percent,
        variant=variant.label,
        system=variant.system.value,
        algorithm=variant.algorithm.value if variant.algorithm is not None else "",
        layout=variant.layout.value,
        topics=list(spec.topics),
        clients=spec.clients,
        messages_per_client=spec.messages_per_client,
        pace_ms=spec.pace_ms,
        record_size=spec.record_size,
        fanout="" if spec.fanout is None else f"{spec.fanout[0]}-{spec.fanout[1]}",
        mix="" if spec.mix is None else spec.mix.describe(),
        sent=sum(len(p.destinations) for p in plans),
        expected_deliveries=sum(len(d) for p in plans for d in p.destinations),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
