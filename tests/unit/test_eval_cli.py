"""``atomickafka eval``: a wrong option is one clear line and exit status 2 (no Kafka)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import atomickafka
from atomickafka.cli import build_parser, eval_cmd, main
from atomickafka.evaluation.cost.processes import CpuMeter
from atomickafka.evaluation.load.variants import Comparison
from atomickafka.evaluation.suite import command as suite
from atomickafka.evaluation.suite import runner
from atomickafka.kafka.connection import Connection
from atomickafka.node.config import ClusterConfig


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


def test_the_secret_file_signs_every_atomickafka_run_and_only_its_path_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--secret-file`` (or ATOMICKAFKA_SECRET_FILE, or the config file) reaches the
    suite, and each AtomicKafka run hands it to its nodes, its clients and its readers;
    the baselines (the sequencers, the bare pipe) are no members and sign nothing."""
    secret = tmp_path / "signing"
    secret.write_text("do-not-show-me\n")
    monkeypatch.setenv("ATOMICKAFKA_SECRET_FILE", str(secret))
    assert main(["eval", "--print-config"]) == 0
    shown = capsys.readouterr().out
    assert f'secret_file = "{secret}"' in shown and "do-not-show-me" not in shown
    monkeypatch.delenv("ATOMICKAFKA_SECRET_FILE")
    args = build_parser().parse_args(
        ["eval", "--secret-file", str(secret), "--compare", "seq-alo,baselines,kafka"]
    )
    scenarios, comparisons = eval_cmd._parse_load(args)
    where = Connection("b:1", {"security.protocol": "SASL_PLAINTEXT"})
    settings = eval_cmd._settings(args, where, scenarios, comparisons)
    assert settings.secret_file == str(secret)
    assert ("signed records (--secret-file)", f"yes, {secret}") in settings.rows()
    signing = {}
    for variant in settings.variants():
        spec = suite._spec(settings, "t", scenarios[0], variant)
        job = runner._job(spec, spec.plans[0])
        assert job.secret_file == spec.signing
        assert job.connection == where  # the clients take the suite's -X settings
        signing[variant.system.value] = spec.signing
    assert signing == {
        "atomickafka": str(secret),
        "seq-alo": None,
        "seq-eos": None,
        "streams": None,
        "kafka": None,
    }
    started: list[ClusterConfig] = []

    @contextlib.contextmanager
    def cluster(config: ClusterConfig, log_path: Path) -> Iterator[None]:
        started.append(config)
        raise RuntimeError("no Kafka here")
        yield  # pragma: no cover

    monkeypatch.setattr(runner, "running_cluster", cluster)
    spec = suite._spec(settings, "t", scenarios[0], settings.primary)
    with pytest.raises(RuntimeError), runner._running_system(spec, CpuMeter()):
        pass
    assert started[0].node.secret_file == str(secret)  # the nodes (and mergers) sign
    assert started[0].node.connection == where
    assert {Comparison.SEQ_ALO, Comparison.BASELINES, Comparison.KAFKA} == set(comparisons)


def test_a_secret_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    assert main(["eval", "--secret-file", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"secret file {missing}" in err and len(err.strip().splitlines()) == 1
