"""Golden transcripts: scripted scenarios beside the trace they produce.

Every ``tests/unit/testdata/*.txt`` is run through :class:`Cluster`
(``tests/unit/transcript_commands.py``, which lists the commands: the simulators'
cluster of production batch layers, ``NodeBatch`` and ``MergerBatch``) by the runner
in ``tests/unit/transcript.py``. A change to a protocol rule shows up here as a diff of
the traces; ``pytest tests/unit/test_transcripts.py --rewrite`` writes the new traces
into the files, for review.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atomickafka.core.marker import decode_marker
from atomickafka.node.batch import NodeBatch
from tests.unit.batch_mutants import use_batch_class
from tests.unit.transcript import TranscriptMismatchError, outputs_of, parse, run_transcript
from tests.unit.transcript_commands import Cluster

TESTDATA = Path(__file__).parent / "testdata"
TRANSCRIPTS = sorted(TESTDATA.glob("*.txt"))


def test_there_are_transcripts() -> None:
    assert len(TRANSCRIPTS) >= 5, TRANSCRIPTS


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_transcript(path: Path, request: pytest.FixtureRequest) -> None:
    run_transcript(path, Cluster().run, rewrite=bool(request.config.getoption("--rewrite")))


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_raw_deliveries_give_the_same_traces(path: Path) -> None:
    """The delivery format (§3.8) is how a delivery is written, not what is delivered:
    with raw records instead of JSON envelopes every trace is the same."""
    run_transcript(path, Cluster(delivery_format="raw").run)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_transcript_says_what_it_shows(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# "), f"{path.name} must start with a comment saying what it shows"


def outputs(text: str) -> list[str]:
    return outputs_of(parse(text), Cluster().run)


def test_the_harness_refuses_script_mistakes_as_outputs() -> None:
    script = "\n\n".join(
        [
            "send id=m to=(A)\n----",
            "setup topics=(A,B) protocol=paxos\n----",
            "setup topics=(A,B)\n----",
            "frobnicate\n----",
            "send id=m to=(A,Z)\n----",
            "send id=m to=(A,B) via=A\n----",
            "send id=m to=(A,B) onyl=(A)\n----",
            "step Q\n----",
            "crash A\n----",
            "step A\n----",
            "recover B\n----",
            "merge A\n----",
        ]
    )
    assert outputs(script + "\n") == [
        "error: no cluster yet: start with setup",
        "error: unknown protocol 'paxos'",
        "nodes A B (direct)",
        "error: unknown command 'frobnicate'; known: setup, send, step, drain, dup, replay, "
        "flush, snapshot, crash, recover, merge, deliveries, log, state, check, standby, "
        "follow, takeover, restart, mark",
        "error: no topic 'Z'",
        "error: direct writes to every destination: use only=(...)",
        "error: send does not take onyl",
        "error: no node 'Q'; nodes: A B",
        "A crashes at A[0]: state lost, 0 queued writes lost, committed offset 0 kept",
        "error: A is down: recover it first",
        "error: B is not down",
        "error: A has no merger (setup layers=N)",
    ]


CONTROL_LOG_TRANSCRIPTS = [p for p in TRANSCRIPTS if "logs=control" in p.read_text()]


def test_the_default_path_has_transcripts() -> None:
    """Control logs are production's default: transcripts of markers, the direct lane,
    a standby over two logs taking over with records buffered, and a wrong restart."""
    names = {p.stem for p in CONTROL_LOG_TRANSCRIPTS}
    assert {
        "control-logs-markers",
        "direct-lane",
        "standby-two-logs",
        "wrong-restart-two-logs",
    } <= names, names


class _AppliesAnyMarker(NodeBatch):
    def _control_record(self, record: Any) -> Any:
        marker = decode_marker(record.value())
        if marker is not None and marker.start < self.applied:
            self.applied = marker.start  # forgets that the range was applied
        return super()._control_record(record)


def test_a_broken_marker_rule_shows_as_a_readable_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put back a wrong marker rule (a marker applies its range whatever the next
    unapplied offset: a zombie's marker applies records a second time) and a control-log
    transcript fails with a diff that names the lines that changed."""
    use_batch_class(monkeypatch, _AppliesAnyMarker)
    path = TESTDATA / "control-logs-markers.txt"
    with pytest.raises(TranscriptMismatchError) as failure:
        run_transcript(path, Cluster().run)
    diff = str(failure.value)
    assert "--- " in diff and "+++ " in diff, diff[:300]
    changed = [
        line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert "-  1 marker(s) apply nothing" in changed, diff  # the zombie's marker applied
