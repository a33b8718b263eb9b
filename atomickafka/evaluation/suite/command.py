"""``atomickafka eval``: the whole suite, from the runs to the report.

Scenarios x variants runs (scenario by scenario, each variant in turn, so that the
machine's drift over time touches every variant alike), preceded by one small
unmeasured run that warms the broker up. Then one local Spark session computes every
run's metrics from the recorded Parquet files, and the report is written.

The output folder::

    OUT/report.md                 the report (plots in OUT/plots/)
    OUT/suite.json                settings, environment, every run's outcome
    OUT/runs/<run>/               run.json, records.parquet, messages.parquet, nodes.log
    OUT/metrics/<run>.json        the PySpark job's figures
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomickafka.core.engine import DEFAULT_ALGORITHM, Algorithm
from atomickafka.evaluation.load.destinations import (
    DEFAULT_TOPIC_COUNTS,
    HOT,
    MANY,
    DestinationMix,
)
from atomickafka.evaluation.load.scenarios import Scenario, scenario
from atomickafka.evaluation.load.variants import Comparison, Variant, variants_for
from atomickafka.evaluation.suite.environment import describe_environment
from atomickafka.evaluation.suite.report import ReportInput, render_report
from atomickafka.evaluation.suite.results import RunInfo, RunMetrics, RunResult
from atomickafka.evaluation.suite.runner import RunSpec, run_one
from atomickafka.evaluation.suite.spark import DEFAULT_MASTER, compute_metrics, spark_session
from atomickafka.kafka.connection import Connection
from atomickafka.kafka.properties import masked
from atomickafka.kafka.topics import Layout

__all__ = ["SuiteOutcome", "SuiteSettings", "many_topic_runs", "run_suite", "suite_summary"]

log = logging.getLogger("atomickafka.eval")

#: The unmeasured warm-up run: a JIT-cold broker is slow for its first minute of load.
_WARMUP_SCENARIO = "90-10"
_WARMUP_MESSAGES = 2000


@dataclass(frozen=True, slots=True)
class SuiteSettings:
    """Every choice of a suite (the ``eval`` command's options)."""

    scenarios: tuple[Scenario, ...]
    out: Path
    #: How every run reaches Kafka: the bootstrap servers and the ``-X`` settings.
    connection: Connection
    messages_per_client: int = 20_000
    clients: int = 2
    topics: int = 5
    pace_ms: float = 0.0
    algorithm: Algorithm = DEFAULT_ALGORITHM
    layout: Layout = Layout.SPLIT
    partitions: int = 1
    comparisons: tuple[Comparison, ...] = ()
    window_s: float = 5.0
    spark_master: str = DEFAULT_MASTER
    stall_timeout_s: float = 120.0
    warmup: bool = True
    progress: bool = True
    #: Bytes of each measured value (0: the probe alone, about 60 bytes).
    record_size: int = 0
    #: Each multicast's destination count, drawn from ``LO..HI`` (``None``: every topic).
    fanout: tuple[int, int] | None = None
    seed: int = 0
    #: Signing secrets (§4.14) for the AtomicKafka runs' nodes, clients and readers.
    secret_file: str | None = None
    #: The AtomicKafka runs' nodes read proposals from control logs (§7).
    control_log: bool = True
    #: Topics whose nodes share a process (``--topics-per-process``, §6.7).
    topics_per_process: int = 1
    #: The topic counts of the many-topic workload (``--compare many-topics``).
    topic_counts: tuple[int, ...] = DEFAULT_TOPIC_COUNTS

    @property
    def primary(self) -> Variant:
        """The variant compared with the thesis."""
        return Variant.atomickafka(self.algorithm, self.layout)

    def variants(self) -> list[Variant]:
        """The primary variant, then every compared one."""
        return variants_for(self.primary, self.comparisons, list(Algorithm))

    def rows(self) -> list[tuple[str, str]]:
        """``(setting, value)`` rows for the report."""
        return [
            ("scenarios", ", ".join(s.name for s in self.scenarios)),
            ("clients x messages per client", f"{self.clients} x {self.messages_per_client}"),
            ("topics (one node each)", str(self.topics)),
            ("value size (bytes)", f"{self.record_size} (0: the probe alone, about 60)"),
            (
                "multicast destinations",
                "every topic"
                if self.fanout is None
                else f"{self.fanout[0]}-{self.fanout[1]} topics drawn at random (seed {self.seed})",
            ),
            ("partition layers per topic", str(self.partitions)),
            ("pace (ms between a client's sends)", f"{self.pace_ms:g} (0: unthrottled)"),
            ("variants", ", ".join(v.label for v in self.variants())),
            ("rate window (s)", f"{self.window_s:g}"),
            ("spark master", self.spark_master),
            ("stall timeout (s)", f"{self.stall_timeout_s:g}"),
            ("warm-up run", "yes" if self.warmup else "no"),
            (
                "signed records (--secret-file)",
                "no" if self.secret_file is None else f"yes, {self.secret_file}",
            ),
            ("control logs (--control-log)", "yes" if self.control_log else "no"),
            ("topics per node process (--topics-per-process)", str(self.topics_per_process)),
            (
                "many-topic workload (--compare many-topics)",
                f"{MANY.describe()}, on {', '.join(map(str, self.topic_counts))} topics; "
                f"skewed ({HOT.describe()}) on {max(self.topic_counts)}"
                if Comparison.MANY_TOPICS in self.comparisons
                else "no",
            ),
            (
                "librdkafka overrides (-X)",
                ", ".join(f"{k}={v}" for k, v in masked(self.connection.settings).items()),
            ),
        ]


@dataclass(frozen=True, slots=True)
class SuiteOutcome:
    """Where the report is, every run's result, and the total wall time."""

    report: Path
    results: list[RunResult]
    wall_s: float
    metrics_error: str | None = None

    @property
    def ok(self) -> bool:
        """Every run passed and the metrics were computed."""
        return self.metrics_error is None and all(r.info.ok for r in self.results)


def _spec(
    settings: SuiteSettings,
    tag: str,
    chosen: Scenario,
    variant: Variant,
    mix: tuple[DestinationMix, int] | None = None,
) -> RunSpec:
    run = f"{variant.slug}--{chosen.name}"
    count = settings.topics if mix is None else mix[1]
    topics = tuple(f"ev-{tag}-{variant.slug}-{chosen.name}-t{i}" for i in range(1, count + 1))
    return RunSpec(
        run=run,
        scenario=chosen,
        variant=variant,
        topics=topics,
        clients=settings.clients,
        messages_per_client=settings.messages_per_client,
        run_dir=settings.out / "runs" / run,
        pace_ms=settings.pace_ms,
        connection=settings.connection,
        stall_timeout_s=settings.stall_timeout_s,
        progress=settings.progress,
        partitions=settings.partitions,
        record_size=settings.record_size,
        fanout=settings.fanout,
        seed=settings.seed,
        secret_file=settings.secret_file,
        control_log=settings.control_log,
        topics_per_process=settings.topics_per_process,
        mix=None if mix is None else mix[0],
    )


def many_topic_runs(counts: tuple[int, ...]) -> list[tuple[Scenario, DestinationMix, int]]:
    """The many-topic workload's runs: the :data:`MANY` mix on every topic count, the
    skewed :data:`HOT` one on the largest; each a scenario named ``many-20``, ``hot-20``
    (10 % of its messages multicast)."""
    runs = [(MANY, n) for n in counts] + [(HOT, max(counts))]
    share = round((1 - MANY.single_share) * 100)
    return [(Scenario(f"{mix.name}-{n}", share), mix, n) for mix, n in runs]


def _warm_up(settings: SuiteSettings, tag: str) -> None:
    spec = _spec(settings, f"{tag}w", scenario(_WARMUP_SCENARIO), settings.primary)
    warm = RunSpec(
        run="warmup",
        scenario=spec.scenario,
        variant=spec.variant,
        topics=spec.topics,
        clients=settings.clients,
        messages_per_client=min(_WARMUP_MESSAGES, settings.messages_per_client),
        run_dir=settings.out / "warmup",
        connection=spec.connection,
        stall_timeout_s=settings.stall_timeout_s,
        progress=settings.progress,
        record=False,
        partitions=settings.partitions,
        warmup=True,
        record_size=settings.record_size,
        fanout=settings.fanout,
        seed=settings.seed,
        secret_file=settings.secret_file,
        control_log=settings.control_log,
        topics_per_process=settings.topics_per_process,
    )
    info = run_one(warm)
    if not info.ok:  # not measured, but a failed check is a finding all the same
        log.error("warm-up run failed", extra={"fields": {"verdict": info.verdict}})


def _metrics(settings: SuiteSettings) -> tuple[dict[str, RunMetrics], str | None]:
    """Every recorded run's metrics, through one Spark session; and the job's error."""
    runs_dir, out_dir = settings.out / "runs", settings.out / "metrics"
    if not any(runs_dir.glob("*/records.parquet")):
        return {}, "no run was recorded"
    started = time.monotonic()
    try:
        with spark_session(settings.spark_master) as spark:
            paths = compute_metrics(spark, runs_dir, out_dir, settings.window_s)
    except Exception as exc:  # reported, loudly, in the report itself
        log.exception("metrics job failed")
        return {}, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    log.info(
        "metrics computed",
        extra={"fields": {"runs": len(paths), "seconds": round(time.monotonic() - started, 1)}},
    )
    metrics = {}
    for path in paths:
        loaded = RunMetrics.load(path)
        metrics[loaded.run] = loaded
    return metrics, None


def run_suite(
    settings: SuiteSettings,
    *,
    embedded: bool = False,
    on_run: Callable[[RunInfo], None] | None = None,
) -> SuiteOutcome:
    """Run every scenario through every variant on ``settings.connection``'s Kafka,
    compute the metrics, write the report.

    The metrics use the running SparkSession if there is one, else a local one for the
    suite. ``on_run`` is told of each run as it ends.
    """
    started = time.monotonic()
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    environment = describe_environment(settings.connection, embedded=embedded)
    tag = uuid.uuid4().hex[:6]
    if settings.warmup:
        _warm_up(settings, tag)
    infos: list[RunInfo] = []
    runs: list[tuple[Scenario, tuple[DestinationMix, int] | None]] = [
        (chosen, None) for chosen in settings.scenarios
    ]
    if Comparison.MANY_TOPICS in settings.comparisons:
        runs += [(chosen, (mix, n)) for chosen, mix, n in many_topic_runs(settings.topic_counts)]
    for chosen, mix in runs:
        for variant in settings.variants():
            info = run_one(_spec(settings, tag, chosen, variant, mix))
            infos.append(info)
            if on_run is not None:
                on_run(info)
    metrics, error = _metrics(settings)
    results = [RunResult(info, metrics.get(info.run)) for info in infos]
    wall_s = time.monotonic() - started
    data = ReportInput(
        results=results,
        primary=settings.primary.label,
        settings=settings.rows(),
        environment=environment,
        wall_s=wall_s,
        metrics_error=error,
    )
    report = render_report(out, data)
    _write_summary(out / "suite.json", data)
    return SuiteOutcome(report, results, wall_s, error)


def suite_summary(data: ReportInput) -> dict[str, Any]:
    """What ``suite.json`` holds: the suite's settings, environment and every run."""
    return {
        "wallSeconds": round(data.wall_s, 1),
        "primary": data.primary,
        "metricsError": data.metrics_error,
        "settings": dict(data.settings),
        "environment": dict(data.environment),
        "runs": [r.info.to_dict() for r in data.results],
    }


def _write_summary(path: Path, data: ReportInput) -> None:
    path.write_text(json.dumps(suite_summary(data), indent=2) + "\n", encoding="utf-8")
