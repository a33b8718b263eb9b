"""Lean Notifies (docs/DESIGN.md §4.16): a ``direct`` node's Notify carries the value
only from or to the message's carrier.

- Mutants of the carrier rule (``_notify_others``), each caught by the order checker or
  a stuck message in runs where clients die between their copies (partial writes), while
  the real engine passes the very same runs.
- A rolling upgrade (mixed versions): nodes of the release before this one (which
  refuse a Notify without its value) ordering the same traffic as upgraded nodes run with
  ``--notify-values every``, then every node upgraded and switched to ``carrier`` one by
  one; and the negative control: ``carrier`` toward a node of the release before stalls.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import pytest

from atomickafka.core.engine import Algorithm, Engine, Output, _Refused
from atomickafka.core.engine_types import PendingMessage
from atomickafka.core.protocols import CARRIER, EVERY, routed_by_id
from atomickafka.core.reasons import Reason, refusal
from atomickafka.core.wire import Message, MessageType
from atomickafka.verify.simulator import (
    Chaos,
    RandomChooser,
    SimulationResult,
    Simulator,
    random_workload,
)
from tests.unit.test_properties import assert_correct

TOPICS = ["T1", "T2", "T3", "T4", "T5"]
SEEDS = 60
PARTIAL = Chaos(duplicate=0.05, delay=0.05, crash=0.0, checkpoint=0.0, partial_write=0.8)
ROUGH = Chaos(
    duplicate=0.1, delay=0.05, crash=0.03, checkpoint=0.1, partial_write=0.5, takeover=0.03
)


class LeanToEveryone(Engine):
    """A node that never sends the value, not even to the carrier."""

    def _notify_others(self, mid: str, entry: PendingMessage, proposal: int) -> list[Output]:
        lean = self._control(MessageType.NOTIFY, mid, entry, proposal, with_value=False)
        return [Output(t, lean) for t in entry.destinations if t != self.topic]


class ValueOnlyFromTheCarrier(Engine):
    """A node that sends the value only when it is the carrier (never *to* it)."""

    def _notify_others(self, mid: str, entry: PendingMessage, proposal: int) -> list[Output]:
        out = super()._notify_others(mid, entry, proposal)
        if routed_by_id(entry.destinations, mid) == self.topic:
            return out
        return [Output(o.topic, o.message._replace(value=None)) for o in out]


class ReleaseBefore(Engine):
    """A node of the release before lean Notifies: it refuses a Notify without its
    value (rule 9 as it was), so it never counts that proposal."""

    def _on_notify(self, record: Message) -> list[Output]:
        if record.value is None:
            raise _Refused(refusal(Reason.INVALID_RECORD, "NotifyMessage carries no value"))
        return super()._on_notify(record)


def run(
    seed: int,
    chaos: Chaos,
    *,
    classes: Mapping[str, type[Engine]] | None = None,
    notify_values: Mapping[str, str] | None = None,
    default: str = CARRIER,
) -> SimulationResult:
    rng = random.Random(seed)
    workload = random_workload(rng, TOPICS, clients=3, messages=20, multicast=0.8, skew=20)
    chosen = dict(classes or {})
    factory: Callable[[str, Algorithm], Engine] = lambda topic, algorithm: chosen.get(  # noqa: E731
        topic, Engine
    )(topic, f"node-{topic}", algorithm)
    sim = Simulator(
        TOPICS,
        algorithm=Algorithm.DIRECT,
        chooser=RandomChooser(rng),
        chaos=chaos,
        engine_factory=factory,
        notify_values=default,
        notify_values_by_topic=notify_values,
    )
    return sim.run(workload)


def caught(result: SimulationResult) -> bool:
    return not result.check().ok or bool(result.stuck())


def honest(result: SimulationResult) -> None:
    """The checker passes, nothing is stuck (no value-less entry left either), rule 8
    holds at every node (test_properties)."""
    assert_correct(result)


@pytest.mark.parametrize("mutant", [LeanToEveryone, ValueOnlyFromTheCarrier])
def test_a_broken_carrier_rule_is_caught_where_clients_die_between_copies(
    mutant: type[Engine],
) -> None:
    classes = dict.fromkeys(TOPICS, mutant)
    for seed in range(SEEDS):
        if caught(run(seed, PARTIAL, classes=classes)):
            break
    else:
        pytest.fail(f"{mutant.__name__} not caught in {SEEDS} seeds")
    for s in range(seed + 1):
        honest(run(s, PARTIAL))


@pytest.mark.parametrize("seed", range(12))
def test_lean_and_full_notifies_order_together_under_faults(seed: int) -> None:
    """Nodes writing lean Notifies beside nodes writing full ones (a switch half done),
    with crashes, takeovers, duplicates and clients dying between copies."""
    values = {t: (CARRIER if (seed >> i) & 1 else EVERY) for i, t in enumerate(TOPICS)}
    honest(run(seed, ROUGH, notify_values=values))


@pytest.mark.parametrize("seed", range(12))
def test_a_rolling_upgrade_from_the_release_before(seed: int) -> None:
    """Step 1: T1 and T2 still run the release before; the upgraded T3-T5 run with
    ``--notify-values every``: one order, nothing stuck. Step 2: all upgraded, the
    switch to ``carrier`` half done (T1-T2 carrier, T3-T5 every)."""
    old = dict.fromkeys(["T1", "T2"], ReleaseBefore)
    honest(run(seed, ROUGH, classes=old, default=EVERY))
    values = dict.fromkeys(["T1", "T2"], CARRIER)
    honest(run(seed, ROUGH, notify_values=values, default=EVERY))


def test_carrier_toward_a_node_of_the_release_before_stalls_it() -> None:
    """The negative control: why the switch exists. A node of the release before refuses
    lean Notifies and waits for those proposals for good."""
    old = {"T1": ReleaseBefore}
    for seed in range(SEEDS):
        result = run(seed, PARTIAL, classes=old)
        if result.stuck():
            assert "T1" in result.stuck()
            return
    pytest.fail("carrier toward the release before never stalled it")
