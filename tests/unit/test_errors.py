"""One base for every error AtomicKafka raises to its users (issue 14).

Every exception class the package defines derives from
:class:`~atomickafka.errors.AtomicKafkaError`, and a ``raise`` of a builtin exception
class is allowed only where :mod:`atomickafka.errors` says so: a programming mistake in
a call (``TypeError``), a lookup of something never created (``KeyError``), abstract
methods, process exits, and the internal invariants listed below.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import atomickafka
from atomickafka.errors import AtomicKafkaError, ClosedError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*ROOT.glob("atomickafka/**/*.py"), *ROOT.glob("client/**/*.py")]

#: Builtins that may be raised anywhere (see the module docstring).
ANYWHERE = {"TypeError", "KeyError", "NotImplementedError", "AssertionError", "SystemExit"}
#: Builtins raised for internal invariants no user input can break, or by a Spark job
#: that runs without the package: (file, exception) -> why.
INTERNAL = {
    ("atomickafka/core/delivery_queue.py", "ValueError"): "the engine removes what it queued",
    ("atomickafka/core/delivery_queue.py", "IndexError"): "the engine reads a queue it holds",
    ("atomickafka/core/merger.py", "ValueError"): "resume key read back by the node itself",
    ("atomickafka/evaluation/suite/metrics_job.py", "FileNotFoundError"): "plain spark-submit file",
    ("atomickafka/evaluation/cost/processes.py", "RuntimeError"): "CpuMeter used out of order",
    ("atomickafka/evaluation/cost/rss.py", "ValueError"): "a fit handed unequal series",
    ("atomickafka/evaluation/soak/figures.py", "ValueError"): "a median of no runs",
    ("atomickafka/node/metrics.py", "ValueError"): "a rate window fed other counters",
    ("atomickafka/node/offsets.py", "ValueError"): "a negative committed offset",
}


def _builtin_raises(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and isinstance(getattr(builtins, exc.id, None), type):
                found.append((node.lineno, exc.id))
    return found


def test_builtin_exceptions_are_raised_only_where_allowed() -> None:
    assert SOURCES
    wrong = []
    for path in SOURCES:
        name = path.relative_to(ROOT).as_posix()
        for line, exc in _builtin_raises(path):
            if exc not in ANYWHERE and (name, exc) not in INTERNAL:
                wrong.append(f"{name}:{line}: raise {exc} (use an AtomicKafkaError)")
    assert not wrong, "\n".join(wrong)


def _modules() -> list[str]:
    found = pkgutil.walk_packages(atomickafka.__path__, prefix="atomickafka.")
    return sorted(m.name for m in found if m.name != "atomickafka.__main__")


def test_every_error_class_the_package_defines_derives_from_the_base() -> None:
    wrong = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if not (inspect.isclass(obj) and issubclass(obj, BaseException)):
                continue
            if obj.__module__ != name or attr.startswith("_"):
                continue  # imported, or a private control-flow signal (core/engine.py)
            if not issubclass(obj, AtomicKafkaError):
                wrong.append(f"{name}.{attr}")
    assert not wrong, f"not an AtomicKafkaError: {wrong}"


@pytest.mark.parametrize(
    ("name", "also"),
    [
        ("atomickafka.evaluation.errors.RunError", None),
        ("atomickafka.evaluation.suite.spark.SparkSetupError", None),
        ("atomickafka.core.engine_state.SnapshotError", ValueError),
        ("atomickafka.errors.ClosedError", RuntimeError),
        ("atomickafka.errors.ConfigError", ValueError),
        ("atomickafka.errors.TimedOutError", TimeoutError),
    ],
)
def test_the_errors_named_in_the_audit_are_under_the_base(name: str, also: type | None) -> None:
    module, _, attr = name.rpartition(".")
    cls = getattr(importlib.import_module(module), attr)
    assert issubclass(cls, AtomicKafkaError)
    assert also is None or issubclass(cls, also)


def test_a_closed_reader_or_producer_raises_closed_error() -> None:
    from atomickafka.client import ClosedError as ClientClosed  # noqa: PLC0415
    from atomickafka.kafka.producer import RecordProducer  # noqa: PLC0415

    assert ClientClosed is ClosedError
    producer = RecordProducer("127.0.0.1:9")
    producer.close(timeout_s=0.1)
    with pytest.raises(ClosedError, match="closed"):
        producer.send("t", b"x")
