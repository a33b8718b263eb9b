"""``atomickafka send``'s ``--key`` and ``-H/--header`` options: parsed into what the
client sends, and a bad header refused in one line with status 2 before anything is
sent (the integration test ``test_raw_format.py`` sends them through a cluster)."""

from __future__ import annotations

import argparse

import pytest

from atomickafka.cli import build_parser, main


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["send", "--bootstrap-server", "b:1", "--to", "t", *argv])


def test_headers_are_repeatable_and_keep_their_order() -> None:
    args = parse("-H", "trace=abc", "--header", "query=a=b&c=", "-H", "empty=", "--key", "k1")
    assert args.header == [("trace", "abc"), ("query", "a=b&c="), ("empty", "")]
    assert args.key == "k1"
    assert parse().header == []


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("novalue", "expected NAME=VALUE"),
        ("=v", "expected NAME=VALUE"),
        ("atomickafka-id=x", "AtomicKafka's"),
    ],
)
def test_a_bad_header_is_one_line_and_status_2(
    given: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["send", "--bootstrap-server", "b:1", "--to", "t", "-H", given, "v"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and reason in err


def test_the_command_line_headers_replace_the_environments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATOMICKAFKA_HEADER", "from=env")
    argv = ["send", "--bootstrap-server", "b:1", "--to", "t", "--print-config"]
    assert main(argv) == 0
    assert 'header = ["from", "env"]  # ATOMICKAFKA_HEADER' in capsys.readouterr().out
    assert main([*argv, "-H", "a=1", "-H", "b=2"]) == 0
    assert 'header = [["a", "1"], ["b", "2"]]  # command line' in capsys.readouterr().out


def test_the_key_help_says_it_is_the_kafka_key_and_chooses_the_layer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["send", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the Kafka key of every delivery record" in text and "chooses the layer" in text
