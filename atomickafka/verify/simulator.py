"""An in-memory cluster of batch-layer nodes, joined by logs of records, any interleaving.

Each topic has an input log (a :class:`~atomickafka.verify.streams.Log` of encoded
records with offsets and log append times, standing in for ``atomickafka-in.T``) and
one node: the production batch layer, a :class:`~atomickafka.node.batch.NodeBatch`,
stepped with the records it has not read yet. What its ``Ready`` holds goes where the
node's shell writes it: control bundles and the node's own ticks to the end of the
target topic's input log, deliveries to the topic's delivery stream, dead letters to
a per-topic list, snapshots to a per-topic snapshot store. So
the code under test is the code that runs: decoding, signatures, bundling, dead
letters, replay cuts and snapshots included. Clients append ClientMessages (stamped
``sentAt`` with the simulated clock) to any topic -- a destination, or another topic,
which then relays; with ``direct`` a client writes to every destination.

Two delivery modes, as in production (``exactly_once``):

- exactly-once (§6.3): a step's control records (bundles into the peers' logs, the
  node's own ticks and members records) are written at once, outside any transaction,
  by a gapless producer; its other records (deliveries, watermarks, dead letters,
  snapshots) join the node's open transaction, which commits with the input offset a
  few steps later (drawn), as the node's writer commits on an interval. A crash aborts
  the open transaction; the restart writes the control records of the replayed steps
  again (receivers drop the repeats). Delivery streams hold what a ``read_committed``
  reader sees; beside each, an *uncommitted view* holds every transactional record in
  the order it was written, aborted ones included, which a reader with the client's
  repeat filter reads as the filtering client reads ``read_uncommitted``: it must show
  exactly the committed stream. With ``Chaos.zombie`` a node that lost its role to its
  standby goes on for a while as a zombie: it writes control records (and records to
  its transaction, which is fenced: aborted).
- at-least-once: a step's records are written at once (a gapless producer), and its
  commit takes effect ``commit_lag`` steps later; a snapshot is written only once the
  commit has passed its offset. A crash replays from the last commit and writes what
  came after it again, so delivery streams get repeats, which the reader of a stream
  drops as the filtering client does (:class:`~atomickafka.verify.streams.StreamReader`).
  A scripted run (the golden transcripts, ``tests/unit/transcript_commands.py``) can
  hold a step's acknowledgements back or its writes in the producer's queue
  (:class:`Hold`, :meth:`Simulator.acknowledge`): no later commit takes effect first.

A crash is what production does on a restart: :meth:`NodeBatch.recover
<atomickafka.node.batch.NodeBatch.recover>` from the newest readable snapshot in the
store and the committed offset, then a replay. Snapshots are taken every
``snapshot_every`` records, and by the chaos's ``checkpoint``.

With ``Chaos.takeover``, every node has a hot standby, the production
:class:`~atomickafka.node.standby.NodeStandby`: it fetches its topic's log in drawn
batches, reads the committed offset now and then, applies only what is below it and
jumps to a newer snapshot when far behind. A TAKEOVER kills the active node (its
uncommitted work is lost, as in a crash) and its standby continues from its own state
(:meth:`NodeStandby.take_over`); the killed node comes back as the new standby, from
the newest snapshot.

A *scheduler* decides, step by step, what happens next: a client sends its next
message, or a node consumes a batch of the next 1..``max_batch`` records of its log (or
ticks it while it holds a message, §4.11). One step is one millisecond of log time;
when nothing is left to do but wait for a held message, time jumps to when it is due.
It can misbehave the way Kafka, crashes and careless writers do (:class:`Chaos`):

- DELAY: a node does not step for a while;
- DUPLICATE: a record already in a log is appended again, later (a writer's retry),
  byte for byte or (UNSEQUENCED) without the ``seq`` of its messages;
- PARTIAL WRITE (``direct``): a client dies after writing to some destinations only;
- CHECKPOINT, CRASH: a snapshot now; a node restarts as above;
- TAKEOVER: a node dies and its following standby takes over (above);
- PRODUCER GAP: a step's write fails at one of its records -- those before it are
  written, none after (the producer is gapless) -- and the node restarts;
- STRAY: a Tick, Ack or Notify with a timestamp at an edge of the §4.11 bounds is
  appended to an input log (:mod:`atomickafka.verify.hostile`);
- BAD VALUE: a forged Bundle whose ClientMessage value is not JSON;
- MIXED PROTOCOLS: each topic's node runs a drawn protocol, and clients write as if
  their entry topic's protocol were everyone's (a stale view of the statuses);
- STRAY IN FLIGHT: a Notify or Ack naming another protocol (or none: format 1), or an
  Abort (answering nothing, or a guess), about a message in flight, "from" one of its
  destinations, appended to another's log at any point of the message's life
  (:func:`~atomickafka.verify.hostile.stray_in_flight`); the message may then be
  aborted, but only everywhere (the checker's ``all_or_none``);
- ABSENT: a client names a topic that has no node too (such a message must be refused
  everywhere; nodes read it before or after their first members record);
- WRONG RESTART: a node is restarted with another protocol; it must refuse (§6.6),
  from its snapshot or from its own members record in the replay, unless nothing
  protocol-specific was committed yet; then it is restarted as it should be;
- DOWNTIME, LATE MEMBERS: the log's time jumps on by more than half the memory window
  (the nodes were down), at any step or before a node's first members record after it
  starts (what it read waits for it that long, §4.9.5); copies that reached their logs
  in time must still be delivered, and nothing twice (§4.13, §7.1);
- MISPLACED: a copy of a recent relay or bundle in the other log of its node (§7.1);
- FORGED MARKER: an unsigned apply marker in a node's name naming input offsets
  nobody wrote yet (§7.1): the topic stops for a bounded time at most.

Messages that must not be delivered (a forged one; one whose destinations run
different protocols, which every destination aborts) are kept out of what the checker
is told was sent, so the checker flags any delivery of them as invented.

All choices come from a :class:`Chooser`: :class:`RandomChooser` wraps a
:class:`random.Random` (the run is a pure function of the seed) and
:class:`DataChooser` draws every choice from Hypothesis's ``data`` object, so a
failing schedule shrinks. Misbehaviour is only scheduled while clients are still
sending and for ``Chaos.tail_steps`` steps after; then the nodes are left to drain
until the system is quiescent (every log read to its end, nothing held) or the step
limit is hit.

>>> sim = Simulator(["A", "B", "C"], chooser=RandomChooser(7))
>>> workload = random_workload(random.Random(7), ["A", "B", "C"], messages=20)
>>> result = sim.run(workload)
>>> result.quiescent, result.check().ok
(True, True)
"""

from __future__ import annotations

import random  # noqa: F401  (the module doctest uses it)
from collections import Counter, deque

from atomickafka.verify.choosers import Chooser, DataChooser, RandomChooser
from atomickafka.verify.sim.chaos import CALM, Chaos, FaultWindow
from atomickafka.verify.sim.clients import ABSENT_TOPIC, Clients
from atomickafka.verify.sim.misbehaviour import Misbehaviour
from atomickafka.verify.sim.node import (
    MEMBERS_AGAIN_MS,
    SNAPSHOT_EVERY,
    STANDBY_JUMP,
    STANDBY_PENDING,
)
from atomickafka.verify.sim.result import SimulationResult, replayed_deliveries
from atomickafka.verify.sim.state import EngineFactory
from atomickafka.verify.sim.writes import Hold
from atomickafka.verify.workload import Send, Workload, client_ids, integer_ids, random_workload

__all__ = [
    "ABSENT_TOPIC",
    "CALM",
    "MEMBERS_AGAIN_MS",
    "SNAPSHOT_EVERY",
    "STANDBY_JUMP",
    "STANDBY_PENDING",
    "Chaos",
    "Chooser",
    "DataChooser",
    "EngineFactory",
    "Hold",
    "RandomChooser",
    "Send",
    "SimulationResult",
    "Simulator",
    "Workload",
    "client_ids",
    "integer_ids",
    "random_workload",
    "replayed_deliveries",
]


class Simulator(Misbehaviour, Clients):
    """N batch-layer nodes, one per topic, joined by in-memory logs (see the module).

    ``algorithm`` is every node's protocol unless ``protocols`` maps topics to others
    (or ``chaos.mixed_protocols`` draws one per topic). ``engine_factory(topic,
    algorithm)`` builds each node's first engine (its node id is the spec's): its
    class is kept across crashes (the mutation tests pass subclasses) and its limits
    go into the node's spec. ``signer``: every member (clients, nodes) signs what it
    writes and nodes set aside what is not signed. ``layer``, ``clock``: set by
    :class:`~atomickafka.verify.layered.LayeredSimulator` for one layer of partitioned
    topics, whose nodes write to the layer streams of ``atomickafka-layers.T``.
    ``gapless=False`` is the negative control of the at-least-once producer gaps: the
    producer of issue 15's item 6, which writes what follows a failed record.
    Each node's shell writes its members record (every topic of the run has a node)
    after its first round, as a starting node does, so what a node reads before that
    waits (§4.9.5); ``members_known`` starts every node knowing them instead (as a node
    restarted from a snapshot does: that snapshot, at offset 0, is in its store, where a
    crash or a standby starts from it, and rule 8's replay starts knowing them too), for
    scripted runs that count records. ``views``
    maps a topic to the topics its node's shell sees in the statuses, when that is not
    every topic (a view that lags, §4.9.5). ``delivery_format`` is the nodes' (§3.8):
    ``json``, production's default, or ``raw``. ``control_format`` is how the nodes
    write bundles and ticks (§3.9): ``binary``, production's default, or ``json``;
    ``control_formats`` maps topics to others (a cluster amid a rolling upgrade).
    ``notify_values`` is what the nodes' Notifies carry (§4.16): ``carrier``,
    production's default, or ``every``; ``notify_values_by_topic`` maps topics to others.
    ``hosts`` groups topics whose nodes one host process runs (§6.7, exactly-once): a
    crash restarts the whole group, and one transaction commits all their records and
    offsets together.
    """

    # ------------------------------------------------------------------ running

    def run(self, workload: Workload, *, max_steps: int = 100_000) -> SimulationResult:
        """Send ``workload`` under the scheduler until quiescent or ``max_steps``."""
        for send in workload.preload:
            self.send(send)
        queues = {client: deque(sends) for client, sends in workload.clients.items()}
        chooser = self.chooser
        chaos = self.chaos
        faults = FaultWindow(chaos)
        while self.clock.step < max_steps:
            waiting = [c for c, q in queues.items() if q]
            if not waiting and self.quiet():
                break
            senders = [c for c in waiting if not self.held_back(queues[c][0])]
            self.events["held_back"] += len(waiting) - len(senders)
            faults.observe(self.clock.step, len(waiting), len(waiting) - len(senders))
            step = self.clock.advance()
            self.settle()
            if faults.active(step):
                self.misbehave()
            runnable = [t for t in self.topics if self.paused_until[t] < step and self.has_work(t)]
            n_choices = len(senders) + len(runnable)
            if n_choices == 0:
                self.wait_for_held()
                continue  # every node with work is paused: time passes
            pick = chooser.integer(0, n_choices - 1)
            if pick < len(senders):
                partial = faults.sending() and chooser.chance(chaos.partial_write)
                self.send(self.misaddressed(queues[senders[pick]].popleft()), partial=partial)
            else:
                topic = runnable[pick - len(senders)]
                self.step_node(topic, chooser.integer(1, chaos.max_batch), budgeted=True)
        return self.result()

    def drain(self, *, max_steps: int = 100_000) -> SimulationResult:
        """Step every node round-robin with large batches until quiescent."""
        while not self.quiet() and self.clock.step < max_steps:
            worked = False
            for topic in self.topics:
                self.clock.advance()
                self.settle()
                if self.has_work(topic):
                    worked = True
                    self.step_node(topic, 1_000_000)
            if not worked:
                self.wait_for_held()
        return self.result()

    def quiet(self) -> bool:
        """Every log read to its end and nothing held."""
        return not self.unread() and not self.holding()

    def wait_for_held(self) -> None:
        """Nothing to read anywhere: let time pass until the first held message is due
        (its node then ticks its log, §4.11)."""
        if self.unread():
            return
        dues = [self.next_due_ms(t) for t in self.topics]
        due = min((d for d in dues if d is not None), default=None)
        if due is not None and due > self.clock.now_ms:
            self.clock.jump_to(due)
            self.events["time_jump"] += 1
            self._note(f"time jumps to {due} ms")

    def settle(self) -> None:
        """At-least-once: commits in flight take effect when their time has come."""
        if not self.exactly_once:
            for node in self.nodes.values():
                self._settle(node)

    def result(self) -> SimulationResult:
        """The run so far."""
        deliveries = self.deliveries
        errors = list(self.determinism_errors)
        for reader in self.readers.values():
            errors.extend(reader.anomalies)
            if self.exactly_once and reader.repeats:
                errors.append(f"{reader.topic}: {reader.repeats} deliveries written twice")
        if self.exactly_once and self.quiet():
            errors.extend(self._uncommitted_errors())
        return SimulationResult(
            topics=self.topics,
            algorithm=self.algorithm,
            protocols=dict(self.protocols),
            exactly_once=self.exactly_once,
            sent=list(self.sent),
            doomed=set(self.doomed),
            deliveries=deliveries,
            raw={t: list(r.raw) for t, r in self.readers.items()},
            streams={t: list(s.records) for t, s in self.streams.items()},
            records={t: list(log.records) for t, log in self.inputs.items()},
            specs={t: n.spec for t, n in self.nodes.items()},
            dead_letters={t: list(d) for t, d in self.dead_letters.items()},
            engines=self.engines,
            steps=self.clock.step,
            quiescent=self.quiet(),
            events=Counter(self.events),
            determinism_errors=errors,
            trace=list(self.trace or ()),
            all_or_none=frozenset(self._stray_hit),
            controls={t: list(log.records) for t, log in self.controls.items()},
            starting_members=dict(self.starting_members),
        )

    def _uncommitted_errors(self) -> list[str]:
        """What a ``read_uncommitted`` reader with the client's repeat filter shows that
        a ``read_committed`` one does not (§6.3): nothing, once every transaction ended."""
        errors: list[str] = []
        for topic, reader in self.uncommitted_readers.items():
            reader.poll()
            errors.extend(f"uncommitted view: {a}" for a in reader.anomalies)
            shown = [(m.messageID, m.timeStamp) for m in reader.read]
            committed = [(m.messageID, m.timeStamp) for m in self.readers[topic].raw]
            if shown != committed:
                errors.append(
                    f"{topic}: read_uncommitted with the repeat filter shows {shown[:8]}..., "
                    f"read_committed {committed[:8]}..."
                )
        return errors
