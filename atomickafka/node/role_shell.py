"""What a node and a merger share around their loops (docs/DESIGN.md §6): serve the
metrics, prepare the topics, start the status producer; build the role's state from
its logs as a standby does (before asking for the lease, so that whichever instance
gets it is ready); join the lease group and stand by until the lease is this
instance's; open (fencing any older instance) and loop; stop at once
when fenced or when a write failed (exit status 4 or 1: the restart or the standby
recovers); and close what was opened -- the last status saying "stopped" only after a
requested stop; after any other stop without committing or waiting for anything, and
within :data:`STOP_BOUND_S` whatever a Kafka client does. Each role says how it
prepares, opens, loops and closes its I/O."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import ClassVar, Final, Protocol

from confluent_kafka import Consumer
from confluent_kafka import Message as KafkaMessage
from setproctitle import getproctitle, setproctitle

from atomickafka.kafka.consumer import consume_batch, usable
from atomickafka.kafka.producer import RecordProducer
from atomickafka.kafka.status import Status, publish_status
from atomickafka.metrics.serving import MetricsServer, serve
from atomickafka.metrics.shell import ShellMetrics
from atomickafka.node.batch import Ready
from atomickafka.node.config import NodeConfig
from atomickafka.node.heap import collect_young_objects_less_often, return_large_blocks
from atomickafka.node.lease import Lease
from atomickafka.node.lifecycle import Stoppable
from atomickafka.node.writers import BatchWriteError, ClientWedgedError, FencedError, Writer

__all__ = [
    "EXIT_FENCED",
    "EXIT_WEDGED",
    "LEASE_AT_ONCE",
    "LEASE_TAKEN_OVER",
    "OVERTAKEN_CHECK_S",
    "STOP_BOUND_S",
    "RoleShell",
]

#: The exit status of an instance that stopped because another one took its role.
EXIT_FENCED: Final = 4
#: The exit status of an instance whose Kafka client hung: its process must end at once
#: (``os._exit``), without closing that client, and its restart recovers.
EXIT_WEDGED: Final = 5
#: What an instance logs when it took its role's lease as it started, no other
#: instance holding it; one that stood by first logs :data:`LEASE_TAKEN_OVER`.
LEASE_AT_ONCE: Final = "the lease is ours at once; active"
LEASE_TAKEN_OVER: Final = "the lease is ours; taking over"
#: How long, at least, an instance that lost its lease waits to get it back (s).
LEASE_BACK_MIN_S: Final = 20.0
#: How often an instance waiting to get its lease back asks whether another instance
#: took the role and wrote meanwhile (s): then it stops at once, instead of holding a
#: seat in the lease group that the group may give back to it -- a stale instance,
#: which would then stop and leave the role without an active instance until its
#: restart joins (seen in the nemesis: takeovers 0.3-0.9 s over their bound).
OVERTAKEN_CHECK_S: Final = 1.0
#: How long an instance that stops without a clean stop (fenced, a failed write, an
#: unexpected error) may take to release its clients before its process ends at once
#: with its exit status (s). Releasing them commits and waits for nothing (the writer is
#: abandoned) and takes well under a second; a librdkafka close or destroy that hangs
#: (a coordinator's broker gone) must not keep an instance that lost its role alive --
#: the supervisor restarts it only once it exited.
STOP_BOUND_S: Final = 10.0


def _exit_now(status: int) -> None:
    """End the process at once (``os._exit``: no interpreter shutdown, which could wait
    on a Kafka client too; each log line was written out when logged)."""
    os._exit(status)


class BatchLayer(Protocol):
    """What a role's pure batch layer offers its shell (NodeBatch, MergerBatch)."""

    def step(self, records: Sequence[KafkaMessage], *, wall_s: float) -> Ready: ...

    def idle(self, *, wall_s: float) -> Ready: ...


class RoleShell(Stoppable):
    """The run of one role's instance (a node or a merger) around its I/O loop."""

    #: ``node`` or ``merger``: names the role in log lines and the logger.
    kind: ClassVar[str]

    def __init__(self, config: NodeConfig, metrics: ShellMetrics) -> None:
        super().__init__()
        return_large_blocks()  # snapshots' large buffers go back to the OS (node/heap.py)
        collect_young_objects_less_often()  # per-record objects die young (node/heap.py)
        self.config = config
        self.metrics = metrics
        #: True while this instance holds the role (after it opened).
        self.active = False
        self._status: RecordProducer | None = None
        self._lease: Lease | None = None
        #: What the role writes through, once it opened (the active instance's).
        self._writer: Writer | None = None
        self._metrics_server: MetricsServer | None = None
        self._stopped_cleanly = False  # set when the loop ends on a stop request
        self._wedged = False  # a Kafka client hung (ClientWedgedError)
        self._lease_unconfirmed = False  # lost, and not yet found ours again

    @property
    def role_key(self) -> str:
        """The role's status key and lease name (``T``, ``T/p``, ``T/merger``)."""
        raise NotImplementedError

    def run(self, *, max_seconds: float | None = None) -> int:
        """Run the instance until stopped (or ``max_seconds`` passed); its exit status."""
        raise NotImplementedError

    @property
    def _log(self) -> logging.Logger:
        return logging.getLogger(f"atomickafka.{self.kind}")

    def holds_lease(self) -> bool:
        """Whether this instance holds its role's lease now, and has not lost it since
        it was last confirmed (what its writer asks, from its commit thread, before it
        takes the role's transactional producer again after a failure: that fences
        whoever holds the role, so a lease that came back counts only once
        :meth:`_lease_back` has found that no other instance wrote meanwhile)."""
        return self._lease is not None and self._lease.held and not self._lease_unconfirmed

    def _prepare_topics(self) -> None:
        """Create or check the topics the role needs, before anything else starts."""
        raise NotImplementedError

    def _open(self) -> None:
        """Become the active instance: open the writer (fencing older ones), recover."""
        raise NotImplementedError

    def _close_io(self, *, abandon: bool) -> None:
        """Close the role's writer and consumers (whatever was opened); ``abandon``: a
        stop that is not a clean one -- the writer commits and waits for nothing."""
        raise NotImplementedError

    def status(self) -> Status:
        """What this instance says of itself now."""
        raise NotImplementedError

    def _stopped_statuses(self) -> list[Status]:
        """The last statuses of a requested stop (a host process: one per node)."""
        return [self.status().stopped()]

    def _next_ready(
        self, consumer: Consumer, layer: BatchLayer
    ) -> tuple[list[KafkaMessage], Ready]:
        """Poll one batch of input and hand it to the batch layer (or tell it that the
        poll found nothing): the records and what to write for them."""
        cfg = self.config
        records = usable(consume_batch(consumer, cfg.batch_size, cfg.poll_timeout_s))
        wall = time.time()
        return records, (layer.step(records, wall_s=wall) if records else layer.idle(wall_s=wall))

    def _loop(self) -> int:
        """Process until stopped (or the run's time is up); return the exit status.
        Each round reads a batch and writes what it decided; then the lease is checked
        (lost: :class:`FencedError`) and the clock served."""
        lease = self._lease
        assert lease is not None
        while not self.stopping:
            self._round()
            if not lease.poll(0) and not self._lease_back(lease):
                raise FencedError(
                    "the role's lease went to another instance, or did not come back in time"
                )
            if self._tick(time.monotonic()):
                break
        self._final_round()
        return 0

    def _final_round(self) -> None:
        """What a clean stop writes last (by default: nothing)."""

    def _retitle(self, state: str) -> None:
        """Under ``cluster``, whose children are titled ``atomickafka node T`` in ``ps``:
        add what this instance is now (``starting``, ``standby``, ``active``), so that
        an active instance can be told from its standby. A process titled otherwise
        (``atomickafka node`` run by hand) keeps its command line."""
        title = getproctitle()
        if title.startswith(f"atomickafka {self.kind} "):
            setproctitle(f"{title.split(' (', 1)[0]} ({state})")

    def _heartbeat(self) -> None:
        """While a write waits on Kafka (a failover): the status when due, so that the
        instance is seen alive."""
        self._tick(time.monotonic())

    def _lease_back(self, lease: Lease) -> bool:
        """The lease was lost: wait, writing nothing, for at most three times the lease's
        session (and 20 s) to get it back -- a group coordinator that moves or a broker
        that fails over can make the group's member time out and rejoin (librdkafka
        revokes the assignment as lost), and the group then gives the lease back to the
        only instance that wants it. True when it came back and this instance may go on
        (:meth:`_still_ours`); False when another instance holds it (or it did not come
        back): then the instance stops as fenced. Safe either way: a newer instance that
        took the role in between fenced this one's transactional producer, so it cannot
        write anything more."""
        name = f"{self.kind} {self.role_key}"
        # Generous: waiting costs little (a standby that took the lease is active
        # meanwhile; without one the topic waits for this instance anyway), while giving
        # up restarts the node. Twice the session (12 s) was 0.8 s short with a broker
        # killed on a loaded two-core machine (the three-broker test).
        limit = max(LEASE_BACK_MIN_S, 3 * self.config.session_timeout_ms / 1000)
        self._log.warning(
            "%s: the lease was lost (its group's coordinator moved?); waiting up to %.0f s "
            "to get it back, writing nothing meanwhile", name, limit,
        )  # fmt: skip
        deadline = time.monotonic() + limit
        next_check = time.monotonic() + OVERTAKEN_CHECK_S
        self._lease_unconfirmed = True
        while time.monotonic() < deadline and not self.stopping:
            if self._writer is not None:  # a fence its commit met: stop now, not later
                self._writer.raise_failure()
            if lease.poll(0.2):
                if not self._still_ours():
                    return False
                self._log.info("%s: the lease is back; going on", name)
                self._lease_unconfirmed = False
                return True
            if time.monotonic() >= next_check:
                if self._overtaken():
                    return False
                next_check = time.monotonic() + OVERTAKEN_CHECK_S
        return False

    def _overtaken(self) -> bool:
        """While the lease is lost: True once another instance is known to have written
        as this role (by default: nothing says so). Unknown (the brokers out of reach)
        is False: the wait goes on."""
        return False

    def _still_ours(self) -> bool:
        """After the lease came back: True unless another instance wrote as this role
        meanwhile (by default: nothing says so)."""
        return True

    def _round(self) -> None:
        """One batch read, handed to the batch layer, and what it decided written."""
        raise NotImplementedError

    def _run(self, max_seconds: float | None) -> int:
        cfg, name = self.config, f"{self.kind} {self.role_key}"
        if cfg.metrics_port is not None:
            self._metrics_server = serve(self.metrics.registry, cfg.metrics_port, cfg.metrics_host)
            self._log.info("%s: metrics on %s", name, self._metrics_server.url)
        self._prepare_topics()
        self._status = RecordProducer(cfg.connection)
        self._start_clock(cfg.status_interval_s, max_seconds)
        self._retitle("starting")
        # the exit status of a stop that is not a clean one (None: a clean one); until
        # the run ends otherwise, an unexpected exception, with which the process exits 1
        failed: int | None = 1
        try:
            self._start_standby()
            if not self._catch_up():
                failed = None
                return 0
            self._lease = Lease(
                cfg.connection,
                self.role_key,
                session_timeout_ms=cfg.session_timeout_ms,
            )
            if not self._await_lease():
                failed = None
                return 0
            self._open()
            self._retitle("active")
            self._next_status = 0.0  # the first status as the active instance at once
            self._tick(time.monotonic())
            status = self._loop()
            self._stopped_cleanly = True
            failed = None
            return status
        except FencedError as exc:
            self._log.error("%s stops: %s", name, exc)
            self.metrics.stopped_fenced()
            failed = EXIT_FENCED
            return failed
        except ClientWedgedError as exc:
            self._log.error("%s: %s; exiting at once so that a restart recovers it", name, exc)
            self._wedged = True
            failed = EXIT_WEDGED
            return failed
        except BatchWriteError as exc:
            self._log.error("%s: %s; exiting so that a restart recovers it", name, exc)
            return 1
        finally:
            self._shutdown(failed)

    def _await_lease(self) -> bool:
        """Wait until this instance is the role's active one, standing by meanwhile;
        False if stopped first."""
        lease, name = self._lease, f"{self.kind} {self.role_key}"
        assert lease is not None
        if lease.poll(1.0):
            self._log.info("%s: %s", name, LEASE_AT_ONCE)
            return True
        self._log.info("%s: another instance is active; standing by", name)
        self._retitle("standby")
        while not self.stopping:
            if lease.poll(0):
                self._log.info("%s: %s", name, LEASE_TAKEN_OVER)
                return True
            self._stand_by()
            if self._tick(time.monotonic()):
                return False
        return False

    def _start_standby(self) -> None:
        """Start following the role's logs, as a standby does (by default: nothing)."""

    def _catch_up(self) -> bool:
        """Follow until the state is as far as the role's committed progress was when
        this instance started, before joining the lease group: whichever instance the
        group then picks -- a standby or a restarted one -- takes over with its state
        ready. False if stopped first (by default: nothing to catch up)."""
        return not self.stopping

    def _stand_by(self) -> None:
        """One bounded round of standing by (by default: wait for the lease)."""
        assert self._lease is not None
        self._lease.poll(0.2)

    def _shutdown(self, failed: int | None) -> None:
        """Close what was opened. ``failed``: the exit status of a stop that is not a
        clean one (``None``: a clean one) -- the writer is abandoned, and should closing
        hang, the process ends with that status after :data:`STOP_BOUND_S`."""
        if self._wedged:  # closing a hung client could hang too: the process just exits
            if self._metrics_server is not None:
                self._metrics_server.close()
            return
        watchdog = None if failed is None else self._bound_the_stop(failed)
        try:
            self._close_clients(abandon=failed is not None)
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def _bound_the_stop(self, status: int) -> threading.Timer:
        """A timer that ends the process with ``status`` unless cancelled within
        :data:`STOP_BOUND_S` (a daemon: it never holds the process up)."""
        name = f"{self.kind} {self.role_key}"

        def expire() -> None:
            self._log.error(
                "%s: its Kafka clients did not close within %.0f s; exiting at once (%d)",
                name, STOP_BOUND_S, status,
            )  # fmt: skip
            _exit_now(status)

        timer = threading.Timer(STOP_BOUND_S, expire)
        timer.daemon = True
        timer.start()
        return timer

    def _close_clients(self, *, abandon: bool) -> None:
        try:
            self._close_io(abandon=abandon)
        except Exception:
            # Abandoned (a stop that is not clean), the writer's records in flight are
            # purged, and librdkafka may raise anything then (a gap-less producer's
            # fatal error surfaced as a SystemError from a delivery callback, in the
            # nemesis): the stop keeps its own status and still leaves the lease group,
            # so that the group need not wait out this member's session.
            if not abandon:
                raise
            self._log.exception("%s %s: closing its Kafka clients", self.kind, self.role_key)
        if self._lease is not None:
            self._lease.close()
        if self._status is not None:
            # the last status of a requested stop: not live any more. A failed, fenced
            # or crashed instance says nothing: its restart or standby takes over, and
            # clients must not take the topic for one without a node meanwhile.
            if self.active and self._stopped_cleanly:
                for status in self._stopped_statuses():
                    publish_status(self._status, status)
            self._status.close(5)
        if self._metrics_server is not None:
            self._metrics_server.close()
