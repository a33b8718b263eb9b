"""The CLI's files, end to end on the real broker: what ``send --json`` writes is what
``check`` reads beside ``tail --json``'s deliveries; ``tail``'s text lines stay one
line per delivery, three tab-separated fields, whatever the value holds (tabs,
newlines, quotes, non-ASCII), and each value column reads back as the value sent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.integration.harness import run_cli, running_cluster

pytestmark = pytest.mark.integration

#: Values a naive text output would split or garble.
AWKWARD = ["tab\there", "two\nlines", 'a "quoted" \\ slash', "crlf\r\nend", "été ✓", "\t"]


def _tail(bootstrap: str, topic: str, *extra: str) -> str:
    """Every delivery of ``topic``: tail ends once it has read them all (a busy machine's
    nodes may take seconds to deliver after ``send`` returns), or after 30 s without."""
    out = run_cli(
        "tail", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
        "--max-messages", str(len(AWKWARD)), "--timeout-ms", "30000", *extra,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_send_json_is_what_check_reads_and_tail_text_stays_unambiguous(
    kafka_bootstrap: str, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    a, b = topic_factory(), topic_factory()
    with running_cluster(kafka_bootstrap, [a, b], log_dir=tmp_path):
        sent = run_cli(
            "send", "--bootstrap-server", kafka_bootstrap, "--to", f"{a},{b}", "--json",
            "--json-value", stdin="".join(orjson.dumps(v).decode() + "\n" for v in AWKWARD),
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        rows = [orjson.loads(line) for line in sent.stdout.splitlines()]
        assert [r["value"] for r in rows] == AWKWARD
        assert all(sorted(r["topic"]) == sorted([a, b]) for r in rows)
        (tmp_path / "SENT.jsonl").write_text(sent.stdout)
        for topic in (a, b):
            (tmp_path / f"{topic}.jsonl").write_text(_tail(kafka_bootstrap, topic, "--json"))
        text = _tail(kafka_bootstrap, a)

    check = run_cli(
        "check", str(tmp_path / "SENT.jsonl"), str(tmp_path / f"{a}.jsonl"),
        str(tmp_path / f"{b}.jsonl"),
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "OK" in check.stdout
    lines = text.splitlines()
    assert len(lines) == len(AWKWARD)  # one line per delivery, whatever the value holds
    by_id = {r["messageID"]: r["value"] for r in rows}
    for line in lines:
        timestamp, message_id, value = line.split("\t")
        assert int(timestamp) > 0
        assert orjson.loads(value) == by_id[message_id]
