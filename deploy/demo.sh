#!/usr/bin/env bash
# Quickstart, the main job: set everything up, start (or reuse) the embedded local Kafka
# broker, multicast a few messages through three nodes and check their order, then
# benchmark AtomicKafka against a bare Kafka pipe on the same broker.
# Extra arguments go to `atomickafka bench` (e.g. --messages 50000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./deploy/bootstrap.sh
bootstrap=$(.venv/bin/atomickafka broker start | tail -n1)
.venv/bin/atomickafka demo --bootstrap-server "$bootstrap"
.venv/bin/atomickafka bench --bootstrap-server "$bootstrap" --messages 20000 "$@"
echo "the broker keeps running at $bootstrap; stop it with: .venv/bin/atomickafka broker stop"
