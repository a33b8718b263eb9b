"""``atomickafka bench`` and the timings beside it: the relay's latency floor, the merge
delay of partitioned topics, an aged status topic, the micro-benchmarks' simulated run
(see :mod:`atomickafka.evaluation`)."""
