"""The evaluation: the thesis's suite (``atomickafka eval``) and the bench
(``atomickafka bench``), with everything they measure with.

One module per concern:

- :mod:`~atomickafka.evaluation.scenarios`: scenario names, multicast shares, client plans;
- :mod:`~atomickafka.evaluation.variants`: what is compared (protocols, layouts, the
  single-sequencer baseline);
- :mod:`~atomickafka.evaluation.measuring`: what the suite and the bench share while a
  load runs (probes, the delivery counter, the warm-up, percentiles);
- :mod:`~atomickafka.evaluation.runner`: one run (nodes, client processes, progress,
  the order check);
- :mod:`~atomickafka.evaluation.clients` and :mod:`~atomickafka.evaluation.sequencer`:
  the processes that write the load;
- :mod:`~atomickafka.evaluation.recording`: every record of a run into Parquet;
- :mod:`~atomickafka.evaluation.metrics_job`: the PySpark metrics job (a plain PySpark
  application, also run by ``spark-submit``), and :mod:`~atomickafka.evaluation.spark`,
  the suite's side of it;
- :mod:`~atomickafka.evaluation.results`, :mod:`~atomickafka.evaluation.thesis`,
  :mod:`~atomickafka.evaluation.comparison`, :mod:`~atomickafka.evaluation.plots`,
  :mod:`~atomickafka.evaluation.report`: the report;
- :mod:`~atomickafka.evaluation.suite`: the whole ``eval`` command;
- :mod:`~atomickafka.evaluation.bench`: AtomicKafka against a bare Kafka pipe, and
  :mod:`~atomickafka.evaluation.merge_delay`: the merge delay of partitioned topics.
"""
