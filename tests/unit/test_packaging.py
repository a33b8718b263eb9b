"""What gets installed: every package of the tree, the client as ``atomickafka.client``
(never a top-level ``client``), and one version."""

from __future__ import annotations

import ast
import importlib
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

import atomickafka
from atomickafka.cli import main
from atomickafka.core import COMPILED_MODULES, core_form
from atomickafka.node import COMPILED_MODULES as COMPILED_NODE_MODULES

ROOT = Path(__file__).resolve().parents[2]


def setuptools_table() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        table: dict[str, Any] = tomllib.load(fh)["tool"]["setuptools"]
    return table


def test_every_package_of_the_tree_is_installed() -> None:
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "atomickafka").glob("**/__init__.py")
    }
    found.add("atomickafka.client")  # through the link, or not: it is always installed
    assert set(setuptools_table()["packages"]) == found


def test_the_client_is_installed_under_atomickafka_from_its_folder() -> None:
    table = setuptools_table()
    assert table["package-dir"] == {"atomickafka.client": "client"}
    assert not [p for p in table["packages"] if p.split(".")[0] == "client"]
    assert (ROOT / "atomickafka" / "client").resolve() == (ROOT / "client").resolve()


def test_the_version_is_written_once_and_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        pyproject = tomllib.load(fh)
    assert "version" not in pyproject["project"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "atomickafka.__version__"
    }
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"atomickafka {atomickafka.__version__} (core: {core_form()})"
    )


def _setup_compiled() -> list[str]:
    """``setup.py``'s list of the modules a wheel build compiles (read, not run)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError("setup.py has no COMPILED list")


def test_the_wheel_compiles_every_module_of_the_core_and_says_which_form_runs() -> None:
    core = sorted(p.stem for p in (ROOT / "atomickafka" / "core").glob("*.py"))
    assert sorted([*COMPILED_MODULES, "__init__"]) == core
    assert _setup_compiled() == [f"atomickafka/core/{name}.py" for name in COMPILED_MODULES] + [
        f"atomickafka/node/{name}.py" for name in COMPILED_NODE_MODULES
    ]


def test_the_core_runs_in_the_form_this_run_expects() -> None:
    """CI runs the unit tier twice (``deploy/test.sh``): on the checkout's sources and on
    the compiled wheel; each run names the form it must find, so a build that fell back
    to the pure form (or a checkout that shadows the wheel) fails here."""
    expected = os.environ.get("ATOMICKAFKA_EXPECT_CORE")
    if expected is None:
        assert core_form() in ("pure Python", "compiled, mypyc")
        return
    assert core_form() == expected
    # the batch layer's modules are compiled with the core, or none is
    batch = [
        (importlib.import_module(f"atomickafka.node.{name}").__file__ or "").endswith(".py")
        for name in COMPILED_NODE_MODULES
    ]
    assert batch == [expected == "pure Python"] * len(batch), batch
