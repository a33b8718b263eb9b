"""The guides' runnable examples are well-formed (they run against a broker in
``tests/integration/test_guides.py``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.guide_blocks import GUIDES, runnable_blocks


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_runnable_example_parses(guide: Path) -> None:
    blocks = runnable_blocks(guide)
    assert len(blocks) >= 3, f"{guide.name} has few runnable examples"
    for block in blocks:
        assert block.lang in ("bash", "python"), block.where
        if block.lang == "python":
            compile(block.code, f"{guide.name}:{block.line}", "exec")
        else:
            done = subprocess.run(
                ["bash", "-n"], input=block.code, text=True, capture_output=True, check=False
            )
            assert done.returncode == 0, f"{guide.name} {block.where}: {done.stderr}"


def test_blocks_in_list_items_are_found_and_dedented(tmp_path: Path) -> None:
    guide = tmp_path / "g.md"
    guide.write_text(
        'intro\n\n1. step\n\n   ```bash title="runnable"\n   echo one\n   ```\n\n'
        '```python title="runnable"\nprint(2)\n```\n```bash\nnot runnable\n```\n'
    )
    blocks = runnable_blocks(guide)
    assert [(b.lang, b.code, b.line) for b in blocks] == [
        ("bash", "echo one\n", 5),
        ("python", "print(2)\n", 9),
    ]
