"""What gets installed: every package of the tree, the client as ``atomickafka.client``
(never a top-level ``client``), and one version."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

import atomickafka
from atomickafka.cli import main

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
    assert capsys.readouterr().out.strip() == f"atomickafka {atomickafka.__version__}"
