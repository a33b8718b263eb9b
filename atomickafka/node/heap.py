"""How a node or merger process asks the C allocator to give large blocks back.

glibc's malloc serves a block of at least ``M_MMAP_THRESHOLD`` bytes with its own
``mmap`` and unmaps it when freed, but by default it *raises* that threshold to the
size of every such block freed (up to 32 MiB): from then on blocks that large come from
the heap, and a freed one stays in the process as free heap. A node builds each
snapshot as one large JSON text and its compressed copy (docs/DESIGN.md §6.1), several
MiB every 30 s; with the moving threshold every snapshot a little larger than the last
raised the node's resident memory a step, never given back (docs/soak.md: +5-6 MiB
over a million messages, each step on a snapshot; with snapshots off, flat). Fixing the
threshold at 1 MiB (``mallopt`` also turns the adjustment off) returns those blocks at
once. Elsewhere (another libc, another OS) this does nothing.

The same processes also let the cyclic garbage collector's youngest generation grow to
:data:`YOUNG_GENERATION_SIZE` objects before it is collected (CPython's default is 700).
A node allocates several short-lived objects per record (decoded messages, outputs,
tuples); at 700 most collections found them still alive, moved them to the older
generations and walked them again there. With 10,000 most are freed by their reference
count first: the batch layer's CPU per Delivery fell 8-10 % compiled and about 4 % pure
(``eval/bench_batch.py``, docs/performance.md), for at most 10,000 objects' headers of
memory. The node's own state is kept out of the collections by ``gc.freeze``
(``node/runtime.py``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
from typing import Final

__all__ = [
    "MMAP_THRESHOLD_BYTES",
    "YOUNG_GENERATION_SIZE",
    "collect_young_objects_less_often",
    "return_large_blocks",
]

log = logging.getLogger("atomickafka.node")

#: Blocks this large or larger are mapped on their own and unmapped when freed.
MMAP_THRESHOLD_BYTES: Final = 1 << 20
_M_MMAP_THRESHOLD: Final = -3  # glibc's malloc.h
#: Net allocations of container objects between two collections of the youngest
#: generation.
YOUNG_GENERATION_SIZE: Final = 10_000
_done = False


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` for this process
    (once); True when it was set."""
    global _done  # noqa: PLW0603 (one allocator per process)
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1)
    if not _done:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused; the allocator keeps its defaults")
    return _done


def collect_young_objects_less_often() -> None:
    """Set the collector's youngest-generation threshold to :data:`YOUNG_GENERATION_SIZE`,
    keeping the older generations' thresholds."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_SIZE, older, oldest)
