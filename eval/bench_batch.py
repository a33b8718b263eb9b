"""Micro-benchmark of the node's batch layer (``node/batch.py``): input records a node
takes per second, and CPU-µs per record, without a broker.

What a node does per record between ``consume_batch`` and ``produce`` is the batch
layer's: place each record in its input order (apply markers, log times), check and
decode it, hand the messages to the engine, and turn the engine's outputs into the
records to write (bundles per peer, deliveries). ``eval/bench_engine.py`` times the
engine alone; this times all of it, as the shell calls it.

The simulator runs the thesis's 50-50 workload once (5 topics, control logs, ``direct``,
half the messages multicast to every topic), and every call its nodes' batch layers
get -- ``step`` (control-log records), ``step_input`` (input-log records), ``idle``,
``members`` -- is recorded with its records and wall time. The timed part replays each
node's calls into a fresh :class:`~atomickafka.node.batch.NodeBatch`, its records as
confluent-kafka ``Message`` objects (what a node's consumer hands it); the replay must
write what the simulated node wrote (checked). Times are CPU seconds of this process,
best of ``--repeat``, so other load on a shared machine counts little.

Run it under each form of the installed package (pure: the checkout's ``.venv``;
compiled: the wheel's venv), on the same recorded calls (``--trace``)::

    .venv/bin/python eval/bench_batch.py --trace /tmp/batch-trace.pickle
    .venv-compiled/bin/python -P eval/bench_batch.py --trace /tmp/batch-trace.pickle
    .venv/bin/python eval/bench_batch.py --profile   # cProfile one replay
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import importlib.util
import io
import pickle
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The installed form (the compiled wheel, or the editable checkout); this checkout's
# sources only where none is installed (as eval/bench_engine.py).
if importlib.util.find_spec("atomickafka") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Message as KafkaMessage

from atomickafka.core import core_form
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.reader import KafkaRecord
from atomickafka.evaluation.bench.simulated import run_correct, thesis_simulation
from atomickafka.node.batch import NodeBatch, NodeSpec, Ready

#: A record as plain data: value, topic, partition, offset, key, headers, timestamp.
Row = tuple[bytes | None, str, int, int, Any, Any, tuple[int, int]]


def _row(record: KafkaRecord) -> Row:
    headers = record.headers()
    return (
        record.value(),
        record.topic() or "",
        record.partition() or 0,
        record.offset() or 0,
        record.key(),
        list(headers) if headers else None,
        record.timestamp(),
    )


def collect(
    messages: int, topics: int, clients: int, multicast: float, seed: int
) -> dict[str, dict[str, Any]]:
    """Run the workload once in the simulator; return, per topic, its node's spec (as
    plain fields), its first engine's state, its two logs as rows and how many
    deliveries it wrote."""
    sim, workload = thesis_simulation(
        Algorithm.DIRECT,
        messages,
        topics,
        clients,
        multicast,
        seed,
        snapshot_every=50_000,  # a node's default (the simulator's own is every few records)
    )
    trace: dict[str, dict[str, Any]] = {}
    for topic, node in sim.nodes.items():
        spec = node.batch.spec
        fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
        fields["algorithm"] = spec.algorithm.value
        trace[topic] = {"spec": fields, "engine": node.batch.engine.snapshot()}
    result = run_correct(sim, workload)
    for topic, entry in trace.items():
        entry["input"] = [_row(r) for r in sim.inputs[topic].read(0, len(sim.inputs[topic]))]
        control = sim.controls[topic]
        entry["control"] = [_row(r) for r in control.read(0, len(control))]
        entry["delivered"] = len(result.deliveries[topic])
    return trace


def _records(rows: list[Row]) -> list[KafkaMessage]:
    return [
        KafkaMessage(
            value=value,
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            headers=headers,
            timestamp=stamp,
        )
        for value, topic, partition, offset, key, headers, stamp in rows
    ]


#: One node's reads, in order: (True: of its control log, False: of its input log, the
#: records, the wall time).
Reads = list[tuple[bool, list[KafkaMessage], float]]


def reads(entry: dict[str, Any], batch: int) -> Reads:
    """A node's two logs as a node at capacity reads them: up to ``batch`` records of
    its input log, then up to ``batch`` of its control log, and so on (built before the
    timing: the consumer builds these in a node); the wall time is the newest log time
    read."""
    inputs, controls = _records(entry["input"]), _records(entry["control"])
    out: Reads = []
    wall = 0.0
    for i in range(0, max(len(inputs), len(controls)), batch):
        for control, log in ((False, inputs), (True, controls)):
            part = log[i : i + batch]
            if part:
                wall = max(wall, part[-1].timestamp()[1] / 1000)
                out.append((control, part, wall))
    return out


def replay(entry: dict[str, Any], node_reads: Reads) -> tuple[float, Counter[str]]:
    """CPU seconds to replay ``node_reads`` into a fresh batch layer of the node (then
    idle steps until it applied everything), and the kinds of records it wrote; its
    deliveries must be the simulated node's."""
    fields = dict(entry["spec"])
    fields["algorithm"] = Algorithm(fields["algorithm"])
    spec = NodeSpec(**fields)
    batch = NodeBatch(spec, Engine.restore(entry["engine"]))
    written: list[Ready] = []
    keep = written.append
    step, step_input = batch.step, batch.step_input
    gc.collect()
    start = time.process_time()
    for control, records, wall in node_reads:
        keep(step(records, wall_s=wall) if control else step_input(records, wall_s=wall))
    took = time.process_time() - start
    kinds = Counter(str(r.kind) for ready in written for r in ready.records)
    if kinds["delivery"] != entry["delivered"] or batch.queued or batch.buffered:
        raise SystemExit(
            f"replay of {spec.topic} wrote {kinds['delivery']} deliveries (the simulated "
            f"node {entry['delivered']}), {batch.queued} control and {batch.buffered} "
            "input records left unapplied"
        )
    return took, kinds


def best(repeat: int, fn: Callable[[], float]) -> float:
    """The smallest of ``repeat`` measurements."""
    return min(fn() for _ in range(repeat))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--multicast", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=500, help="records per read of a log")
    parser.add_argument("--repeat", type=int, default=5, help="best of N")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="keep the recorded calls in this file (pickle) and read them from it next "
        "time, so that each form replays the same calls and the simulation runs once",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one replay")
    args = parser.parse_args(argv)

    if args.trace is not None and args.trace.exists():
        with args.trace.open("rb") as fh:
            trace = pickle.load(fh)
    else:
        trace = collect(args.messages, args.topics, args.clients, args.multicast, args.seed)
        if args.trace is not None:
            with args.trace.open("wb") as fh:
                pickle.dump(trace, fh)
    node_reads = {topic: reads(entry, args.batch) for topic, entry in trace.items()}
    records = sum(len(e["input"]) + len(e["control"]) for e in trace.values())
    written: Counter[str] = Counter()
    for topic, entry in trace.items():  # once, checked (and warms up)
        written += replay(entry, node_reads[topic])[1]

    def once() -> float:
        return sum(replay(entry, node_reads[topic])[0] for topic, entry in trace.items())

    took = best(args.repeat, once)
    print(
        f"workload: {args.messages} messages, {args.topics} topics, {args.clients} clients, "
        f"{args.multicast:.0%} multicast; control logs; reads of {args.batch} records; "
        f"CPU time, best of {args.repeat}; Python {sys.version.split()[0]}, "
        f"core: {core_form()}, batch layer: {batch_form()}"
    )
    print(
        f"  {records:,} input records over {len(trace)} nodes "
        f"({sum(len(e['input']) for e in trace.values()):,} of input logs); written: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(written.items()))
    )
    print(
        f"  batch layer: {took:.3f} s, {records / took:,.0f} records/s, "
        f"{took / records * 1e6:.2f} CPU-µs per input record, "
        f"{took / max(1, written['delivery']) * 1e6:.2f} per delivery"
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        once()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())
    return 0


def batch_form() -> str:
    """Whether the batch layer runs compiled (a mypyc extension module) or as Python."""
    import atomickafka.node.batch as module  # noqa: PLC0415

    return "compiled" if not (module.__file__ or "").endswith(".py") else "pure Python"


if __name__ == "__main__":
    sys.exit(main())
