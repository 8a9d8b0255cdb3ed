#!/usr/bin/env bash
# Runs `cnpool bench all` (B1 to B6, then the table of every target) with a
# throwaway kube-apiserver 1.20 + etcd for B2 and B6, on ports of its own so that a
# CI cluster can run beside it. Needs ci/kube/build.sh's cache and a release
# build; docs/benchmarks.md holds the figures of a run.
#
#   ci/bench/all.sh [JSON-FILE]     (default target/bench-all.json)
set -euo pipefail
cd "$(dirname "$0")/../.."
json=${1:-target/bench-all.json}

export CNPOOL_KUBE_RUN=${CNPOOL_KUBE_RUN:-/tmp/cnpool-kube-bench}
export CNPOOL_KUBE_PORT=${CNPOOL_KUBE_PORT:-27443}
export CNPOOL_ETCD_PORT=${CNPOOL_ETCD_PORT:-24790}

bash ci/kube/build.sh >/dev/null
cargo build --release --locked -p cnpool
trap 'bash ci/kube/stop.sh' EXIT
kubeconfig=$(bash ci/kube/start.sh | tail -n 1)
./target/release/cnpool bench all --kubeconfig "$kubeconfig" --json "$json"
echo "JSON: $json"
