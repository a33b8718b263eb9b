#!/usr/bin/env bash
# The project's one test command (README, CI): set up, lint, check formatting and types,
# then run every test: the unit tier on both forms of the core (pure Python and compiled),
# then the integration tier. Integration tests need a Kafka: the session
# fixture uses $KAFKA_BOOTSTRAP_SERVERS, a Docker daemon, or starts a local broker from
# Maven jars; if none can be had the tests fail (never skip). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./deploy/bootstrap.sh eval
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# thousands of generated runs in the property tests (tests/unit/conftest.py)
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
# Workers (pytest-xdist): two for the unit tier, whose property tests are CPU-bound (one
# per core); three for the integration tier, whose tests mostly wait on the broker and
# the nodes (on two cores, 2026-11-27: 102 tests in 14-15 min on two workers, 104 in
# 12.3 min on three). Integration files stay whole on one worker (--dist loadfile: a
# module's fixtures, e.g. the evaluation suite, run once), and each worker has its own
# broker. The unit tier runs first, apart: it would slow the integration tests' clusters.
if [ "$#" -gt 0 ]; then
  exec .venv/bin/pytest -n 2 --dist loadfile "$@"
fi
# Both tiers run whatever the first found: a unit failure is reported, the integration
# tier still runs, and the command fails at the end if any did.
status=0
# The unit tier on the checkout's sources: the pure-Python core (an editable install)
ATOMICKAFKA_EXPECT_CORE="pure Python" .venv/bin/pytest -n 2 --durations=10 tests/unit \
  || status=$?
# and on the compiled core, as a user installs it: the wheel (mypyc, setup.py) in
# .venv-compiled. --import-mode=append puts the checkout after the installed package on
# sys.path (its tests, docs and deploy files are read from here; the wheel is what runs);
# the test_packaging check fails should the wheel have fallen back to the pure form.
# Hypothesis's dev profile: the pure run above draws the ci profile's thousands of
# examples through the same logic; this run checks that the compiled form does what the
# pure one does, for about two minutes of the CI budget (build included).
# PYTHONSAFEPATH: no python (pytest's workers included) puts the checkout first on
# sys.path, where its atomickafka would stand in for the wheel's.
wheel=$(./deploy/compiled.sh | tail -n1) || status=$?
ATOMICKAFKA_EXPECT_CORE="compiled, mypyc" HYPOTHESIS_PROFILE=dev PYTHONSAFEPATH=1 \
  .venv-compiled/bin/python -m pytest -n 2 --import-mode=append --durations=5 tests/unit \
  || status=$?
# the wheel test installs the wheel just built rather than building it again
ATOMICKAFKA_TEST_WHEEL="$wheel" .venv/bin/pytest -n 3 --dist loadfile --durations=25 \
  tests/integration || status=$?
if [ "$status" -ne 0 ]; then
  echo "test.sh: a tier failed (see above)" >&2
fi
exit "$status"
