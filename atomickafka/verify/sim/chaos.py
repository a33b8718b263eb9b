"""How hostile a simulated run is (:class:`Chaos`), and the calm of none (:data:`CALM`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CALM", "Chaos", "FaultWindow"]


@dataclass(frozen=True, slots=True)
class Chaos:
    """How hostile the schedule is; the probabilities are per step.

    ``max_batch`` bounds how many records a node consumes in one step. Misbehaviour is
    only scheduled while clients are sending and ``tail_steps`` steps after, and pauses
    while every client with a send left has been held back ``storm_steps`` steps in a
    row (:class:`FaultWindow`).
    ``duplicate`` appends a copy of a recent record; ``unsequenced`` a copy of a recent
    bundle without its messages' ``seq`` (as a node of a release before §4.12 wrote
    them), so that rule 5 is tested beneath the de-duplication by ``seq``. The
    hostile inputs of issue 15 (``stray``, ``producer_gap``, ``bad_value``,
    ``mixed_protocols``) are off by default; ``producer_gap`` is per node step.
    ``takeover`` gives every node a hot standby, which follows its log (``follow``:
    the chance per step that a standby reads), and is the chance per step that an
    active node dies and its standby takes over.
    """

    max_batch: int = 4
    partial_write: float = 0.0
    duplicate: float = 0.05
    delay: float = 0.03
    crash: float = 0.0
    checkpoint: float = 0.1
    max_delay: int = 20
    duplicate_window: int = 20
    tail_steps: int = 50
    #: Faults pause once every client with a send left has been held back by
    #: back-pressure this many steps in a row: the nodes cannot keep up under them (a
    #: duplicate every few steps outgrows nodes that read a record a step and crash
    #: often), so without a pause the clients would wait, and the faults go on, forever.
    #: They resume as soon as a client may send again.
    storm_steps: int = 2_000
    unsequenced: float = 0.0
    stray: float = 0.0
    producer_gap: float = 0.0
    bad_value: float = 0.0
    mixed_protocols: bool = False
    #: Each node's control format drawn at random (binary or JSON, §3.9) instead of the
    #: simulator's; ``upgrade`` is the chance per step that a node restarts writing the
    #: other one (a rolling upgrade, or its rollback, with messages in flight).
    mixed_formats: bool = False
    upgrade: float = 0.0
    #: Each node's ``--notify-values`` drawn at random (carrier or every, §4.16) instead
    #: of the simulator's; ``upgrade`` flips it too.
    mixed_notify_values: bool = False
    takeover: float = 0.0
    follow: float = 0.5
    stray_in_flight: float = 0.0
    absent: float = 0.0
    wrong_restart: float = 0.0
    #: Exactly-once: the chance per node step that its open transaction commits (1:
    #: every step, as scripted runs expect; below 1: on a drawn interval, as the
    #: node's writer commits).
    commit: float = 1.0
    #: The chance that a node that lost its role to its standby goes on as a zombie.
    zombie: float = 0.0
    #: Issue 35's hazards (docs/DESIGN.md §4.9.5, §4.13, §7.1). ``late_members``: the
    #: chance that a node's first members record after it starts comes only once more
    #: than half the memory window of log time has passed (a fresh node down before it
    #: wrote it, its peers' proposals read and waiting for it).
    late_members: float = 0.0
    #: The chance per step that the log's time jumps on by more than half the memory
    #: window: the nodes were down (what was written before is read after).
    downtime: float = 0.0
    #: The chance per step that a copy of a recent record lands in the other log of its
    #: node (a relay in the control log, a peer's bundle in the input log); with one log,
    #: in that log again.
    misplaced: float = 0.0
    #: The chance per step that an unsigned apply marker in a node's name, naming input
    #: offsets from its next unapplied one on (most of them not written yet), reaches
    #: its control log (its input log, with one log).
    forged_marker: float = 0.0


#: No misbehaviour at all, just interleavings.
CALM = Chaos(duplicate=0.0, delay=0.0, crash=0.0, checkpoint=0.0, partial_write=0.0)


class FaultWindow:
    """When a run's misbehaviour is scheduled: while clients have sends left and
    ``tail_steps`` steps after the last, except while every client with a send left
    has been held back ``storm_steps`` steps in a row (then the nodes are left to catch
    up; the faults resume with the first send let through). Without the pause, a run
    whose faults make more work than its nodes do would never end: back-pressure holds
    the clients until the nodes catch up, and the faults go on while clients wait."""

    __slots__ = ("_held_since", "_storm_steps", "_tail_steps", "until")

    def __init__(self, chaos: Chaos) -> None:
        self._tail_steps = chaos.tail_steps
        self._storm_steps = chaos.storm_steps
        self._held_since: int | None = None
        #: The last step with faults once the clients are done (``None`` before).
        self.until: int | None = None

    def sending(self) -> bool:
        """True while clients have sends left."""
        return self.until is None

    def observe(self, step: int, waiting: int, held: int) -> None:
        """Step ``step`` begins with ``waiting`` clients with sends left, ``held`` of them
        held back."""
        if waiting == 0:
            if self.until is None:
                self.until = step + self._tail_steps
            return
        if held < waiting:
            self._held_since = None
        elif self._held_since is None:
            self._held_since = step

    def active(self, step: int) -> bool:
        """Whether faults are scheduled at ``step``."""
        if self.until is not None:
            return step <= self.until
        return self._held_since is None or step - self._held_since < self._storm_steps
