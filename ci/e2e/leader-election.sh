#!/usr/bin/env bash
# Two `cnpool operator` replicas with Lease leader election against a real
# kube-apiserver (the Lease needs server-side apply), beside
# `cnpool dev --no-operator --cluster` as the node side:
# - one leads, and only the leader writes anything but the Lease;
# - SIGKILL of the leader: the other takes over within the lease duration
#   plus 10 s, and claims created after that are bound.
# Needs `cnpool`, kubectl, curl on PATH and KUBECONFIG naming the server.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"

ns=leader-$$
lease_seconds=6
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done 2>/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# wait_for SECONDS COMMAND...: retries COMMAND every 0.2 s until it exits 0.
wait_for() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) >= deadline )) && return 1
    sleep 0.2
  done
}

kubectl create namespace "$ns" >/dev/null
wait_for 30 sh -c "kubectl -n $ns get serviceaccount default -o jsonpath='{.secrets[0].name}' | grep -q ."
cnpool crd | kubectl apply -f - >/dev/null 2>&1

cnpool dev --no-operator --cluster "$KUBECONFIG" --hakeeper-listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
pids+=($!)
wait_for 30 grep -q 'HAKeeper (morpc) on' "$work/dev.log"
discovery=$(sed -n 's/^cnpool dev: HAKeeper (morpc) on \([^;]*\);.*/\1/p' "$work/dev.log")

start_operator() {  # NAME PROBE_PORT
  cnpool operator --namespace "$ns" --hakeeper-discovery "$discovery" --identity "$1" \
    --lease-namespace "$ns" --lease-duration "${lease_seconds}s" --probe-listen "127.0.0.1:$2" \
    >"$work/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
}
start_operator alpha 18081
start_operator beta 18082
port_alpha=18081
port_beta=18082

holder() { kubectl -n "$ns" get lease cnpool-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
has_holder() { [[ $(holder) == alpha || $(holder) == beta ]]; }
check "one replica holds the lease" wait_for 30 has_holder
leader=$(holder)
if [[ $leader == alpha ]]; then standby=beta; else standby=alpha; fi
leader_port_var=port_$leader; standby_port_var=port_$standby
leader_port=${!leader_port_var}; standby_port=${!standby_port_var}

kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: core.matrixorigin.io/v1alpha1
kind: CNPool
metadata: {name: mo}
spec:
  podLabels: {tier: standard}
  strategy:
    scaleStrategy: {maxIdle: 1, maxPods: 6}
    drainStrategy: {minDelay: 300ms, timeout: 60s}
  template:
    spec:
      containers: [{name: cn, image: matrixorigin/matrixone:test}]
YAML
claim() {  # NAME
  kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: core.matrixorigin.io/v1alpha1
kind: CNClaim
metadata: {name: $1}
spec:
  poolName: mo
  selector: {matchLabels: {tier: standard}}
YAML
}
bound() { [[ $(kubectl -n "$ns" get cnclaim "$1" -o jsonpath='{.status.phase}' 2>/dev/null) == Bound ]]; }
claim first
check "the leader binds a claim within 30 s" wait_for 30 bound first

metrics() { curl -sf "http://127.0.0.1:$1/metrics"; }
# Writes are every request but get, list and watch; the standby's may only be its Lease's.
standby_writes=$(metrics "$standby_port" | grep '^cnpool_api_requests_total{' \
  | grep -Ev 'verb="(get|list|watch)"' | grep -v 'resource="leases"')
check "the standby wrote nothing but the Lease" expect_eq "" "$standby_writes"
check "the leader reports cnpool_leader 1" expect_match 'cnpool_leader 1' "$(metrics "$leader_port")"
check "the standby reports cnpool_leader 0" expect_match 'cnpool_leader 0' "$(metrics "$standby_port")"
check "the standby is ready (it can take over)" curl -sf "http://127.0.0.1:$standby_port/readyz"

leader_pid_var=pid_$leader
kill -9 "${!leader_pid_var}"
wait "${!leader_pid_var}" 2>/dev/null
killed_at=$(date +%s)
took_over() { [[ $(holder) == "$standby" ]]; }
check "the standby takes the lease within ${lease_seconds} s + 10 s" wait_for $((lease_seconds + 10)) took_over
echo "takeover after $(( $(date +%s) - killed_at )) s"
claim second
check "the new leader binds a claim created after the takeover" wait_for 30 bound second
check "the first claim stayed Bound" bound first

# A loss, so that every metric the new leader has is exercised.
first_pod=$(kubectl -n "$ns" get cnclaim first -o jsonpath='{.spec.podName}')
kubectl -n "$ns" delete pod "$first_pod" --wait=false >/dev/null
rebound() { bound first && [[ $(kubectl -n "$ns" get cnclaim first -o jsonpath='{.spec.podName}') != "$first_pod" ]]; }
check "a claim whose pod was deleted is bound again" wait_for 30 rebound
scrape=$(metrics "$standby_port")
printf '%s\n' "$scrape" | grep -E '^cnpool_' | grep -v '_bucket{' > "$work/metrics.txt"
nonzero() {  # REGEX: some sample matching REGEX has a value above 0
  awk -v re="$1" '$0 ~ re && $NF + 0 > 0 { found = 1 } END { exit !found }' "$work/metrics.txt"
}
check "metrics: reconciles per controller" nonzero '^cnpool_reconciles_total\{controller="CNClaim"\}'
check "metrics: API writes" nonzero '^cnpool_api_requests_total\{verb="patch",resource="pods"'
check "metrics: claim bind latency" nonzero '^cnpool_claim_bind_seconds_count'
check "metrics: lost claims by reason" nonzero '^cnpool_claims_lost_total\{reason="PodDelet(ed|ing)"\}'
check "metrics: pool pods by phase" nonzero '^cnpool_pool_pods\{namespace="'"$ns"'",pool="mo",phase="Bound"\}'
check "metrics: the new leader says so" nonzero '^cnpool_leader '
echo "--- metrics of the new leader (without histogram buckets)"
cat "$work/metrics.txt"

summary
