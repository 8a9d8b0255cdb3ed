#!/usr/bin/env bash
# The CRDs against a real kube-apiserver: accepted as structural schemas,
# the Go operator's example objects accepted, nothing of a Go-operator-shaped
# claim pruned, printer columns and the scale subresource working.
# Needs KUBECONFIG pointing at the server (ci/kube/start.sh) and `cnpool` on PATH.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"
ns=cnpool-foundation
k() { kubectl -n "$ns" "$@"; }

kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null 2>&1
kubectl create namespace "$ns" >/dev/null

check "cnpool crd is accepted by the API server" sh -c 'cnpool crd | kubectl apply -f -'
check "all three CRDs become Established" kubectl wait --for condition=Established --timeout=60s \
  crd/cnpools.core.matrixorigin.io crd/cnclaims.core.matrixorigin.io crd/cnclaimsets.core.matrixorigin.io
check "the schemas are structural (no NonStructuralSchema condition)" sh -c \
  "! kubectl get crd -o jsonpath='{range .items[*]}{.status.conditions[*].type}{\"\\n\"}{end}' | grep -q NonStructuralSchema"

check "the Go operator's example CNClaim is accepted" k apply -f "$repo/examples/claim.yaml"
check "the Go operator's example CNClaimSet is accepted" k apply -f "$repo/examples/claimset.yaml"

header=$(k get cnclaims 2>&1 | head -n 1)
check "kubectl get cnclaims shows the Pod and Phase columns" expect_match '^NAME +POD +PHASE +POOL +AGE$' "$header"
wide=$(k get cnclaims -o wide 2>&1 | head -n 1)
check "-o wide adds Node and Owner" expect_match 'NODE +OWNER$' "$wide"
check "short names resolve" k get cncl,cncs,cnpl

check "kubectl scale cnclaimset test --replicas=3" k scale cnclaimset test --replicas=3
check "scaling changed spec.replicas" expect_eq 3 "$(k get cnclaimset test -o jsonpath='{.spec.replicas}')"

# A claim exactly as the Go operator leaves one mid-migration: the API server
# prunes fields the schema does not know, so reading it back unchanged shows
# the schema covers all of them (including status.store.string).
spec='{"podName":"cn-8fqpx","nodeName":"node-3","sourcePod":{"podName":"cn-glhd9","nodeName":"node-1"},
 "selector":{"matchLabels":{"pool":"default"},"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]},
 "cnLabels":[{"key":"account","values":["acc1"]}],"ownerName":"tenant",
 "additionalPodLabels":{"tenant.example.com/id":"acc1"},"poolName":"default"}'
status='{"phase":"Bound","boundTime":"2026-05-14T05:12:31Z",
 "store":{"serviceID":"62333133-3462-6162-3339-633436306439","lockServiceAddress":"a:6003","pipelineServiceAddress":"a:6005",
  "sqlAddress":"a:6001","queryAddress":"a:19998","workState":1,"labels":[{"key":"account","values":["acc1"]}],
  "boundTime":"2026-05-14T21:40:00Z","string":"cn-8fqpx","podName":"cn-8fqpx","podUID":"u-1"},
 "migrate":{"source":{"connections":3,"pipelines":1,"replicas":0}},
 "conditions":[{"type":"Bound","status":"True","reason":"Acquired","message":"bound","lastTransitionTime":"2026-05-14T05:12:31Z"}],
 "observedGeneration":1}'
printf '{"apiVersion":"core.matrixorigin.io/v1alpha1","kind":"CNClaim","metadata":{"name":"go-shaped"},"spec":%s}' "$spec" \
  | k create -f - >/dev/null
check "status of a Go-shaped claim is written through /status" \
  k patch cnclaim go-shaped --subresource=status --type=merge -p "{\"status\":$status}"
stored=$(k get cnclaim go-shaped -o json)
check "no spec field of a Go-shaped claim is pruned" \
  expect_eq "$(jq -S . <<<"$spec")" "$(jq -S .spec <<<"$stored")"
check "no status field of a Go-shaped claim is pruned (status.store.string kept)" \
  expect_eq "$(jq -S . <<<"$status")" "$(jq -S .status <<<"$stored")"
check "the Pod and Phase columns show the bound claim" \
  expect_match 'go-shaped +cn-8fqpx +Bound +default' "$(k get cnclaim go-shaped --no-headers)"

check "a CNPool with a Go-shaped template is accepted" k apply -f - <<'YAML'
apiVersion: core.matrixorigin.io/v1alpha1
kind: CNPool
metadata: {name: default}
spec:
  podLabels: {pool: default}
  strategy:
    scaleStrategy: {maxIdle: 2, maxPods: 10}
    drainStrategy: {timeout: 30m, minDelay: 15s}
  template:
    image: matrixorigin/matrixone:2.1.0
    replicas: 0
    serviceType: ClusterIP
  deps:
    logSet: {metadata: {name: mo, namespace: default}, spec: {replicas: 3}}
YAML
check "kubectl get cnpool shows the Idle, Bound, Pending, Max and Ready columns" \
  expect_match '^NAME +IDLE +BOUND +PENDING +MAX +READY +AGE' "$(k get cnpool default | head -1)"
check "the Max column shows maxPods (no operator runs: the status columns are empty)" \
  expect_match '^default +10 ' "$(k get cnpool default --no-headers)"
check "-o wide adds Draining and Revision" \
  expect_match '^NAME +IDLE +BOUND +PENDING +MAX +READY +AGE +DRAINING +REVISION' "$(k get cnpool default -o wide | head -1)"
refused=$(k patch cnpool default --type=merge -p '{"spec":{"strategy":{"drainStrategy":{"timeout":"ten minutes"}}}}' 2>&1)
check "an ill-formed duration is refused by the schema, naming the field" \
  expect_match 'Invalid value.*spec.strategy.drainStrategy.timeout' "$refused"

kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1
summary
