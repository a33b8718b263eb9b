"""The sequencer baselines (issue 36): which one stands beside which mode, how the bench
and the suite name and choose them, the many-topic workload's destination sets, and the
plot of projected capacity against the number of topics."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from atomickafka.cli import bench_cmd, build_parser, main
from atomickafka.errors import ConfigError
from atomickafka.evaluation.bench.command import BenchLoad
from atomickafka.evaluation.cost.projection_plot import TopicPoint, plot_projection_vs_topics
from atomickafka.evaluation.load.baselines import Baseline, baselines_for, parse_baselines
from atomickafka.evaluation.load.destinations import HOT, MANY, parse_topic_counts
from atomickafka.evaluation.load.scenarios import plan_clients, scenario
from atomickafka.evaluation.load.streams import streams_process
from atomickafka.evaluation.suite.command import many_topic_runs
from atomickafka.kafka.connection import Connection

TOPICS = [f"t{i}" for i in range(1, 21)]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_each_mode_is_compared_with_the_baselines_of_its_promise() -> None:
    assert baselines_for(exactly_once=True) == (Baseline.SEQ_EOS, Baseline.STREAMS)
    assert baselines_for(exactly_once=False) == (Baseline.SEQ_ALO,)
    assert [b.exactly_once for b in Baseline] == [False, True, True]
    assert [b.sender_id for b in Baseline] == ["sequencer", "seq-eos", "streams"]
    assert "at-least-once, no recovery" in Baseline.SEQ_ALO.promise
    assert Baseline.STREAMS.jvm and not Baseline.SEQ_EOS.jvm


def test_the_bench_takes_the_baselines_of_its_mode_unless_told() -> None:
    parser = build_parser()

    def chosen(*argv: str) -> tuple[Baseline, ...]:
        return tuple(bench_cmd._options(parser.parse_args(["bench", *argv]))[2])

    assert chosen() == (Baseline.SEQ_EOS, Baseline.STREAMS)
    assert chosen("--at-least-once") == (Baseline.SEQ_ALO,)
    assert chosen("--baselines", "streams,seq-alo,streams") == (Baseline.STREAMS, Baseline.SEQ_ALO)
    assert chosen("--no-baselines") == () == chosen("--no-sequencer")  # its old name


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baselines", "sequencer"], "the plain sequencer is now seq-alo"),
        (["--workload", "many,lots"], "--workload: standard, many or standard,many"),
        (["--plot", "p.png"], "--plot draws the many-topic workload"),
        (["--many-topics", "5,1"], "at least 2"),
        (["--many-topics", "five"], "whole numbers"),
        (["--shares", "ten"], "--shares: whole percentages"),
        (["--delivery-format", "xml"], "--delivery-format"),
    ],
)
def test_a_bad_bench_option_is_one_clear_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["bench", *argv])
    assert bench_cmd._run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("atomickafka bench: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_a_baseline_that_cannot_take_the_x_settings_is_refused_before_any_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Kafka Streams baseline reaches Kafka with the bootstrap only: with ``-X``
    settings, bench and eval say so in one line before they start anything."""
    x = ["-X", "security.protocol=SASL_SSL", "--bootstrap-server", "127.0.0.1:9"]
    assert main(["bench", *x]) == 2
    err = capsys.readouterr().err
    assert "streams" in err and "security.protocol" in err and "--baselines seq-eos" in err
    assert main(["eval", *x, "--compare", "baselines", "--no-warmup"]) == 2
    err = capsys.readouterr().err
    assert "streams" in err and "--compare seq-eos" in err
    assert len(err.strip().splitlines()) == 1


def test_parse_baselines_refuses_what_is_none() -> None:
    assert parse_baselines(" seq-eos , ") == (Baseline.SEQ_EOS,)
    with pytest.raises(ConfigError, match="choose from seq-alo, seq-eos, streams"):
        parse_baselines("kafka-streams")


def test_the_streams_baseline_refuses_librdkafka_settings_it_cannot_take() -> None:
    where = Connection("127.0.0.1:9", {"security.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match=r"bootstrap servers only.*security\.protocol"):
        streams_process(where, "seq")


def test_the_many_mix_is_the_stated_distribution() -> None:
    plan = MANY.plan(TOPICS, 20_000, seed=3)
    assert plan == MANY.plan(TOPICS, 20_000, seed=3)  # the same messages for every system
    sizes = collections.Counter(len(d) for d in plan)
    assert set(sizes) == {1, 2, 3}
    assert 0.88 < sizes[1] / len(plan) < 0.92
    assert all(len(set(d)) == len(d) and list(d) == sorted(d) for d in plan)
    picks = collections.Counter(t for d in plan for t in d)
    assert max(picks.values()) < 1.25 * min(picks.values())  # every topic alike
    assert MANY.describe() == (
        "90% of messages to one topic, 10% to 2-3 distinct topics, every topic equally likely"
    )


def test_the_hot_mix_sends_half_of_the_picks_to_a_tenth_of_the_topics() -> None:
    assert HOT.hot_topics(20) == 2 and HOT.hot_topics(5) == 1
    assert sum(HOT.weights(20)) == pytest.approx(1.0)
    picks = collections.Counter(t for d in HOT.plan(TOPICS, 20_000) for t in d)
    hot = (picks["t1"] + picks["t2"]) / sum(picks.values())
    assert 0.4 < hot < 0.55  # a multicast's later picks are drawn without the first
    assert "take 50% of the picks" in HOT.describe()


def test_topic_counts_are_whole_numbers_of_at_least_two() -> None:
    assert parse_topic_counts("5, 10,20,10") == (5, 10, 20)
    for bad in ("", "1", "5,x"):
        with pytest.raises(ConfigError):
            parse_topic_counts(bad)


def test_a_many_topic_load_is_named_by_its_mix_and_topic_count() -> None:
    load = BenchLoad(100, 0.0, mix=HOT, seed=1)
    assert load.tag(20) == "hot-20" and BenchLoad(100, 0.1).tag(5) == "10%"
    plan = load.plan("c", TOPICS)
    assert [mid for mid, _ in plan[:2]] == ["c-0", "c-1"]
    assert [d for _, d in plan] == HOT.plan(TOPICS, 100, 1)


def test_the_suite_runs_the_many_mix_on_each_count_and_the_hot_one_on_the_largest() -> None:
    runs = many_topic_runs((5, 10, 20))
    assert [(s.name, mix.name, n) for s, mix, n in runs] == [
        ("many-5", "many", 5),
        ("many-10", "many", 10),
        ("many-20", "many", 20),
        ("hot-20", "hot", 20),
    ]
    assert {s.multicast_percent for s, _, _ in runs} == {10}
    plans = plan_clients(scenario("90-10"), TOPICS[:5], 2, 50, mix=MANY, seed=2)
    assert all(len(plan.destinations) == 50 for plan in plans)
    assert plans[0].destinations != plans[1].destinations  # each client its own draw


def test_the_projection_plot_is_drawn_for_each_system(tmp_path: Path) -> None:
    lines: dict[str, list[TopicPoint]] = {
        "AtomicKafka": [(20, 30_000.0, 4_000.0), (5, 9_000.0, 6_000.0)],
        "seq-eos": [(5, 18_000.0, 7_000.0), (20, None, 7_500.0)],
    }
    path = plot_projection_vs_topics(lines, tmp_path / "p.png", MANY.describe())
    assert path.read_bytes().startswith(PNG_MAGIC)
