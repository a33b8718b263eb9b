#!/usr/bin/env bash
# The compiled form, as a user gets it: build the wheel (setup.py compiles the pure core
# with mypyc; pip builds it in an isolated environment, as for any user) and install it,
# with the test and eval extras, into .venv-compiled (deploy/test.sh runs the unit tier on it).
# The checkout's own .venv keeps the editable, pure-Python install. Safe to run again:
# the wheel is rebuilt and reinstalled every time (the sources may have changed), the
# dependencies only when pyproject.toml did.
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

dist=build/compiled-wheel
rm -rf build  # setuptools' and mypyc's build tree: nothing of an earlier build is reused
say "building the wheel (mypyc compiles the core)"
# pip's log shows setup.py's one-line warning should the build fall back to the pure form;
# the unit tier then fails its form check (tests/unit/test_packaging.py)
.venv-compiled/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps \
  --wheel-dir "$dist" .
wheel=$(ls "$dist"/atomickafka-*.whl)

stamp=.venv-compiled/.atomickafka-installed
digest=$("$py" -c \
  'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest())')
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
  say "installing the dependencies (the test and eval extras: the unit tier needs both)"
  .venv-compiled/bin/python -m pip install --quiet --disable-pip-version-check "${wheel}[test,eval]"
  echo "$digest" >"$stamp"
fi
.venv-compiled/bin/python -m pip install --quiet --disable-pip-version-check \
  --force-reinstall --no-deps "$wheel"
say "$(.venv-compiled/bin/atomickafka --version)"
