"""What a suite produces, as typed data: each run's facts and its computed metrics.

A run's facts (:class:`RunInfo`) are written by the runner as ``run.json`` beside the
run's Parquet files; its metrics (:class:`RunMetrics`) come from the PySpark job
(:mod:`~atomickafka.evaluation.suite.metrics_job`) as ``<run>.json``. The report reads only
these, so it can be rendered again, or from synthetic figures in tests, without Kafka
or Spark.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from atomickafka.jsonnames import camel_keys, json_name

__all__ = ["LatencySummary", "NodeMetrics", "RunInfo", "RunMetrics", "RunResult"]


@dataclass(slots=True)
class RunInfo:
    """One run's setup and outcome, as the runner saw it."""

    run: str
    scenario: str
    multicast_percent: int
    variant: str
    system: str
    algorithm: str
    layout: str
    topics: list[str]
    clients: int
    messages_per_client: int
    pace_ms: float
    sent: int = 0
    expected_deliveries: int = 0
    counted_deliveries: int = 0
    started_at: str = ""
    wall_s: float = 0.0
    complete: bool = False
    check_ok: bool = False
    check_summary: str = ""
    check_counts: dict[str, int] = field(default_factory=dict)
    #: The live audit beside the run, on its delivery topics (``None``: not run); beside
    #: the checker's verdict, not part of :attr:`ok` (the checker is the authority).
    #: Violations by kind, delivery records checked, seconds it took after the last
    #: delivery counted to have read everything written up to then, the CPU seconds of
    #: its own process (in no cost of the run), and its first violations (JSON).
    audit_ok: bool | None = None
    audit_summary: str = ""
    audit_counts: dict[str, int] = field(default_factory=dict)
    audit_checked: int = 0
    audit_lag_s: float | None = None
    audit_cpu_s: float | None = None
    audit_examples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    #: Bytes of each measured value (0: the probe alone), and each multicast's
    #: destination count (``""``: every topic; ``"2-5"``: drawn from 2 to 5).
    record_size: int = 0
    fanout: str = ""
    #: The many-topic workload's destination mix, in words (``""``: a thesis scenario).
    mix: str = ""
    #: The run's cost over its measured window
    #: (:meth:`~atomickafka.evaluation.cost.accounting.RunCost.to_dict`), when it was measured.
    cost: dict[str, Any] | None = None
    #: How steadily deliveries came from the first one until the clients stopped
    #: (:meth:`~atomickafka.evaluation.load.measuring.Flow.to_dict`), as the measuring
    #: consumer read them; ``None``: not one whole bucket.
    flow: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """Everything delivered, the order check passed, nothing crashed."""
        return self.complete and self.check_ok and self.error is None

    @property
    def verdict(self) -> str:
        """``passed``, or why the run failed, in capitals so it is not missed."""
        if self.error is not None:
            return "FAILED (error)"
        if not self.check_ok:
            return "FAILED (order check)"
        if not self.complete:
            return "FAILED (incomplete)"
        if self.system == "kafka":
            return "passed (integrity; no order promised)"
        return "passed"

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``, under the fields' JSON names (``wallSeconds``)."""
        return {json_name(k): v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunInfo:
        """Inverse of :meth:`to_dict`, also of the snake_case ``run.json`` of earlier
        versions; unknown fields are ignored."""
        data = camel_keys(data)
        return cls(
            **{f.name: data[json_name(f.name)] for f in fields(cls) if json_name(f.name) in data}
        )

    def save(self, path: Path) -> None:
        """Write ``run.json``."""
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> RunInfo:
        """Read ``run.json``."""
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return cls.from_dict(data)


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Send-to-delivery latency of fully delivered messages, in milliseconds (at the last
    of a message's destinations), and 101 quantiles (0 %, 1 %, ..., 100 %) for plots."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float
    mean: float
    quantiles: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencySummary:
        """From the job's JSON."""
        return cls(
            n=int(data["n"]),
            p50=float(data["p50"]),
            p90=float(data["p90"]),
            p99=float(data["p99"]),
            max=float(data["max"]),
            mean=float(data["mean"]),
            quantiles=tuple(float(q) for q in data.get("quantiles", ())),
        )


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    """One node's counts over the run window and their averages per second.

    ``incoming``/``outgoing`` count messages (a bundle counts its inner messages);
    ``*_records`` count Kafka records. ``window_max`` is the busiest 5-second window's
    rate per kind (``incoming``, ``outgoing``, ``deliveries``).
    """

    node: str
    incoming: int
    incoming_records: int
    outgoing: int
    outgoing_records: int
    deliveries: int
    incoming_per_s: float
    outgoing_per_s: float
    deliveries_per_s: float
    window_max: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeMetrics:
        """From the job's JSON (its snake_case names of earlier versions too)."""
        data = camel_keys(data)
        return cls(
            node=str(data["node"]),
            incoming=int(data["incoming"]),
            incoming_records=int(data["incomingRecords"]),
            outgoing=int(data["outgoing"]),
            outgoing_records=int(data["outgoingRecords"]),
            deliveries=int(data["deliveries"]),
            incoming_per_s=float(data["incomingPerSecond"]),
            outgoing_per_s=float(data["outgoingPerSecond"]),
            deliveries_per_s=float(data["deliveriesPerSecond"]),
            window_max={str(k): float(v) for k, v in data.get("windowMax", {}).items()},
        )


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """What the PySpark job computed for one run.

    The run window goes from the first measured send to the last measured delivery;
    every rate is over it. ``series[kind][node]`` holds rates per ``bucket_s`` bucket
    from the window's start (kinds ``incoming``, ``outgoing``, ``deliveries``);
    ``windows`` the same in the thesis's 5-second windows.
    """

    run: str
    start_ms: int
    end_ms: int
    run_time_s: float
    messages: int
    multicast: int
    delivered_messages: int
    deliveries: int
    missing_deliveries: int
    messages_per_s: float
    deliveries_per_s: float
    records: int
    nodes: tuple[NodeMetrics, ...]
    by_type: dict[str, int]
    latency: dict[str, LatencySummary]
    bucket_s: float
    series: dict[str, dict[str, list[float]]]
    window_s: float
    windows: dict[str, dict[str, list[float]]]

    def node(self, name: str) -> NodeMetrics | None:
        """The metrics of node ``name``, if it had any traffic."""
        return next((n for n in self.nodes if n.node == name), None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunMetrics:
        """From the job's JSON (its snake_case names of earlier versions too)."""
        data = camel_keys(data)
        series, windows = camel_keys(data["series"]), camel_keys(data["windows"])
        return cls(
            run=str(data["run"]),
            start_ms=int(data["startMs"]),
            end_ms=int(data["endMs"]),
            run_time_s=float(data["runTimeSeconds"]),
            messages=int(data["messages"]),
            multicast=int(data["multicast"]),
            delivered_messages=int(data["deliveredMessages"]),
            deliveries=int(data["deliveries"]),
            missing_deliveries=int(data["missingDeliveries"]),
            messages_per_s=float(data["messagesPerSecond"]),
            deliveries_per_s=float(data["deliveriesPerSecond"]),
            records=int(data["records"]),
            nodes=tuple(NodeMetrics.from_dict(n) for n in data["nodes"]),
            by_type={str(k): int(v) for k, v in data["byType"].items()},
            latency={
                str(k): LatencySummary.from_dict(v)
                for k, v in data["latencyMs"].items()
                if v is not None
            },
            bucket_s=float(series["bucketSeconds"]),
            series=_series(series),
            window_s=float(windows["windowSeconds"]),
            windows=_series(windows),
        )

    @classmethod
    def load(cls, path: Path) -> RunMetrics:
        """Read the job's ``<run>.json``."""
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return cls.from_dict(data)


def _series(data: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    return {
        str(kind): {str(node): [float(v) for v in values] for node, values in per_node.items()}
        for kind, per_node in data.items()
        if isinstance(per_node, dict)
    }


@dataclass(frozen=True, slots=True)
class RunResult:
    """A run's facts with its metrics (``None`` when the job could not compute them)."""

    info: RunInfo
    metrics: RunMetrics | None
