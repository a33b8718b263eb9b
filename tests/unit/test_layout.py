"""The layout keeps the architecture (docs/DESIGN.md §2): the core is pure, and each
layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "atomickafka"
#: What the core must never import: no Kafka, no clock, no randomness, no OS, no threads.
FORBIDDEN_IN_CORE = {"confluent_kafka", "time", "random", "os", "socket", "threading"}
#: Which subpackages each layer may import (besides itself and the standard library).
ALLOWED = {
    "core": set(),
    "verify": {"core"},
    "kafka": {"core"},
    "audit": {"core", "kafka", "logs"},
    "metrics": {"core"},
    "node": {"core", "kafka", "logs", "audit", "metrics"},
    "localkafka": set(),
    "config": {"kafka"},
    "doctor": {"core", "kafka", "node"},
}
#: Modules every layer may import: they import nothing of AtomicKafka themselves.
EVERYWHERE = {"errors", "jsonnames", "logs", "spark_raw"}
#: The node's batch layers: pure like the core (records in, records out), so the
#: simulators (``verify``) drive the very code the node runs.
PURE_NODE = {
    "atomickafka.node.batch",
    "atomickafka.node.merger_batch",
    "atomickafka.node.snapshots",
    "atomickafka.node.standby",
}
#: Which layers may import the pure batch layers besides ``node`` itself.
PURE_NODE_USERS = {"verify"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).glob("**/*.py"))


@pytest.mark.parametrize("path", modules("core"), ids=lambda p: p.name)
def test_core_modules_do_no_io(path: Path) -> None:
    used = {name.split(".")[0] for name in imports(path)}
    assert not used & FORBIDDEN_IN_CORE, f"{path.name} imports {used & FORBIDDEN_IN_CORE}"


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_only_what_is_below_them(layer: str) -> None:
    for path in modules(layer):
        for name in imports(path):
            parts = name.split(".")
            if parts[0] != "atomickafka" or len(parts) < 2:
                continue
            if layer in PURE_NODE_USERS and name in PURE_NODE:
                continue
            assert parts[1] in ALLOWED[layer] | EVERYWHERE | {layer}, f"{path.name} imports {name}"


@pytest.mark.parametrize("name", sorted(PURE_NODE))
def test_the_batch_layers_are_as_pure_as_the_core(name: str) -> None:
    used = imports(PACKAGE.parent / (name.replace(".", "/") + ".py"))
    assert not {n.split(".")[0] for n in used} & FORBIDDEN_IN_CORE, f"{name} imports {used}"
    ours = {n for n in used if n.split(".")[0] == "atomickafka"}
    assert all(n.split(".")[1] in {"core", "errors"} or n in PURE_NODE for n in ours), ours


@pytest.mark.parametrize("name", sorted(EVERYWHERE))
def test_modules_every_layer_imports_import_nothing_of_atomickafka(name: str) -> None:
    used = imports(PACKAGE / f"{name}.py")
    assert not {n for n in used if n.split(".")[0] == "atomickafka"}, f"{name}.py imports {used}"


def test_the_forbidden_list_catches_a_real_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import os\nfrom time import monotonic\n")
    assert {"os", "time"} <= imports(sample)
