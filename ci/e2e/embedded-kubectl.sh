#!/usr/bin/env bash
# kubectl against `cnpool dev` (the embedded API server over HTTP, with the
# operator and the simulated node side): what a newcomer does on the first
# day must work as on a real cluster.
# Needs `cnpool` and kubectl (1.32) on PATH; KUBECTL_120 may name kubectl 1.20.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"

port=${CNPOOL_DEV_PORT:-18443}
work=$(mktemp -d)
export KUBECONFIG="$work/kubeconfig"
cnpool dev --listen "127.0.0.1:$port" --kubeconfig "$KUBECONFIG" >"$work/dev.log" 2>&1 &
dev_pid=$!
trap 'kill $dev_pid 2>/dev/null; wait $dev_pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

check "cnpool crd | kubectl apply -f - (validating)" sh -c 'cnpool crd | kubectl apply -f -'
check "kubectl apply -f examples/ (a pool, a claim, a claim set)" kubectl apply -f "$repo/examples/"
bound=""
for _ in $(seq 1 300); do
  bound=$(kubectl get cnclaim test -o jsonpath='{.status.phase}' 2>/dev/null)
  [[ $bound == Bound ]] && break
  sleep 0.1
done
check "the example claim is Bound within 30 s" expect_eq Bound "$bound"
check "kubectl get cnclaims has the Pod, Phase, Pool and Age columns" \
  expect_match '^NAME +POD +PHASE +POOL +AGE' "$(kubectl get cnclaims 2>&1 | head -n 1)"
check "-o wide adds Node and Owner" expect_match 'NODE +OWNER$' "$(kubectl get cnclaims -o wide 2>&1 | head -n 1)"
check "-o yaml prints the object" expect_match 'kind: CNClaim' "$(kubectl get cnclaim test -o yaml 2>&1)"
check "kubectl get cnpools shows Idle, Bound, Pending, Max, Ready" \
  expect_match '^NAME +IDLE +BOUND +PENDING +MAX +READY +AGE$' "$(kubectl get cnpools 2>&1 | head -n 1)"
check "-o wide adds Draining and Revision" \
  expect_match '^NAME +IDLE +BOUND +PENDING +MAX +READY +AGE +DRAINING +REVISION$' \
  "$(kubectl get cnpools -o wide 2>&1 | head -n 1)"
check "the example pool shows maxPods 10 and Ready True" \
  expect_match '^default +[0-9]+ +[0-9]+ +[0-9]+ +10 +True ' "$(kubectl get cnpools --no-headers 2>&1)"
check "-o wide shows the pool's template revision" \
  expect_match "$(kubectl get cnpool default -o jsonpath='{.status.currentRevision}')\$" \
  "$(kubectl get cnpool default -o wide --no-headers 2>&1)"
check "kubectl get cnclaimsets shows Ready, then Replicas" \
  expect_match '^NAME +READY +REPLICAS +AGE$' "$(kubectl get cnclaimsets 2>&1 | head -n 1)"

unknown=$(kubectl apply -f - 2>&1 <<'YAML'
apiVersion: core.matrixorigin.io/v1alpha1
kind: CNClaim
metadata: {name: typo}
spec:
  selector: {matchLabels: {pool: default}}
  cnLables: [{key: role, values: [x]}]
YAML
)
check "apply refuses an unknown field (server-side strict validation)" expect_match 'unknown field "spec.cnLables"' "$unknown"

check "kubectl label" kubectl label cnclaim test tier=gold
check "-l selects by label" expect_match '^test ' "$(kubectl get cnclaims -l tier=gold --no-headers 2>&1)"
check "-l with a set-based selector excludes" expect_match 'No resources found' "$(kubectl get cnclaims -l 'tier in (silver)' 2>&1)"
check "kubectl patch --type merge" kubectl patch cnclaim test --type merge -p '{"spec":{"ownerName":"alice"}}'
check "the patch shows under -o wide" expect_match 'alice$' "$(kubectl get cnclaim test -o wide --no-headers 2>&1)"
check "kubectl scale cnclaimset" kubectl scale cnclaimset test --replicas=4
check "scale changed spec.replicas" expect_eq 4 "$(kubectl get cnclaimset test -o jsonpath='{.spec.replicas}')"
ready=""
for _ in $(seq 1 300); do
  ready=$(kubectl get cnclaimset test -o jsonpath='{.status.readyReplicas}' 2>/dev/null)
  [[ $ready == 4 ]] && break
  sleep 0.1
done
check "the scaled set has 4 ready claims within 30 s" expect_eq 4 "$ready"
# The pool scaled out several times; the newest pod is named by an Event of
# its own, not hidden under the first scale-out's text.
newest=$(kubectl get pods -l pool.matrixorigin.io/pool-name=default --sort-by=.metadata.creationTimestamp \
  -o jsonpath='{.items[-1:].metadata.name}')
check "kubectl describe cnpool names the pods of the last scale-out" \
  expect_match "ScaledOut +.*created pods .*$newest([^0-9]|\$)" "$(kubectl describe cnpool default 2>&1)"

# An Event as kube-rs's recorder writes it (events.k8s.io/v1) shows in describe.
kubectl create -f - >/dev/null 2>&1 <<YAML
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: test.bound, namespace: default}
eventTime: "2026-11-29T10:00:00.000000Z"
regarding: {apiVersion: core.matrixorigin.io/v1alpha1, kind: CNClaim, name: test, namespace: default,
  uid: "$(kubectl get cnclaim test -o jsonpath='{.metadata.uid}')"}
reason: Bound
note: bound to cn-0
type: Normal
action: Acquire
reportingController: cnpool
reportingInstance: cnpool-0
YAML
check "kubectl describe shows the claim's Events" expect_match 'Normal +Bound .*bound to cn-0' "$(kubectl describe cnclaim test 2>&1)"

# -w streams changes as they happen.
kubectl get cnclaims -w --no-headers >"$work/watch.out" 2>&1 &
watch_pid=$!
sleep 1
kubectl label cnclaim test streamed=yes >/dev/null
sleep 1
kill $watch_pid 2>/dev/null
check "kubectl get -w streams a change as it happens" expect_match 'test +default-[0-9]+ +Bound' "$(cat "$work/watch.out")"

# delete returns once the object is gone, and waits on finalizers.
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: held, finalizers: [example.com/hold]}
YAML
kubectl delete configmap held --timeout=30s >"$work/delete.out" 2>&1 &
delete_pid=$!
sleep 2
check "kubectl delete waits while a finalizer holds the object" kill -0 $delete_pid
kubectl patch configmap held --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null
wait $delete_pid
check "kubectl delete returns once the finalizer is gone" expect_match 'deleted' "$(cat "$work/delete.out")"

pod=$(kubectl get cnclaim test -o jsonpath='{.spec.podName}')
check "kubectl delete cnclaim returns once the operator has released the pod" kubectl delete cnclaim test --timeout=30s
check "the claim is gone" expect_match 'NotFound' "$(kubectl get cnclaim test 2>&1)"
check "its pod is no longer Bound" expect_match '^(Draining|Idle)$' \
  "$(kubectl get pod "$pod" -o jsonpath='{.metadata.labels.pool\.matrixorigin\.io/phase}')"

if [[ -n ${KUBECTL_120:-} ]]; then
  check "kubectl 1.20: get" "$KUBECTL_120" get cnclaimsets
  check "kubectl 1.20: apply --validate=false" "$KUBECTL_120" apply --validate=false -f "$repo/examples/claim.yaml"
  check "kubectl 1.20: get shows the columns" expect_match '^NAME +POD +PHASE' "$("$KUBECTL_120" get cnclaims 2>&1 | head -n 1)"
  check "kubectl 1.20: get cnpools shows the columns" \
    expect_match '^NAME +IDLE +BOUND +PENDING +MAX +READY +AGE$' "$("$KUBECTL_120" get cnpools 2>&1 | head -n 1)"
  check "kubectl 1.20: -o wide adds Draining and Revision" \
    expect_match 'READY +AGE +DRAINING +REVISION$' "$("$KUBECTL_120" get cnpools -o wide 2>&1 | head -n 1)"
  check "kubectl 1.20: the pool's values" \
    expect_match '^default +[0-9]+ +[0-9]+ +[0-9]+ +10 +True ' "$("$KUBECTL_120" get cnpools --no-headers 2>&1)"
  check "kubectl 1.20: delete" "$KUBECTL_120" delete cnclaim test
fi
summary
