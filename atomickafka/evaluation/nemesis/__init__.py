"""The nemesis (issue 39; docs/soak.md, "Network faults"): a seeded schedule of network
and process faults against a deployment spread over several hosts on one machine
(:mod:`atomickafka.netlab`), while a client sends at a steady rate; then heal, wait and
check. ``atomickafka soak --nemesis`` runs it and writes its report;
``tests/integration/test_netfaults.py`` runs a short one in CI.

- :mod:`~atomickafka.evaluation.nemesis.schedule` -- the faults, drawn from a seed (pure);
- :mod:`~atomickafka.evaluation.nemesis.deployment` -- brokers, node hosts, client host;
- :mod:`~atomickafka.evaluation.nemesis.sender` -- the steady client (a process);
- :mod:`~atomickafka.evaluation.nemesis.observe` -- who is active, the takeovers;
- :mod:`~atomickafka.evaluation.nemesis.faults` -- applying and healing each fault;
- :mod:`~atomickafka.evaluation.nemesis.checks` -- the verdicts;
- :mod:`~atomickafka.evaluation.nemesis.report` -- results, summary, timeline plot;
- :mod:`~atomickafka.evaluation.nemesis.command` -- one run, start to report.
"""
