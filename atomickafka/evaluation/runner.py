"""One run of the suite: a scenario through one variant, checked and recorded.

A run gets fresh topic names, starts its system (one AtomicKafka node per topic under
``running_cluster``, or the sequencer's fan-out process), sends one unmeasured warm-up
multicast through every topic, then starts the client processes together and counts
deliveries as they arrive (a progress bar per run) until every destination of every
message has delivered, or nothing arrives for ``stall_timeout_s``. Then it stops the
system, runs the order checker on everything ``AtomicKafkaClient.deliveries()``
returns at every topic, and records every record of the run (see
:mod:`~atomickafka.evaluation.recording`). The outcome is a
:class:`~atomickafka.evaluation.results.RunInfo`, also written as ``run.json``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from tqdm import tqdm

from atomickafka.client import AtomicKafkaClient, Delivery, DeliveryError, DestinationError
from atomickafka.evaluation.clients import ClientJob, ClientResult, client_process, make_sender
from atomickafka.evaluation.clients import payload as measured_value
from atomickafka.evaluation.measuring import WARMUP_VALUE, DeliveryCounter, warm_up
from atomickafka.evaluation.recording import RecordedTopic, Role, SentRow, record_run
from atomickafka.evaluation.results import RunInfo
from atomickafka.evaluation.scenarios import ClientPlan, Scenario, plan_clients
from atomickafka.evaluation.sequencer import SEQUENCER_ID, running_sequencer
from atomickafka.evaluation.variants import System, Variant
from atomickafka.kafka.admin import ensure_topics
from atomickafka.kafka.consumer import make_consumer, watermarks
from atomickafka.kafka.settings import admin_config
from atomickafka.kafka.topics import (
    STATUS_TOPIC,
    Layout,
    dead_letter_topic,
    delivery_topic,
    input_topic,
    layers_topic,
)
from atomickafka.node.config import ClusterConfig, NodeConfig
from atomickafka.node.launch import cluster_keys, running_cluster
from atomickafka.verify.checker import check, deliveries_from_client, sent_from_pairs

__all__ = ["RunError", "RunSpec", "run_one"]

log = logging.getLogger("atomickafka.eval.runner")


class RunError(RuntimeError):
    """A run could not go on (a client failed, the warm-up was not delivered, ...)."""


#: What ends a run as failed (reported in its RunInfo) while the suite goes on: the
#: run's own failures, Kafka's, time-outs and I/O, writes the broker did not accept, and
#: a destination whose node went away. Anything else is a bug and is raised.
_RUN_FAILURES = (RunError, KafkaException, OSError, DeliveryError, DestinationError)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: a scenario, a variant, the load's size and where the run's files go."""

    run: str
    scenario: Scenario
    variant: Variant
    topics: tuple[str, ...]
    clients: int
    messages_per_client: int
    run_dir: Path
    pace_ms: float = 0.0
    overrides: Mapping[str, str] = field(default_factory=dict)
    stall_timeout_s: float = 120.0
    max_run_s: float = 3600.0
    progress: bool = True
    record: bool = True
    partitions: int = 1
    #: The suite's unmeasured warm-up run (it says so on its progress bar).
    warmup: bool = False

    @property
    def title(self) -> str:
        """What the run is called on its progress bar."""
        if self.warmup:
            return f"warm-up run (unmeasured, {self.variant.label})"
        return f"{self.variant.label} {self.scenario.name}"

    @property
    def plans(self) -> list[ClientPlan]:
        """Every client's messages."""
        return plan_clients(self.scenario, self.topics, self.clients, self.messages_per_client)

    @property
    def sequencer_topic(self) -> str:
        """The baseline's one-partition topic (used by the sequencer variant only)."""
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
        if self.variant.system is System.SEQUENCER:
            return [
                RecordedTopic(self.sequencer_topic, SEQUENCER_ID, Role.INPUT),
                *(RecordedTopic(t, t, Role.DELIVERY, holds_deliveries=True) for t in self.topics),
            ]
        out: list[RecordedTopic] = []
        for topic in self.topics:
            inbox = input_topic(topic, self.layout)
            out.append(RecordedTopic(inbox, topic, Role.INPUT, holds_deliveries=inbox == topic))
            if inbox != topic:
                out.append(RecordedTopic(topic, topic, Role.DELIVERY, holds_deliveries=True))
            out.append(RecordedTopic(dead_letter_topic(topic), topic, Role.DEAD_LETTER))
            if self.partitions > 1:
                out.append(RecordedTopic(layers_topic(topic), topic, Role.LAYERS))
        keys = frozenset(cluster_keys(self.topics, self.partitions))
        status = RecordedTopic(STATUS_TOPIC, "", Role.STATUS, start_offset=status_start, keys=keys)
        return [*out, status]


def _status_end(bootstrap: str, overrides: Mapping[str, str]) -> int:
    """The status topic's current end offset (0 if it does not exist yet)."""
    consumer = make_consumer(bootstrap, None, overrides)
    try:
        meta = consumer.list_topics(STATUS_TOPIC, timeout=10).topics.get(STATUS_TOPIC)
        if meta is None or meta.error is not None:
            return 0
        return watermarks(consumer, TopicPartition(STATUS_TOPIC, 0))[1]
    finally:
        consumer.close()


@contextlib.contextmanager
def _running_system(bootstrap: str, spec: RunSpec) -> Iterator[None]:
    algorithm = spec.variant.algorithm
    if algorithm is None:  # the sequencer
        ensure_topics(
            AdminClient(admin_config(bootstrap, spec.overrides)),
            [spec.sequencer_topic, *spec.topics],
        )
        with running_sequencer(bootstrap, spec.sequencer_topic, overrides=spec.overrides):
            yield
        return
    node = NodeConfig(
        bootstrap,
        spec.topics[0],
        algorithm=algorithm,
        layout=spec.layout,
        partitions=spec.partitions,
        overrides=spec.overrides,
        log_level="warning",
    )
    with running_cluster(
        ClusterConfig(tuple(spec.topics), node), log_path=spec.run_dir / "nodes.log"
    ):
        yield


def _job(bootstrap: str, spec: RunSpec, plan: ClientPlan) -> ClientJob:
    return ClientJob(
        bootstrap=bootstrap,
        plan=plan,
        system=spec.variant.system,
        layout=spec.layout,
        pace_ms=spec.pace_ms,
        sequencer_topic=spec.sequencer_topic,
        overrides=dict(spec.overrides),
    )


def _warm_up(bootstrap: str, spec: RunSpec, counter: DeliveryCounter) -> list[SentRow]:
    """The suite's warm-up multicasts (:func:`~atomickafka.evaluation.measuring.warm_up`),
    as recording rows."""
    topics = spec.topics
    sender = make_sender(_job(bootstrap, spec, ClientPlan(-1, "warmup", topics[0], ())))
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


def _drive_clients(
    bootstrap: str, spec: RunSpec, plans: Sequence[ClientPlan], counter: DeliveryCounter
) -> tuple[list[ClientResult], bool]:
    """Start the clients together; count deliveries until all came or progress stalled."""
    expected = sum(len(d) for plan in plans for d in plan.destinations)
    ctx = mp.get_context("spawn")
    results_queue = ctx.Queue()
    go = ctx.Event()
    readies = [ctx.Event() for _ in plans]
    procs = [
        ctx.Process(
            target=client_process,
            args=(_job(bootstrap, spec, plan), ready, go, results_queue),
            name=f"atomickafka-eval-{plan.client_id}",
        )
        for plan, ready in zip(plans, readies, strict=True)
    ]
    results: dict[str, ClientResult] = {}
    bar: tqdm[Any] | None = None
    try:
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + 120
        while not all(r.is_set() for r in readies):
            _drain(results_queue, results)  # a client that failed to start says why
            if time.monotonic() > deadline:
                raise RunError("client processes not ready within 120s")
            time.sleep(0.05)
        go.set()
        bar = tqdm(
            total=expected,
            desc=spec.title,
            unit="dlv",
            disable=not spec.progress,
            mininterval=0.5 if sys.stderr.isatty() else 10.0,
            file=sys.stderr,
        )
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
        bar.close()
        deadline = time.monotonic() + 120
        while len(results) < len(plans) and time.monotonic() < deadline:
            _drain(results_queue, results)
            time.sleep(0.05)
        if len(results) < len(plans):
            raise RunError(f"only {len(results)} of {len(plans)} clients reported")
        return [results[plan.client_id] for plan in plans], counter.measured >= expected
    finally:
        if bar is not None:
            bar.close()
        for proc in procs:
            if proc.pid is None:
                continue  # never started
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)


def _read_deliveries(
    bootstrap: str, spec: RunSpec, expected: Mapping[str, int], idle_s: float = 1.5
) -> dict[str, list[Delivery]]:
    """Every topic's deliveries as ``AtomicKafkaClient.deliveries()`` returns them, read
    in parallel; a topic that shows fewer than expected is read again (a slow first
    fetch is not a lost message), at most three times."""
    reader = AtomicKafkaClient(bootstrap, layout=spec.layout, config=spec.overrides)

    def read(topic: str) -> list[Delivery]:
        got: list[Delivery] = []
        for _ in range(3):
            got = list(reader.deliveries(topic, from_beginning=True, timeout_s=idle_s))
            if len(got) >= expected.get(topic, 0):
                break
        return got

    with ThreadPoolExecutor(max_workers=len(spec.topics)) as pool:
        lists = pool.map(read, spec.topics)
        return dict(zip(spec.topics, lists, strict=True))


def _sent_rows(
    plans: Sequence[ClientPlan], results: Sequence[ClientResult]
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
            values[mid] = (dests, measured_value(plan.index, seq, len(dests) > 1, sent))
    return rows, values


def run_one(bootstrap: str, spec: RunSpec) -> RunInfo:
    """Run ``spec``: load, wait, check, record. Never raises for a failed run: the
    returned (and saved) :class:`RunInfo` says what went wrong."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    variant = spec.variant
    plans = spec.plans
    info = RunInfo(
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
        sent=sum(len(p.destinations) for p in plans),
        expected_deliveries=sum(len(d) for p in plans for d in p.destinations),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    started = time.monotonic()
    fields = {"run": spec.run, "topics": list(spec.topics)}
    log.info("run starting", extra={"fields": fields})
    try:
        status_start = _status_end(bootstrap, spec.overrides)
        counter = DeliveryCounter(bootstrap, spec.delivery_topics(), spec.overrides)
        with contextlib.closing(counter):
            with _running_system(bootstrap, spec):
                warm = _warm_up(bootstrap, spec, counter)
                results, info.complete = _drive_clients(bootstrap, spec, plans, counter)
            info.counted_deliveries = counter.measured
        rows, values = _sent_rows(plans, results)
        sent = {row.message_id: (row.destinations, WARMUP_VALUE) for row in warm}
        sent.update(values)
        per_topic = {t: sum(t in dests for dests, _ in sent.values()) for t in spec.topics}
        deliveries = _read_deliveries(bootstrap, spec, per_topic)
        report = check(sent_from_pairs(sent), deliveries_from_client(deliveries))
        info.check_ok = report.ok
        info.check_summary = report.summary()
        info.check_counts = {k.value: n for k, n in report.counts.items()}
        if spec.record:
            record_run(
                bootstrap,
                spec.run,
                spec.recorded_topics(status_start),
                [*warm, *rows],
                spec.run_dir,
                overrides=spec.overrides,
            )
    except _RUN_FAILURES as exc:
        log.exception("run failed", extra={"fields": fields})
        info.error = f"{type(exc).__name__}: {exc}"
    info.wall_s = round(time.monotonic() - started, 2)
    info.save(spec.run_dir / "run.json")
    level = logging.INFO if info.ok else logging.ERROR
    log.log(level, "run finished", extra={"fields": {**fields, "verdict": info.verdict}})
    return info
