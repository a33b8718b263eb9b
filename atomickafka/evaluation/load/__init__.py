"""What writes an evaluation's load and what is measured while it runs: scenarios and
variants, client processes, the baselines' senders, probes and percentiles (see
:mod:`atomickafka.evaluation`)."""
