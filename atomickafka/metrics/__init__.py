"""Prometheus metrics of the nodes, the mergers and ``cluster`` (docs/DESIGN.md §11).

- :mod:`~atomickafka.metrics.shell`: the ``atomickafka_node_*`` and
  ``atomickafka_merger_*`` families and how a shell updates them, per batch;
- :mod:`~atomickafka.metrics.records`: what they read off records without decoding
  them (type, ``sentAt``, a dead letter's reason as a bounded label);
- :mod:`~atomickafka.metrics.histogram`: a batch of latencies observed at once;
- :mod:`~atomickafka.metrics.serving`: the ``/metrics`` endpoint of one process;
- :mod:`~atomickafka.metrics.cluster`: ``cluster``'s one endpoint for all its
  children (prometheus-client's multiprocess mode) and its restart counter.
"""
