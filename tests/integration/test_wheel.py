"""The package as a user gets it: a wheel, installed with the eval extra into a fresh
virtual environment outside the checkout, runs the compiled core (``--version`` says so)
and ``atomickafka eval`` from there.

Only ``pyproject.toml``, ``README.md`` and the two packages are copied to build the
wheel, so nothing else of the checkout (``eval/``, ``tests/``) can stand in for what the
wheel lacks; the suite then runs from an empty folder with no ``PYTHONPATH``. pip's
cache makes the installation quick after the first time (pyspark is large).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
#: What the wheel is built from: the project file, its readme, the compiled core's build
#: (setup.py), the packages (deploy/compiled.sh copies the same).
SOURCES = ("pyproject.toml", "README.md", "setup.py", "atomickafka", "client")


def _run(
    argv: list[str | Path],
    timeout_s: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _wheel(tmp_path: Path) -> Path:
    """The wheel to install: built here from :data:`SOURCES`, or the one
    ``deploy/compiled.sh`` built from the same files for this CI run
    (``ATOMICKAFKA_TEST_WHEEL``; ``deploy/test.sh`` sets it), rather than twice."""
    given = os.environ.get("ATOMICKAFKA_TEST_WHEEL")
    if given:
        assert Path(given).is_file(), given
        return Path(given)
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    pip_wheel: list[str | Path] = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--wheel-dir",
        dist,
        source,
    ]
    _run([*pip_wheel, "--quiet"], timeout_s=600)
    (wheel,) = dist.glob("atomickafka-*.whl")
    return wheel


def test_an_installed_wheel_runs_the_evaluation(kafka_bootstrap: str, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], timeout_s=120)
    bin_dir = venv / "bin"
    _run([bin_dir / "python", "-m", "pip", "install", "--quiet", f"{wheel}[eval]"], 1800)

    work = tmp_path / "work"  # outside the checkout: nothing of it is importable
    work.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATOMICKAFKA_EVAL_JOB")
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    command = bin_dir / "atomickafka"

    # the wheel carries the compiled core (mypyc), and the command says that it runs it
    version = _run([command, "--version"], 60, cwd=work, env=env).stdout.strip()
    assert version.endswith("(core: compiled, mypyc)"), version

    job = _run([command, "eval", "--print-job"], 60, cwd=work, env=env).stdout.strip()
    assert Path(job).is_file() and Path(job).is_relative_to(venv), job

    out = _run(
        [
            command,
            "eval",
            "--scenarios",
            "baseline",
            "--messages-per-client",
            "200",
            "--bootstrap-server",
            kafka_bootstrap,
        ],
        900,
        cwd=work,
        env=env,
    )
    (report,) = work.glob("eval/out/*/report.md")
    text = report.read_text(encoding="utf-8")
    assert "**All 1 runs passed the order check**" in text, out.stdout[-3000:]
    assert "## Capacity against the 2019 thesis" in text
    assert list((report.parent / "metrics").glob("*.json")), "the Spark job wrote no metrics"
    assert f"report: {report.relative_to(work)}" in out.stdout
