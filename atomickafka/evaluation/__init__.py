"""The thesis's evaluation suite (``atomickafka eval``): runs, recording, metrics, report.

One module per concern:

- :mod:`~atomickafka.evaluation.scenarios`: scenario names, multicast shares, client plans;
- :mod:`~atomickafka.evaluation.variants`: what is compared (protocols, layouts, the
  single-sequencer baseline);
- :mod:`~atomickafka.evaluation.runner`: one run (nodes, client processes, progress,
  the order check);
- :mod:`~atomickafka.evaluation.clients` and :mod:`~atomickafka.evaluation.sequencer`:
  the processes that write the load;
- :mod:`~atomickafka.evaluation.recording`: every record of a run into Parquet;
- :mod:`~atomickafka.evaluation.spark`: the PySpark metrics job (``eval/metrics.py``);
- :mod:`~atomickafka.evaluation.results`, :mod:`~atomickafka.evaluation.thesis`,
  :mod:`~atomickafka.evaluation.plots`, :mod:`~atomickafka.evaluation.report`: the report;
- :mod:`~atomickafka.evaluation.suite`: the whole command.
"""
