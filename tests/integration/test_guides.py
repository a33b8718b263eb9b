"""The guides' runnable examples (``docs/users.md``, ``docs/operators.md``), run as a
reader would run them: in order, in one folder, with ``atomickafka`` on the PATH,
``KAFKA_BOOTSTRAP_SERVERS`` set and nodes running for ``orders``, ``payments`` and
``audit``. Each must exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.guide_blocks import GUIDES, runnable_blocks
from tests.integration.harness import running_cluster

pytestmark = pytest.mark.integration

TOPICS = ["orders", "payments", "audit"]


@pytest.fixture(scope="module")
def guide_nodes(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The nodes the guides assume, for the module."""
    # raw deliveries: users.md's "Reading with any Kafka consumer" says its example runs
    # against nodes started with --delivery-format raw
    with running_cluster(
        kafka_bootstrap,
        TOPICS,
        log_dir=tmp_path_factory.mktemp("guides"),
        delivery_format="raw",
    ):
        yield


def reader_environment(bootstrap: str) -> dict[str, str]:
    """A reader's shell: the bootstrap in its variable, ``atomickafka`` on the PATH, no
    other AtomicKafka setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATOMICKAFKA_")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if "ATOMICKAFKA_HOME" in os.environ:
        env["ATOMICKAFKA_HOME"] = os.environ["ATOMICKAFKA_HOME"]
    return env


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_the_guides_examples_run(
    guide: Path, guide_nodes: None, kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = reader_environment(kafka_bootstrap)
    for block in runnable_blocks(guide):
        argv = (
            [sys.executable, "-c", block.code]
            if block.lang == "python"
            else ["bash", "-euo", "pipefail", "-c", block.code]
        )
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (
            f"{guide.name} {block.where} exited {done.returncode}:\n{block.code}\n"
            f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-2000:]}"
        )
        assert "Traceback" not in done.stderr, done.stderr
