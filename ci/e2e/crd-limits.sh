#!/usr/bin/env bash
# The CRDs' limits against a real kube-apiserver (1.20: no CEL, no
# ratcheting), each of: replicas >= 0 on a CNClaimSet, maxPods and maxIdle
# >= 0 on a CNPool, a selector operator among In/NotIn/Exists/DoesNotExist
# on a CNClaim (issue 25). A limit the CRDs carry must refuse its value at
# apply, naming the field. Whether carried or not, an object stored before
# the limit existed must stay deletable, its finalizers removable: 1.20
# validates every update against the whole schema, so a limit that refuses
# a value already stored would refuse that object's finalizer removal (and
# the operator's status writes) for good, and must be left out.
# Needs KUBECONFIG pointing at the server (ci/kube/start.sh). Replaces the
# cluster's cnpool CRDs for a while; puts deploy/crds/cnpool.yaml back.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"
ns=cnpool-crd-limits
# CNPOOL_CRDS: another rendering of the CRDs to try (default: the repository's).
crds=${CNPOOL_CRDS:-$repo/deploy/crds/cnpool.yaml}
loose=$(mktemp)
k() { kubectl -n "$ns" "$@"; }

# The CRDs as they were before the limits: no `minimum: 0`, no enum of
# selector operators (the claim phase enum stays).
sed -e '/^ *minimum: 0.0$/d' -e '/^ *enum:$/{N;/- In$/{N;N;N;d}}' "$crds" > "$loose"

install() {
  kubectl apply -f "$1" >/dev/null &&
    kubectl wait --for condition=Established --timeout=60s \
      crd/cnpools.core.matrixorigin.io crd/cnclaims.core.matrixorigin.io crd/cnclaimsets.core.matrixorigin.io >/dev/null &&
    # A CRD's new schema takes a moment to reach the handlers.
    sleep 2
}

# Whatever happens, leave no object behind and the real CRDs installed.
cleanup() {
  install "$loose"
  for kind in cnpool cnclaim cnclaimset; do
    for name in $(k get "$kind" -o name 2>/dev/null); do
      k patch "$name" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
    done
  done
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1
  install "$crds"
  rm -f "$loose"
}
trap cleanup EXIT

set_of() { # NAME REPLICAS
  printf 'apiVersion: core.matrixorigin.io/v1alpha1\nkind: CNClaimSet\nmetadata: {name: %s, finalizers: [example.com/hold]}\n' "$1"
  printf 'spec: {replicas: %s, template: {spec: {selector: {matchLabels: {pool: default}}}}}\n' "$2"
}
pool_of() { # NAME SCALE-STRATEGY
  printf 'apiVersion: core.matrixorigin.io/v1alpha1\nkind: CNPool\nmetadata: {name: %s, finalizers: [example.com/hold]}\n' "$1"
  printf 'spec: {strategy: {scaleStrategy: %s}, template: {image: matrixorigin/matrixone:1.2.0}}\n' "$2"
}
claim_of() { # NAME OPERATOR
  printf 'apiVersion: core.matrixorigin.io/v1alpha1\nkind: CNClaim\nmetadata: {name: %s, finalizers: [example.com/hold]}\n' "$1"
  printf 'spec: {selector: {matchExpressions: [{key: zone, operator: %s, values: [a]}]}}\n' "$2"
}
create_from() { "$@" | k create -f -; }
gone() { ! k get "$1" >/dev/null 2>&1; }
loose_is_loose() {
  ! grep -q 'minimum: 0.0' "$loose" && ! grep -q -- '- NotIn$' "$loose" && grep -q -- '- Pending$' "$loose" &&
    [[ $(diff "$crds" "$loose" | grep -c '^>') -eq 0 ]]
}
schema='{.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties}'
# carried CRD JSONPATH-UNDER-SPEC: whether the installed CRD has that limit.
carried() { [[ -n $(kubectl get "crd/$1" -o jsonpath="${schema%\}}$2}" 2>/dev/null) ]]; }

# The limits: name, CRD, where the limit sits under spec, the field the
# refusal must name, and the object carrying a value the limit refuses (its
# maker, name and value).
limits=(
  "replicas|cnclaimsets.core.matrixorigin.io|.replicas.minimum|spec\.replicas|set_of|replicas|-3"
  "maxPods|cnpools.core.matrixorigin.io|.strategy.properties.scaleStrategy.properties.maxPods.minimum|spec\.strategy\.scaleStrategy\.maxPods|pool_of|max-pods|{maxIdle: 0, maxPods: -1}"
  "maxIdle|cnpools.core.matrixorigin.io|.strategy.properties.scaleStrategy.properties.maxIdle.minimum|spec\.strategy\.scaleStrategy\.maxIdle|pool_of|max-idle|{maxIdle: -1}"
  "operator|cnclaims.core.matrixorigin.io|.selector.properties.matchExpressions.items.properties.operator.enum|spec\.selector\.matchExpressions.*operator|claim_of|like|Like"
)

kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null 2>&1
kubectl create namespace "$ns" >/dev/null
check "the CRDs are installed from ${crds#"$repo"/}" install "$crds"
check "the loose variant only drops the minimums and the operator enums" loose_is_loose

# At apply, without any webhook.
for limit in "${limits[@]}"; do
  IFS='|' read -r name crd path field maker object value <<<"$limit"
  if carried "$crd" "$path"; then
    refused=$(create_from "$maker" "$object" "$value" 2>&1)
    check "$name: refused at apply, naming the field" expect_match "$field.*(Invalid|Unsupported) value" "$refused"
  else
    printf 'note %s: no schema limit (left out: it would strand objects stored before it on 1.20)\n' "$name"
  fi
done

# Stored before the limits: created under the loose CRDs with a finalizer,
# then the real CRDs put back.
check "the CRDs without the limits are installed" install "$loose"
stored=()
for limit in "${limits[@]}"; do
  IFS='|' read -r name crd path field maker object value <<<"$limit"
  if out=$(create_from "$maker" "$object" "$value" 2>&1); then
    stored+=("$name|${out%% *}")
  elif [[ $name == replicas && $out =~ spec\.replicas.*non-negative ]]; then
    # The scale subresource refuses a negative spec.replicas by itself:
    # no stored CNClaimSet can carry one, so that limit strands nothing.
    printf 'ok   replicas: unstorable even without the limit (the scale subresource refuses it)\n'
    passed=$((passed + 1))
  else
    check "$name: an object stored before the limit" false
    printf '%s\n' "$out" | sed 's/^/     /'
  fi
done
check "the CRDs with the limits are back" install "$crds"

for entry in "${stored[@]}"; do
  IFS='|' read -r name object <<<"$entry"
  check "$name: $object, stored before the limit, can be deleted" k delete "$object" --wait=false
  check "$name: $object's finalizers can be removed (a limit refusing this strands it: leave it out)" \
    k patch "$object" --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]'
  check "$name: $object is gone" gone "$object"
done

summary
