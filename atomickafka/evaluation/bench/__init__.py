"""``atomickafka bench`` and the timings beside it: the relay's latency floor, the merge
delay of partitioned topics, an aged status topic (see :mod:`atomickafka.evaluation`)."""
