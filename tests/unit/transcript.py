"""A small runner for golden transcripts, after cockroachdb/datadriven (etcd-io/raft's
``testdata/*.txt`` interaction tests).

A transcript is a text file of commands, each followed by ``----`` and the output it
is expected to produce::

    # A comment: what this file shows.
    send id=m1 to=(A,B)
    ----
    m1 -> A[0] B[0]

    step A n=1
    optional input lines
    ----
    read A[0] Client m1 {A,B}

The format:

- Lines starting with ``#`` and blank lines between commands are kept as they are.
- A command is a line ``name arg arg...``; a line ending in ``\\`` continues on the
  next. An argument is ``key``, ``key=value``, ``key="a value"`` or
  ``key=(v1, v2, ...)``. Lines up to ``----`` are the command's input.
- The expected output runs from ``----`` to the first blank line (or the end of the
  file). An output that holds blank lines is written between two ``----`` lines and
  closed by two more::

      ----
      ----
      first part

      second part
      ----
      ----

:func:`run_transcript` runs every command of a file through a handler (a function of
:class:`Command` to its output text), in order, on one state. It compares each output
with the expected one; on any difference it raises :class:`TranscriptMismatchError` whose
message is a unified diff of the file as it is against the file as it would be. With
``rewrite=True`` it writes that file instead: only the expected blocks change. A
handler raises :class:`TranscriptError` for a mistake in the script (an unknown node,
a missing argument); the runner shows it as the command's output, ``error: ...``, so a
transcript may expect one. Arguments a handler never reads are such a mistake too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "SEPARATOR",
    "Argument",
    "Command",
    "Transcript",
    "TranscriptError",
    "TranscriptMismatchError",
    "parse",
    "run_transcript",
]

SEPARATOR = "----"

_ARGUMENT = re.compile(
    r"""\s*(?P<key>[^\s=()"]+)
        (?:=(?:\((?P<list>[^)]*)\)|"(?P<quoted>[^"]*)"|(?P<plain>[^\s()"]+)))?
        (?=\s|$)""",
    re.VERBOSE,
)


class TranscriptError(Exception):
    """A mistake in a transcript: a bad file, or a command its handler cannot run."""


class TranscriptMismatchError(AssertionError):
    """A transcript's outputs differ from the expected ones; the message is a diff."""


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument of a command: ``key``, ``key=value`` or ``key=(v1, v2)``."""

    key: str
    values: tuple[str, ...]


@dataclass(slots=True)
class Command:
    """One command of a transcript and the output expected of it.

    The accessors (:meth:`positional`, :meth:`get`, :meth:`values`, :meth:`flag`)
    note which arguments were read; :func:`run_transcript` refuses a command whose
    handler left an argument unread (a typo would otherwise be ignored).
    """

    name: str
    arguments: tuple[Argument, ...]
    input: str
    expected: str
    line: int  # of the command, 1-based
    used: set[str] = field(default_factory=set)

    @property
    def text(self) -> str:
        """The command line, as a reader would refer to it."""
        parts = [self.name]
        for argument in self.arguments:
            if not argument.values:
                parts.append(argument.key)
            elif len(argument.values) == 1:
                parts.append(f"{argument.key}={argument.values[0]}")
            else:
                parts.append(f"{argument.key}=({','.join(argument.values)})")
        return " ".join(parts)

    def positional(self) -> list[str]:
        """The bare arguments (``key`` without ``=``), in order."""
        bare = [a.key for a in self.arguments if not a.values]
        self.used.update(bare)
        return bare

    def _find(self, key: str) -> Argument | None:
        self.used.add(key)
        for argument in self.arguments:
            if argument.key == key:
                return argument
        return None

    def values(self, key: str, default: Sequence[str] | None = None) -> tuple[str, ...]:
        """The values of ``key`` (``key=(a, b)``: two), or ``default``; raises
        :class:`TranscriptError` when it is missing and there is no default."""
        argument = self._find(key)
        if argument is None or not argument.values:
            if default is None:
                raise TranscriptError(f"{self.name} needs {key}=...")
            return tuple(default)
        return argument.values

    def get(self, key: str, default: str | None = None) -> str | None:
        """The one value of ``key``, or ``default`` when it is not given."""
        argument = self._find(key)
        if argument is None or not argument.values:
            return default
        if len(argument.values) != 1:
            raise TranscriptError(f"{key} takes one value, not {len(argument.values)}")
        return argument.values[0]

    def require(self, key: str) -> str:
        """The one value of ``key``; raises :class:`TranscriptError` when missing."""
        value = self.get(key)
        if value is None:
            raise TranscriptError(f"{self.name} needs {key}=...")
        return value

    def integer(self, key: str, default: int | None = None) -> int | None:
        """The value of ``key`` as an integer, or ``default``."""
        value = self.get(key)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise TranscriptError(f"{key}={value}: not an integer") from None

    def flag(self, key: str) -> bool:
        """True when the bare argument ``key`` is given."""
        argument = self._find(key)
        if argument is not None and argument.values:
            raise TranscriptError(f"{key} takes no value")
        return argument is not None

    def unused(self) -> list[str]:
        """The argument keys no accessor asked for."""
        return [a.key for a in self.arguments if a.key not in self.used]


@dataclass(frozen=True, slots=True)
class _Block:
    """Where a command's expected output sits: lines ``[start, end)`` of the file."""

    start: int
    end: int


@dataclass(slots=True)
class Transcript:
    """A parsed transcript: its lines, its commands and where each expected block is."""

    name: str
    lines: list[str]
    commands: list[Command]
    blocks: list[_Block]

    def render(self, outputs: Sequence[str]) -> str:
        """The file with each command's expected block replaced by ``outputs``."""
        if len(outputs) != len(self.commands):
            raise ValueError("one output per command")
        out: list[str] = []
        position = 0
        for block, output in zip(self.blocks, outputs, strict=True):
            out.extend(self.lines[position : block.start])
            out.extend(_format_block(output))
            position = block.end
        out.extend(self.lines[position:])
        return "".join(line + "\n" for line in out)


def _format_block(output: str) -> list[str]:
    lines = output.split("\n") if output else []
    if any(not line.strip() for line in lines) or lines[:1] == [SEPARATOR]:
        return [SEPARATOR, SEPARATOR, *lines, SEPARATOR, SEPARATOR]
    return [SEPARATOR, *lines]


def _parse_arguments(text: str, where: str) -> tuple[Argument, ...]:
    arguments: list[Argument] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _ARGUMENT.match(text, position)
        if match is None:
            raise TranscriptError(f"{where}: cannot read the arguments at {text[position:]!r}")
        key = match["key"]
        if match["list"] is not None:
            values = tuple(v.strip() for v in match["list"].split(",") if v.strip())
        elif match["quoted"] is not None:
            values = (match["quoted"],)
        elif match["plain"] is not None:
            values = (match["plain"],)
        else:
            values = ()
        arguments.append(Argument(key, values))
        position = match.end()
    return tuple(arguments)


def _read_command_line(lines: Sequence[str], index: int, where: str) -> tuple[str, int]:
    """The command line at ``index`` with its ``\\`` continuations joined, and the
    index of the line after it."""
    directive = lines[index]
    while directive.endswith("\\"):
        index += 1
        if index >= len(lines):
            raise TranscriptError(f"{where}: the command line never ends")
        directive = directive[:-1] + " " + lines[index]
    return directive, index + 1


def _read_input(lines: Sequence[str], index: int, where: str, word: str) -> tuple[str, int]:
    """The command's input lines from ``index`` up to its ``----`` line, and the index
    of that line; a blank line or the end of the file before it is an error."""
    input_lines: list[str] = []
    while index < len(lines) and lines[index] != SEPARATOR:
        if not lines[index].strip():
            raise TranscriptError(f"{where}: {word!r} has no {SEPARATOR} line")
        input_lines.append(lines[index])
        index += 1
    if index >= len(lines):
        raise TranscriptError(f"{where}: {word!r} has no {SEPARATOR} line")
    return "\n".join(input_lines), index


def _read_expected(lines: Sequence[str], separator: int, name: str) -> tuple[str, int]:
    """The expected output after the ``----`` line at ``separator``, and the index of
    the line after it: up to the first blank line, or, in the two-separator form, up
    to the two closing ``----`` lines."""
    index = separator + 1
    expected: list[str] = []
    if index < len(lines) and lines[index] == SEPARATOR:  # the two-separator form
        index += 1
        while True:
            if index + 1 >= len(lines):
                raise TranscriptError(
                    f"{name}:{separator + 1}: the output is never closed by two {SEPARATOR} lines"
                )
            if lines[index] == SEPARATOR and lines[index + 1] == SEPARATOR:
                return "\n".join(expected), index + 2
            expected.append(lines[index])
            index += 1
    while index < len(lines) and lines[index].strip():
        expected.append(lines[index])
        index += 1
    return "\n".join(expected), index


def parse(text: str, name: str = "<transcript>") -> Transcript:
    """Parse a transcript; raises :class:`TranscriptError` naming the line at fault."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline
    commands: list[Command] = []
    blocks: list[_Block] = []
    index = 0
    while index < len(lines):
        if not lines[index].strip() or lines[index].startswith("#"):
            index += 1
            continue
        where = f"{name}:{index + 1}"
        line = index + 1
        directive, index = _read_command_line(lines, index, where)
        word, _, rest = directive.strip().partition(" ")
        command_input, start = _read_input(lines, index, where, directive.split()[0])
        expected, index = _read_expected(lines, start, name)
        commands.append(
            Command(
                name=word,
                arguments=_parse_arguments(rest, where),
                input=command_input,
                expected=expected,
                line=line,
            )
        )
        blocks.append(_Block(start, index))
    return Transcript(name, lines, commands, blocks)


Handler = Callable[[Command], str]


def _run_one(handler: Handler, command: Command) -> str:
    try:
        output = handler(command)
        unused = command.unused()
        if unused:
            raise TranscriptError(f"{command.name} does not take {', '.join(unused)}")
    except TranscriptError as exc:
        return f"error: {exc}"
    return output.rstrip("\n")


def outputs_of(transcript: Transcript, handler: Handler) -> list[str]:
    """Run every command of ``transcript`` through ``handler``; their outputs.

    An exception other than :class:`TranscriptError` is a fault of the code under
    test: it propagates, with a note naming the file, line and command.
    """
    outputs = []
    for command in transcript.commands:
        try:
            outputs.append(_run_one(handler, command))
        except Exception as exc:
            exc.add_note(f"at {transcript.name}:{command.line}: {command.text}")
            raise
    return outputs


def run_transcript(path: Path, handler: Handler, *, rewrite: bool = False) -> None:
    """Run the transcript at ``path``; on a difference raise :class:`TranscriptMismatchError`
    with a unified diff, or with ``rewrite`` write the actual outputs into the file."""
    text = path.read_text(encoding="utf-8")
    transcript = parse(text, str(path))
    outputs = outputs_of(transcript, handler)
    if all(o == c.expected for o, c in zip(outputs, transcript.commands, strict=True)):
        return
    actual = transcript.render(outputs)
    if rewrite:
        path.write_text(actual, encoding="utf-8")
        return
    diff = difflib.unified_diff(
        text.splitlines(keepends=True),
        actual.splitlines(keepends=True),
        fromfile=f"{path} (expected)",
        tofile=f"{path} (actual)",
        n=3,
    )
    raise TranscriptMismatchError(
        f"{path.name}: the outputs differ from the expected ones (a '-' line is "
        "expected, a '+' line is what ran; rewrite with `pytest "
        "tests/unit/test_transcripts.py --rewrite` if the change is intended):\n" + "".join(diff)
    )
