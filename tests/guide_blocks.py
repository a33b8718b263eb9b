"""The runnable examples of the guides (``docs/*.md``): fenced blocks whose info string
says ``title="runnable"`` (```` ```bash title="runnable" ````), in the order they
appear, dedented when they sit in a list item."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["GUIDES", "Block", "runnable_blocks"]

ROOT: Final = Path(__file__).resolve().parents[1]
#: The guides whose examples run.
GUIDES: Final = (ROOT / "docs" / "users.md", ROOT / "docs" / "operators.md")
_FENCE: Final = re.compile(
    r'^(?P<indent> *)```(?P<lang>\w+) title="runnable"\n(?P<body>.*?)^(?P=indent)```',
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Block:
    """One runnable example: its language, its code and where it starts."""

    lang: str
    code: str
    line: int

    @property
    def where(self) -> str:
        return f"line {self.line}"


def runnable_blocks(guide: Path) -> list[Block]:
    """The runnable blocks of ``guide``, in order."""
    text = guide.read_text(encoding="utf-8")
    return [
        Block(
            match["lang"],
            textwrap.dedent(match["body"]),
            text.count("\n", 0, match.start()) + 1,
        )
        for match in _FENCE.finditer(text)
    ]
