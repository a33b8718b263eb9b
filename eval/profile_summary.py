"""Sum up a py-spy profile of ``atomickafka bench``: where each kind of process spends
its CPU (docs/performance.md).

Record the profile with py-spy's raw (collapsed-stack) output over the bench and every
process it starts (py-spy samples only threads that run, so a sample is CPU time)::

    py-spy record --subprocesses -r 100 -f raw -o prof.txt -- \\
        .venv/bin/python -m atomickafka bench --shares 50 --no-sequencer --no-warmup
    .venv/bin/python eval/profile_summary.py prof.txt

For the nodes it prints the share of samples per phase of the loop (consume, decode,
engine, encode, produce, transactions, metrics, status, ...), found as the first frame
on the way from the root that names one, and for every kind of process the functions
with the most samples of their own (leaf frames).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterator

#: Phases of a node's loop: the first frame (from the root) matching a pattern names it.
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("consume (poll, usable)", r"^(consume_batch|usable) "),
        ("metrics", r"^ShellMetrics\."),
        ("decode", r"^NodeBatch\._decode "),
        ("engine", r"^Engine\.step "),
        ("encode outputs", r"^NodeBatch\.(_outputs|_refused|_aborted|_signed) "),
        ("produce", r"^_produce "),
        (
            "transactions (begin, offsets, commit, gap)",
            r"^(bounded_call|sleep) |\.(begin|commit)_transaction|send_offsets",
        ),
        ("status, lease, members", r"_publish_status|_tick |Lease\.poll|_note_members"),
        ("librdkafka callbacks (settle)", r"\.settle "),
    )
)


def stacks(path: str) -> Iterator[tuple[list[str], int]]:
    """Each sampled stack (frames from the root) and its sample count. A process's
    command line may hold a newline, so a stack may span two lines of the file."""
    pending = ""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            if pending and not line.startswith("process "):
                pending += " " + line
                continue
            if pending:
                yield _parse(pending)
            pending = line
    if pending:
        yield _parse(pending)


def _parse(line: str) -> tuple[list[str], int]:
    body, _, count = line.rpartition(" ")
    return body.split(";"), int(count) if count.isdigit() else 0


def kind_of(frames: list[str]) -> str:
    """What the sampled process is."""
    text = ";".join(frames)
    if any(
        m in text
        for m in (
            "NodeRuntime",
            "node/runtime.py",
            "_CallThread",
            "bounded_call",
            "TransactionalWriter",
        )
    ):
        return "node"
    if "relay_process" in text:
        return "relay"
    if "_measure (" in text or "DeliveryCounter" in text:
        return "measuring consumer"
    if "fan_out_process" in text:
        return "sequencer"
    if "supervisor.py" in text:
        return "supervisor"
    return "client (the bench's process)"


#: A writer's own frames are transaction work unless a deeper frame is a produce.
_WRITE = re.compile(r"^(TransactionalWriter|AckedWriter)\.write")
_TRANSACTIONS = PHASES[6][0]


def phase_of(frames: list[str]) -> str:
    """The phase of a node's loop a stack is in."""
    fallback = "other (start-up, idle loop)"
    for frame in frames:
        if _WRITE.search(frame):
            fallback = _TRANSACTIONS
            continue
        for name, pattern in PHASES:
            if pattern.search(frame):
                return name
    return fallback


def _code(frame: str) -> str:
    return frame.split(" (", 1)[0] + " (" + frame.split(" (", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    """Print the summary of a raw py-spy profile."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="py-spy raw output")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    per_kind: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    leaves: dict[str, Counter[str]] = {}
    for frames, count in stacks(args.profile):
        code = [f for f in frames if not f.startswith("process ")]
        if not code:
            continue
        kind = kind_of(code)
        per_kind[kind] += count
        leaves.setdefault(kind, Counter())[_code(code[-1])] += count
        if kind == "node":
            phases[phase_of(code)] += count
    total = sum(per_kind.values()) or 1
    print(f"{total} samples")
    for kind, n in per_kind.most_common():
        print(f"  {kind:<32} {n:>7} ({n / total:5.1%})")
    nodes = per_kind["node"] or 1
    print("\nnode samples by phase of the loop:")
    for name, n in phases.most_common():
        print(f"  {name:<44} {n:>7} ({n / nodes:5.1%})")
    for kind, counter in leaves.items():
        share = per_kind[kind] or 1
        print(f"\n{kind}: top functions by own samples")
        for frame, n in counter.most_common(args.top):
            print(f"  {n / share:5.1%}  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
