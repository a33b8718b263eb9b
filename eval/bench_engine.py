"""Micro-benchmark of the ordering engine alone: records processed per second.

Builds the thesis's 50-50 workload (chapter 5): 5 topics, several clients, half the
messages multicast to every topic and half single-topic. The simulator runs it once to
collect each node's complete input log (client and control records, in log order);
then the timed part replays each node's log into a fresh :class:`Engine` in batches, as
a node's poll loop would -- pure engine time, one core, no I/O, no JSON.

Times are CPU seconds of this process (``time.process_time``), best of ``--repeat``, so
that other load on a shared machine does not count as engine time. Two baselines are
measured on the same records in the same run, so the ratios do not depend on the
machine: a trivial loop that only updates a dict per record (the floor
for any per-record Python work), and decoding the records from their wire bytes (what
the node pays anyway before the engine sees a record). Decoding and encoding are timed
for both control forms (docs/DESIGN.md §3.9), JSON and binary, on the same records,
with the bytes per bundle of each.

Usage::

    .venv/bin/python eval/bench_engine.py                  # both algorithms
    .venv/bin/python eval/bench_engine.py --algorithm optimized --messages 40000
    .venv/bin/python eval/bench_engine.py --profile        # cProfile the replay
    .venv/bin/python eval/bench_engine.py --gc             # the replay's garbage-collection pauses
    .venv/bin/python eval/bench_engine.py --logs /tmp/logs # simulate once, replay the same logs
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import importlib.util
import io
import pickle
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# The installed form (the compiled wheel in .venv-compiled, the editable checkout in
# .venv); this checkout's sources only where none is installed. (Inserting the checkout
# first would run its pure sources under every interpreter.)
if importlib.util.find_spec("atomickafka") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atomickafka.core import core_form
from atomickafka.core.compact import CONTROL_FORMATS, control_encoders
from atomickafka.core.engine import Algorithm, Engine
from atomickafka.core.engine_types import Output
from atomickafka.core.raw import decode_any
from atomickafka.core.wire import (
    Message,
    MessageType,
    encode_client,
    encode_delivery,
    encode_members,
    pack_bundles,
    value_digest,
)
from atomickafka.evaluation.bench.simulated import run_correct, thesis_simulation

TARGET = 1_000_000  # records per second, compiled (issue 25; issue 19's was 300,000)
#: What a node's input holds as records of their own (the rest comes in bundles).
_SINGLE = frozenset({MessageType.CLIENT, MessageType.MEMBERS, MessageType.TICK})
_DELIVERIES = frozenset({MessageType.DELIVERY, MessageType.PARTITION_DELIVERY})


def collect_logs(
    algorithm: Algorithm, messages: int, topics: int, clients: int, multicast: float, seed: int
) -> tuple[dict[str, list[Message]], dict[str, int]]:
    """Run the workload once in the simulator; return every node's input log and how
    many deliveries each topic made."""
    sim, workload = thesis_simulation(
        algorithm,
        messages,
        topics,
        clients,
        multicast,
        seed,
        # one log per node: with control logs (§7) most records are in the control log
        # and the input log alone no longer replays the run (the replay stopped with
        # "did not reproduce the run")
        control_logs=False,
    )
    result = run_correct(sim, workload)
    return result.logs, {t: len(d) for t, d in result.deliveries.items()}


def chunks(log: Sequence[Message], size: int) -> list[Sequence[Message]]:
    """``log`` cut into batches of ``size`` records, as a poll loop would see it."""
    return [log[i : i + size] for i in range(0, len(log), size)]


def time_engine(
    algorithm: Algorithm,
    logs: dict[str, list[Message]],
    batch: int,
    expect: dict[str, int],
    *,
    collect: bool = True,
    freeze_every: int = 0,
) -> float:
    """Seconds to replay every node's log into a fresh engine (``collect``: a full
    collection before each, outside the timing; ``freeze_every``: ``gc.freeze()`` after
    every that many batches, as a node does once a second)."""
    batches = {t: chunks(log, batch) for t, log in logs.items()}
    total = 0.0
    for topic, parts in batches.items():
        engine = Engine(topic, f"node-{topic}", algorithm)
        handle_batch = engine.handle_batch
        if collect:
            gc.collect()
        start = time.process_time()
        for i, part in enumerate(parts, 1):
            handle_batch(part)
            if freeze_every and i % freeze_every == 0:
                gc.freeze()
        total += time.process_time() - start
        if engine.delivered_count != expect[topic] or engine.pending_count:
            raise SystemExit(f"replay of {topic} did not reproduce the run")
    return total


def time_dict_loop(logs: dict[str, list[Message]]) -> float:
    """Baseline 1: one dict update per record."""
    total = 0.0
    for log in logs.values():
        seen: dict[str, int | None] = {}
        gc.collect()
        start = time.process_time()
        for record in log:
            seen[record.messageID] = record.timeStamp
        total += time.process_time() - start
    return total


def _single(message: Message, control_format: str) -> bytes:
    """A record of its own: a ClientMessage, or a node's members record or tick (in
    ``control_format``)."""
    if message.messageType is MessageType.MEMBERS:
        return encode_members(message.senderID, message.topic, message.protocol)
    if message.messageType is MessageType.TICK:
        assert message.timeStamp is not None
        _, tick = control_encoders(control_format)
        return tick(message.senderID, message.timeStamp, message.partitionID)
    return encode_client(message)


def wire_logs(
    logs: dict[str, list[Message]], control_format: str
) -> tuple[dict[str, list[bytes]], list[int]]:
    """Each node's input as wire bytes: ClientMessages (and members records) one record
    each, control messages in bundles of up to 50 in ``control_format``; and the size of
    every bundle."""
    encode, _ = control_encoders(control_format)
    wire: dict[str, list[bytes]] = {}
    sizes: list[int] = []
    for topic, log in logs.items():
        records = [_single(m, control_format) for m in log if m.messageType in _SINGLE]
        control = [m for m in log if m.messageType not in _SINGLE]
        for i in range(0, len(control), 50):
            bundles = list(
                pack_bundles(
                    control[i : i + 50],
                    sender_id="node",
                    sent_from=topic,
                    protocol="x",
                    encode=encode,
                )
            )
            sizes.extend(len(b) for b in bundles)
            records.extend(bundles)
        wire[topic] = records
    return wire, sizes


def time_decode(wire: dict[str, list[bytes]]) -> float:
    """Baseline 2: decode each node's input from its wire bytes (validation included),
    as a node does (:func:`decode_any`: either control form, JSON client records)."""
    total = 0.0
    for data in wire.values():
        gc.collect()
        start = time.process_time()
        for value in data:
            decode_any(value)
        total += time.process_time() - start
    return total


def engine_outputs(
    algorithm: Algorithm, logs: dict[str, list[Message]], batch: int
) -> dict[str, list[list[Output]]]:
    """Every node's outputs, batch by batch, from one (untimed) replay."""
    out: dict[str, list[list[Output]]] = {}
    for topic, log in logs.items():
        engine = Engine(topic, f"node-{topic}", algorithm)
        out[topic] = [engine.handle_batch(part) for part in chunks(log, batch)]
    return out


def time_encode(
    outputs: dict[str, list[list[Output]]], protocol: str, control_format: str
) -> float:
    """Baseline 3: encode every node's outputs as its batch layer does
    (``node/batch.py``): per batch, the control messages to each destination packed in
    bundles (in ``control_format``), each delivery a JSON envelope."""
    encode, _ = control_encoders(control_format)
    total = 0.0
    for topic, batches in outputs.items():
        node_id = f"node-{topic}"
        gc.collect()
        start = time.process_time()
        for batch in batches:
            control: dict[str, list[Message]] = {}
            for output in batch:
                message = output.message
                if message.messageType in _DELIVERIES:
                    encode_delivery(message)
                else:
                    control.setdefault(output.topic, []).append(message)
            for messages in control.values():
                for _ in pack_bundles(
                    messages, sender_id=node_id, sent_from=topic, protocol=protocol, encode=encode
                ):
                    pass
        total += time.process_time() - start
    return total


def bundle_table(repeat: int) -> None:
    """Bytes and µs per message of a bundle of 1, 10 and 50 Notifies with a 112-byte
    value each (a client's ``{"client", "i", "pad"}``), in both control forms: what
    the bench's small values leave out."""
    pad = "x" * 80
    print("  bundles of Notifies with 112-byte values (bytes per bundle; µs per message):")
    for size in (1, 10, 50):
        notifies = []
        for i in range(size):
            value = b'{"client":1,"i":%d,"pad":"%s"}' % (100_000 + i, pad.encode())
            notifies.append(
                Message(
                    f"c3f9a1b2-{i}",
                    MessageType.NOTIFY,
                    ("T1", "T2", "T3", "T4", "T5"),
                    value,
                    timeStamp=100_000 + i,
                    digest=value_digest(value),
                    sentAt=1_795_000_000_000 + i,
                    seq=(1000 + i, 0),
                )
            )
        row = []
        for form in CONTROL_FORMATS:
            encode, _ = control_encoders(form)
            write = functools.partial(
                encode, notifies, sender_id="node-T1", sent_from="T1", protocol="direct"
            )
            record = write()
            reps = 20_000 // size
            encode_s = best(repeat, functools.partial(_cpu, write, reps))
            decode_s = best(
                repeat, functools.partial(_cpu, functools.partial(decode_any, record), reps)
            )
            per = 1e6 / reps / size
            row.append(
                f"{form} {len(record):,} B, decode {decode_s * per:.2f} µs, "
                f"encode {encode_s * per:.2f} µs"
            )
        print(f"    {size:2} Notifies: " + "; ".join(row))


def _cpu(fn: Callable[[], object], times: int) -> float:
    """CPU seconds of ``times`` calls of ``fn``."""
    start = time.process_time()
    for _ in range(times):
        fn()
    return time.process_time() - start


def gc_pauses(run: Callable[[], float]) -> str:
    """Run ``run`` with the collector's pauses timed (wall clock, per generation)."""
    started: list[float] = []
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses[info["generation"]].append(time.perf_counter() - started.pop())

    gc.callbacks.append(watch)
    try:
        engine_s = run()
    finally:
        gc.callbacks.remove(watch)
    parts = [
        f"gen{g}: {len(p)} pauses, {sum(p) * 1000:.1f} ms, max {max(p, default=0) * 1000:.2f} ms"
        for g, p in pauses.items()
    ]
    total = sum(sum(p) for p in pauses.values())
    return (
        f"  GC during one replay ({engine_s:.3f} s CPU): {'; '.join(parts)}; {total / engine_s:.1%}"
    )


def best(repeat: int, fn: Callable[[], float]) -> float:
    """The smallest of ``repeat`` measurements."""
    return min(fn() for _ in range(repeat))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 0 when every algorithm reaches the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--algorithm", choices=[a.value for a in Algorithm] + ["all"], default="all"
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--multicast", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=500, help="records per handle_batch")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="keep the simulated logs in this file (pickle) and read them from it next time, "
        "so that two runs (the pure and the compiled core) replay the same records and the "
        "simulation runs once",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one replay")
    parser.add_argument(
        "--gc", action="store_true", help="time the garbage collector's pauses in one replay"
    )
    args = parser.parse_args(argv)

    algorithms = list(Algorithm) if args.algorithm == "all" else [Algorithm(args.algorithm)]
    print(
        f"workload: {args.messages} messages, {args.topics} topics, {args.clients} clients, "
        f"{args.multicast:.0%} multicast to all topics; batches of {args.batch}; "
        f"CPU time, best of {args.repeat}; Python {sys.version.split()[0]}, "
        f"core: {core_form()}"
    )
    results = [bench_one(algorithm, args) for algorithm in algorithms]
    return 0 if all(results) else 1


def bench_one(algorithm: Algorithm, args: argparse.Namespace) -> bool:
    """Collect the logs for ``algorithm``, time the replay and the baselines, print."""
    cache = args.logs.with_suffix(f".{algorithm.value}.pickle") if args.logs else None
    if cache is not None and cache.exists():
        with cache.open("rb") as fh:
            logs, delivered = pickle.load(fh)
    else:
        logs, delivered = collect_logs(
            algorithm, args.messages, args.topics, args.clients, args.multicast, args.seed
        )
        if cache is not None:
            with cache.open("wb") as fh:
                pickle.dump((logs, delivered), fh)
    records = sum(len(log) for log in logs.values())
    kinds: dict[str, int] = {}
    for log in logs.values():
        for record in log:
            kinds[record.messageType.value] = kinds.get(record.messageType.value, 0) + 1
    engine_s = best(args.repeat, lambda: time_engine(algorithm, logs, args.batch, delivered))
    dict_s = best(args.repeat, lambda: time_dict_loop(logs))
    outputs = engine_outputs(algorithm, logs, args.batch)
    produced = sum(len(b) for batches in outputs.values() for b in batches)
    forms: dict[str, tuple[float, float, list[int]]] = {}
    for form in CONTROL_FORMATS:
        wire, sizes = wire_logs(logs, form)
        decode_s = best(args.repeat, functools.partial(time_decode, wire))
        encode_s = best(args.repeat, functools.partial(time_encode, outputs, algorithm.value, form))
        forms[form] = (decode_s, encode_s, sizes)
    rate = records / engine_s
    ok = rate >= TARGET
    print(
        f"\n[{algorithm.value}] {records} input records over {len(logs)} nodes "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}); "
        f"{sum(delivered.values())} deliveries"
    )
    print(
        f"  engine replay      {engine_s:8.3f} s  {rate:12,.0f} records/s  "
        f"{'>=' if ok else '<'} target {TARGET:,}  {'OK' if ok else 'BELOW TARGET'}"
    )
    print(
        f"  baseline dict loop {dict_s:8.3f} s  {records / dict_s:12,.0f} records/s  "
        f"engine is {engine_s / dict_s:5.1f}x slower"
    )
    for form, (decode_s, encode_s, sizes) in forms.items():
        print(f"  control records in {form}:")
        print(
            f"    baseline decode  {decode_s:8.3f} s  {records / decode_s:12,.0f} records/s  "
            f"engine/decode time ratio {engine_s / decode_s:5.2f}"
        )
        print(
            f"    encode outputs   {encode_s:8.3f} s  {produced / encode_s:12,.0f} outputs/s  "
            f"({produced} outputs: bundles per batch and destination, JSON deliveries)"
        )
        print(
            f"    per input record: decode {decode_s / records * 1e6:.2f} µs, engine "
            f"{engine_s / records * 1e6:.2f} µs, encode (its outputs) "
            f"{encode_s / records * 1e6:.2f} µs; per output encoded "
            f"{encode_s / produced * 1e6:.2f} µs"
        )
        print(
            f"    bundles of up to 50 control messages: {len(sizes)}, "
            f"{sum(sizes) / len(sizes):,.0f} bytes per bundle, "
            f"{sum(sizes) / (records - sum(kinds.get(k.value, 0) for k in _SINGLE)):,.1f} "
            f"bytes per control message"
        )
    bundle_table(args.repeat)
    if args.gc:
        for every in (0, 20):
            gc.collect()
            replay = functools.partial(
                time_engine,
                algorithm,
                logs,
                args.batch,
                delivered,
                collect=False,
                freeze_every=every,
            )
            print(f"  freeze every {every or 'no'} batches:", gc_pauses(replay).strip())
            gc.unfreeze()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        time_engine(algorithm, logs, args.batch, delivered)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())
    return ok


if __name__ == "__main__":
    sys.exit(main())
