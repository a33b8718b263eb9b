"""What a suite compares: the protocols, the two layouts, the sequencer baselines.

A :class:`Variant` is one way of moving the load: AtomicKafka with a given algorithm and
layout, a sequencer baseline (every message through one partition of one topic, fanned
out to its destinations by one process; what a Kafka user does without AtomicKafka:
:mod:`~atomickafka.evaluation.load.baselines` -- ``seq-alo``, at-least-once with no
recovery, ``seq-eos`` and ``streams``, exactly-once), or the bare Kafka pipe (each
client writes each message to each destination; nothing orders them: the cost floor).
The suite's *primary* variant is the one named by ``--algorithm`` and ``--layout``;
``--compare`` adds the others (``baselines``: the two exactly-once ones, with the
promise of AtomicKafka's default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from atomickafka.core.engine import Algorithm
from atomickafka.errors import ConfigError
from atomickafka.evaluation.load.baselines import Baseline, baselines_for
from atomickafka.kafka.topics import Layout

__all__ = ["Comparison", "System", "Variant", "parse_comparisons", "variants_for"]


class System(StrEnum):
    """What orders the messages."""

    ATOMICKAFKA = "atomickafka"
    SEQ_ALO = Baseline.SEQ_ALO.value
    SEQ_EOS = Baseline.SEQ_EOS.value
    STREAMS = Baseline.STREAMS.value
    KAFKA = "kafka"  # the bare pipe: nothing orders

    @property
    def baseline(self) -> Baseline | None:
        """The sequencer baseline this is (``None``: AtomicKafka or the bare pipe)."""
        return next((b for b in Baseline if b.value == self.value), None)


class Comparison(StrEnum):
    """A ``--compare`` choice."""

    ALGORITHMS = "algorithms"
    LAYOUTS = "layouts"
    #: The exactly-once sequencers (``seq-eos`` and ``streams``).
    BASELINES = "baselines"
    SEQ_ALO = Baseline.SEQ_ALO.value
    SEQ_EOS = Baseline.SEQ_EOS.value
    STREAMS = Baseline.STREAMS.value
    KAFKA = "kafka"
    #: Not a variant: the many-topic workload, run through every variant.
    MANY_TOPICS = "many-topics"


@dataclass(frozen=True, slots=True)
class Variant:
    """One system configuration; the baselines and the bare pipe have no algorithm
    (``None``) and write their topics in the split layout."""

    system: System
    algorithm: Algorithm | None = None
    layout: Layout = Layout.SPLIT

    @property
    def label(self) -> str:
        """Short human name: ``optimized/split``, ``seq-eos`` or ``kafka``."""
        if self.algorithm is None:
            return self.system.value
        return f"{self.algorithm.value}/{self.layout.value}"

    @property
    def slug(self) -> str:
        """The label as a file and topic name part: ``optimized-split``."""
        return self.label.replace("/", "-")

    @classmethod
    def atomickafka(cls, algorithm: Algorithm | str, layout: Layout | str) -> Variant:
        """AtomicKafka with ``algorithm`` and ``layout`` (``ValueError`` for names that
        are neither)."""
        return cls(System.ATOMICKAFKA, Algorithm(algorithm), Layout(layout))

    @classmethod
    def of_baseline(cls, baseline: Baseline) -> Variant:
        """A sequencer baseline (its topics use the split layout)."""
        return cls(System(baseline.value), None, Layout.SPLIT)

    @classmethod
    def bare_pipe(cls) -> Variant:
        """The bare Kafka pipe (its topics use the split layout)."""
        return cls(System.KAFKA, None, Layout.SPLIT)


def parse_comparisons(text: str) -> list[Comparison]:
    """``--compare`` values from a comma-separated list (empty: none)."""
    out: list[Comparison] = []
    for part in text.split(","):
        name = part.strip()
        if not name:
            continue
        try:
            item = Comparison(name)
        except ValueError:
            choices = ", ".join(c.value for c in Comparison)
            hint = " (the plain sequencer is now seq-alo)" if name == "sequencer" else ""
            raise ConfigError(f"unknown comparison {name!r}{hint}: choose from {choices}") from None
        if item not in out:
            out.append(item)
    return out


def variants_for(
    primary: Variant,
    comparisons: Iterable[Comparison],
    algorithms: Sequence[Algorithm] = tuple(Algorithm),
) -> list[Variant]:
    """The primary variant first, then each compared one once, in a stable order.

    ``algorithms`` defaults to every protocol the engine offers, so a new one joins
    ``--compare algorithms`` without a change here.
    """
    out = [primary]

    def add(variant: Variant) -> None:
        if variant not in out:
            out.append(variant)

    for comparison in comparisons:
        if comparison is Comparison.ALGORITHMS:
            for algorithm in algorithms:
                add(Variant.atomickafka(algorithm, primary.layout))
        elif comparison is Comparison.LAYOUTS and primary.algorithm is not None:
            for layout in Layout:
                add(Variant.atomickafka(primary.algorithm, layout))
        elif comparison is Comparison.BASELINES:
            for baseline in baselines_for(exactly_once=True):
                add(Variant.of_baseline(baseline))
        elif comparison is Comparison.KAFKA:
            add(Variant.bare_pipe())
        elif comparison is not Comparison.MANY_TOPICS:  # a workload, not a variant
            add(Variant.of_baseline(Baseline(comparison.value)))
    return out
