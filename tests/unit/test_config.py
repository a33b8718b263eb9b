"""Configuration: the TOML file, the environment and the flags, their precedence, the
librdkafka settings of every level and role, and secrets that never show."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from atomickafka.cli import build_parser, main
from atomickafka.config import (
    KafkaSetting,
    Level,
    command_options,
    load_config_file,
    merge_kafka_settings,
)
from atomickafka.config.files import parse_properties
from atomickafka.errors import ConfigError
from atomickafka.kafka.properties import MASK
from atomickafka.kafka.settings import admin_config, consumer_config, producer_config
from atomickafka.logs import configure_logging, hide_in_logs
from atomickafka.node.config import NodeConfig

ENV_PREFIXES = ("ATOMICKAFKA_", "KAFKA_BOOTSTRAP_SERVERS")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ATOMICKAFKA_* variable of the machine leaks into these tests."""
    import os  # noqa: PLC0415

    for name in list(os.environ):
        if name.startswith(ENV_PREFIXES) and name != "ATOMICKAFKA_HOME":
            monkeypatch.delenv(name)
    yield


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, tuple[str, str]]:
    """``--print-config`` of ``argv`` as ``{name: (value, origin)}``."""
    assert main([*argv, "--print-config"]) == 0
    out: dict[str, tuple[str, str]] = {}
    for line in capsys.readouterr().out.splitlines():
        if " = " in line and not line.startswith("#"):
            left, right = line.split(" = ", 1)
            value, _, origin = right.partition("  # ")
            out[left.strip('"')] = (value.strip('"'), origin)
    return out


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------ precedence


def test_flags_beat_the_environment_which_beats_the_file_which_beats_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path / "ak.toml",
        'bootstrap_server = "file:1"\nstuck_after = 3\nlog_level = "error"\n'
        "[status]\nstuck_after = 4\njson = true\n",
    )
    got = dump(capsys, "status", "--config", str(config))
    assert got["bootstrap_server"] == ("file:1", str(config))
    assert got["stuck_after"] == ("4.0", f"{config} [status]")  # the command's table wins
    assert got["json"] == ("true", f"{config} [status]")
    assert got["log_level"] == ("error", str(config))
    assert got["all"] == ("false", "default")

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "kafka-env:1")
    monkeypatch.setenv("ATOMICKAFKA_STUCK_AFTER", "7.5")
    got = dump(capsys, "status", "--config", str(config))
    assert got["bootstrap_server"] == ("kafka-env:1", "KAFKA_BOOTSTRAP_SERVERS")
    assert got["stuck_after"] == ("7.5", "ATOMICKAFKA_STUCK_AFTER")

    monkeypatch.setenv("ATOMICKAFKA_BOOTSTRAP_SERVER", "ak-env:1")  # beats KAFKA_...
    got = dump(capsys, "status", "--config", str(config))
    assert got["bootstrap_server"] == ("ak-env:1", "ATOMICKAFKA_BOOTSTRAP_SERVER")

    got = dump(
        capsys, "status", "--config", str(config), "--bootstrap-server", "flag:1",
        "--stuck-after", "9",
    )  # fmt: skip
    assert got["bootstrap_server"] == ("flag:1", "command line")
    assert got["stuck_after"] == ("9.0", "command line")


def test_the_config_file_can_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "ak.toml", '[tail]\nbootstrap-server = "b:1"\ntopic = "orders"\n')
    monkeypatch.setenv("ATOMICKAFKA_CONFIG", str(config))
    got = dump(capsys, "tail")  # --topic and --bootstrap-server are no longer required
    assert got["topic"] == ("orders", f"{config} [tail]")
    assert got["bootstrap_server"][0] == "b:1"


def test_lists_booleans_and_subcommand_tables_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path / "ak.toml",
        'bootstrap_server = "b:1"\n[cluster]\ntopics = ["orders", "audit"]\n'
        "[broker.start]\nbrokers = 3\n",
    )
    assert dump(capsys, "cluster", "--config", str(config))["topics"][0] == "orders,audit"
    assert dump(capsys, "broker", "start", "--config", str(config))["brokers"][0] == "3"


def test_cluster_runs_its_nodes_with_the_node_table_under_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, item 11: ``[node]`` (the example file's and the systemd cluster unit's
    protocol settings) was ignored by ``cluster``, so a host running ``cluster`` beside
    ``node`` units would run two protocols. ``[cluster]`` wins over ``[node]``; a
    ``[node]`` option ``cluster`` lacks (``topic``) is left out."""
    config = write(
        tmp_path / "ak.toml",
        'bootstrap_server = "b:1"\nstuck_after = 2\n'
        '[node]\nalgorithm = "poc"\ndelivery_format = "raw"\nstuck_after = 3\ntopic = "x"\n'
        '[cluster]\ntopics = ["orders", "audit"]\nstuck_after = 4\n',
    )
    got = dump(capsys, "cluster", "--config", str(config))
    assert got["algorithm"] == ("poc", f"{config} [node]")
    assert got["delivery_format"] == ("raw", f"{config} [node]")
    assert got["stuck_after"] == ("4.0", f"{config} [cluster]")
    assert got["topics"] == ("orders,audit", f"{config} [cluster]")
    assert "topic" not in got
    node = dump(capsys, "node", "--config", str(config))
    assert node["algorithm"] == ("poc", f"{config} [node]") and node["topic"][0] == "x"
    assert dump(capsys, "status", "--config", str(config))["stuck_after"][1] == str(config)
    example = Path(__file__).parents[2] / "deploy" / "atomickafka.example.toml"
    loaded = load_config_file(example, command_options(build_parser()))
    assert loaded.options_for("cluster")["algorithm"] == ("direct", f"{example} [node]")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not toml = = 1", "not valid TOML"),
        ('bootstrap_servrer = "x"', "no command has an option 'bootstrap_servrer'"),
        ("[tail]\nstuck_after = 3\n", "[tail] has no option 'stuck_after'"),
        ("[nosuch]\nx = 1\n", "[nosuch] is not a command"),
        ('[status]\nstuck_after = "soon"\n', "--stuck-after 'soon'"),
        ('[cluster]\nalgorithm = "gossip"\n', "--algorithm 'gossip': not one of"),
        ('[status]\njson = "maybe"\n', "--json takes true or false"),
    ],
)
def test_a_bad_file_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    config = write(tmp_path / "ak.toml", text)
    command = "cluster" if "cluster" in text else "status"
    argv = [command, "--config", str(config), "--bootstrap-server", "b:1"]
    if command == "cluster":
        argv += ["--topics", "a"]
    assert main([*argv, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
    assert err.startswith(f"atomickafka {command}: ")


def test_bad_environment_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATOMICKAFKA_STUCK_AFTER", "soon")
    assert main(["status", "--bootstrap-server", "b:1"]) == 2
    err = capsys.readouterr().err
    assert "ATOMICKAFKA_STUCK_AFTER: --stuck-after 'soon'" in err and err.count("\n") == 1


def test_a_missing_config_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--config", "/nonexistent/ak.toml"]) == 2
    err = capsys.readouterr().err
    assert "config file /nonexistent/ak.toml: No such file" in err and err.count("\n") == 1


def test_every_command_option_can_be_set_by_a_file() -> None:
    options = command_options(build_parser())
    assert {"tail", "status", "send", "node", "cluster", "broker start"} <= set(options)
    for command in ("tail", "status", "send", "node", "cluster"):
        assert {"bootstrap_server", "bootstrap_servers", "command_config"} <= options[command]
    assert {"secret_file", "topics", "algorithm"} <= options["cluster"]


# ------------------------------------------------------------------- librdkafka


def test_kafka_settings_merge_by_level_and_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    props = write(
        tmp_path / "client.properties",
        "# the Kafka tools' format\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism: PLAIN\n"
        "client.id=from-properties\n",
    )
    config = write(
        tmp_path / "ak.toml",
        f'bootstrap_server = "b:1"\ncommand_config = "{props}"\n'
        '[kafka]\nclient.id = "from-file"\n"socket.timeout.ms" = 1000\n'
        "[producer]\nlinger.ms = 5\n[consumer]\nfetch.wait.max.ms = 50\n",
    )
    got = dump(capsys, "send", "--config", str(config), "--to", "t")
    assert got["security.protocol"] == ("SASL_PLAINTEXT", str(props))
    assert got["client.id"] == ("from-file", f"{config} [kafka]")  # the file's own pair wins
    assert got["producer.linger.ms"] == ("5", f"{config} [producer]")
    assert got["consumer.fetch.wait.max.ms"][0] == "50"

    monkeypatch.setenv("ATOMICKAFKA_X_CLIENT_ID", "from-env")
    monkeypatch.setenv("ATOMICKAFKA_X_PRODUCER_BATCH_NUM_MESSAGES", "77")
    got = dump(capsys, "send", "--config", str(config), "--to", "t", "-X", "linger.ms=9")
    assert got["client.id"] == ("from-env", "ATOMICKAFKA_X_CLIENT_ID")
    assert got["producer.batch.num.messages"] == ("77", "ATOMICKAFKA_X_PRODUCER_BATCH_NUM_MESSAGES")
    assert got["linger.ms"] == ("9", "-X")
    assert "producer.linger.ms" not in got  # a higher level's linger.ms replaced the role one

    got = dump(
        capsys, "send", "--config", str(config), "--to", "t", "-X", "client.id=flag",
        "--producer-property", "client.id=producer-flag", "--command-config", str(props),
    )  # fmt: skip
    assert got["client.id"] == ("flag", "-X")
    assert got["producer.client.id"] == ("producer-flag", "--producer-property")


def test_each_client_takes_only_the_settings_of_its_role() -> None:
    overrides = {
        "client.id": "all",
        "linger.ms": "7",  # librdkafka: producer-only
        "fetch.wait.max.ms": "9",  # consumer-only
        "producer.client.id": "p",
        "consumer.session.timeout.ms": "6000",
        "admin.socket.timeout.ms": "5000",
    }
    producer = producer_config("b:1", overrides)
    consumer = consumer_config("b:1", "g", overrides)
    admin = admin_config("b:1", overrides)
    assert producer["client.id"] == "p" and producer["linger.ms"] == "7"
    assert "fetch.wait.max.ms" not in producer and "session.timeout.ms" not in producer
    assert consumer["client.id"] == "all" and consumer["fetch.wait.max.ms"] == "9"
    assert consumer["session.timeout.ms"] == "6000" and "linger.ms" not in consumer
    assert admin == {"bootstrap.servers": "b:1", "client.id": "all", "socket.timeout.ms": "5000"}


def test_merging_within_one_level_lets_the_role_setting_win() -> None:
    settings = [
        KafkaSetting("producer.acks", "all", Level.FILE, "f"),
        KafkaSetting("acks", "-1", Level.FILE, "f"),
        KafkaSetting("consumer.client.id", "c", Level.ENVIRONMENT, "e"),
        KafkaSetting("client.id", "x", Level.FILE, "f"),
    ]
    values, origins = merge_kafka_settings(settings, read_file=lambda _: "")
    assert values == {"acks": "-1", "producer.acks": "all", "client.id": "x",
                      "consumer.client.id": "c"}  # fmt: skip
    assert origins["consumer.client.id"] == "e"


def test_only_the_winning_file_is_read() -> None:
    read: list[str] = []

    def read_file(path: str) -> str:
        read.append(path)
        return f"from {path}"

    settings = [
        KafkaSetting("sasl.password.file", "/nonexistent/file-level", Level.FILE, "f"),
        KafkaSetting("sasl.password.file", "/run/creds/pw", Level.ENVIRONMENT, "e"),
        KafkaSetting("ssl.key.password", "plain", Level.FILE, "f"),
        KafkaSetting("ssl.key.password.file", "/k", Level.COMMAND_LINE, "-X"),
    ]
    values, origins = merge_kafka_settings(settings, read_file)
    assert values == {"sasl.password": "from /run/creds/pw", "ssl.key.password": "from /k"}
    assert origins == {"sasl.password": "e", "ssl.key.password": "-X"}
    assert read == ["/run/creds/pw", "/k"]


def test_java_properties_and_a_jaas_login_become_librdkafka_settings() -> None:
    text = (
        "! comment\nsecurity.protocol = SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="s3cr\\"et";\n'
    )
    got = {s.key: s.value for s in parse_properties(text, "p", Level.FILE)}
    assert got == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": 's3cr\\"et',
    }
    with pytest.raises(ConfigError, match="only a login module with username and password"):
        parse_properties("sasl.jaas.config=com.example.Kerberos required;", "p", Level.FILE)


# ---------------------------------------------------------------------- secrets


def test_a_setting_read_from_a_file_and_every_secret_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    password = write(tmp_path / "password", "hunter2-from-file\n")
    config = write(
        tmp_path / "ak.toml",
        f'bootstrap_server = "b:1"\n[kafka]\nsasl.username = "alice"\n'
        f'sasl.password.file = "{password}"\n',
    )
    monkeypatch.setenv("ATOMICKAFKA_X_SSL_KEY_PASSWORD", "env-secret-1")
    secret_flag = "sasl.oauthbearer.client.secret=flag-secret-2"
    argv = ["send", "--config", str(config), "--to", "t", "--consumer-property", secret_flag]
    assert main([*argv, "--print-config"]) == 0
    out = capsys.readouterr().out
    for secret in ("hunter2-from-file", "env-secret-1", "flag-secret-2"):
        assert secret not in out
    assert f'"sasl.password" = "{MASK}"' in out and '"sasl.username" = "alice"' in out
    assert f'"consumer.sasl.oauthbearer.client.secret" = "{MASK}"' in out


def test_a_secret_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["status", "--bootstrap-server", "b:1", "-X", f"sasl.password.file={missing}"]) == 2
    err = capsys.readouterr().err
    assert f"sasl.password.file: cannot read {missing}: No such file" in err
    assert err.count("\n") == 1
    assert main(["send", "--bootstrap-server", "b:1", "--to", "t", "--secret-file",
                 str(missing), "x"]) == 2  # fmt: skip
    assert f"secret file {missing}" in capsys.readouterr().err


def test_the_signing_secret_file_is_carried_and_only_its_path_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = write(tmp_path / "signing", "do-not-show-me\n")
    monkeypatch.setenv("ATOMICKAFKA_SECRET_FILE", str(secret))
    got = dump(capsys, "cluster", "--bootstrap-server", "b:1", "--topics", "a")
    assert got["secret_file"] == (str(secret), "ATOMICKAFKA_SECRET_FILE")


def test_secrets_never_show_in_a_node_config_repr() -> None:
    config = NodeConfig("b:1", "A", overrides={"sasl.password": "pw-123", "acks": "all"})
    shown = repr(config)
    assert "pw-123" not in shown and MASK in shown and "'acks': 'all'" in shown
    assert "pw-123" in str(config.to_dict())  # handed on whole to the child process


def test_log_lines_never_show_a_secret(capsys: pytest.CaptureFixture[str]) -> None:
    hide_in_logs(["pw-in-log-line"])
    configure_logging("info")
    logging.getLogger("atomickafka.librdkafka").error("SASL: bad password pw-in-log-line")
    configure_logging("info", json=False)
    logging.getLogger("test").warning("login with pw-in-log-line failed")
    err = capsys.readouterr().err
    assert "pw-in-log-line" not in err and err.count(MASK) == 2


def test_an_error_message_never_shows_a_secret(capsys: pytest.CaptureFixture[str]) -> None:
    from atomickafka.cli.options import fail  # noqa: PLC0415

    hide_in_logs(["pw-in-error"])
    assert fail("send", "Kafka: login as alice/pw-in-error refused\nsecond line") == 2
    err = capsys.readouterr().err
    assert "pw-in-error" not in err and err.count("\n") == 1


def test_the_file_loader_refuses_kafka_tables_that_are_not_tables(tmp_path: Path) -> None:
    config = write(tmp_path / "ak.toml", 'kafka = "x"\n')
    with pytest.raises(ConfigError, match="kafka must be a table"):
        load_config_file(config, command_options(build_parser()))


def test_help_lists_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 5.0)" in text and "(default: warning)" in text
    assert isinstance(build_parser(), argparse.ArgumentParser)


def test_every_command_help_lists_every_default() -> None:
    """Each option with a default shows it in its command's --help."""
    from atomickafka.config.commands import _walk  # noqa: PLC0415

    for words, parser in _walk(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            default = action.default
            if not action.option_strings or default in (None, False, argparse.SUPPRESS, {}, []):
                continue
            shown = str(default.value if hasattr(default, "value") else default)
            assert "default" in (action.help or "").lower() or f"(default: {shown})" in text, (
                " ".join(words),
                action.option_strings,
            )


def test_the_commit_interval_reaches_the_nodes_of_node_cluster_and_bench(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 38: ``--commit-interval`` sets how often a node's writer commits (§6.3); the
    default stays the writers' 0.1 s; zero or a negative interval is refused."""
    from atomickafka.cli.node_cmd import _node_config  # noqa: PLC0415
    from atomickafka.evaluation.bench.command import BenchSetup  # noqa: PLC0415
    from atomickafka.kafka.connection import Connection  # noqa: PLC0415
    from atomickafka.node.writers import COMMIT_INTERVAL_S  # noqa: PLC0415

    parser = build_parser()
    args = parser.parse_args(["node", "--bootstrap-server", "b:1", "--topic", "t"])
    assert _node_config(args, "t", None).commit_interval_s == COMMIT_INTERVAL_S
    for command in (["node", "--topic", "t"], ["cluster", "--topics", "t,u"]):
        args = parser.parse_args(
            [*command, "--bootstrap-server", "b:1", "--commit-interval", "0.2"]
        )
        assert _node_config(args, "t", None).commit_interval_s == 0.2
    args = parser.parse_args(["bench", "--commit-interval", "0.05"])
    setup = BenchSetup(Connection("b:1"), commit_interval_s=args.commit_interval)
    assert setup.node_config(["t"]).commit_interval_s == 0.05
    with pytest.raises(SystemExit):
        parser.parse_args(["node", "--topic", "t", "--commit-interval", "0"])
    assert "above 0" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="commit interval"):
        NodeConfig("b:1", "t", commit_interval_s=-1.0)
