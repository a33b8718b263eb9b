"""The guides' runnable examples are well-formed (they run against a broker in
``tests/integration/test_guides.py``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from atomickafka.cli import build_parser
from atomickafka.config import command_options
from atomickafka.config.files import load_config_file
from atomickafka.config.kafka_layers import merge_kafka_settings
from tests.guide_blocks import GUIDES, runnable_blocks

OPERATORS = Path(__file__).resolve().parents[2] / "docs" / "operators.md"


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


def test_the_operators_security_example_is_a_config_file_that_loads(tmp_path: Path) -> None:
    """The SASL_SSL example of docs/operators.md ("Secure") is valid TOML that the
    configuration loader takes, and its password comes from the file it names."""
    text = OPERATORS.read_text(encoding="utf-8")
    secure = text[text.index("## Secure") :]
    start = secure.index("```toml\n") + len("```toml\n")
    block = secure[start : secure.index("```\n", start)]
    path = tmp_path / "atomickafka.toml"
    path.write_text(block, encoding="utf-8")
    config = load_config_file(path, command_options(build_parser()))
    assert config.options["bootstrap_server"] == (
        "kafka-1.example.com:9093,kafka-2.example.com:9093"
    )
    read: list[str] = []

    def read_file(name: str) -> str:
        read.append(name)
        return "from-the-file"

    settings, _origins = merge_kafka_settings(list(config.kafka), read_file)
    assert settings == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "atomickafka-node",
        "sasl.password": "from-the-file",
        "ssl.ca.location": "/etc/atomickafka/ca.pem",
    }
    assert read == ["/etc/atomickafka/kafka-password"]
