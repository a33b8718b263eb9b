"""The local Kafka's package data: templates and POMs ship in the wheel and render from it.

Nothing here starts a broker or runs Maven; the wheel test builds a wheel with pip.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import pytest

from atomickafka import localkafka
from atomickafka.localkafka import BrokerError, BrokerSpec, ClusterState, render_template
from atomickafka.localkafka.configs import write_configs

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "atomickafka.localkafka"
PACKAGE_DIR = Path(localkafka.__file__).parent
DATA_DIRS = ("templates", "poms")
PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def data_files() -> list[str]:
    """Every file under the package's data folders, relative to the package, ``/``-joined."""
    found = [
        path.relative_to(PACKAGE_DIR).as_posix()
        for folder in DATA_DIRS
        for path in (PACKAGE_DIR / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    assert found, f"no data files under {PACKAGE_DIR}"
    return sorted(found)


def template_names() -> list[str]:
    """Names accepted by :func:`render_template`, walked through importlib.resources."""

    def walk(node: Traversable, prefix: str) -> list[str]:
        names = []
        for child in node.iterdir():
            if child.is_dir():
                names += walk(child, f"{prefix}{child.name}/")
            else:
                names.append(prefix + child.name)
        return names

    return sorted(walk(resources.files(PACKAGE) / "templates", ""))


def test_package_data_globs_cover_every_data_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"][PACKAGE]
    # setuptools expands the patterns with glob relative to the package folder
    matched = {
        match
        for pattern in patterns
        for match in glob.glob(pattern, root_dir=PACKAGE_DIR)
        if (PACKAGE_DIR / match).is_file()
    }
    missing = [name for name in data_files() if name not in matched]
    assert not missing, f"not matched by package-data {patterns}: {missing}"


def test_every_template_renders_from_the_package() -> None:
    names = template_names()
    assert {"log4j2.xml", "single/server.properties", "cluster/server.properties"} <= set(names)
    for name in names:
        text = (resources.files(PACKAGE) / "templates" / name).read_text(encoding="utf-8")
        keys = set(PLACEHOLDER.findall(text))
        assert keys, f"template {name} has no placeholder"
        rendered = render_template(name, {key: f"<{key.lower()}>" for key in keys})
        assert PLACEHOLDER.search(rendered) is None, name
        assert all(f"<{key.lower()}>" in rendered for key in keys)


def test_a_missing_value_names_the_placeholder() -> None:
    with pytest.raises(BrokerError, match="@LOG_FILE@"):
        render_template("log4j2.xml", {})


@pytest.mark.parametrize("brokers", [1, 3])
def test_write_configs_fills_each_broker_folder(tmp_path: Path, brokers: int) -> None:
    specs = tuple(BrokerSpec(i + 1, 30000 + 2 * i, 30001 + 2 * i) for i in range(brokers))
    state = ClusterState("cluster-id", localkafka.kafka_version(), specs)
    write_configs(tmp_path, state)
    for spec in specs:
        folder = tmp_path / f"node-{spec.node_id}"
        props = (folder / "server.properties").read_text()
        assert f"node.id={spec.node_id}\n" in props
        assert f"listeners=PLAINTEXT://127.0.0.1:{spec.port}," in props
        assert f"controller.quorum.voters={state.voters}\n" in props
        assert f"log.dirs={folder / 'data'}\n" in props
        assert f"default.replication.factor={1 if brokers == 1 else 3}\n" in props
        assert str(folder / "logs" / "server.log") in (folder / "log4j2.xml").read_text()


def test_pom_versions() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", localkafka.kafka_version())
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [d for d in config["project"]["optional-dependencies"]["eval"] if "pyspark" in d]
    # the connector POM's default must be the pinned pyspark: only its jars all resolve
    assert pins == [f"pyspark=={localkafka.default_spark_version()}"]
    assert localkafka.default_spark_version() == "4.0.0"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_contains_templates_and_poms(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build leaves build/ behind, whose stale files could
    # end up in the wheel and hide a missing glob.
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("atomickafka", "client"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("atomickafka-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    prefix = PACKAGE.replace(".", "/")
    missing = [name for name in data_files() if f"{prefix}/{name}" not in names]
    assert not missing, f"{wheel.name} lacks {missing}"
    assert f"{prefix}/__init__.py" in names
