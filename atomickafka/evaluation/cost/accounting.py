"""What a run cost: CPU per delivered message by process role, records and bytes per
message by type, and the capacity that projects to with one core per process.

A run's :class:`RunCost` holds each process's CPU seconds over the measured window
(from the OS, :mod:`~atomickafka.evaluation.cost.processes`), the messages delivered at
every destination in it, and the records the run wrote in it by type
(:mod:`~atomickafka.evaluation.cost.traffic`). From these:

- **CPU-µs per delivered message** of each role: the role's CPU seconds x 10^6 over the
  messages delivered;
- the **projection with one core per process** (:data:`PROJECTION_FORMULA`): each
  ordering process (a node or a merger; a sequencer baseline's fan-out process, the
  Kafka Streams JVM included) on a core of its own, the busiest one saturates first,
  so it bounds the messages per second;
- the **broker**, apart (:data:`BROKER_FORMULA`): its CPU per record written, times the
  records a message takes, is what each message costs it; Kafka spreads that over
  brokers by partition.

The tables (:func:`cost_table`, :func:`projection_table`, :func:`traffic_table`) are
shared by the bench's output and the evaluation report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from atomickafka.evaluation.cost.processes import ORDERING_ROLES, ProcessCpu, ProcessRole
from atomickafka.evaluation.cost.traffic import TypeTraffic
from atomickafka.jsonnames import camel_keys

__all__ = [
    "BROKER_FORMULA",
    "PROJECTION_FORMULA",
    "ProjectionRow",
    "RunCost",
    "cost_table",
    "projection_table",
    "traffic_table",
]

PROJECTION_FORMULA: Final = (
    "projected msg/s with one core per process = 1,000,000 ÷ CPU-µs per delivered message "
    "of the busiest ordering process (a node or merger; a baseline's fan-out process: "
    "a Python sequencer or the Kafka Streams JVM); "
    "clients, the measuring consumer and the broker are left out"
)
BROKER_FORMULA: Final = (
    "broker CPU-µs per message = broker CPU-µs per record written * records written per "
    "message; msg/s per broker core = 1,000,000 ÷ that"
)

#: The traffic kind of Delivery records.
DELIVERY_KIND: Final = "DeliveryMessage"
#: Roles of the system's own processes besides the ordering ones.
_SYSTEM_ROLES: Final = ORDERING_ROLES | {
    ProcessRole.SUPERVISOR,
    ProcessRole.OTHER,
    ProcessRole.RELAY,
}


@dataclass(frozen=True, slots=True)
class RunCost:
    """One run's costs: ``system`` moved ``delivered`` messages in ``window_s`` seconds,
    its ``processes`` spent that CPU, and it wrote that ``traffic`` (by type)."""

    system: str
    delivered: int
    window_s: float
    processes: tuple[ProcessCpu, ...]
    traffic: Mapping[str, TypeTraffic] = field(default_factory=dict)

    # ------------------------------------------------------------------ CPU

    def _per_message(self, seconds: float) -> float | None:
        return seconds * 1e6 / self.delivered if self.delivered > 0 else None

    def _cpu(self, roles: frozenset[ProcessRole] | set[ProcessRole]) -> float | None:
        """CPU seconds of the measured processes of ``roles`` (``None``: none there)."""
        found = [p.cpu_s for p in self.processes if p.role in roles and p.cpu_s is not None]
        return sum(found) if found else None

    def role_us(self, *roles: ProcessRole) -> float | None:
        """CPU-µs per delivered message of the processes of ``roles`` together
        (``None`` when the run had none, or delivered nothing)."""
        seconds = self._cpu(set(roles))
        return None if seconds is None else self._per_message(seconds)

    @property
    def system_us(self) -> float | None:
        """The system's own processes (ordering processes, supervisor, its helpers)."""
        seconds = self._cpu(_SYSTEM_ROLES)
        return None if seconds is None else self._per_message(seconds)

    @property
    def all_but_broker_us(self) -> float | None:
        """Every measured process but the broker: the system, clients, measuring."""
        seconds = self._cpu(set(ProcessRole) - {ProcessRole.BROKER})
        return None if seconds is None else self._per_message(seconds)

    @property
    def unmeasured(self) -> tuple[ProcessCpu, ...]:
        """Processes not there at both ends of the window (their share is missing)."""
        return tuple(p for p in self.processes if p.cpu_s is None)

    @property
    def busiest(self) -> ProcessCpu | None:
        """The ordering process that spent the most CPU."""
        ordering = [p for p in self.processes if p.role in ORDERING_ROLES and p.cpu_s is not None]
        return max(ordering, key=lambda p: p.cpu_s or 0.0, default=None)

    @property
    def busiest_us(self) -> float | None:
        """CPU-µs per delivered message of the busiest ordering process."""
        busiest = self.busiest
        return (
            None if busiest is None or busiest.cpu_s is None else self._per_message(busiest.cpu_s)
        )

    @property
    def projected_msgs_per_s(self) -> float | None:
        """:data:`PROJECTION_FORMULA`: messages per second with one core per process."""
        busiest = self.busiest_us
        return 1e6 / busiest if busiest else None

    @property
    def node_us_per_delivery(self) -> float | None:
        """The nodes' CPU-µs per Delivery record written (a message delivered at three
        destinations is three deliveries; ``None``: no node, or no delivery counted)."""
        seconds = self._cpu({ProcessRole.NODE})
        written = self.traffic.get(DELIVERY_KIND)
        if seconds is None or written is None or written.messages <= 0:
            return None
        return seconds * 1e6 / written.messages

    # ------------------------------------------------------------------ records

    @property
    def records(self) -> int:
        """Records written in the window, every type."""
        return sum(t.records for t in self.traffic.values())

    @property
    def records_per_message(self) -> float | None:
        """Records written per delivered message."""
        return self.records / self.delivered if self.delivered > 0 and self.traffic else None

    @property
    def bytes_per_message(self) -> float | None:
        """Value bytes written per delivered message."""
        if self.delivered <= 0 or not self.traffic:
            return None
        return sum(t.value_bytes for t in self.traffic.values()) / self.delivered

    @property
    def broker_us_per_record(self) -> float | None:
        """The broker's CPU-µs per record written (``None``: not measured)."""
        seconds = self._cpu({ProcessRole.BROKER})
        return seconds * 1e6 / self.records if seconds is not None and self.records else None

    @property
    def broker_us_per_message(self) -> float | None:
        """:data:`BROKER_FORMULA`: µs per record x records per message."""
        per_record, records = self.broker_us_per_record, self.records_per_message
        return per_record * records if per_record is not None and records is not None else None

    @property
    def broker_msgs_per_s_per_core(self) -> float | None:
        """Messages per second one broker core carries at this cost."""
        per_message = self.broker_us_per_message
        return 1e6 / per_message if per_message else None

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``run.json``, the bench's ``--json``)."""
        return {
            "system": self.system,
            "delivered": self.delivered,
            "windowSeconds": round(self.window_s, 3),
            "processes": [p.to_dict() for p in self.processes],
            "traffic": {kind: t.to_dict() for kind, t in self.traffic.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunCost:
        """Inverse of :meth:`to_dict`, also of the snake_case names of earlier files."""
        data = camel_keys(data)
        return cls(
            system=str(data["system"]),
            delivered=int(data["delivered"]),
            window_s=float(data["windowSeconds"]),
            processes=tuple(ProcessCpu.from_dict(p) for p in data["processes"]),
            traffic={str(k): TypeTraffic.from_dict(v) for k, v in data["traffic"].items()},
        )


# ----------------------------------------------------------------------------- tables


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def cost_table(runs: Sequence[tuple[str, RunCost]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: each run's CPU-µs per delivered message by role, the busiest
    ordering process, records and bytes per message, the broker's µs per record."""
    headers = [
        "run",
        "delivered",
        "window s",
        "broker",
        "nodes",
        "mergers",
        "fan-out (sequencer or streams app)",
        "supervisor+relays+other",
        "clients",
        "measuring",
        "all but broker",
        "busiest ordering process",
        "node µs/delivery",
        "records/msg",
        "bytes/msg",
        "broker µs/record",
    ]
    rows = []
    for label, cost in runs:
        busiest = cost.busiest
        rows.append(
            [
                label,
                f"{cost.delivered:,}",
                _num(cost.window_s, 2),
                _num(cost.role_us(ProcessRole.BROKER)),
                _num(cost.role_us(ProcessRole.NODE)),
                _num(cost.role_us(ProcessRole.MERGER)),
                _num(cost.role_us(ProcessRole.SEQUENCER, ProcessRole.STREAMS)),
                _num(cost.role_us(ProcessRole.SUPERVISOR, ProcessRole.RELAY, ProcessRole.OTHER)),
                _num(cost.role_us(ProcessRole.CLIENT)),
                _num(cost.role_us(ProcessRole.MEASURER)),
                _num(cost.all_but_broker_us),
                "-" if busiest is None else f"{busiest.name}: {_num(cost.busiest_us)}",
                _num(cost.node_us_per_delivery, 1),
                _num(cost.records_per_message, 2),
                _num(cost.bytes_per_message),
                _num(cost.broker_us_per_record, 1),
            ]
        )
    return headers, rows


#: One row of :func:`projection_table`: its label, AtomicKafka's cost, each baseline's
#: (by name; ``None``: not run), and the bare pipe's.
ProjectionRow = tuple[str, "RunCost | None", Mapping[str, "RunCost | None"], "RunCost | None"]


def projection_table(
    rows: Sequence[ProjectionRow], baselines: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: per row (a multicast share, a workload), AtomicKafka's
    projected msg/s with one core per process beside each of ``baselines``' (named as
    they are: ``seq-eos``, ``streams``, ``seq-alo``) and their ratio, then the broker's
    cost per message of each, and of the bare pipe (the floor: it has no ordering
    process, so no projection of its own)."""
    headers = ["load", "AtomicKafka: projected msg/s (busiest µs/msg)"]
    for name in baselines:
        headers += [f"{name}: projected msg/s (µs/msg)", f"AtomicKafka ÷ {name}"]
    systems = " / ".join(["AtomicKafka", *baselines, "bare pipe"])
    headers += [f"broker µs/msg: {systems}", f"msg/s per broker core: {systems}"]
    out = []
    for label, ours, theirs, bare in rows:
        ours_msgs = ours.projected_msgs_per_s if ours else None
        row = [label, _projected(ours)]
        for name in baselines:
            other = theirs.get(name)
            other_msgs = other.projected_msgs_per_s if other else None
            ratio = ours_msgs / other_msgs if ours_msgs and other_msgs else None
            row += [_projected(other), "-" if ratio is None else f"{ratio:.2f}x"]
        costs = [ours, *(theirs.get(name) for name in baselines), bare]
        row += [
            " / ".join(_num(c.broker_us_per_message if c else None) for c in costs),
            " / ".join(_num(c.broker_msgs_per_s_per_core if c else None) for c in costs),
        ]
        out.append(row)
    return headers, out


def _projected(cost: RunCost | None) -> str:
    if cost is None or cost.projected_msgs_per_s is None:
        return "-"
    return f"{cost.projected_msgs_per_s:,.0f} ({cost.busiest_us:,.0f})"


def traffic_table(runs: Sequence[tuple[str, RunCost]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: per run and record type, records, messages and value bytes per
    delivered message."""
    headers = ["run", "type", "records/msg", "messages/msg", "bytes/msg"]
    rows = []
    for label, cost in runs:
        if cost.delivered <= 0:
            continue
        for kind, counts in cost.traffic.items():
            rows.append(
                [
                    label,
                    kind,
                    f"{counts.records / cost.delivered:.3f}",
                    f"{counts.messages / cost.delivered:.3f}",
                    f"{counts.value_bytes / cost.delivered:,.0f}",
                ]
            )
    return headers, rows
