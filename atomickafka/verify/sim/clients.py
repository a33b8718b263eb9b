"""The simulated clients (:class:`Clients`): sends, the direct lane, back-pressure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from typing import Final, TypeVar

from atomickafka.client.plan import DirectLane, NodeView, lagging, lane_targets
from atomickafka.core.protocols import route
from atomickafka.core.wire import encode_client
from atomickafka.verify.checker import SentMessage
from atomickafka.verify.sim.state import SimState
from atomickafka.verify.workload import Send

__all__ = ["ABSENT_TOPIC", "Clients"]

_S = TypeVar("_S", bound=Send)

#: The topic a client names by mistake (ABSENT): no node serves it.
ABSENT_TOPIC: Final = "no-such-topic"


class Clients(SimState):
    """The simulated clients: they send as the client library does (relay or direct,
    the direct lane by :mod:`atomickafka.client.plan` with its token buckets), hold back
    while a node is behind, and (ABSENT) name a topic that has no node."""

    def send(
        self,
        send: Send,
        *,
        partial: bool = False,
        only: Collection[str] | None = None,
        lane: Collection[str] | None = None,
    ) -> None:
        """A client appends a ClientMessage to ``send.via``'s log (``direct``: to every
        destination's, or with ``partial`` to a non-empty subset chosen by the chooser,
        or with ``only`` to those destinations a script names). With control logs a copy
        takes the direct lane (its destination's control log) as the client's plan says
        (:func:`~atomickafka.client.plan.lane_targets`, its token bucket), or, when a
        script names them, for the topics in ``lane``.

        A client believes every node runs its entry topic's protocol. A message whose
        destinations run different protocols must be aborted everywhere: it is not
        handed to the checker as sent.
        """
        destinations = send.destinations
        if not set(destinations) <= set(self.topics):  # a topic with no node: refused
            self.doomed.add(send.messageID)
            self.events["absent_destination"] += 1
        elif len({self.protocols.get(t, self.algorithm) for t in destinations}) > 1:
            self.doomed.add(send.messageID)
            self.events["mixed_message"] += 1
        else:
            self.sent.append(SentMessage(send.messageID, frozenset(destinations), send.value))
        sent_at = self._sent_at.setdefault((send.client, send.messageID), self.clock.now_ms)
        message = send.to_message(sent_at)
        if self.layer is not None:
            message = message._replace(partitionID=self.layer)
        if len(destinations) > 1:
            self._in_flight.append(message)
        value = encode_client(message)
        routed, _ = route(destinations, send.via, self.protocols[send.via])  # as a client
        targets = list(routed)
        if len(targets) > 1:  # direct: every destination's log (that has a node)
            targets = [t for t in targets if t in self.inputs]
        if only is not None:  # a partial write the script names
            targets = [t for t in targets if t in only]
            self.events["partial_write"] += len(targets) < len(destinations)
        elif partial and len(targets) > 1:
            keep = self.chooser.integer(1, len(targets) - 1)
            for _ in range(len(targets) - keep):
                targets.pop(self.chooser.integer(0, len(targets) - 1))
            self.events["partial_write"] += 1
        direct = self._lane_copies(send.client, targets, lane)
        for topic in targets:
            if topic in direct:
                self._append_signed(self.controls[topic], value)
                self.events["direct_copy"] += 1
            else:
                self.append_input(topic, value, signed=True)
        self.events["send"] += 1
        self._note(f"{send.client} sends {send.messageID} to {destinations} via {targets}")

    def _lane_copies(
        self, client: str, targets: Sequence[str], lane: Collection[str] | None
    ) -> set[str]:
        """The targets whose copies take the direct lane: those a script names, or as
        the client's plan decides (each node's view and the client's token bucket)."""
        if not self.controls:
            return set()
        if lane is not None:
            return {t for t in targets if t in lane}
        allowed = lane_targets(targets, self.node_views(targets))
        bucket = self._lanes.get(client)
        if bucket is None:
            bucket = self._lanes[client] = DirectLane(*self.direct_lane)
        now = self.clock.now_ms / 1000
        return {t for t in targets if t in allowed and bucket.take(t, now)}

    def node_views(self, topics: Iterable[str]) -> dict[str, list[NodeView]]:
        """What the clients know of ``topics``' nodes, as their statuses would say: live,
        with a control log or not, and how far behind (the log time the oldest record
        they have not applied has waited, read or not)."""
        control = bool(self.controls)
        return {
            t: [NodeView(t, True, control, self.behind_s(t))] for t in topics if t in self.nodes
        }

    def behind_s(self, topic: str) -> float:
        """How long (s, in the log's time) the oldest record ``topic``'s node has not
        applied has waited: one queued or buffered, or the first unread of a log."""
        batch = self.nodes[topic].batch
        stamps = [batch.oldest_unapplied_ms]
        for log, at in self._fetches(topic, batch):
            if len(log) > at:
                stamps.append(log.records[at].timestamp()[1])
        oldest = min((s for s in stamps if s is not None), default=None)
        return 0.0 if oldest is None else max(0.0, (self.clock.now_ms - oldest) / 1000)

    def held_back(self, send: Send) -> bool:
        """Back-pressure: the client of ``send`` waits while a node of its destinations
        (or its relay) is more than ``max_lag_s`` behind (the client's plan,
        :func:`~atomickafka.client.plan.lagging`)."""
        if self.max_lag_s is None:
            return False
        topics = [*send.destinations, send.via]
        return lagging(topics, self.node_views(topics), self.max_lag_s) is not None

    def misaddressed(self, send: _S) -> _S:
        """ABSENT: by chance, ``send`` also names a topic that has no node."""
        if not self.chaos.absent:
            return send
        drawn = self._misaddressed.get(send.messageID)
        if drawn is None:  # a client's retry of a message names what the first send did
            drawn = self._misaddressed[send.messageID] = self.chooser.chance(self.chaos.absent)
        if not drawn:
            return send
        return replace(send, destinations=tuple(sorted({*send.destinations, ABSENT_TOPIC})))
