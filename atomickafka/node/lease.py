"""One active instance per role, elected by Kafka's consumer groups (docs/DESIGN.md §6.4).

Every instance of a role (a topic's node, a layer's node, a merger) joins the consumer
group ``atomickafka-lease.<role>`` subscribed to the one-partition topic
``atomickafka-lease``. The group gives that partition to exactly one member: the
active instance. The others wait as standbys; when the active one stops or dies, the
group reassigns the partition after its session times out (``session.timeout.ms``),
and a standby takes over. The cooperative-sticky assignor leaves the partition where
it is when a standby joins, so starting one never interrupts the active instance.

The lease decides who *should* write; fencing decides who *can*: the new active
instance initialises its transactional producer, which fences the previous one, so
an instance that lost the lease without noticing (paused, partitioned) cannot write
anything more (:class:`~atomickafka.node.writers.FencedError`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import Consumer, TopicPartition

from atomickafka.kafka.connection import Connection
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER

__all__ = ["LEASE_TOPIC", "Lease", "lease_group"]

log = logging.getLogger("atomickafka.node")

#: The one-partition topic every role's lease group subscribes to (nothing is written).
LEASE_TOPIC: Final = "atomickafka-lease"


def lease_group(role: str) -> str:
    """The consumer group electing ``role``'s active instance."""
    return f"atomickafka-lease.{role.replace('/', '.')}"


class Lease:
    """Membership in a role's lease group; :attr:`held` while this instance is active."""

    def __init__(
        self,
        connection: Connection,
        role: str,
        *,
        session_timeout_ms: int = 6000,
    ) -> None:
        self.role = role
        self._held = False
        self.lost_at: float | None = None
        settings: dict[str, str | int | bool] = {
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(500, session_timeout_ms // 6),
            "max.poll.interval.ms": 600_000,
        }
        self._consumer = Consumer(
            connection.consumer_config(lease_group(role), **settings), logger=LIBRDKAFKA_LOGGER
        )
        self._consumer.subscribe(
            [LEASE_TOPIC], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )

    @property
    def held(self) -> bool:
        """True while this instance holds the role's lease."""
        return self._held

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self._held = True
            self.lost_at = None
            log.info("lease of %s assigned to this instance", self.role)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions and self._held:
            self._held = False
            self.lost_at = time.monotonic()
            log.info("lease of %s revoked from this instance", self.role)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._revoked(consumer, partitions)

    def poll(self, timeout_s: float = 0.0) -> bool:
        """Serve the group protocol for up to ``timeout_s``; return :attr:`held`."""
        self._consumer.poll(timeout_s)
        return self._held

    def wait(self, until: Callable[[], bool], *, step_s: float = 0.2) -> bool:
        """Wait for the lease while ``until()`` is false; return whether it is held."""
        while not self._held and not until():
            self.poll(step_s)
        return self._held

    def close(self) -> None:
        """Leave the group (a standby then takes over at once, without a timeout)."""
        with contextlib.suppress(RuntimeError):  # already closed
            self._consumer.close()
