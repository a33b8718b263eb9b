#!/usr/bin/env bash
# The project's one test command (README, CI): set up, lint, check formatting and types,
# then run every test, unit and integration. Integration tests need a Kafka: the session
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
# Two workers (pytest-xdist): the tests mostly wait on the broker and the nodes, so two
# at a time halve the wall time on two cores. Integration files stay whole on one worker
# (--dist loadfile: a module's fixtures, e.g. the evaluation suite, run once), and each
# worker has its own broker. The unit tier runs first, apart: its property tests are
# CPU-bound and would slow the integration tests' clusters.
if [ "$#" -gt 0 ]; then
  exec .venv/bin/pytest -n 2 --dist loadfile "$@"
fi
# Both tiers run whatever the first found: a unit failure is reported, the integration
# tier still runs, and the command fails at the end if either did.
status=0
.venv/bin/pytest -n 2 --durations=10 tests/unit || status=$?
.venv/bin/pytest -n 2 --dist loadfile --durations=25 tests/integration || status=$?
if [ "$status" -ne 0 ]; then
  echo "test.sh: a tier failed (see above)" >&2
fi
exit "$status"
