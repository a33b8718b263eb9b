"""The soak (``eval/soak.py``, docs/soak.md): its phases, cluster, load and outputs (see
:mod:`atomickafka.evaluation`)."""
