#!/usr/bin/env bash
# Idempotent developer/CI setup, safe to run again and again:
#   1. .venv with Python >= 3.11 (PYTHON=/path/to/python3 picks the interpreter),
#   2. the package in editable mode with the test and dev extras, plus any extras named
#      as arguments (`deploy/bootstrap.sh eval` also installs .[eval]),
#   3. the Apache Kafka broker jars, downloaded once with Maven into
#      $ATOMICKAFKA_HOME (default ~/.cache/atomickafka); with `eval`, Spark's Kafka jars too.
# pip runs again only when pyproject.toml changed or a new extra is asked for.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { echo "bootstrap: $*" >&2; }

python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

if [ ! -x .venv/bin/python ]; then
  py=""
  for cand in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
    if [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 && python_ok "$cand"; then
      py="$cand"
      break
    fi
  done
  if [ -z "$py" ]; then
    say "need Python >= 3.11 on PATH (or PYTHON=/path/to/python3.11)"
    exit 2
  fi
  say "creating .venv with $("$py" --version 2>&1)"
  "$py" -m venv .venv
fi
if ! python_ok .venv/bin/python; then
  say ".venv runs Python < 3.11; delete .venv and run again"
  exit 2
fi

# Extras wanted now, merged with those installed before for the same pyproject.toml.
stamp=.venv/.atomickafka-installed
digest=$(.venv/bin/python -c \
  'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest())')
installed=""
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$digest" ]; then
  installed=$(sed -n 2p "$stamp")
fi
wanted="test dev $*"
missing=""
for extra in $wanted; do
  case " $installed " in *" $extra "*) ;; *) missing="$missing $extra" ;; esac
done
if [ -n "$missing" ]; then
  all=$(echo "$installed $wanted" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
  joined=$(echo $all | tr ' ' ',')
  say "pip install -e .[$joined]"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$joined]"
  printf '%s\n%s\n' "$digest" "$all" >"$stamp"
fi

lib=$(.venv/bin/atomickafka broker fetch | tail -n1)
say "Kafka jars ready in $lib"
if tools=$(.venv/bin/atomickafka broker fetch --tools | head -n1); then
  say "Kafka's command-line tools ready in $tools (atomickafka broker tool NAME)"
else
  say "warning: could not fetch Kafka's command-line tools; atomickafka broker tool cannot run"
fi
# the Kafka Streams baseline of bench and eval (its integration test needs it too)
if streams=$(.venv/bin/atomickafka broker fetch --streams | head -n1); then
  say "Kafka Streams baseline built in $streams"
else
  say "warning: could not build the Kafka Streams baseline; bench and eval cannot run it"
fi
case " $* " in
  *" eval "*)
    if spark_lib=$(.venv/bin/atomickafka broker fetch --spark | tail -n1); then
      say "Spark Kafka connector jars ready in $spark_lib"
    else
      say "warning: could not fetch Spark's Kafka connector; Spark cannot read Kafka"
    fi
    ;;
esac
