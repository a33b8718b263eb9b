"""AtomicKafka: atomic multicast over an unmodified Apache Kafka cluster.

A client publishes one message to several topics; every destination topic receives it
exactly once, and all destinations deliver their common messages in the same order.

Subpackages and modules:

- :mod:`atomickafka.core.wire` -- the wire format (thesis Listing 4.3/4.4) and its codec.
- :mod:`atomickafka.core.engine` -- the ordering core: a pure, deterministic state machine.
- :mod:`atomickafka.verify.checker` -- an independent checker of delivery logs.
- :mod:`atomickafka.verify.simulator` -- N engines joined by in-memory logs, any interleaving.
- :mod:`atomickafka.localkafka` -- the embedded local Apache Kafka (Maven jars, no Docker).
- :mod:`atomickafka.kafka.settings` -- librdkafka settings and ``-X`` pass-through.
- :mod:`atomickafka.kafka.consumer` -- small Kafka I/O helpers (batched consume, retries).
- :mod:`atomickafka.cli` -- the ``atomickafka`` command.
"""

__version__ = "0.1.0"
