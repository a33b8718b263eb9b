#!/usr/bin/env bash
# The compiled form, as a user gets it: build the wheel (setup.py compiles the pure core
# with mypyc; pip builds it in an isolated environment, as for any user) and install it
# into .venv-compiled, where deploy/test.sh runs the unit tier on it. The checkout's own
# .venv keeps the editable, pure-Python install, and lends .venv-compiled its installed
# dependencies (a .pth file: the same interpreter, so nothing is installed twice).
# Prints the wheel's path last: deploy/test.sh hands it to tests/integration/test_wheel.py,
# which would otherwise build the same wheel again. Safe to run again: the wheel is
# rebuilt and reinstalled every time (the sources may have changed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { echo "compiled: $*" >&2; }

py=.venv/bin/python  # deploy/bootstrap.sh made it: the same interpreter for both forms
if [ ! -x "$py" ]; then
  say "run deploy/bootstrap.sh first (it creates .venv)"
  exit 2
fi
if [ ! -x .venv-compiled/bin/python ]; then
  say "creating .venv-compiled"
  "$py" -m venv .venv-compiled
fi
site() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# after .venv-compiled's own site-packages (the wheel): .venv's, for the dependencies
# (its editable atomickafka stays out: a .pth line adds a path, not that path's .pth files)
site "$py" >"$(site .venv-compiled/bin/python)/atomickafka-dependencies.pth"

# Built from a copy holding only what tests/integration/test_wheel.py's SOURCES names,
# so that nothing else of the checkout can stand in for what the wheel lacks.
source=$(mktemp -d)
trap 'rm -rf "$source"' EXIT
cp -r pyproject.toml README.md setup.py atomickafka client "$source"/
find "$source" -name __pycache__ -prune -exec rm -rf {} +
dist=build/compiled-wheel
rm -rf "$dist"
say "building the wheel (mypyc compiles the core)"
# pip's log shows setup.py's one-line warning should the build fall back to the pure form;
# the unit tier then fails its form check (tests/unit/test_packaging.py)
.venv-compiled/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps \
  --wheel-dir "$dist" "$source"
wheel=$(ls "$PWD/$dist"/atomickafka-*.whl)
.venv-compiled/bin/python -m pip install --quiet --disable-pip-version-check \
  --force-reinstall --no-deps "$wheel"
say "$(.venv-compiled/bin/python -P -m atomickafka --version)"
echo "$wheel"
