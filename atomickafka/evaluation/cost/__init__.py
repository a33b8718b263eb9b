"""What a run costs and what it wrote: CPU per delivered message by process role,
records and bytes by type, resident memory (see :mod:`atomickafka.evaluation`)."""
