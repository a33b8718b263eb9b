"""AtomicKafka: atomic multicast over an unmodified Apache Kafka cluster.

A client publishes one message to several topics; every destination topic receives it
exactly once, and all destinations deliver their common messages in the same order.

Subpackages (docs/DESIGN.md §2 has the layout and its rules):

- :mod:`atomickafka.core` -- pure: the wire format, the ordering engine, the merger.
- :mod:`atomickafka.verify` -- the independent order checker and the simulators.
- :mod:`atomickafka.kafka` -- Kafka I/O shared by every role (settings, producer,
  consumer helpers, topics, admin, the status topic).
- :mod:`atomickafka.node` -- the node and merger shells, configuration, the supervisor.
- :mod:`atomickafka.localkafka` -- the embedded local Apache Kafka (Maven jars, no Docker).
- :mod:`atomickafka.cli` -- the ``atomickafka`` command.
"""

__version__ = "0.1.0"
