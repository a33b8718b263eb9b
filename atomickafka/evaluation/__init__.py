"""The evaluation: the thesis's suite (``atomickafka eval``), the bench
(``atomickafka bench``) and the soak (``eval/soak.py``), with everything they measure
with. Five subpackages, each importing only those before it here (and
:mod:`~atomickafka.evaluation.errors`, the error that ends a run); the layout test holds
them to it (docs/DESIGN.md §2):

- :mod:`~atomickafka.evaluation.cost`: what a run costs and what it wrote -- CPU per
  message by process role (``accounting``, ``processes``), records and bytes by type
  (``traffic``, ``topic_scan``), resident memory (``rss``), the plot of projected
  capacity against the number of topics (``projection_plot``);
- :mod:`~atomickafka.evaluation.load`: what writes the load and what is measured while
  it runs -- the thesis's scenarios and client plans (``scenarios``), the many-topic
  workload's destination mixes (``destinations``), what is compared (``variants``),
  the client processes (``clients``), the baselines (``baselines``: the sequencers
  ``seq-alo`` in ``sequencer``, ``seq-eos`` in ``seq_eos``, ``streams`` in
  ``streams``; the bare pipe in ``bare``; their senders' common part in ``senders``),
  probes, the delivery counter, the warm-up and percentiles (``measuring``);
- :mod:`~atomickafka.evaluation.bench`: ``atomickafka bench`` (``command``), AtomicKafka
  against a bare Kafka pipe and the sequencer baselines, the relay's latency floor
  (``relay``), the merge delay of partitioned topics (``merge_delay``), an aged status
  topic for start-up timings (``aged_status``), the simulated run the micro-benchmarks
  (``eval/bench_engine.py``, ``eval/bench_batch.py``) replay (``simulated``);
- :mod:`~atomickafka.evaluation.suite`: ``atomickafka eval`` (``command``): one run
  (``runner``, ``environment``, ``recording``, ``run_audit``), the PySpark metrics job
  (``metrics_job``, a plain PySpark application also run by ``spark-submit``, and
  ``spark``, the suite's side of it), the report (``results``, ``thesis``,
  ``comparison``, ``plots``, ``report``);
- :mod:`~atomickafka.evaluation.soak`: the soak's phases (``memory``, ``faults``,
  ``modes``), its cluster, load and shared parts (``cluster``, ``load``, ``common``) and
  its outputs (``figures``, ``report``).
"""
