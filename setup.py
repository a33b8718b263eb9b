"""The compiled core: what a wheel build adds to ``pyproject.toml`` (which holds every
piece of metadata; this file holds none).

A wheel build (``pip wheel .``, ``python -m build``, ``pip install .``) compiles the pure
core's modules (:data:`COMPILED`) with mypyc into C extensions beside their sources; the
interpreter imports an extension before a ``.py`` of the same name, so the sources stay
in the wheel as the documentation of what runs and as the fallback. No compiled form is
built, and the pure-Python modules run, when

- the install is editable (``pip install -e .``, ``deploy/bootstrap.sh``): the checkout
  runs what it holds, so an edit takes effect without a rebuild;
- ``ATOMICKAFKA_PURE=1`` is set at build time;
- mypyc or a C compiler is missing (an sdist built where there is none): the build says
  so in one warning and goes on without them.

``atomickafka --version`` says which form runs (``core: compiled, mypyc`` or ``core:
pure Python``).
"""

from __future__ import annotations

import os
import sys

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules compiled: the whole pure core but its package ``__init__`` (which says
#: which form runs, docs/DESIGN.md §2), then the node's batch layer, the per-record path
#: between the consumer and the engine (``atomickafka.node.COMPILED_MODULES``).
COMPILED = [
    "atomickafka/core/compact.py",
    "atomickafka/core/delivery_queue.py",
    "atomickafka/core/engine.py",
    "atomickafka/core/engine_state.py",
    "atomickafka/core/engine_types.py",
    "atomickafka/core/marker.py",
    "atomickafka/core/memory.py",
    "atomickafka/core/merger.py",
    "atomickafka/core/placement.py",
    "atomickafka/core/protocols.py",
    "atomickafka/core/raw.py",
    "atomickafka/core/reader.py",
    "atomickafka/core/reasons.py",
    "atomickafka/core/signing.py",
    "atomickafka/core/timebounds.py",
    "atomickafka/core/wire.py",
    "atomickafka/node/batch.py",
    "atomickafka/node/batch_support.py",
    "atomickafka/node/batch_types.py",
]


def _warn(text: str) -> None:
    print(f"atomickafka build: {text}; the core stays pure Python", file=sys.stderr)


class BuildCore(build_ext):
    """``build_ext`` that compiles :data:`COMPILED` with mypyc, when it should."""

    def finalize_options(self) -> None:
        self.distribution.ext_modules = self._compiled()
        super().finalize_options()

    def _compiled(self) -> list[Extension]:
        """The extensions to build: none for the pure form."""
        if self.editable_mode:
            return []  # the checkout runs its own sources
        if os.environ.get("ATOMICKAFKA_PURE", "") not in ("", "0"):
            _warn("ATOMICKAFKA_PURE is set")
            return []
        try:
            from mypyc.build import mypycify  # noqa: PLC0415 (only a wheel build needs it)
        except ImportError:
            _warn("mypyc is not installed")
            return []
        try:
            extensions: list[Extension] = mypycify(
                COMPILED, opt_level="3", group_name="atomickafka_core"
            )
        except (Exception, SystemExit) as exc:  # mypyc reports type errors by exiting
            _warn(f"mypyc failed ({exc})")
            return []
        # mypyc builds with -Werror: keep it so (gcc's maybe-uninitialized found a real
        # mypyc bug, see Engine._answer_settled)
        return extensions

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no C compiler, a missing header: the pure form stays
            _warn(f"the C compiler failed ({exc})")
            for ext in self.extensions:  # a module without its shared library would
                built = self.get_ext_fullpath(ext.name)  # fail to import: all or none
                if os.path.exists(built):
                    os.remove(built)
            self.distribution.ext_modules = self.extensions = []


class CompiledDistribution(Distribution):
    """A distribution whose wheels are for one platform and interpreter (the extensions
    are decided when ``build_ext`` runs, so there are none to count before)."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_ext": BuildCore}, distclass=CompiledDistribution)
