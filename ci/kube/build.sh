#!/usr/bin/env bash
# Builds a real kube-apiserver and kube-controller-manager 1.20.2 from
# Debian bookworm's `kubernetes` source package, plus Debian's kubectl 1.20,
# and caches them outside the repository. Idempotent: a second run with the
# binaries in place does nothing. See ../shared/reference/kube-apiserver.md.
#
#   CNPOOL_KUBE_CACHE  cache directory (default /var/cache/cnpool-kube)
#
# Prints the bin directory on its last line of stdout.
set -euo pipefail

cache=${CNPOOL_KUBE_CACHE:-/var/cache/cnpool-kube}
bin="$cache/bin"
log() { printf '[kube-build] %s\n' "$*" >&2; }

if [[ -x $bin/kube-apiserver && -x $bin/kube-controller-manager && -x $bin/kubectl-1.20 ]]; then
  log "cached in $bin"
  echo "$bin"
  exit 0
fi

# Package fetches over the network fail now and then: retry those, and only
# those, a few times before failing loudly.
retry() {
  local n
  for n in 1 2 3 4 5; do
    if "$@"; then return 0; fi
    log "attempt $n of '$*' failed; retrying in $((n * 5)) s"
    sleep $((n * 5))
  done
  log "FAILED after 5 attempts: $*"
  return 1
}

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

src_list=/etc/apt/sources.list.d/cnpool-deb-src.sources
if [[ ! -f $src_list ]]; then
  log "enabling Debian source packages ($src_list)"
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | as_root tee "$src_list" >/dev/null
fi
retry as_root apt-get update -qq
retry as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  golang-go rsync jq etcd-server openssl golang-github-modern-go-reflect2-dev dpkg-dev >/dev/null

work="$cache/src"
mkdir -p "$work" "$bin"
cd "$work"
if ! ls kubernetes_*.orig.tar.* >/dev/null 2>&1; then
  log "downloading the kubernetes source package"
  retry apt-get source --download-only kubernetes >/dev/null
fi
orig=$(ls kubernetes_*.orig.tar.* | head -n 1)
tree="$work/tree"
if [[ ! -f $tree/Makefile ]]; then
  log "unpacking $orig"
  rm -rf "$tree" && mkdir -p "$tree"
  tar -xf "$orig" -C "$tree" --strip-components=1
fi

# reflect2 1.0.1 crashes under Go >= 1.18; swap in Debian's 1.0.2 sources.
r2_src=/usr/share/gocode/src/github.com/modern-go/reflect2
r2_dst="$tree/vendor/github.com/modern-go/reflect2"
if ! cmp -s "$r2_src/go_above_118.go" "$r2_dst/go_above_118.go" 2>/dev/null; then
  log "replacing vendored reflect2 with Debian's 1.0.2"
  rm -rf "$r2_dst" && mkdir -p "$r2_dst"
  find "$r2_src" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' -exec cp {} "$r2_dst/" \;
fi

gopath="$work/.go"
mkdir -p "$gopath/src/k8s.io"
ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"
log "building kube-apiserver and kube-controller-manager (about 4 minutes on 2 cores)"
(
  cd "$gopath/src/k8s.io/kubernetes"
  GOPATH="$gopath" GOPROXY=off GOFLAGS= CGO_ENABLED=0 GO111MODULE=off \
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
)
out="$tree/_output/local/bin/linux/amd64"
install -m 0755 "$out/kube-apiserver" "$out/kube-controller-manager" "$bin/"

log "extracting Debian's kubectl 1.20"
deb_dir=$(mktemp -d)
( cd "$deb_dir" && retry apt-get download kubernetes-client >/dev/null )
dpkg-deb -x "$deb_dir"/kubernetes-client_*.deb "$deb_dir/x"
install -m 0755 "$deb_dir/x/usr/bin/kubectl" "$bin/kubectl-1.20"
rm -rf "$deb_dir"

log "done: $("$bin/kube-apiserver" --version)"
echo "$bin"
