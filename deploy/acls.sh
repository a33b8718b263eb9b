#!/usr/bin/env bash
# Kafka ACLs for AtomicKafka (docs/operators.md, "Secure"): with an authorizer on the
# brokers, clients may only write client records (into the input logs, and the control
# logs for the direct lane, docs/DESIGN.md §7.1) and read
# deliveries and the nodes' statuses; nodes only what they need; the operator's tools
# (topics create, doctor) the rest. Split layout (the default): in the shared layout the
# input log of T is T itself, so clients would need Write on the delivery topics too.
#
#   BOOTSTRAP=kafka-1:9093 ADMIN_CONFIG=admin.properties TOPICS="orders payments audit" \
#     NODE=User:atomickafka-node CLIENT=User:shop OPERATOR=User:ops deploy/acls.sh
#
# ADMIN_CONFIG is the --command-config of a principal allowed to change ACLs. KAFKA_ACLS
# names the tool (default kafka-acls.sh, from Kafka's bin/). Each line adds one rule; run
# it again after adding a topic. Kafka cannot tell a client record from any other record:
# the input logs accept what a client writes, and the nodes set aside what is not theirs
# (dead letters) -- signed records close that gap.
set -euo pipefail

: "${BOOTSTRAP:?the brokers, host:port[,...]}"
: "${TOPICS:?the AtomicKafka topics, space-separated}"
NODE=${NODE:-User:atomickafka-node}
CLIENT=${CLIENT:-User:atomickafka-client}
OPERATOR=${OPERATOR:-User:atomickafka-operator}
KAFKA_ACLS=${KAFKA_ACLS:-kafka-acls.sh}
config=()
if [ -n "${ADMIN_CONFIG:-}" ]; then config=(--command-config "$ADMIN_CONFIG"); fi

acl() { "$KAFKA_ACLS" --bootstrap-server "$BOOTSTRAP" "${config[@]}" --add --force "$@"; }
prefixed=(--resource-pattern-type prefixed)

# --- nodes (and mergers): their input and control logs, layer streams, dead letters,
# snapshots, statuses, the lease topic and groups (one active instance per role),
# transactions
acl --allow-principal "$NODE" --operation Read --operation Write --operation Describe \
    --operation DescribeConfigs --operation AlterConfigs --operation Create \
    --topic atomickafka-in. --topic atomickafka-ctl. --topic atomickafka-layers. \
    --topic atomickafka-dlq. \
    --topic atomickafka-snap. "${prefixed[@]}"
acl --allow-principal "$NODE" --operation Read --operation Write --operation Describe \
    --operation DescribeConfigs --operation AlterConfigs --operation Create \
    --topic atomickafka-status --topic atomickafka-lease
acl --allow-principal "$NODE" --operation Read --operation Describe \
    --group atomickafka-node. --group atomickafka-lease. --group atomickafka-reader- \
    "${prefixed[@]}"
acl --allow-principal "$NODE" --operation Write --operation Describe \
    --transactional-id atomickafka. "${prefixed[@]}"
acl --allow-principal "$NODE" --operation IdempotentWrite --cluster
for topic in $TOPICS; do  # the deliveries (a merger also reads the last one back)
  acl --allow-principal "$NODE" --operation Write --operation Read --operation Describe \
      --operation DescribeConfigs --operation Create --topic "$topic"
done

# --- clients: write client records into the input logs (and, a trickle of them, the
# direct lane, into the control logs: without this, give clients direct_rate=0), read
# deliveries and statuses
acl --allow-principal "$CLIENT" --operation Write --operation Describe \
    --topic atomickafka-in. --topic atomickafka-ctl. "${prefixed[@]}"
acl --allow-principal "$CLIENT" --operation Read --operation Describe --topic atomickafka-status
acl --allow-principal "$CLIENT" --operation Read --operation Describe \
    --group atomickafka-reader- "${prefixed[@]}"
acl --allow-principal "$CLIENT" --operation IdempotentWrite --cluster
for topic in $TOPICS; do
  acl --allow-principal "$CLIENT" --operation Read --operation Describe --topic "$topic"
done

# --- the operator's tools: atomickafka topics create, topics check, doctor, status
acl --allow-principal "$OPERATOR" --operation Create --operation Describe \
    --operation DescribeConfigs --operation AlterConfigs \
    --topic atomickafka- "${prefixed[@]}"
acl --allow-principal "$OPERATOR" --operation Read --topic atomickafka-status
acl --allow-principal "$OPERATOR" --operation Describe --group atomickafka-node. "${prefixed[@]}"
acl --allow-principal "$OPERATOR" --operation Write --operation Describe \
    --transactional-id atomickafka-doctor
acl --allow-principal "$OPERATOR" --operation Describe --operation DescribeConfigs \
    --operation IdempotentWrite --cluster
for topic in $TOPICS; do
  acl --allow-principal "$OPERATOR" --operation Create --operation Describe \
      --operation DescribeConfigs --operation AlterConfigs --topic "$topic"
done
