#!/usr/bin/env bash
# Quickstart, the main job: the 2019 thesis's evaluation on this machine.
# Sets everything up (the eval extra: PySpark, pyarrow, matplotlib, and Spark's Kafka
# connector jars, fetched now and never at run time), starts (or reuses) the embedded
# local Kafka broker, and runs `atomickafka eval` at the thesis's size: 5 topics with one
# node each, 2 clients x 20,000 messages, the scenarios baseline and 90-10 ... 50-50.
# Every run's delivery order is checked; PySpark computes the metrics; a Markdown report
# with plots, beside the thesis's figures, goes to eval/out/<UTC time>/report.md.
# Extra arguments go to `atomickafka eval` (e.g. --compare sequencer,layouts).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./deploy/bootstrap.sh eval
# The compiled core, as `pip install` gives it, wherever a C compiler is there: the wheel
# deploy/compiled.sh builds (mypyc) into .venv-compiled; the pure-Python form otherwise.
# PYTHONSAFEPATH: the processes a run starts (`python -m ...` in this folder) import the
# installed package, not the checkout's sources. The report names the form that ran.
atomickafka=.venv/bin/atomickafka
if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || command -v clang >/dev/null 2>&1; then
  if ./deploy/compiled.sh >/dev/null; then
    atomickafka=.venv-compiled/bin/atomickafka
  else
    echo "demo: building the compiled core failed; the pure-Python core runs" >&2
  fi
else
  echo "demo: no C compiler (cc, gcc, clang); the pure-Python core runs" >&2
fi
export PYTHONSAFEPATH=1
"$atomickafka" --version
bootstrap=$("$atomickafka" broker start | tail -n1)
echo "embedded Kafka at $bootstrap"
# No --bootstrap-server: eval reuses the embedded broker just started (and says so), and
# ends by printing where the report is. The broker was started here, so it is said here
# that it keeps running.
status=0
"$atomickafka" eval --scenarios baseline,90-10,80-20,70-30,60-40,50-50 \
  --clients 2 --messages-per-client 20000 --topics 5 "$@" || status=$?
echo "the embedded Kafka keeps running at $bootstrap; stop it with: .venv/bin/atomickafka broker stop"
exit "$status"
