"""A node process fixes glibc's mmap threshold (atomickafka/node/heap.py): a large
block freed is given back at once, so snapshots do not raise the resident memory."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from atomickafka.node.heap import return_large_blocks

#: A child that keeps a sliding set of small objects (a node's memory window) and
#: builds a several-MiB JSON text and its compressed copy every round (a snapshot);
#: it prints its RSS growth over the rounds after the first, in MiB.
PROGRAM = """
import sys, zlib, orjson
from atomickafka.node.heap import return_large_blocks
if sys.argv[1] == "on":
    assert return_large_blocks()
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
state, n = {}, 0
def add(k):
    global n
    for _ in range(k):
        n += 1
        state[f"msg-{n:012d}"] = (("t1", "t2"), f"{n * 7919:016x}", n * 1000)
    while len(state) > 30000:
        del state[next(iter(state))]
add(30000)
first = None
for i in range(8):
    add(12000 + (i * 1501) % 5000)
    data = {"settled": [[k, list(v[0]), v[1], v[2]] for k, v in state.items()]}
    payload = zlib.compress(orjson.dumps(data), 3)
    del data, payload
    if i == 0:
        first = rss()
print(round(rss() - first, 1))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_snapshot_buffers_do_not_raise_the_resident_memory() -> None:
    def growth(mode: str) -> float:
        """The median growth of three children (one child's RSS moves with the machine's
        load: under the CI's parallel tiers one compiled-tier run measured 4.2 MiB
        returned against 7.4 kept, where alone they measure 3.2-3.3 and 7.2-8.4)."""
        runs = [
            subprocess.run(
                [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True
            )
            for _ in range(3)
        ]
        return statistics.median(float(out.stdout.strip()) for out in runs)

    assert return_large_blocks() and return_large_blocks()  # once, idempotent
    kept, returned = growth("off"), growth("on")
    assert returned <= kept / 2, (kept, returned)
