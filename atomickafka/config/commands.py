"""Applying the configuration file and the environment to a command's options.

The command line is parsed by argparse as usual; before that, each option of the
command being run that the environment or the file sets gets that value as its default
(checked and converted as argparse would, and no longer required), so a flag still
wins. After parsing, :func:`resolve_kafka` merges the librdkafka settings of every level
into the one mapping the command hands its Kafka clients, and
:class:`ResolvedConfig` can show everything with where it came from, secrets masked.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from atomickafka.config.environment import (
    BOOTSTRAP_ENV,
    CONFIG_ENV,
    kafka_from_environment,
    option_env_name,
)
from atomickafka.config.files import ConfigFile, load_properties, read_secret_file, setting_text
from atomickafka.config.kafka_layers import KafkaSetting, Level, merge_kafka_settings
from atomickafka.errors import ConfigError
from atomickafka.kafka.properties import MASK, is_secret, masked

__all__ = [
    "CONFIG_FLAG",
    "KAFKA_FLAGS_DEST",
    "KafkaPairAction",
    "Origin",
    "ResolvedConfig",
    "apply_to_parser",
    "command_options",
    "config_path",
    "find_command",
    "given_on_command_line",
    "resolve_kafka",
]

CONFIG_FLAG: Final = "--config"
#: Where :class:`KafkaPairAction` keeps the command line's librdkafka pairs, in order.
KAFKA_FLAGS_DEST: Final = "kafka_flags"
#: Options that are not settings (never read from the file or the environment).
_NOT_SETTINGS: Final = frozenset({"help", "version", "config", "print_config"})
_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a setting's value came from: its :class:`~atomickafka.config.Level` and the
    place (``"ATOMICKAFKA_LOG_LEVEL"``, ``"ak.toml [tail]"``, ``"command line"``)."""

    level: Level
    where: str


class KafkaPairAction(argparse.Action):
    """``-X key=value`` and the per-role ``--producer-property key=value``: each pair is
    kept, with its role prefix, in ``args.overrides`` (a dict) and, in command-line
    order, in ``args.kafka_flags`` for :func:`resolve_kafka`."""

    def __init__(self, *args: Any, prefix: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix = prefix

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        pair = str(values)
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            parser.error(f"{option_string or '-X'} expects key=value, got {pair!r}")
        full = self.prefix + key.strip()
        current = dict(getattr(namespace, self.dest, None) or {})
        current[full] = value
        setattr(namespace, self.dest, current)
        flags = list(getattr(namespace, KAFKA_FLAGS_DEST, None) or [])
        flags.append(KafkaSetting(full, value, Level.COMMAND_LINE, option_string or "-X"))
        setattr(namespace, KAFKA_FLAGS_DEST, flags)


# --------------------------------------------------------------------- the command


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for name, sub in _subcommands(parser).items():
        if _subcommands(sub):
            yield from _walk(sub, (*words, name))
        else:
            yield (*words, name), sub


def _setting_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of ``parser`` that the file and the environment may set."""
    return [
        a
        for a in parser._actions
        if a.option_strings
        and a.dest not in _NOT_SETTINGS
        and not isinstance(a, KafkaPairAction | argparse._HelpAction | argparse._VersionAction)
    ]


def _names(action: argparse.Action) -> set[str]:
    """The names a file may use for ``action``: its long flags and its dest."""
    names = {s.lstrip("-").replace("-", "_") for s in action.option_strings if s[:2] == "--"}
    return names | {action.dest}


def command_options(parser: argparse.ArgumentParser) -> dict[str, frozenset[str]]:
    """Every command (``"tail"``, ``"broker start"``) with the option names a
    configuration file may set for it."""
    return {
        " ".join(words): frozenset(n for a in _setting_actions(sub) for n in _names(a))
        for words, sub in _walk(parser)
    }


def find_command(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[str, argparse.ArgumentParser | None]:
    """The command ``argv`` runs (``"broker start"``) and its parser, found before
    parsing; ``("", None)`` when it names none (``--help``, ``--version``, a typo: then
    argparse answers)."""
    words: list[str] = []
    current = parser
    tokens = iter(argv)
    for token in tokens:
        if token == CONFIG_FLAG:
            next(tokens, None)
            continue
        if token.startswith("-"):
            continue
        choices = _subcommands(current)
        if token not in choices:
            break
        words.append(token)
        current = choices[token]
        if not _subcommands(current):
            return " ".join(words), current
    return "", None


def config_path(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The configuration file: ``--config PATH`` (anywhere on the command line), else
    ``ATOMICKAFKA_CONFIG``; ``None`` when neither names one."""
    for i, token in enumerate(argv):
        if token == "--":
            break
        if token == CONFIG_FLAG and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(CONFIG_FLAG + "="):
            return token[len(CONFIG_FLAG) + 1 :]
    return env.get(CONFIG_ENV) or None


def given_on_command_line(action: argparse.Action, argv: Sequence[str]) -> bool:
    """True when ``argv`` gives ``action`` (``--flag``, ``--flag=v``, ``-Xv``)."""
    for token in argv:
        if token == "--":
            return False
        for flag in action.option_strings:
            if token == flag or (flag[:2] == "--" and token.startswith(flag + "=")):
                return True
            if flag[:2] != "--" and token.startswith(flag) and len(token) > len(flag):
                return True
    return False


# ----------------------------------------------------------------- option values


def _flag(action: argparse.Action) -> str:
    longs = [s for s in action.option_strings if s[:2] == "--"]
    return (longs or list(action.option_strings))[0]


def _convert(action: argparse.Action, raw: object, where: str) -> Any:
    """``raw`` (from the file or the environment) as argparse would make it, checked."""
    flag = _flag(action)
    if action.nargs == 0:  # store_true / store_false / store_const
        text = setting_text(raw).strip().lower()
        if text in _TRUE:
            return action.const
        if text in _FALSE:
            return action.default
        raise ConfigError(f"{where}: {flag} takes true or false, not {raw!r}")
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        items = raw if isinstance(raw, list) else setting_text(raw).replace(",", " ").split()
        return [_one(action, setting_text(item), where, flag) for item in items]
    return _one(action, setting_text(raw), where, flag)


def _one(action: argparse.Action, text: str, where: str, flag: str) -> Any:
    convert: Callable[[str], Any] | None = action.type  # type: ignore[assignment]
    try:
        value = convert(text) if convert is not None else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        reason = str(exc) or f"not a valid {getattr(convert, '__name__', 'value')}"
        raise ConfigError(f"{where}: {flag} {text!r}: {reason}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{where}: {flag} {text!r}: not one of {choices}")
    return value


def _lookup(
    action: argparse.Action,
    file_options: Mapping[str, tuple[Any, str]],
    env: Mapping[str, str],
) -> tuple[Any, Origin] | None:
    """The value the environment (first) or the file gives ``action``, if any."""
    names = [option_env_name(action.dest)]
    if action.dest == "bootstrap_server":
        names.append(BOOTSTRAP_ENV)
    for name in names:
        if env.get(name, "").strip():
            return env[name], Origin(Level.ENVIRONMENT, name)
    for name in _names(action):
        if name in file_options:
            value, where = file_options[name]
            return value, Origin(Level.FILE, where)
    return None


def apply_to_parser(
    parser: argparse.ArgumentParser,
    command: str,
    config: ConfigFile | None,
    env: Mapping[str, str],
) -> dict[str, Origin]:
    """Give each option of ``command``'s ``parser`` that the environment or ``config``
    sets that value as its default (no longer required); return where each came from,
    by dest. Raises :class:`~atomickafka.errors.ConfigError` for a value the option
    cannot take, naming where it was set."""
    file_options = config.options_for(command) if config is not None else {}
    origins: dict[str, Origin] = {}
    for action in _setting_actions(parser):
        found = _lookup(action, file_options, env)
        if found is None:
            continue
        raw, origin = found
        action.default = _convert(action, raw, origin.where)
        action.required = False
        origins[action.dest] = origin
    return origins


# ------------------------------------------------------------------ librdkafka


def resolve_kafka(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    argv: Sequence[str],
    config: ConfigFile | None,
    env: Mapping[str, str],
    origins: Mapping[str, Origin],
    read_file: Callable[[str], str] = read_secret_file,
) -> tuple[dict[str, str], dict[str, str]]:
    """The librdkafka settings of every level merged by precedence (with their
    origins): the file's tables, the environment's ``ATOMICKAFKA_X_*``, the command
    line's pairs, and the properties file of ``--command-config`` at the level that
    named it."""
    by_level: dict[Level, list[KafkaSetting]] = {
        Level.FILE: list(config.kafka) if config is not None else [],
        Level.ENVIRONMENT: kafka_from_environment(env),
        Level.COMMAND_LINE: list(getattr(args, KAFKA_FLAGS_DEST, None) or []),
    }
    path = getattr(args, "command_config", None)
    if path:
        action = next(a for a in parser._actions if a.dest == "command_config")
        on_line = given_on_command_line(action, argv)
        level = Level.COMMAND_LINE if on_line else origins["command_config"].level
        # the file's pairs come first: the explicit pairs of the same level win
        by_level[level] = load_properties(str(path), level) + by_level[level]
    return merge_kafka_settings([s for level in Level for s in by_level.get(level, [])], read_file)


# ---------------------------------------------------------------------- showing


@dataclass(slots=True)
class ResolvedConfig:
    """What a command runs with: each option's value and origin, and the merged
    librdkafka settings with theirs. :meth:`dump` shows it all, secrets masked, in the
    configuration file's syntax."""

    command: str
    options: dict[str, tuple[Any, str]] = field(default_factory=dict)
    kafka: dict[str, str] = field(default_factory=dict)
    kafka_origins: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        command: str,
        parser: argparse.ArgumentParser,
        args: argparse.Namespace,
        argv: Sequence[str],
        origins: Mapping[str, Origin],
        kafka: tuple[dict[str, str], dict[str, str]],
    ) -> ResolvedConfig:
        """Collect what ``args`` holds for ``command``, with where each value came from."""
        options: dict[str, tuple[Any, str]] = {}
        for action in _setting_actions(parser):
            if given_on_command_line(action, argv):
                where = "command line"
            elif action.dest in origins:
                where = origins[action.dest].where
            else:
                where = "default"
            options[action.dest] = (getattr(args, action.dest, None), where)
        return cls(command, options, kafka[0], kafka[1])

    def __repr__(self) -> str:
        kafka = masked(self.kafka)
        return f"ResolvedConfig({self.command!r}, options={self.options!r}, kafka={kafka!r})"

    def dump(self) -> str:
        """The settings as TOML, each with its origin in a comment; secrets masked."""
        lines = [f"# atomickafka {self.command}: the settings it runs with, and their origins"]
        for dest, (value, where) in sorted(self.options.items()):
            if value is None:
                lines.append(f"# {dest} is not set  ({where})")
                continue
            lines.append(f"{dest} = {_toml(value)}  # {where}")
        if self.kafka:
            lines.append("")
            lines.append("[kafka]  # role-prefixed keys (producer.*...) go to one kind of client")
            for key in sorted(self.kafka):
                shown = MASK if is_secret(key) else self.kafka[key]
                lines.append(f'"{key}" = {_toml(shown)}  # {self.kafka_origins.get(key, "")}')
        return "\n".join(lines)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Path):
        value = str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
