#!/usr/bin/env bash
# Starts etcd, kube-apiserver 1.20 and kube-controller-manager on loopback,
# from the binaries ci/kube/build.sh cached, and waits until the API server
# is ready. Stop them with ci/kube/stop.sh.
#
#   CNPOOL_KUBE_CACHE  where build.sh cached the binaries (default /var/cache/cnpool-kube)
#   CNPOOL_KUBE_RUN    state directory (default /tmp/cnpool-kube); wiped on start
#   CNPOOL_KUBE_PORT   API server port (default 26443); etcd uses the two ports below 2379+
#
# Writes $CNPOOL_KUBE_RUN/kubeconfig (cluster-admin token) and prints its path
# on the last line of stdout. Server logs go to $CNPOOL_KUBE_RUN/*.log, and
# the audit log of ServiceAccounts' requests to $CNPOOL_KUBE_RUN/audit.log.
set -euo pipefail

cache=${CNPOOL_KUBE_CACHE:-/var/cache/cnpool-kube}
run=${CNPOOL_KUBE_RUN:-/tmp/cnpool-kube}
port=${CNPOOL_KUBE_PORT:-26443}
etcd_port=${CNPOOL_ETCD_PORT:-23790}
bin="$cache/bin"
log() { printf '[kube-start] %s\n' "$*" >&2; }

for b in kube-apiserver kube-controller-manager; do
  [[ -x $bin/$b ]] || { log "missing $bin/$b: run ci/kube/build.sh first"; exit 1; }
done
command -v etcd >/dev/null || { log "etcd is not installed: run ci/kube/build.sh first"; exit 1; }

"$(dirname "$0")/stop.sh" >/dev/null 2>&1 || true
rm -rf "$run" && mkdir -p "$run/certs"
cd "$run"

openssl genrsa -out certs/sa.key 2048 2>/dev/null
openssl rsa -in certs/sa.key -pubout -out certs/sa.pub 2>/dev/null
token=$(openssl rand -hex 16)
echo "$token,cnpool-admin,cnpool-admin,system:masters" > certs/tokens.csv

etcd --name cnpool-ci --data-dir "$run/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-cluster "cnpool-ci=http://127.0.0.1:$((etcd_port + 1))" \
  --listen-metrics-urls "" >etcd.log 2>&1 &
echo $! > etcd.pid

# Audit: the requests of deploy/rbac's ServiceAccounts (the operator
# processes and `cnpool doctor` of the e2e suites, told apart by their
# User-Agent), so that a suite can prove what a process sent.
cat > audit-policy.yaml <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
POLICY

"$bin/kube-apiserver" \
  --audit-policy-file "$run/audit-policy.yaml" --audit-log-path "$run/audit.log" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" --insecure-port 0 \
  --cert-dir "$run/certs" \
  --token-auth-file "$run/certs/tokens.csv" \
  --authorization-mode RBAC \
  --service-account-key-file "$run/certs/sa.pub" \
  --service-account-signing-key-file "$run/certs/sa.key" \
  --service-account-issuer https://kubernetes.default.svc \
  --service-cluster-ip-range 10.96.0.0/24 \
  --endpoint-reconciler-type none \
  --allow-privileged \
  >apiserver.log 2>&1 &
echo $! > apiserver.pid

cat > kubeconfig <<KC
apiVersion: v1
kind: Config
clusters:
- name: cnpool-ci
  cluster:
    server: https://127.0.0.1:$port
    insecure-skip-tls-verify: true
users:
- name: cnpool-admin
  user:
    token: $token
contexts:
- name: cnpool-ci
  context: {cluster: cnpool-ci, user: cnpool-admin, namespace: default}
current-context: cnpool-ci
KC

for i in $(seq 1 120); do
  if curl -sfk -H "Authorization: Bearer $token" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$(cat apiserver.pid)" 2>/dev/null; then
    log "kube-apiserver exited; last lines of $run/apiserver.log:"; tail -20 apiserver.log >&2; exit 1
  fi
  [[ $i -eq 120 ]] && { log "kube-apiserver not ready after 60 s; see $run/apiserver.log"; exit 1; }
  sleep 0.5
done

"$bin/kube-controller-manager" \
  --kubeconfig "$run/kubeconfig" \
  --controllers garbagecollector,namespace,serviceaccount,serviceaccount-token \
  --service-account-private-key-file "$run/certs/sa.key" \
  --root-ca-file "$run/certs/apiserver.crt" \
  --leader-elect=false --port 0 --secure-port 0 \
  >controller-manager.log 2>&1 &
echo $! > controller-manager.pid

# Pods are refused until the namespace's default ServiceAccount exists.
for i in $(seq 1 120); do
  if KUBECONFIG="$run/kubeconfig" kubectl get serviceaccount default -n default >/dev/null 2>&1; then break; fi
  [[ $i -eq 120 ]] && { log "no default ServiceAccount after 60 s; see $run/controller-manager.log"; exit 1; }
  sleep 0.5
done
log "ready: https://127.0.0.1:$port ($("$bin/kube-apiserver" --version))"
echo "$run/kubeconfig"
