"""The AtomicKafka filtering client (``atomickafka.client``): send one message to several
topics, read a topic's deliveries in their agreed order.

- :class:`AtomicKafkaClient` -- ``send(value, destinations, *, via, key, headers,
  on_delivery)``, ``send_batch(values, destinations, ...)`` (many messages to the same
  destinations, one send time, the per-message work done once; their messageIDs),
  ``flush()``, ``reader(topic, group=...)``, ``deliveries(topic, group=...)``,
  ``close()``; a context manager.
- :class:`DeliveryReader` -- one topic's deliveries, its consumer closed on exit.
- :class:`SentMessage` (what ``on_delivery(err, sent)`` gets) and :class:`Delivery`.
- Errors, all :class:`AtomicKafkaError`: :class:`DeliveryError` (``failures``: pairs of
  messageID and ``KafkaError``), :class:`DestinationError`,
  :class:`OfflineDestinationError`, :class:`SigningError` (the destinations' nodes check
  signatures this client cannot make), :class:`MessageError`, :class:`ConfigError`,
  :class:`QueueFullError`, :class:`TimedOutError`, :class:`ClosedError` (used after
  ``close()``; also a ``RuntimeError``).
"""

from atomickafka.client.client import AtomicKafkaClient
from atomickafka.client.delivery import Delivery, OnDelivery, SentMessage
from atomickafka.client.errors import (
    AtomicKafkaError,
    ClosedError,
    ConfigError,
    DeliveryError,
    DestinationError,
    MessageError,
    OfflineDestinationError,
    QueueFullError,
    SigningError,
    TimedOutError,
)
from atomickafka.client.reader import DeliveryReader
from atomickafka.core.engine import Algorithm
from atomickafka.kafka.topics import Layout

__all__ = [
    "Algorithm",
    "AtomicKafkaClient",
    "AtomicKafkaError",
    "ClosedError",
    "ConfigError",
    "Delivery",
    "DeliveryError",
    "DeliveryReader",
    "DestinationError",
    "Layout",
    "MessageError",
    "OfflineDestinationError",
    "OnDelivery",
    "QueueFullError",
    "SentMessage",
    "SigningError",
    "TimedOutError",
]
