#!/usr/bin/env bash
# Gives the operator, run as its own process against the CI's kube-apiserver,
# the identity it has in a cluster: the ServiceAccount `cnpool` in NAMESPACE,
# bound to deploy/rbac's ClusterRole, leader-election and cutover Roles, and nothing
# else (not system:masters). Writes a kubeconfig that authenticates with
# that ServiceAccount's token and prints its path on the last line.
#
#   ci/e2e/rbac-kubeconfig.sh NAMESPACE
#
# Needs KUBECONFIG pointing at the server with an admin identity (the one
# ci/kube/start.sh writes), kubectl and jq. NAMESPACE is the operator's own
# namespace: its ServiceAccount and its Lease live there, so run the operator
# with --lease-namespace NAMESPACE. The manifests name cnpool-system; they
# are applied with that replaced by NAMESPACE, and with a ClusterRoleBinding
# named after NAMESPACE, so that several namespaces (several test runs) can
# each have an operator identity at once without taking the binding from
# one another.
#
# The token: the script creates a Secret of type
# kubernetes.io/service-account-token for the ServiceAccount and waits for
# kube-controller-manager's token controller to fill it. 1.20 would also
# make one by itself (with a random name); asking for one by name works the
# same on 1.20 and on 1.24+, which no longer does, and needs no guessing.
# The token controller signs with --service-account-private-key-file and
# puts --root-ca-file in the Secret as ca.crt (ci/kube/start.sh sets both).
set -euo pipefail

ns=${1:?usage: rbac-kubeconfig.sh NAMESPACE}
here=$(cd "$(dirname "$0")" && pwd)
rbac=$(cd "$here/../../deploy/rbac" && pwd)
admin=${KUBECONFIG:?KUBECONFIG must point at the server with an admin identity}
log() { printf '[rbac-kubeconfig] %s\n' "$*" >&2; }
for tool in kubectl jq base64; do
  command -v "$tool" >/dev/null || { log "needs $tool on PATH"; exit 1; }
done

kubectl create namespace "$ns" --dry-run=client -o json | kubectl apply -f - >/dev/null

# deploy/rbac as it is, retargeted at $ns: namespaced objects into $ns,
# ServiceAccount subjects to $ns, and the ClusterRoleBinding renamed so that
# it is this namespace's own. `create --dry-run=client` only turns the YAML
# into JSON; nothing is sent.
kubectl create --dry-run=client -o json \
  -f "$rbac/serviceaccount.yaml" -f "$rbac/clusterrole.yaml" -f "$rbac/leader-election.yaml" \
  -f "$rbac/cutover.yaml" |
  jq --arg ns "$ns" '
    (if .kind == "List" then .items else [.] end)
    | map(
        if .kind == "ServiceAccount" or .kind == "Role" or .kind == "RoleBinding"
        then .metadata.namespace = $ns else . end
        | if .kind == "ClusterRoleBinding" then .metadata.name = "cnpool-operator:" + $ns else . end
        | if .subjects then .subjects |= map(if .kind == "ServiceAccount" then .namespace = $ns else . end) else . end)
    | {apiVersion: "v1", kind: "List", items: .}' |
  kubectl apply -f - >&2

kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: cnpool-token
  namespace: $ns
  annotations:
    kubernetes.io/service-account.name: cnpool
type: kubernetes.io/service-account-token
YAML

token=
for _ in $(seq 1 120); do
  token=$(kubectl -n "$ns" get secret cnpool-token -o jsonpath='{.data.token}' 2>/dev/null || true)
  [[ -n $token ]] && break
  sleep 0.5
done
[[ -n $token ]] || {
  log "the token controller did not fill secret $ns/cnpool-token within 60 s:"
  log "is kube-controller-manager running with the serviceaccount-token controller and --service-account-private-key-file?"
  exit 1
}
token=$(base64 -d <<<"$token")
ca=$(kubectl -n "$ns" get secret cnpool-token -o jsonpath='{.data.ca\.crt}')

server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
out="$(dirname "$admin")/cnpool-$ns.kubeconfig"
# The CA is the one the token controller put in the Secret (--root-ca-file),
# so the operator verifies the server as it would in a pod, instead of
# skipping verification like the admin kubeconfig.
umask 077
cat > "$out" <<KC
apiVersion: v1
kind: Config
clusters:
- name: cnpool-ci
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: system:serviceaccount:$ns:cnpool
  user:
    token: $token
contexts:
- name: cnpool-$ns
  context: {cluster: cnpool-ci, user: "system:serviceaccount:$ns:cnpool", namespace: $ns}
current-context: cnpool-$ns
KC

who=$(KUBECONFIG=$out kubectl auth can-i get pods --all-namespaces 2>&1) || {
  log "the ServiceAccount's kubeconfig does not work: $who"; exit 1;
}
log "wrote $out (system:serviceaccount:$ns:cnpool)"
echo "$out"
