#!/usr/bin/env bash
# Every broken variant of the protocol must be caught by `cnpool check`:
# exit 1 with a counterexample trace (docs/model-checking.md, "Broken
# variants"). Each runs on the tiny configuration that shows it.
set -euo pipefail
failed=0
while read -r config variant; do
  set +e
  out=$(cnpool check --config "$config" --variant "$variant" --timeout 60 2>&1)
  status=$?
  set -e
  if [ "$status" -ne 1 ] || ! grep -q '^# shortest path: [0-9]* actions' <<<"$out"; then
    echo "variant $variant on $config: exit $status, expected 1 with a trace:" >&2
    echo "$out" >&2
    failed=1
  else
    echo "variant $variant on $config: caught, $(grep -m 1 '^VIOLATION' <<<"$out"); $(grep -m 1 '^# shortest path' <<<"$out" | cut -c3-)"
  fi
done <<'VARIANTS'
race unguarded-acquire
pair lost-without-live-read
pair adopt-keeps-extras
prebound store-from-claim
forged-labels owner-labels-from-spec
VARIANTS
exit "$failed"
