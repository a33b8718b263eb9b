"""The pure core: the wire format, the ordering engine and the merger's core.

Nothing in this package does I/O: no Kafka, no clock, no randomness, no OS, no threads
(``tests/unit/test_layout.py`` enforces it). Records go in, records come out; the Kafka
shells in :mod:`atomickafka.node` feed them. See ``docs/DESIGN.md``.

A wheel carries these modules compiled with mypyc (``setup.py``) beside their sources,
which are the fallback wherever no compiled build exists (an editable install, a build
without a C compiler); :func:`core_form` says which form runs. This package's own
``__init__`` is never compiled: it is what tells.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Final

__all__ = ["COMPILED_MODULES", "core_form"]

#: The modules a wheel build compiles (``setup.py``'s list; a unit test holds the two
#: together).
COMPILED_MODULES: Final = (
    "compact",
    "delivery_queue",
    "engine",
    "engine_state",
    "engine_types",
    "marker",
    "memory",
    "merger",
    "placement",
    "protocols",
    "raw",
    "reader",
    "reasons",
    "signing",
    "timebounds",
    "wire",
)


def core_form() -> str:
    """Which form of the core runs here: ``compiled, mypyc`` (every module of
    :data:`COMPILED_MODULES` is a compiled extension), ``pure Python`` (none is), or,
    should an installation mix the two, which modules are compiled."""
    compiled = [
        name
        for name in COMPILED_MODULES
        if (importlib.import_module(f"{__name__}.{name}").__file__ or "").endswith(
            tuple(EXTENSION_SUFFIXES)
        )
    ]
    if not compiled:
        return "pure Python"
    if len(compiled) == len(COMPILED_MODULES):
        return "compiled, mypyc"
    return f"partly compiled, mypyc: {', '.join(compiled)}"
