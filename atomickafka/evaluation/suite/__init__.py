"""``atomickafka eval``: the thesis's suite, from one run to the report, with its
PySpark metrics job (see :mod:`atomickafka.evaluation`)."""
