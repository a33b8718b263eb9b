"""The layout keeps the architecture (docs/DESIGN.md §2): the core is pure, each layer
imports only the layers below it, no module imports itself back through others (no
import cycle), and no module reaches into another's private fields."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "atomickafka"
DESIGN = ROOT / "docs" / "DESIGN.md"
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
    "netlab": {"localkafka"},
    "config": {"kafka"},
    "doctor": {"core", "kafka", "node"},
    "client": {"core", "kafka"},
    "spark": {"core", "kafka", "config", "client"},
    "evaluation": {"core", "kafka", "audit", "client", "localkafka", "netlab", "node", "verify"},
    "cli": {
        "core",
        "verify",
        "kafka",
        "audit",
        "metrics",
        "node",
        "localkafka",
        "netlab",
        "config",
        "doctor",
        "client",
        "spark",
        "evaluation",
    },
}
#: The evaluation's subpackages, each importing only those it lists (and its own
#: modules, ``evaluation.errors`` and whatever the evaluation may import).
EVALUATION = {
    "cost": set(),
    "load": set(),
    "bench": {"cost", "load"},
    "suite": {"cost", "load"},
    "soak": {"cost", "load", "bench"},
    "nemesis": set(),
}
#: Modules every layer may import: they import nothing of AtomicKafka themselves.
EVERYWHERE = {"errors", "jsonnames", "logs", "spark_raw"}
#: The node's batch layers: pure like the core (records in, records out), so the
#: simulators (``verify``) drive the very code the node runs.
PURE_NODE = {
    "atomickafka.node.batch",
    "atomickafka.node.batch_support",
    "atomickafka.node.batch_types",
    "atomickafka.node.merger_batch",
    "atomickafka.node.snapshots",
    "atomickafka.node.standby",
}
#: Which layers may import the pure batch layers besides ``node`` itself.
PURE_NODE_USERS = {"verify"}
#: The client's decisions (issue 37): pure like the core, so the simulated clients
#: decide as the real one does; ``verify`` may import them.
PURE_CLIENT = {"atomickafka.client.plan"}


#: The API of a NamedTuple: underscored so as not to clash with its fields, not private.
NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make", "_field_defaults"}


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


def package_files() -> list[Path]:
    """Every module of the package, the client's too (``atomickafka/client`` is a link
    to ``client/``, which ``rglob`` does not follow)."""
    return sorted({*PACKAGE.rglob("*.py"), *(PACKAGE / "client").rglob("*.py")})


def packages() -> list[str]:
    """Every package, as its path from the checkout's root (``atomickafka/node``)."""
    return sorted(
        path.parent.relative_to(ROOT).as_posix()
        for path in package_files()
        if path.name == "__init__.py" and path.parent != PACKAGE
    )


@pytest.mark.parametrize("path", modules("core"), ids=lambda p: p.name)
def test_core_modules_do_no_io(path: Path) -> None:
    used = {name.split(".")[0] for name in imports(path)}
    assert not used & FORBIDDEN_IN_CORE, f"{path.name} imports {used & FORBIDDEN_IN_CORE}"


def test_the_clients_plan_is_pure() -> None:
    """client/plan.py decides, the client does the I/O: it imports only the core, the
    modules every layer may import, and no Kafka, clock, randomness or OS."""
    for name in imports(ROOT / "client" / "plan.py"):
        parts = name.split(".")
        assert parts[0] not in FORBIDDEN_IN_CORE, name
        if parts[0] == "atomickafka":
            assert parts[1] in {"core"} | EVERYWHERE, name


def test_every_package_is_a_layer() -> None:
    """A new package gets a row in :data:`ALLOWED` (and in DESIGN §2) before it ships."""
    top = {p.split("/")[1] for p in packages()}
    assert top == set(ALLOWED)
    evaluation = {p.split("/")[2] for p in packages() if p.startswith("atomickafka/evaluation/")}
    assert evaluation == set(EVALUATION)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_only_what_is_below_them(layer: str) -> None:
    for path in modules(layer):
        for name in imports(path):
            parts = name.split(".")
            if parts[0] != "atomickafka" or len(parts) < 2:
                continue
            if layer in PURE_NODE_USERS and name in PURE_NODE | PURE_CLIENT:
                continue
            assert parts[1] in ALLOWED[layer] | EVERYWHERE | {layer}, f"{path.name} imports {name}"


@pytest.mark.parametrize("part", sorted(EVALUATION))
def test_the_evaluations_parts_import_only_the_parts_before_them(part: str) -> None:
    for path in modules(f"evaluation/{part}"):
        for name in imports(path):
            parts = name.split(".")
            if parts[:2] != ["atomickafka", "evaluation"] or len(parts) < 3:
                continue
            allowed = EVALUATION[part] | {part, "errors"}
            assert parts[2] in allowed, f"evaluation/{part}/{path.name} imports {name}"


def test_design_section_2_lists_every_package() -> None:
    """docs/DESIGN.md §2 names every package: a top-level one in a row of its own, a
    subpackage by its path or as ``name/`` in its parent's row."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("## 2. Layout of the code") : text.index("## 3. ")]
    rows = {
        row.split("`")[1].rstrip("/"): row for row in section.splitlines() if row.startswith("| `")
    }
    missing = []
    for package in packages():
        parent, _, name = package.rpartition("/")
        top = package if parent == "atomickafka" else None
        if top is not None:
            listed = top in rows or (top == "atomickafka/client" and "client" in rows)
        else:
            listed = f"`{package}" in section or f"`{name}/`" in rows.get(parent, "")
        if not listed:
            missing.append(package)
    assert not missing, missing


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


# ---------------------------------------------------------------------------- import cycles


def module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in {*package.rglob("*.py"), *(package / "client").rglob("*.py")}:
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, wherever the import is (at
    the top, in a function, under ``TYPE_CHECKING``), absolute or relative."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                child = f"{module}.{alias.name}"
                if child in known:
                    out.add(child)
                elif module in known:
                    out.add(module)
    out.discard(name)
    return out


def import_cycles(package: Path) -> list[list[str]]:
    """The import cycles among ``package``'s modules: each strongly connected group of
    two or more modules (Tarjan's algorithm, iteratively)."""
    known = module_names(package)
    graph = {name: sorted(imported_modules(name, path, known)) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(graph[node]):
                work.append((node, i + 1))
                nxt = graph[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # back in the caller: carry the low link up
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_no_import_cycle() -> None:
    """Every package (core, node, evaluation, cli, client, ...): a module never imports
    itself back through others, not even for type checking."""
    assert import_cycles(PACKAGE) == []


def test_the_cycle_check_finds_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n"
    )
    (package / "c.py").write_text("def f():\n    import pkg.a\n")
    (package / "d.py").write_text("from pkg import a\n")
    assert import_cycles(package) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


# ---------------------------------------------------------------------------- private fields


def private_fields(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """The private names ``path`` defines (``self._x = ...``, ``def _f``, ``_X = ...``)
    and the private attributes it reads or writes on anything but ``self``, ``cls`` or
    ``super()``: ``(line, attribute)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    defined: set[str] = set()
    reached: list[tuple[int, str]] = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if private(node.name):
                defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and private(node.id):
            defined.add(node.id)
        elif isinstance(node, ast.Attribute) and private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
                if isinstance(node.ctx, ast.Store):
                    defined.add(node.attr)
            elif not (isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super"):
                reached.append((node.lineno, node.attr))
    return defined, reached


def test_no_module_reaches_another_modules_private_fields() -> None:
    """A private field (or method) of one of our classes is used by its own module only:
    ``core/engine_state.py`` once read and wrote ten of the engine's (issue 27)."""
    found = {path: private_fields(path) for path in package_files()}
    ours = set().union(*(defined for defined, _ in found.values()))
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: .{name}"
        for path, (defined, reached) in found.items()
        for line, name in reached
        if name in ours and name not in defined
    ]
    assert not wrong, "\n".join(wrong)


def test_the_private_field_check_finds_a_reach(tmp_path: Path) -> None:
    own = tmp_path / "own.py"
    own.write_text("class A:\n    def __init__(self):\n        self._x = 1\n")
    other = tmp_path / "other.py"
    other.write_text("def f(a):\n    return a._x + a._replace(y=1).y\n")
    assert private_fields(own) == ({"_x"}, [])
    assert private_fields(other) == (set(), [(2, "_x")])
