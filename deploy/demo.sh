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
bootstrap=$(.venv/bin/atomickafka broker start | tail -n1)
echo "embedded Kafka at $bootstrap"
# No --bootstrap-server: eval reuses the embedded broker just started (and says so), and
# ends by printing where the report is. The broker was started here, so it is said here
# that it keeps running.
status=0
.venv/bin/atomickafka eval --scenarios baseline,90-10,80-20,70-30,60-40,50-50 \
  --clients 2 --messages-per-client 20000 --topics 5 "$@" || status=$?
echo "the embedded Kafka keeps running at $bootstrap; stop it with: .venv/bin/atomickafka broker stop"
exit "$status"
