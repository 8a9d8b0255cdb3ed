#!/usr/bin/env bash
# Stops what ci/kube/start.sh started.
run=${CNPOOL_KUBE_RUN:-/tmp/cnpool-kube}
for name in controller-manager apiserver etcd; do
  if [[ -f $run/$name.pid ]]; then
    pid=$(cat "$run/$name.pid")
    kill "$pid" 2>/dev/null && for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    rm -f "$run/$name.pid"
  fi
done
exit 0
