"""What ``doctor`` and ``topics check`` find, and how a report of findings reads.

A :class:`Finding` is one check's verdict on one subject (a broker, a topic, a node):
``ok``, ``info``, ``warn`` (works, but weaker than it should be) or ``fail`` (unsafe
for ordering, or not working now), with a message and, unless it is ok, the fix.
``code`` names the check; ``docs/operators.md`` explains each one. Pure data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Finding", "Severity", "exit_status", "render_json", "render_text"]


class Severity(StrEnum):
    """How much a finding matters; ``fail`` makes the exit status 1."""

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"


_ORDER = {Severity.FAIL: 0, Severity.WARN: 1, Severity.INFO: 2, Severity.OK: 3}


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict on one subject, with the fix when something is wrong."""

    code: str
    severity: Severity
    subject: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``severity`` as its string)."""
        return asdict(self) | {"severity": self.severity.value}


def exit_status(findings: Iterable[Finding]) -> int:
    """1 when any finding fails, else 0."""
    return 1 if any(f.severity is Severity.FAIL for f in findings) else 0


def _sorted(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (_ORDER[f.severity], f.code, f.subject))


def _summary(findings: Sequence[Finding]) -> str:
    counts = Counter(f.severity for f in findings)
    parts = [
        f"{counts[Severity.FAIL]} unsafe or failing",
        f"{counts[Severity.WARN]} warnings",
        f"{counts[Severity.OK] + counts[Severity.INFO]} fine",
    ]
    return ", ".join(parts)


def render_text(findings: Sequence[Finding], header: str, *, verbose: bool = False) -> str:
    """The report as text: the header, failures first, each with its fix, then a
    summary line. ``ok`` findings are listed only when ``verbose``."""
    lines = [header]
    for finding in _sorted(findings):
        if finding.severity is Severity.OK and not verbose:
            continue
        label = finding.severity.value.upper()
        lines.append(f"{label:<5} {finding.code:<24} {finding.subject}: {finding.message}")
        if finding.fix and finding.severity is not Severity.OK:
            lines.append(f"{'':<6}fix: {finding.fix}")
    lines.append(_summary(findings))
    return "\n".join(lines)


def render_json(findings: Sequence[Finding], **context: Any) -> dict[str, Any]:
    """The report as JSON-ready data: ``context`` (bootstrap, topics...), ``ok``, the
    counts per severity and every finding."""
    counts = Counter(f.severity.value for f in findings)
    return {
        **context,
        "ok": exit_status(findings) == 0,
        "counts": {s.value: counts.get(s.value, 0) for s in Severity},
        "findings": [f.to_dict() for f in _sorted(findings)],
    }
