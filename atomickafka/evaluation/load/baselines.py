"""The sequencer baselines, by name, and a running one for a block of code.

Each carries every message through one partition of one topic and one fan-out process
(see :mod:`~atomickafka.evaluation.load.sequencer`); they differ in what they promise:

- ``seq-alo``: the plain sequencer -- at-least-once, no recovery (it reads its partition
  from the start whenever it starts; no transaction, no fencing);
- ``seq-eos``: the transactional sequencer in Python -- exactly-once
  (:mod:`~atomickafka.evaluation.load.seq_eos`);
- ``streams``: a Kafka Streams application with ``exactly_once_v2``, one JVM
  (:mod:`~atomickafka.evaluation.load.streams`).

AtomicKafka's exactly-once default is compared with the two exactly-once ones, its
``--at-least-once`` mode with the plain one (:func:`baselines_for`). Their clients all
write through :class:`~atomickafka.evaluation.load.sequencer.SequencerSender`.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from atomickafka.errors import ConfigError, TimedOutError
from atomickafka.evaluation.load.seq_eos import SEQ_EOS_ID, eos_fan_out_process
from atomickafka.evaluation.load.sequencer import SEQUENCER_ID, fan_out_process
from atomickafka.evaluation.load.streams import STREAMS_ID, streams_process
from atomickafka.kafka.connection import Connection, Where, connection_of

__all__ = [
    "Baseline",
    "FanOutProcess",
    "PythonFanOut",
    "baselines_for",
    "check_reachable",
    "parse_baselines",
    "running_baseline",
    "start_baseline",
]


class Baseline(StrEnum):
    """A sequencer baseline, by the name its bench rows and runs carry."""

    SEQ_ALO = "seq-alo"
    SEQ_EOS = "seq-eos"
    STREAMS = "streams"

    @property
    def sender_id(self) -> str:
        """The ``senderID`` of its Delivery records."""
        return {
            Baseline.SEQ_ALO: SEQUENCER_ID,
            Baseline.SEQ_EOS: SEQ_EOS_ID,
            Baseline.STREAMS: STREAMS_ID,
        }[self]

    @property
    def exactly_once(self) -> bool:
        """Whether a ``read_committed`` reader sees each message once after any crash."""
        return self is not Baseline.SEQ_ALO

    @property
    def jvm(self) -> bool:
        """Whether its fan-out process is a JVM (Kafka Streams)."""
        return self is Baseline.STREAMS

    @property
    def promise(self) -> str:
        """What it promises, in a few words, for every table that shows it."""
        return {
            Baseline.SEQ_ALO: "plain sequencer: at-least-once, no recovery",
            Baseline.SEQ_EOS: "transactional sequencer in Python: exactly-once",
            Baseline.STREAMS: "Kafka Streams, exactly_once_v2: exactly-once",
        }[self]


def check_reachable(baselines: Iterable[Baseline], connection: Connection) -> None:
    """:class:`~atomickafka.errors.ConfigError` when one of ``baselines`` cannot reach
    Kafka through ``connection``: the Kafka Streams one takes no librdkafka settings
    (said before any run starts, not when its turn comes)."""
    if Baseline.STREAMS in baselines and connection.settings:
        raise ConfigError(
            "the Kafka Streams baseline (streams) reaches Kafka with the bootstrap servers "
            f"only and cannot take the -X settings {', '.join(sorted(connection.settings))}:"
            " leave it out (--baselines seq-eos for bench, --compare seq-eos for eval)"
        )


def baselines_for(exactly_once: bool) -> tuple[Baseline, ...]:
    """The baselines with AtomicKafka's promise in that delivery mode."""
    if exactly_once:
        return (Baseline.SEQ_EOS, Baseline.STREAMS)
    return (Baseline.SEQ_ALO,)


def parse_baselines(text: str) -> tuple[Baseline, ...]:
    """Baselines from a comma-separated list, in the order given, without repeats
    (:class:`~atomickafka.errors.ConfigError` for a name that is none)."""
    out: list[Baseline] = []
    for part in text.split(","):
        name = part.strip()
        if not name:
            continue
        try:
            item = Baseline(name)
        except ValueError:
            choices = ", ".join(b.value for b in Baseline)
            hint = " (the plain sequencer is now seq-alo)" if name in ("seq", "sequencer") else ""
            raise ConfigError(f"unknown baseline {name!r}{hint}: choose from {choices}") from None
        if item not in out:
            out.append(item)
    return tuple(out)


class FanOutProcess(Protocol):
    """A baseline's fan-out process: started, killed (SIGKILL) or stopped."""

    @property
    def pid(self) -> int | None:
        """Its process id while it runs."""
        ...

    def start(self, timeout_s: float = 120.0) -> None:
        """Start it and wait until it fans out."""
        ...

    def kill(self) -> None:
        """SIGKILL: a crash."""
        ...

    def stop(self, timeout_s: float = 45.0) -> int | None:
        """Stop it cleanly; its exit status."""
        ...


#: A Python fan-out's body: ``(where, topic, ready, stop, max_seconds)``.
FanOutBody = Callable[[Where, str, Any, Any, float], None]


class PythonFanOut:
    """A Python sequencer's fan-out as a child process (``spawn``: Kafka clients made
    after the start)."""

    def __init__(self, body: FanOutBody, where: Where, topic: str, name: str) -> None:
        self._body, self._where, self._topic, self._name = body, where, topic, name
        self._ctx = mp.get_context("spawn")
        self._proc: mp.process.BaseProcess | None = None
        self._stop: Any = None
        self.max_seconds = 3600.0

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return None if self._proc is None else self._proc.pid

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the child and wait until it is ready (:class:`TimedOutError` if not)."""
        ready, self._stop = self._ctx.Event(), self._ctx.Event()
        self._proc = self._ctx.Process(
            target=self._body,
            args=(self._where, self._topic, ready, self._stop, self.max_seconds),
            name=f"atomickafka-{self._name}",
        )
        self._proc.start()
        if not ready.wait(timeout_s):
            self.kill()
            raise TimedOutError(f"{self._name} did not start within {timeout_s:.0f}s")

    def kill(self) -> None:
        """SIGKILL the child."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(30)

    def stop(self, timeout_s: float = 90.0) -> int | None:
        """Ask the child to stop (it commits what is open), terminate it if it does not."""
        proc = self._proc
        if proc is None:
            return None
        self._stop.set()
        proc.join(timeout_s)
        if proc.is_alive():
            proc.terminate()
            proc.join(10)
        return proc.exitcode


def start_baseline(
    baseline: Baseline, where: Where, topic: str, work_dir: Path | None = None
) -> FanOutProcess:
    """The fan-out of ``baseline`` over sequencer topic ``topic``, started (the topic
    and its destinations must exist). The Streams application keeps its state and log
    in ``work_dir`` (default: a folder of the system's temporary directory)."""
    connection: Connection = connection_of(where)
    process: FanOutProcess
    if baseline is Baseline.STREAMS:
        process = streams_process(connection, topic, work_dir)
    elif baseline is Baseline.SEQ_EOS:
        process = PythonFanOut(eos_fan_out_process, connection, topic, baseline.value)
    else:
        process = PythonFanOut(fan_out_process, connection, topic, baseline.value)
    process.start()
    return process


@contextmanager
def running_baseline(
    baseline: Baseline, where: Where, topic: str, work_dir: Path | None = None
) -> Iterator[FanOutProcess]:
    """:func:`start_baseline` for the block; stopped cleanly at its end."""
    process = start_baseline(baseline, where, topic, work_dir)
    try:
        yield process
    finally:
        process.stop()
