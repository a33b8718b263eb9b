"""The golden-transcript runner (tests/unit/transcript.py): parse, run, compare, rewrite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.transcript import (
    Argument,
    Command,
    TranscriptError,
    TranscriptMismatchError,
    outputs_of,
    parse,
    run_transcript,
)

SAMPLE = """\
# What this file shows.

echo a b=1 c=(x, y) d="two words"
input line
----
a
b=1
c=x|y
d=two words

# Between commands, comments and blank lines stay as they are.


upper word=hello
----
HELLO
"""


def echo(cmd: Command) -> str:
    """A handler for the tests: echoes its arguments, or upper-cases ``word``."""
    if cmd.name == "upper":
        return cmd.require("word").upper()
    if cmd.name == "fail":
        raise TranscriptError("this command fails")
    if cmd.name == "crash":
        raise RuntimeError("a fault of the code under test")
    if cmd.name == "lines":
        return cmd.input
    lines = [" ".join(cmd.positional())]
    for argument in cmd.arguments:
        if argument.values:
            lines.append(f"{argument.key}={'|'.join(cmd.values(argument.key))}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- parse


def test_parse_reads_commands_arguments_input_and_expected_output() -> None:
    transcript = parse(SAMPLE, "sample.txt")
    first, second = transcript.commands
    assert first.name == "echo" and first.line == 3
    assert first.arguments == (
        Argument("a", ()),
        Argument("b", ("1",)),
        Argument("c", ("x", "y")),
        Argument("d", ("two words",)),
    )
    assert first.input == "input line"
    assert first.expected == "a\nb=1\nc=x|y\nd=two words"
    assert second.name == "upper" and second.line == 14 and second.expected == "HELLO"


def test_an_output_with_blank_lines_sits_between_double_separators() -> None:
    text = "lines\n----\n----\none\n\ntwo\n----\n----\n\nupper word=x\n----\nX\n"
    transcript = parse(text)
    assert [c.expected for c in transcript.commands] == ["one\n\ntwo", "X"]
    assert transcript.render(["one\n\ntwo", "X"]) == text


def test_an_empty_output_and_a_continued_command_line() -> None:
    text = "echo a \\\n  b=2\n----\n\nupper word=y\n----\n"
    first, second = parse(text).commands
    assert first.arguments == (Argument("a", ()), Argument("b", ("2",)))
    assert first.expected == "" and second.expected == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("echo a\n\n----\n", "sample.txt:1: 'echo' has no ---- line"),
        ("echo a\n", "sample.txt:1: 'echo' has no ---- line"),
        ("echo a\n----\n----\nout\n", "sample.txt:2: the output is never closed"),
        ("echo a=(x\n----\n", "sample.txt:1: cannot read the arguments"),
        ("echo a \\\n", "sample.txt:1: the command line never ends"),
    ],
)
def test_a_malformed_file_names_the_line(text: str, message: str) -> None:
    with pytest.raises(TranscriptError, match=message.replace("(", r"\(")):
        parse(text, "sample.txt")


def test_render_with_the_expected_outputs_gives_the_file_back() -> None:
    transcript = parse(SAMPLE)
    assert transcript.render([c.expected for c in transcript.commands]) == SAMPLE


def test_render_switches_to_double_separators_for_blank_lines_only() -> None:
    transcript = parse(SAMPLE)
    text = transcript.render(["a\n\nb", "HELLO"])
    assert "----\n----\na\n\nb\n----\n----\n" in text
    assert [c.expected for c in parse(text).commands] == ["a\n\nb", "HELLO"]
    back = parse(text).render(["a\nb=1\nc=x|y\nd=two words", "HELLO"])
    assert back == SAMPLE


# ---------------------------------------------------------------------------- commands


def test_command_accessors() -> None:
    (cmd,) = parse("do n=3 bad=x flag list=(a,b)\n----\n").commands
    assert cmd.integer("n") == 3
    assert cmd.integer("missing", 7) == 7
    assert cmd.flag("flag") and not cmd.flag("absent")
    assert cmd.values("list") == ("a", "b")
    assert cmd.values("absent", ("d",)) == ("d",)
    with pytest.raises(TranscriptError, match="not an integer"):
        cmd.integer("bad")
    with pytest.raises(TranscriptError, match="takes one value"):
        cmd.get("list")
    with pytest.raises(TranscriptError, match="do needs absent="):
        cmd.require("absent")
    with pytest.raises(TranscriptError, match="takes no value"):
        cmd.flag("n")
    assert cmd.text == "do n=3 bad=x flag list=(a,b)"


def test_script_errors_are_outputs_and_unread_arguments_are_errors() -> None:
    transcript = parse("fail\n----\n\nupper word=a typo=1\n----\n")
    assert outputs_of(transcript, echo) == [
        "error: this command fails",
        "error: upper does not take typo",
    ]


def test_a_fault_of_the_code_under_test_propagates_with_its_place() -> None:
    transcript = parse("upper word=a\n----\nA\n\ncrash now\n----\n", "t.txt")
    with pytest.raises(RuntimeError) as info:
        outputs_of(transcript, echo)
    assert "at t.txt:5: crash now" in (info.value.__notes__ or [])


# ---------------------------------------------------------------------------- run


def test_a_matching_transcript_passes_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "sample.txt"
    path.write_text(SAMPLE)
    run_transcript(path, echo)
    assert path.read_text() == SAMPLE


def test_a_mismatch_fails_with_a_unified_diff(tmp_path: Path) -> None:
    path = tmp_path / "sample.txt"
    path.write_text(SAMPLE.replace("HELLO", "HULLO"))
    with pytest.raises(TranscriptMismatchError) as info:
        run_transcript(path, echo)
    text = str(info.value)
    assert "--rewrite" in text
    assert f"--- {path} (expected)" in text and f"+++ {path} (actual)" in text
    assert "\n-HULLO\n" in text and "\n+HELLO\n" in text
    assert "upper word=hello" in text  # context: the command that changed
    assert path.read_text() == SAMPLE.replace("HELLO", "HULLO")  # not rewritten


def test_rewrite_writes_the_outputs_and_keeps_everything_else(tmp_path: Path) -> None:
    path = tmp_path / "sample.txt"
    stale = SAMPLE.replace("a\nb=1\nc=x|y\n", "old\n").replace("HELLO\n", "")
    path.write_text(stale)
    run_transcript(path, echo, rewrite=True)
    assert path.read_text() == SAMPLE
    run_transcript(path, echo)  # and now it passes
