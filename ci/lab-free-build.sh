#!/usr/bin/env bash
# The operator image is built without the lab (Dockerfile: `cargo build -p
# cnpool --release --locked --no-default-features`). Its dependency graph
# must hold none of the lab's crates, nor tokio's `test-util` (the
# simulator's paused clock), nor the controllers' `sabotage` (the broken
# variants the simulator and the model checker must catch), or a lab
# dependency has leaked into the operator. Keep the arguments here those of
# the Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."
build=(-p cnpool --locked --no-default-features)

leaked=0
packages=$(cargo tree "${build[@]}" -e normal --prefix none --format '{p}')
for crate in cnpool-sim cnpool-world cnpool-apiserver cnpool-check; do
  if grep -q "^$crate v" <<<"$packages"; then
    echo "lab crate $crate is in the operator's build" >&2
    leaked=1
  fi
done
# Inverted on tokio: every feature of tokio that is on, and who turns it on.
features=$(cargo tree "${build[@]}" -e normal,features -i tokio)
if grep -q 'tokio feature "test-util"' <<<"$features"; then
  echo "tokio's test-util is in the operator's build; turned on by:" >&2
  grep -m 1 -A 1 'tokio feature "test-util"' <<<"$features" | tail -n 1 >&2
  leaked=1
fi
features=$(cargo tree "${build[@]}" -e normal,features -i cnpool-controllers)
if grep -q 'cnpool-controllers feature "sabotage"' <<<"$features"; then
  echo "the controllers' sabotage is in the operator's build; turned on by:" >&2
  grep -m 1 -A 1 'cnpool-controllers feature "sabotage"' <<<"$features" | tail -n 1 >&2
  leaked=1
fi
if [ "$leaked" -ne 0 ]; then
  exit 1
fi
echo "the operator's build (${build[*]}) has no lab crate, no tokio test-util and no sabotage"
