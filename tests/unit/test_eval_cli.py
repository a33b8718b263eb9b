"""``atomickafka eval``: a wrong option is one clear line and exit status 2 (no Kafka)."""

from __future__ import annotations

from pathlib import Path

import pytest

import atomickafka
from atomickafka.cli import main


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scenarios", "90-20"], "unknown scenario '90-20'"),
        (["--compare", "everything"], "unknown comparison 'everything'"),
        (["--clients", "0"], "--clients must be at least 1"),
        (["-X", "acks"], "-X expects key=value"),
        (["--pace-ms", "-1"], "--pace-ms must be >= 0"),
        (["--record-size", "-5"], "--record-size must be >= 0"),
        (["--fanout", "1-5"], "need 2 <= LO <= HI, got '1-5'"),
        (["--fanout", "5-2"], "need 2 <= LO <= HI, got '5-2'"),
        (["--fanout", "two"], "expected LO-HI, e.g. 2-5, got 'two'"),
    ],
)
def test_a_bad_option_is_one_line_and_status_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("atomickafka eval: error: ")
    assert says in err
    assert len(err.strip().splitlines()) == 1


def test_the_algorithm_choices_come_from_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    from atomickafka.core.engine import Algorithm  # noqa: PLC0415

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = capsys.readouterr().out
    assert "{" + ",".join(a.value for a in Algorithm) + "}" in help_text


def test_the_spark_jobs_path_is_printed_for_spark_submit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The job ships in the package: its path is a file of the installed package."""
    assert main(["eval", "--print-job"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.is_file() and path.name == "metrics_job.py"
    assert path.is_relative_to(Path(atomickafka.__file__).parent)
