"""The node and merger shells, and the node's pure batch layers (docs/DESIGN.md §2)."""

from __future__ import annotations

from typing import Final

__all__ = ["COMPILED_MODULES"]

#: The batch layer's modules a wheel build compiles with the core (``setup.py``'s list
#: after the core's; a unit test holds the two together): the per-record path between
#: the consumer and the engine.
COMPILED_MODULES: Final = ("batch", "batch_support", "batch_types")
