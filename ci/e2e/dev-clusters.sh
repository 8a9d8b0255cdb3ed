#!/usr/bin/env bash
# Two MatrixOne clusters on `cnpool dev`, as a user tries examples/clusters.yaml
# (issue 26): pool `mo` names LogSet `mo`, pool `mo-b` names LogSet `mo-b`,
# and `cnpool dev` serves one simulated HAKeeper for each.
# - each pool's CN stores are written in its own cluster's HAKeeper;
# - with the second HAKeeper stopped (SIGUSR2), pool mo-b says so
#   (Ready=False HAKeeperUnreachable, naming it) while claims on mo still
#   bind; started again, the claim waiting on mo-b binds.
#
#   dev-clusters.sh            on the embedded API server of `cnpool dev`
#   dev-clusters.sh --cluster  on the cluster KUBECONFIG names (`cnpool dev
#                              --cluster`, in namespace default, where it
#                              puts its LogSets)
# Needs `cnpool`, kubectl and curl on PATH.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"

work=$(mktemp -d)
if [[ ${1:-} == --cluster ]]; then
  where="kube-apiserver"
  dev_args=(--cluster "$KUBECONFIG" --namespace default)
else
  where="embedded"
  port=${CNPOOL_DEV_PORT:-18444}
  export KUBECONFIG="$work/kubeconfig"
  dev_args=(--listen "127.0.0.1:$port" --kubeconfig "$KUBECONFIG")
fi
dev_pid=""
cleanup() {
  if [[ $where == kube-apiserver ]]; then
    # The operator still runs: it releases the pods, retires them and
    # drops the pools' finalizers, so that the next run starts clean.
    kubectl delete cnclaim tenant-on-mo tenant-on-mo-b tenant-on-mo-2 tenant-on-mo-b-2 \
      --ignore-not-found --timeout=60s >/dev/null 2>&1
    kubectl delete cnpool mo mo-b --ignore-not-found --timeout=60s >/dev/null 2>&1
  fi
  [[ -n $dev_pid ]] && { kill "$dev_pid" 2>/dev/null; wait "$dev_pid" 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT

cnpool dev "${dev_args[@]}" --hakeeper-listen 127.0.0.1:0 --second-hakeeper-listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
dev_pid=$!
check "[$where] cnpool dev starts its operator" wait_for 60 grep -q 'operator and simulated node side running' "$work/dev.log"
first=$(sed -n 's/^cnpool dev: HAKeeper (morpc) on \([^;]*\);.*/\1/p' "$work/dev.log")
second=$(sed -n "s/^cnpool dev: second MatrixOne cluster's HAKeeper (morpc) on \([^;]*\);.*/\1/p" "$work/dev.log")
check "[$where] two HAKeepers on two addresses" test -n "$first" -a -n "$second" -a "$first" != "$second"

check "[$where] kubectl apply -f examples/clusters.yaml" kubectl apply -f "$repo/examples/clusters.yaml"
phase() { kubectl get cnclaim "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
bound() { [[ $(phase "$1") == Bound ]]; }
both_bound() { bound tenant-on-mo && bound tenant-on-mo-b; }
check "[$where] the claim on each cluster's pool is Bound within 30 s" wait_for 30 both_bound

# The operator logs each store write with the HAKeeper it went to.
written_to() {  # CLAIM: the HAKeepers its pod's store was written Working in
  local pod
  pod=$(kubectl get cnclaim "$1" -o jsonpath='{.spec.podName}')
  grep "store written from pod pod=$pod " "$work/dev.log" | grep 'state=Working' \
    | sed -n 's/.* cluster=\([^ ]*\) .*/\1/p' | sort -u | paste -sd' '
}
check "[$where] pool mo's store is written in the first cluster's HAKeeper only" \
  expect_eq "$first" "$(written_to tenant-on-mo)"
check "[$where] pool mo-b's store is written in the second cluster's HAKeeper only" \
  expect_eq "$second" "$(written_to tenant-on-mo-b)"

claim() {  # NAME POOL
  kubectl apply -f - >/dev/null <<YAML
apiVersion: core.matrixorigin.io/v1alpha1
kind: CNClaim
metadata: {name: $1}
spec:
  poolName: $2
  selector: {matchLabels: {pool: $2}}
YAML
}
ready() {  # POOL: the status, reason and message of its Ready condition
  kubectl get cnpool "$1" -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.reason} {.message}{end}'
}
bound_reason() {  # CLAIM: the reason of its Bound condition
  kubectl get cnclaim "$1" -o jsonpath='{.status.conditions[?(@.type=="Bound")].reason}'
}

kill -USR2 "$dev_pid"
check "[$where] cnpool dev stops the second HAKeeper" wait_for 10 grep -q 'HAKeeper.* stopped (SIGUSR2' "$work/dev.log"
unreachable() { [[ $(ready mo-b) == "False HAKeeperUnreachable "* ]]; }
check "[$where] pool mo-b turns Ready=False HAKeeperUnreachable within 40 s" wait_for 40 unreachable
check "[$where] its condition names the HAKeeper" expect_match "$second" "$(ready mo-b)"
claim tenant-on-mo-2 mo
claim tenant-on-mo-b-2 mo-b
check "[$where] a new claim on pool mo binds while the other cluster's HAKeeper is down" \
  wait_for 30 bound tenant-on-mo-2
check "[$where] pool mo stays Ready" expect_match '^True ' "$(ready mo)"
waits_for_hakeeper() { [[ $(bound_reason tenant-on-mo-b-2) == HAKeeperUnreachable ]]; }
check "[$where] the new claim on pool mo-b waits, saying HAKeeperUnreachable" wait_for 30 waits_for_hakeeper
check "[$where] ... and is not Bound" expect_eq Pending "$(phase tenant-on-mo-b-2)"

kill -USR2 "$dev_pid"
check "[$where] cnpool dev starts the second HAKeeper again" wait_for 10 grep -q 'HAKeeper.* started again' "$work/dev.log"
check "[$where] the waiting claim on pool mo-b binds within 60 s" wait_for 60 bound tenant-on-mo-b-2
check "[$where] its store is written in the second cluster's HAKeeper" \
  expect_eq "$second" "$(written_to tenant-on-mo-b-2)"
ready_again() { [[ $(ready mo-b) == "True "* ]]; }
check "[$where] pool mo-b is Ready again" wait_for 30 ready_again

summary
