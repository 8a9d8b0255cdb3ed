#!/usr/bin/env bash
# Shows that every verb of deploy/rbac's rules is needed, and that they are
# enough: runs a test as the operator's ServiceAccount with the full rules,
# then once with each verb of each rule taken away, and prints which test
# steps break. Not part of CI (it runs the test once per verb).
#
#   ci/rbac-rules.sh                  # the probe (below) as the test
#   ci/rbac-rules.sh --with-operator  # the real operator's scenario (below)
#   ci/rbac-rules.sh TEST_COMMAND...  # any test
#
# Needs KUBECONFIG pointing at a server with an admin identity
# (ci/kube/start.sh), kubectl and jq. The test command runs with
# CNPOOL_OPERATOR_KUBECONFIG (the ServiceAccount's kubeconfig, from
# ci/e2e/rbac-kubeconfig.sh), CNPOOL_OPERATOR_NAMESPACE (its namespace, where
# the Lease goes) and CNPOOL_TEST_NAMESPACE (where it may create pools,
# claims and pods as admin); it fails when a step fails and prints one line
# per failed step, "FAIL <step> -- <why>".
#
# The probe (`--probe`): as the ServiceAccount, the same API requests the
# operator sends — the resources, verbs, subresources and patch types of
# crates/controllers and of its Lease — one step each, plus requests the
# operator must NOT be able to make. It shows which request needs which
# verb. The scenario (`--scenario`, needs `cnpool`): the operator itself, as
# the ServiceAccount, binding and releasing a claim; it shows the rules are
# enough for the code as it is, not only for the requests listed here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
op_ns=${CNPOOL_OPERATOR_NAMESPACE:-cnpool-rbac}
test_ns=${CNPOOL_TEST_NAMESPACE:-cnpool-rbac-test}
log() { printf '[rbac-rules] %s\n' "$*" >&2; }

# --- the probe -------------------------------------------------------------
probe() {
  local failed=0
  local sa=${CNPOOL_OPERATOR_KUBECONFIG:?} ns=$test_ns
  admin() { kubectl -n "$ns" "$@"; }
  as_op() { KUBECONFIG=$sa kubectl -n "$ns" "$@"; }
  # The Lease is in the operator's own namespace.
  as_lease() { KUBECONFIG=$sa kubectl -n "$op_ns" "$@"; }
  # patch_as_op PATH TYPE BODY: one PATCH request, as the controllers send
  # it. Not `kubectl patch`, which first GETs the object and so would need
  # a `get` the operator does not have (nor use) for some resources.
  local token server ca
  token=$(kubectl config view --kubeconfig "$sa" --raw -o jsonpath='{.users[0].user.token}')
  server=$(kubectl config view --kubeconfig "$sa" --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(mktemp)
  kubectl config view --kubeconfig "$sa" --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$ca"
  patch_as_op() {
    curl -sS --fail-with-body --cacert "$ca" -H "Authorization: Bearer $token" -X PATCH \
      -H "Content-Type: $2" --data "$3" "$server$1" -o /dev/null -w '%{http_code}\n'
  }
  local json=application/json-patch+json merge=application/merge-patch+json
  local pods=/api/v1/namespaces/$ns/pods pools=/apis/core.matrixorigin.io/v1alpha1/namespaces/$ns/cnpools
  # step NAME COMMAND...: the operator's request must succeed.
  step() {
    local name=$1; shift
    local out
    if out=$("$@" 2>&1); then printf 'ok   %s\n' "$name"
    else failed=1; printf 'FAIL %s -- %s\n' "$name" "$(tail -1 <<<"$out")"; fi
  }
  # refused NAME COMMAND...: the request must be forbidden.
  refused() {
    local name=$1; shift
    local out
    if out=$("$@" 2>&1); then failed=1; printf 'FAIL %s -- allowed, should be forbidden\n' "$name"
    elif grep -q Forbidden <<<"$out"; then printf 'ok   %s (forbidden)\n' "$name"
    else failed=1; printf 'FAIL %s -- %s\n' "$name" "$(tail -1 <<<"$out")"; fi
  }
  local sel=pool.matrixorigin.io/pool-name
  admin delete pod,service,cnclaim,cnclaimset,cnpool,events.events.k8s.io --all --wait=false >/dev/null 2>&1
  kubectl -n "$op_ns" delete lease cnpool-operator --ignore-not-found >/dev/null 2>&1
  for kind in pod cnclaim cnclaimset cnpool; do
    for o in $(admin get "$kind" -o name 2>/dev/null); do
      admin patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
    done
  done
  admin apply -f "$repo/examples/pool.yaml" >/dev/null
  admin apply -f "$repo/examples/claim.yaml" >/dev/null
  # With no replicas, so that no operator elsewhere makes members for it.
  admin apply -f "$repo/examples/claimset.yaml" >/dev/null
  admin scale cnclaimset test --replicas=0 >/dev/null
  local pool_uid set_uid
  pool_uid=$(admin get cnpool default -o jsonpath='{.metadata.uid}')
  set_uid=$(admin get cnclaimset test -o jsonpath='{.metadata.uid}')

  # Informers (controllers/src/lib.rs): list then watch, across namespaces.
  step "list pool pods in all namespaces" as_op get pods -A -l "$sel" -o name
  step "watch pool pods in all namespaces" \
    as_op get --raw "/api/v1/pods?labelSelector=$sel&watch=true&timeoutSeconds=1"
  step "list cnclaims in all namespaces" as_op get cnclaims -A -o name
  step "watch cnclaims in all namespaces" \
    as_op get --raw "/apis/core.matrixorigin.io/v1alpha1/cnclaims?watch=true&timeoutSeconds=1"
  step "list cnclaimsets in all namespaces" as_op get cnclaimsets -A -o name
  step "watch cnclaimsets in all namespaces" \
    as_op get --raw "/apis/core.matrixorigin.io/v1alpha1/cnclaimsets?watch=true&timeoutSeconds=1"
  step "list cnpools in all namespaces" as_op get cnpools -A -o name
  step "watch cnpools in all namespaces" \
    as_op get --raw "/apis/core.matrixorigin.io/v1alpha1/cnpools?watch=true&timeoutSeconds=1"

  # Pool controller (pool/): the headless Service, pods, finalizer, status.
  step "get the pool's headless Service" sh -c \
    "KUBECONFIG=$sa kubectl -n $ns get service default --ignore-not-found"
  step "create the headless Service, owned by its pool" as_op create -f - <<YAML
apiVersion: v1
kind: Service
metadata:
  name: default
  labels: {$sel: default}
  ownerReferences:
  - {apiVersion: core.matrixorigin.io/v1alpha1, kind: CNPool, name: default, uid: $pool_uid, controller: true, blockOwnerDeletion: true}
spec:
  clusterIP: None
  selector: {$sel: default}
  publishNotReadyAddresses: true
YAML
  step "create a pool pod with the cn-draining finalizer" as_op create -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: default-0
  labels: {$sel: default, pool.matrixorigin.io/phase: Unknown}
  finalizers: [matrixorigin.io/cn-draining]
spec:
  containers: [{name: cn, image: matrixorigin/matrixone:2.1.0}]
YAML
  step "add the pool finalizer (replace at the resourceVersion read)" sh -c \
    "kubectl -n $ns get cnpool default -o json | jq '.metadata.finalizers = [\"pool.matrixorigin.io/pool\"]' |
     KUBECONFIG=$sa kubectl -n $ns replace -f -"
  step "replace the pool's status" sh -c \
    "kubectl -n $ns get cnpool default -o json | jq '.status = {replicas: 1}' |
     KUBECONFIG=$sa kubectl -n $ns replace --subresource=status -f -"
  step "remove the pool finalizer (guarded JSON patch)" patch_as_op "$pools/default" $json \
    '[{"op":"test","path":"/metadata/finalizers","value":["pool.matrixorigin.io/pool"]},{"op":"replace","path":"/metadata/finalizers","value":[]}]'

  # Ownership transitions (ownership.rs) and the CN-store controller (store.rs).
  step "get a pod (live read)" as_op get pod default-0 -o name
  step "list pods by claim-uid (live read)" as_op get pods -l pool.matrixorigin.io/claim-uid=x -o name
  step "acquire: JSON patch guarded by test ops" patch_as_op "$pods/default-0" $json \
    '[{"op":"test","path":"/metadata/labels/pool.matrixorigin.io~1phase","value":"Unknown"},{"op":"test","path":"/metadata/labels/pool.matrixorigin.io~1claim-uid","value":null},{"op":"replace","path":"/metadata/labels/pool.matrixorigin.io~1phase","value":"Idle"}]'
  step "cn-store condition: JSON patch of pods/status" patch_as_op "$pods/default-0/status" $json \
    '[{"op":"test","path":"/status/conditions","value":null},{"op":"add","path":"/status/conditions","value":[{"type":"matrixorigin.io/cn-store","status":"True","reason":"StoreRegistered"}]}]'
  step "stats annotations: merge patch" patch_as_op "$pods/default-0" $merge \
    '{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"0"}}}'

  # Claim controller (claim.rs) and the orphan sweep (store.rs).
  step "get a claim (live read)" as_op get cnclaim test -o name
  step "list claims in a namespace (orphan sweep)" as_op get cnclaims -o name
  step "claim finalizer and podName (replace at the resourceVersion read)" sh -c \
    "kubectl -n $ns get cnclaim test -o json | jq '.metadata.finalizers = [\"pool.matrixorigin.io/claim\"] | .spec.podName = \"default-0\"' |
     KUBECONFIG=$sa kubectl -n $ns replace -f -"
  step "replace the claim's status" sh -c \
    "kubectl -n $ns get cnclaim test -o json | jq '.status = {phase: \"Pending\"}' |
     KUBECONFIG=$sa kubectl -n $ns replace --subresource=status -f -"

  # Claim set controller (claim_set.rs): members made and deleted, status.
  step "create a member claim owned by its set" as_op create -f - <<YAML
apiVersion: core.matrixorigin.io/v1alpha1
kind: CNClaim
metadata:
  name: test-0
  labels: {matrixorigin.io/claimset: test, claim.matrixorigin.io/instance-id: "0"}
  ownerReferences:
  - {apiVersion: core.matrixorigin.io/v1alpha1, kind: CNClaimSet, name: test, uid: $set_uid, controller: true, blockOwnerDeletion: true}
spec:
  selector: {matchLabels: {pool: default}}
YAML
  step "delete a member claim" as_op delete cnclaim test-0 --wait=false
  step "replace the claim set's status" sh -c \
    "kubectl -n $ns get cnclaimset test -o json | jq '.status = {replicas: 0, readyReplicas: 0, labelSelector: \"matrixorigin.io/claimset=test\"}' |
     KUBECONFIG=$sa kubectl -n $ns replace --subresource=status -f -"

  # Events (context.rs, kube-runtime's Recorder): create, then patch a repeat.
  step "create an events.k8s.io/v1 Event" as_op create -f - <<YAML
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: test.rbac-probe}
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: cnpool
reportingInstance: cnpool-probe
action: Bind
reason: Bound
type: Normal
note: probe
regarding: {apiVersion: core.matrixorigin.io/v1alpha1, kind: CNClaim, name: test, namespace: $ns}
YAML
  step "patch the Event's series (a repeat)" \
    patch_as_op "/apis/events.k8s.io/v1/namespaces/$ns/events/test.rbac-probe" $merge \
    '{"series":{"count":2,"lastObservedTime":"2026-01-01T00:00:01.000000Z"}}'

  # Retire (pool/mod.rs): delete a pod.
  step "delete a retired pod" as_op delete --raw "$pods/default-0"

  # Leader election, in the operator's namespace only.
  step "create the Lease" as_lease create -f - <<YAML
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: cnpool-operator}
spec: {holderIdentity: probe, leaseDurationSeconds: 15}
YAML
  step "get the Lease" as_lease get lease cnpool-operator -o name
  local leases=/apis/coordination.k8s.io/v1/namespaces/$op_ns/leases
  step "take the Lease (server-side apply)" patch_as_op "$leases/cnpool-operator?fieldManager=cnpool-probe" \
    application/apply-patch+yaml \
    '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","spec":{"holderIdentity":"probe","leaseDurationSeconds":15}}'
  step "renew the Lease (strategic merge patch)" patch_as_op "$leases/cnpool-operator" \
    application/strategic-merge-patch+json '{"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}}'

  # The cutover record (cutover.rs), in the operator's namespace only.
  kubectl -n "$op_ns" delete configmap cnpool-cutover --ignore-not-found >/dev/null 2>&1
  step "read the cutover record (absent)" sh -c \
    "KUBECONFIG=$sa kubectl -n $op_ns get configmap cnpool-cutover --ignore-not-found -o name"
  step "create the cutover record" as_lease create configmap cnpool-cutover --from-literal=cutoverTime=2026-01-01T00:00:00Z
  step "read the cutover record" as_lease get configmap cnpool-cutover -o name

  # What the operator must not do.
  refused "read another ConfigMap of its namespace" as_lease get configmap other
  refused "rewrite the cutover record" as_lease patch configmap cnpool-cutover --type=merge -p '{"data":{"cutoverTime":"2026-01-02T00:00:00Z"}}'
  refused "read Secrets" as_op get secrets
  refused "read ConfigMaps" as_op get configmaps
  refused "update (not patch) a pod" sh -c \
    "kubectl -n $ns get pod -l $sel -o json | jq '.items[0] // {apiVersion:\"v1\",kind:\"Pod\",metadata:{name:\"x\"}}' |
     KUBECONFIG=$sa kubectl -n $ns replace -f -"
  refused "update a CNClaimSet's spec (kubectl scale is the user's)" sh -c \
    "kubectl -n $ns get cnclaimset test -o json | KUBECONFIG=$sa kubectl -n $ns replace -f -"
  refused "delete a CNPool" as_op delete cnpool default --dry-run=server
  refused "delete a Service" as_op delete service default
  refused "read Leases in another namespace" as_op get leases
  refused "read a Lease of another name" as_lease get lease other
  refused "read CRDs" as_op get crds
  refused "replace (not patch) the Lease" sh -c \
    "kubectl -n $op_ns get lease cnpool-operator -o json | KUBECONFIG=$sa kubectl -n $op_ns replace -f -"

  # Leave no finalizer behind, as admin.
  kubectl -n "$op_ns" delete lease cnpool-operator >/dev/null 2>&1
  kubectl -n "$op_ns" delete configmap cnpool-cutover >/dev/null 2>&1
  admin patch pod default-0 --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  admin patch cnclaim test --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  rm -f "$ca"
  return $failed
}

if [[ ${1:-} == --probe ]]; then probe; exit; fi

# --- the scenario ----------------------------------------------------------
# The real thing: `cnpool operator` (CNPOOL_BIN, else `cnpool` on PATH) as
# the ServiceAccount, with leader election, beside `cnpool dev --cluster
# --no-operator` (run as admin: the simulated kubelet and HAKeeper). A pool
# and a claim are created as admin; the claim must be Bound, then the claim
# and the pool must go (the operator releases the pod and drops the
# finalizers), and no API request of the operator may have been refused
# (its /metrics count requests by HTTP status).
scenario() {
  local bin=${CNPOOL_BIN:-cnpool} sa=${CNPOOL_OPERATOR_KUBECONFIG:?} ns=$test_ns
  local hakeeper=127.0.0.1:${CNPOOL_RBAC_HAKEEPER_PORT:-32101} probes=127.0.0.1:${CNPOOL_RBAC_PROBE_PORT:-28080}
  local dir failed=0 dev op i
  dir=$(mktemp -d)
  fail() { failed=1; printf 'FAIL %s -- %s\n' "$1" "$2"; }
  clean() {
    kubectl -n "$ns" delete cnclaim,cnpool --all --wait=false >/dev/null 2>&1
    for o in $(kubectl -n "$ns" get pods,cnclaims,cnpools -o name 2>/dev/null); do
      kubectl -n "$ns" patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
    done
    kubectl -n "$ns" delete pods --all --grace-period=0 --force >/dev/null 2>&1
    kubectl -n "$op_ns" delete lease cnpool-operator --ignore-not-found >/dev/null 2>&1
    kubectl -n "$op_ns" delete configmap cnpool-cutover --ignore-not-found >/dev/null 2>&1
  }
  clean
  "$bin" dev --cluster "$KUBECONFIG" --no-operator --hakeeper-listen "$hakeeper" --second-hakeeper-listen 127.0.0.1:0 \
    --kubeconfig "$dir/dev.kubeconfig" >"$dir/dev.log" 2>&1 &
  dev=$!
  for i in $(seq 1 50); do grep -q "node side running" "$dir/dev.log" && break; sleep 0.2; done
  "$bin" operator --kubeconfig "$sa" --hakeeper-discovery "$hakeeper" --lease-namespace "$op_ns" \
    --identity rbac-scenario --probe-listen "$probes" >"$dir/op.log" 2>&1 &
  op=$!
  local ready=
  for i in $(seq 1 75); do
    kill -0 "$op" 2>/dev/null || break
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$probes/readyz") == 200 ]] &&
      grep -q "leading: controllers start" "$dir/op.log" && { ready=1; break; }
    sleep 0.2
  done
  if [[ -z $ready ]]; then
    if kill -0 "$op" 2>/dev/null; then fail "operator leads and is ready" "not within 15 s: $(tail -1 "$dir/op.log")"
    else fail "operator leads and is ready" "exited: $(grep -v '^$' "$dir/op.log" | tail -1)"; fi
  else
    kubectl -n "$ns" apply -f "$repo/examples/pool.yaml" -f "$repo/examples/claim.yaml" >/dev/null
    local phase=
    for i in $(seq 1 100); do
      phase=$(kubectl -n "$ns" get cnclaim test -o jsonpath='{.status.phase}' 2>/dev/null)
      [[ $phase == Bound ]] && break
      sleep 0.2
    done
    if [[ $phase != Bound ]]; then fail "claim Bound" "phase '${phase}' after 20 s"
    else
      kubectl -n "$ns" delete cnclaim test --wait=false >/dev/null
      kubectl -n "$ns" wait --for=delete cnclaim/test --timeout=20s >/dev/null 2>&1 ||
        fail "claim deleted (pod released, finalizer dropped)" "still there after 20 s"
      kubectl -n "$ns" delete cnpool default --wait=false >/dev/null
      kubectl -n "$ns" wait --for=delete cnpool/default --timeout=20s >/dev/null 2>&1 ||
        fail "pool deleted (pods retired, finalizers dropped)" "still there after 20 s"
    fi
  fi
  local refused
  refused=$(curl -s "http://$probes/metrics" | grep '^cnpool_api_requests_total{.*code="403"}' |
    sed -E 's/.*verb="([^"]*)",resource="([^"]*)".*/\1 \2/' | sort -u | paste -sd ',' | sed 's/,/, /g')
  [[ -n $refused ]] && fail "no request refused" "403 for: $refused"
  kill "$op" "$dev" 2>/dev/null; wait "$op" "$dev" 2>/dev/null
  clean
  [[ $failed -eq 0 ]] || { sed 's/^/  op: /' "$dir/op.log" | grep -i 'forbidden\|error' | tail -3 >&2; }
  rm -rf "$dir"
  return $failed
}

if [[ ${1:-} == --scenario ]]; then scenario; exit; fi

# --- the driver ------------------------------------------------------------
test_cmd=("$@")
[[ ${#test_cmd[@]} -eq 0 ]] && test_cmd=("$0" --probe)
[[ ${test_cmd[0]} == --with-operator ]] && test_cmd=("$0" --scenario)

kubectl apply -f "$repo/deploy/crds/cnpool.yaml" >/dev/null
kubectl wait --for condition=Established --timeout=60s crd/cnpools.core.matrixorigin.io crd/cnclaims.core.matrixorigin.io >/dev/null
kubectl create namespace "$test_ns" --dry-run=client -o json | kubectl apply -f - >/dev/null
sa_kubeconfig=$("$here/e2e/rbac-kubeconfig.sh" "$op_ns" 2>/dev/null | tail -1)
[[ -f $sa_kubeconfig ]] || { log "ci/e2e/rbac-kubeconfig.sh $op_ns failed"; exit 1; }
export CNPOOL_OPERATOR_KUBECONFIG=$sa_kubeconfig CNPOOL_OPERATOR_NAMESPACE=$op_ns CNPOOL_TEST_NAMESPACE=$test_ns

# The roles as deploy/rbac has them, as JSON.
full_cluster=$(kubectl create --dry-run=client -o json -f "$repo/deploy/rbac/clusterrole.yaml" | jq 'select(.kind == "ClusterRole")')
full_election=$(kubectl create --dry-run=client -o json -f "$repo/deploy/rbac/leader-election.yaml" |
  jq --arg ns "$op_ns" 'select(.kind == "Role") | .metadata.namespace = $ns')
full_cutover=$(kubectl create --dry-run=client -o json -f "$repo/deploy/rbac/cutover.yaml" |
  jq --arg ns "$op_ns" 'select(.kind == "Role") | .metadata.namespace = $ns')
put() { jq 'del(.metadata.resourceVersion)' <<<"$1" | kubectl apply -f - >/dev/null; }
restore() { put "$full_cluster"; put "$full_election"; put "$full_cutover"; }
trap restore EXIT
# RBAC changes reach the authorizer through an informer, not at once. Here
# that takes well under a second; the pause leaves room for a busy machine.
settle() { sleep 2; }

run_test() {
  local out
  out=$("${test_cmd[@]}" 2>&1)
  local rc=$?
  # The names of the failed steps: the probe's lines are "FAIL name -- error".
  printf '%s' "$(grep '^FAIL ' <<<"$out" | sed 's/^FAIL //; s/ -- .*//')"
  return $rc
}

restore; settle
printf 'with every rule: '
if baseline=$(run_test); then echo "the test passes"; else echo "the test FAILS:"; echo "$baseline"; exit 1; fi
echo

unneeded=0
table() {
  local role_json=$1 what=$2 n i verbs v
  n=$(jq '.rules | length' <<<"$role_json")
  for ((i = 0; i < n; i++)); do
    verbs=$(jq -r ".rules[$i].verbs[]" <<<"$role_json")
    for v in $verbs; do
      local rule
      rule=$(jq -r --argjson i "$i" '.rules[$i] | "\(.apiGroups[0] | if . == "" then "core" else . end) \(.resources | join(","))\(if .resourceNames then " (\(.resourceNames | join(",")))" else "" end)"' <<<"$role_json")
      local reduced
      reduced=$(jq --argjson i "$i" --arg v "$v" '.rules[$i].verbs -= [$v] | .rules |= map(select(.verbs | length > 0))' <<<"$role_json")
      put "$reduced"; settle
      local broke
      if broke=$(run_test); then
        unneeded=$((unneeded + 1))
        printf '%-14s %-48s %-7s nothing breaks\n' "$what" "$rule" "$v"
      else
        printf '%-14s %-48s %-7s breaks: %s\n' "$what" "$rule" "$v" "$(paste -sd '|' <<<"$broke" | sed 's/|/; /g')"
      fi
      put "$role_json"; settle
    done
  done
}
printf '%-14s %-48s %-7s %s\n' role "group resource" verb "without it"
table "$full_cluster" ClusterRole
table "$full_election" leader-Role
table "$full_cutover" cutover-Role
echo
echo "$unneeded verb(s) whose removal breaks nothing in this test"
