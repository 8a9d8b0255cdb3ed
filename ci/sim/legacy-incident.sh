#!/usr/bin/env bash
# The simulator's model of the Go operator must reproduce the freetier-01
# incident's symptoms: two claims Bound to one pod (I1), claims Bound to pods
# or stores that are gone (I2) and a reconcile storm (I5). `cnpool sim` exits
# 1 when it finds violations; this checks it found those three.
set -euo pipefail
seeds=${CNPOOL_SIM_SEEDS:-20}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
cnpool sim --scenario scenarios/freetier-01.yaml --controller legacy --seeds "$seeds" --json >"$out" || status=$?
if [ "$status" -ne 1 ]; then
  echo "expected cnpool sim to exit 1 (violations found), got $status" >&2
  exit 1
fi
for invariant in I1 I2 I5; do
  found=$(grep -o "\"$invariant\": *[0-9]*" "$out" | head -n 1 | grep -o '[0-9]*$' || true)
  if [ -z "$found" ] || [ "$found" -eq 0 ]; then
    echo "the legacy model showed no $invariant violation in $seeds seeds" >&2
    exit 1
  fi
  echo "legacy model, $seeds seeds: $invariant violated $found times"
done
