"""The AtomicKafka filtering client: send to several topics, read ordered deliveries.

See :class:`AtomicKafkaClient` and :class:`Delivery`.
"""

from atomickafka.client.client import (
    AtomicKafkaClient,
    DeliveryError,
    DestinationError,
    OfflineDestinationError,
)
from atomickafka.client.delivery import Delivery

__all__ = [
    "AtomicKafkaClient",
    "Delivery",
    "DeliveryError",
    "DestinationError",
    "OfflineDestinationError",
]
