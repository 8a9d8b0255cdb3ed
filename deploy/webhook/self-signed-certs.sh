#!/usr/bin/env bash
# Webhook certificates without cert-manager: a CA of your own, a serving
# certificate it signs for the webhook Service's DNS name, the Secret the
# operator mounts, and the CA in every webhook's caBundle.
#
#   deploy/webhook/self-signed-certs.sh DIR
#
# DIR keeps ca.key, ca.crt, tls.key and tls.crt. Run it again with the same
# DIR to renew the serving certificate: the CA in DIR is reused, so the
# caBundle stays the same and the operator picks up the new certificate
# from the Secret without a restart. Keep DIR (ca.key above all) out of the
# cluster. Needs openssl, kubectl with rights to write Secrets in
# cnpool-system and the ValidatingWebhookConfiguration, and jq.
#
# The caBundle is written only if the configuration `cnpool` exists already
# (apply deploy/ first, or run this again after). The names here are those of
# deploy/webhook/ and deploy/operator/deployment.yaml.
set -euo pipefail

dir=${1:?usage: self-signed-certs.sh DIR}
namespace=cnpool-system
service=cnpool-webhook
secret=cnpool-webhook-tls
configuration=cnpool
dns="$service.$namespace.svc"
log() { printf '[webhook-certs] %s\n' "$*" >&2; }

mkdir -p "$dir" && cd "$dir"
umask 077
if [[ ! -f ca.key || ! -f ca.crt ]]; then
  log "new CA in $dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=cnpool-webhook-ca" \
    -keyout ca.key -out ca.crt 2>/dev/null
else
  log "reusing the CA in $dir"
fi
openssl req -newkey rsa:2048 -nodes -subj "/CN=$dns" -keyout tls.key -out tls.csr 2>/dev/null
# The apiserver checks the name against subjectAltName only (Go's TLS ignores
# the common name), so the DNS name must be there.
printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' "$dns" > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
  -extfile tls.ext -out tls.crt 2>/dev/null
rm -f tls.csr tls.ext
openssl verify -CAfile ca.crt tls.crt >/dev/null
log "serving certificate for $dns, valid until $(openssl x509 -in tls.crt -noout -enddate | cut -d= -f2)"

# Create or replace, so that a renewal is the same command. Server-side
# apply: a client-side apply would also copy the private key into the
# Secret's last-applied-configuration annotation.
kubectl -n "$namespace" create secret tls "$secret" --cert tls.crt --key tls.key --dry-run=client -o json |
  kubectl apply --server-side --force-conflicts --field-manager cnpool-webhook-certs -f - >&2

if kubectl get validatingwebhookconfiguration "$configuration" >/dev/null 2>&1; then
  ca=$(base64 -w0 < ca.crt)
  patch=$(kubectl get validatingwebhookconfiguration "$configuration" -o json |
    jq -c --arg ca "$ca" '[range(0; .webhooks | length) | {op: "add", path: "/webhooks/\(.)/clientConfig/caBundle", value: $ca}]')
  kubectl patch validatingwebhookconfiguration "$configuration" --type json -p "$patch" >&2
  log "caBundle set on every webhook of $configuration"
else
  log "no ValidatingWebhookConfiguration $configuration yet: apply deploy/webhook/ and run this again"
fi
echo "$dir"
