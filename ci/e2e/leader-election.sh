#!/usr/bin/env bash
# Two `cnpool operator` replicas with Lease leader election against a real
# kube-apiserver (the Lease needs server-side apply), beside
# `cnpool dev --no-operator --cluster` as the node side:
# - one leads, and only the leader writes anything but the Lease;
# - SIGKILL of the leader: the other takes over within the lease duration
#   plus 10 s, and claims created after that are bound;
# - the new leader's /metrics has every metric family docs/operator.md
#   lists, its /healthz passes, and beta's JSON log lines are flat.
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

kubectl create namespace "$ns" >/dev/null
wait_for 30 sh -c "kubectl -n $ns get serviceaccount default -o jsonpath='{.secrets[0].name}' | grep -q ."
cnpool crd | kubectl apply -f - >/dev/null 2>&1

cnpool dev --no-operator --cluster "$KUBECONFIG" --hakeeper-listen 127.0.0.1:0 --second-hakeeper-listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
dev_pid=$!
pids+=($dev_pid)
wait_for 30 grep -q 'HAKeeper (morpc) on' "$work/dev.log"
discovery=$(sed -n 's/^cnpool dev: HAKeeper (morpc) on \([^;]*\);.*/\1/p' "$work/dev.log")

start_operator() {  # NAME PROBE_PORT [FLAG...]
  local name=$1 port=$2; shift 2
  cnpool operator --namespace "$ns" --hakeeper-discovery "$discovery" --identity "$name" \
    --lease-namespace "$ns" --lease-duration "${lease_seconds}s" --probe-listen "127.0.0.1:$port" "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
}
start_operator alpha 18081
start_operator beta 18082 --log-format json
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
  template: {image: matrixorigin/matrixone:1.2.0}
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

# A loss, so that every metric the new leader has is exercised. The pool
# names its pods by ordinal, so the replacement may have the deleted pod's
# name: the pod's UID tells them apart, and the loss's reason is PodReplaced
# when the claim controller reads the name only after the replacement exists
# (PodDeleted or PodDeleting when it reads it before).
first_pod=$(kubectl -n "$ns" get cnclaim first -o jsonpath='{.spec.podName}')
first_pod_uid=$(kubectl -n "$ns" get cnclaim first -o jsonpath='{.status.store.podUID}')
kubectl -n "$ns" delete pod "$first_pod" --wait=false >/dev/null
rebound() {
  local uid
  uid=$(kubectl -n "$ns" get cnclaim first -o jsonpath='{.status.store.podUID}')
  bound first && [[ -n $uid && $uid != "$first_pod_uid" ]]
}
check "a claim whose pod was deleted is bound again" wait_for 30 rebound
scrape=$(metrics "$standby_port")
printf '%s\n' "$scrape" | grep -E '^cnpool_' | grep -v '_bucket{' > "$work/metrics.txt"
nonzero() {  # REGEX: some sample matching REGEX has a value above 0
  awk -v re="$1" '$0 ~ re && $NF + 0 > 0 { found = 1 } END { exit !found }' "$work/metrics.txt"
}
check "metrics: reconciles per controller" nonzero '^cnpool_reconciles_total\{controller="CNClaim"\}'
check "metrics: API writes" nonzero '^cnpool_api_requests_total\{verb="patch",resource="pods"'
check "metrics: claim bind latency" nonzero '^cnpool_claim_bind_seconds_count'
check "metrics: lost claims by reason" nonzero '^cnpool_claims_lost_total\{reason="Pod(Deleted|Deleting|Replaced)"\}'
check "metrics: the one loss is counted once" expect_eq 1 \
  "$(awk '/^cnpool_claims_lost_total\{/ { n += $NF } END { print n + 0 }' "$work/metrics.txt")"
check "metrics: pool pods by phase" nonzero '^cnpool_pool_pods\{namespace="'"$ns"'",pool="mo",phase="Bound"\}'
check "metrics: the new leader says so" nonzero '^cnpool_leader '
check "metrics: pending claims per pool" grep -q '^cnpool_pool_pending_claims{namespace="'"$ns"'",pool="mo"} ' "$work/metrics.txt"
check "metrics: build info" grep -Eq '^cnpool_build_info\{version="[0-9][^"]*"\} 1$' "$work/metrics.txt"
check "metrics: morpc calls to HAKeeper by method" nonzero '^cnpool_morpc_requests_total\{method="GetClusterDetails"\}'
check "metrics: every API request names its resource" expect_eq "" \
  "$(grep '^cnpool_api_requests_total{' "$work/metrics.txt" | grep -E 'resource="(other)?"')"
# HAKeeper stops for a while (SIGUSR1 to the dev side), so that failed
# HAKeeper calls are counted, then starts again.
kill -USR1 "$dev_pid"
morpc_errors() { metrics "$standby_port" | grep -q '^cnpool_morpc_request_errors_total{method="GetClusterDetails"'; }
check "metrics: failed HAKeeper calls by method and error while it is down" wait_for 40 morpc_errors
kill -USR1 "$dev_pid"
scrape=$(metrics "$standby_port")
# Each family docs/operator.md lists, by its OpenMetrics TYPE line. A family
# appears with its first sample: `cnpool_reconcile_errors`,
# `cnpool_api_conflicts` and `cnpool_migrations` (counts of events this run
# may not have) are left out.
for family in cnpool_reconciles cnpool_reconcile_duration_seconds cnpool_queue_depth \
  cnpool_api_requests cnpool_claim_bind_seconds cnpool_claims_lost cnpool_pool_pods \
  cnpool_pool_pending_claims cnpool_morpc_requests cnpool_morpc_request_errors cnpool_leader cnpool_build_info \
  cnpool_migrations_in_flight cnpool_migration_seconds \
  process_cpu_seconds process_resident_memory_bytes process_virtual_memory_bytes process_open_fds \
  process_max_fds process_start_time_seconds; do
  check "metrics: family $family" expect_match "# TYPE $family " "$scrape"
done
check "metrics: the process's memory and start time are real" \
  awk '/^process_resident_memory_bytes / && $2 > 1e6 { r = 1 } /^process_start_time_seconds / && $2 > 1.7e9 { s = 1 }
       END { exit !(r && s) }' <<<"$scrape"
check "the new leader is healthy (a HAKeeper outage wedges no controller)" \
  curl -sf "http://127.0.0.1:$standby_port/healthz"
flat_json() {  # every line of beta's log is one flat JSON object with ts, level and msg
  python3 -c '
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
assert lines, "no log lines"
for line in lines:
    assert {"ts", "level", "msg"} <= line.keys(), line
    assert not any(isinstance(value, dict) for value in line.values()), line
' "$work/beta.log"
}
check "beta's JSON log lines are flat, with ts, level and msg" flat_json
echo "--- metrics of the new leader (without histogram buckets)"
cat "$work/metrics.txt"

summary
