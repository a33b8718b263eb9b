"""AtomicKafka: atomic multicast over an unmodified Apache Kafka cluster.

A client publishes one message to several topics; every destination topic receives it
exactly once, and all destinations deliver their common messages in the same order.

Subpackages and modules:

- :mod:`atomickafka.messages` -- the wire format (thesis Listing 4.3/4.4) and its codec.
- :mod:`atomickafka.engine` -- the ordering core: a pure, deterministic state machine.
- :mod:`atomickafka.checker` -- an independent checker of delivery logs.
- :mod:`atomickafka.simulator` -- N engines joined by in-memory logs, any interleaving.
- :mod:`atomickafka.broker` -- start/stop a local Apache Kafka from Maven Central jars.
- :mod:`atomickafka.kafka_config` -- librdkafka settings and ``-X`` pass-through.
- :mod:`atomickafka.kafka_io` -- small Kafka I/O helpers (batched consume, retries).
- :mod:`atomickafka.cli` -- the ``atomickafka`` command.
"""

__version__ = "0.1.0"
