"""What the simulated clients send: :class:`Send`, :class:`Workload` and random ones;
for partitioned topics, :class:`LayerSend` and :func:`assign_layers`, which gives each
message its layer."""

from __future__ import annotations

import random
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from atomickafka.core.wire import Message, client_message
from atomickafka.errors import ConfigError
from atomickafka.verify.choosers import Chooser, RandomChooser

__all__ = [
    "LayerPolicy",
    "LayerSend",
    "Send",
    "Workload",
    "assign_layers",
    "client_ids",
    "integer_ids",
    "random_workload",
]


@dataclass(frozen=True, slots=True)
class Send:
    """One ClientMessage a client appends to topic ``via`` (a destination, or a relay).

    With the ``direct`` protocol a client writes a message to every destination; the
    simulator does so for a send whose ``via`` is a destination.
    """

    client: str
    messageID: str
    destinations: tuple[str, ...]
    value: Any
    via: str

    def to_message(self, sent_at: int | None = None) -> Message:
        """The ClientMessage record, sent at ``sent_at`` (ms) when given."""
        return client_message(
            self.messageID, self.destinations, self.value, self.client, sent_at=sent_at
        )


@dataclass(slots=True)
class Workload:
    """What the clients send: ``preload`` is in the logs before the run starts, and
    each client's list in ``clients`` is sent in order, when the scheduler says so."""

    clients: dict[str, list[Send]] = field(default_factory=dict)
    preload: list[Send] = field(default_factory=list)

    @property
    def sends(self) -> list[Send]:
        """Every send, preload first."""
        out = list(self.preload)
        for sends in self.clients.values():
            out.extend(sends)
        return out


def client_ids(client: str, seq: int) -> str:
    """Globally unique ids, ``<clientId>-<seq>`` (docs/DESIGN.md §3)."""
    return f"{client}-{seq}"


def integer_ids(client: str, seq: int) -> str:
    """The 2019 defect: per-client integer ids, which collide across clients."""
    return str(seq)


_VALUES: tuple[Any, ...] = (
    "",
    "x",
    "héllo wörld",
    "😀 emoji",
    None,
    0,
    -1.5,
    True,
    [],
    [1, "two", None],
    {"nested": {"list": [1, 2, {"k": "v"}]}},
)


def random_workload(
    rng: random.Random,
    topics: Sequence[str],
    *,
    clients: int = 2,
    messages: int = 30,
    multicast: float = 0.5,
    relay: float = 0.1,
    retry: float = 0.0,
    skew: int = 0,
    all_topics: bool = False,
    ids: Callable[[str, int], str] = client_ids,
) -> Workload:
    """A random workload over ``topics``.

    ``messages`` messages in all, spread over ``clients`` clients. A share
    ``multicast`` has 2..all destinations (all of them with ``all_topics``), the rest
    one. A share ``relay`` is sent via a topic that is not a destination. A share
    ``retry`` is sent a second time, later, via another topic (a client retrying after
    a timeout). ``skew`` preloads that many single-topic messages for ``topics[0]``
    from client ``skew`` so that its clock runs ahead. ``ids`` makes message ids.
    """
    names = [f"c{i}" for i in range(clients)]
    workload = Workload(clients={name: [] for name in names})
    seq: Counter[str] = Counter()
    for _ in range(skew):
        seq["skew"] += 1
        workload.preload.append(
            Send("skew", ids("skew", seq["skew"]), (topics[0],), "skew", topics[0])
        )
    for _ in range(messages):
        client = names[rng.randrange(clients)]
        seq[client] += 1
        if len(topics) > 1 and rng.random() < multicast:
            size = len(topics) if all_topics else rng.randint(2, len(topics))
            destinations = tuple(sorted(rng.sample(list(topics), size)))
        else:
            destinations = (rng.choice(list(topics)),)
        others = [t for t in topics if t not in destinations]
        via = rng.choice(others) if others and rng.random() < relay else rng.choice(destinations)
        value = rng.choice(_VALUES)
        send = Send(client, ids(client, seq[client]), destinations, value, via)
        sends = workload.clients[client]
        sends.append(send)
        if rng.random() < retry:
            again = Send(client, send.messageID, destinations, value, rng.choice(list(topics)))
            sends.insert(rng.randint(len(sends), len(sends) + 3), again)
    return workload


@dataclass(frozen=True, slots=True)
class LayerSend(Send):
    """A :class:`Send` routed to layer ``layer``: its ClientMessage carries the layer."""

    layer: int = 0

    def to_message(self, sent_at: int | None = None) -> Message:
        """The ClientMessage record, with ``partitionID = layer``."""
        return client_message(
            self.messageID,
            self.destinations,
            self.value,
            self.client,
            self.layer,
            sent_at=sent_at,
        )


class LayerPolicy(StrEnum):
    """How :func:`assign_layers` picks a message's layer among the active ones."""

    ROUND_ROBIN = "round_robin"  # in order of first appearance
    KEY = "key"  # a hash of ``key(send)`` (by default the client: Kafka's keyed partitioning)
    DRAWN = "drawn"  # drawn by the chooser


def _by_client(send: Send) -> str:
    return send.client


def assign_layers(
    workload: Workload,
    layers: int,
    *,
    policy: LayerPolicy | str = LayerPolicy.ROUND_ROBIN,
    chooser: Chooser | None = None,
    key: Callable[[Send], str] = _by_client,
    silent: Sequence[int] = (),
    phases: int = 1,
) -> Workload:
    """``workload`` with every send turned into a :class:`LayerSend`.

    A message id gets one layer, at its first appearance; a client's retry of it (the
    same id, later) goes to the same layer. Layers in ``silent`` never get a message.
    With ``phases > 1`` each client's list is cut into ``phases`` consecutive stretches
    (the preload belongs to the first) and each stretch gets a drawn non-empty subset
    of the other layers: the rest are idle for that stretch. ``chooser`` (default
    ``RandomChooser(0)``) draws those subsets and, with ``DRAWN``, the layers.
    """
    policy = LayerPolicy(policy)
    if layers < 1:
        raise ConfigError(f"at least one layer, not {layers}")
    usable = [layer for layer in range(layers) if layer not in set(silent)]
    if not usable:
        raise ConfigError("every layer is silent: nothing could be sent")
    chooser = chooser if chooser is not None else RandomChooser(0)
    active: list[list[int]] = [usable]
    if phases > 1:
        active = []
        for _ in range(phases):
            subset = [layer for layer in usable if chooser.chance(0.5)]
            active.append(subset or [usable[chooser.integer(0, len(usable) - 1)]])
    layer_of: dict[str, int] = {}
    turn = 0

    def route(send: Send, phase: int) -> LayerSend:
        nonlocal turn
        layer = layer_of.get(send.messageID)
        if layer is None:
            candidates = active[phase]
            if policy is LayerPolicy.ROUND_ROBIN:
                layer = candidates[turn % len(candidates)]
                turn += 1
            elif policy is LayerPolicy.KEY:
                layer = candidates[zlib.crc32(key(send).encode()) % len(candidates)]
            else:
                layer = candidates[chooser.integer(0, len(candidates) - 1)]
            layer_of[send.messageID] = layer
        return LayerSend(
            send.client, send.messageID, send.destinations, send.value, send.via, layer
        )

    preload: list[Send] = [route(send, 0) for send in workload.preload]
    clients: dict[str, list[Send]] = {}
    for client, sends in workload.clients.items():
        count = len(sends)
        clients[client] = [
            route(send, index * len(active) // count) for index, send in enumerate(sends)
        ]
    return Workload(clients=clients, preload=preload)
