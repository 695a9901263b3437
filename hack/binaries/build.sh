#!/usr/bin/env bash
# Build the control-plane binaries edgewatch runs against: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl, from the Go module proxy,
# through the wrapper modules beside this script. Nothing is fetched from anywhere else.
#
# Usage: hack/binaries/build.sh            build (or reuse) and print the folder holding them
#
# Output: $EDGEWATCH_CACHE/bin/<stamp>/ (default ~/.cache/edgewatch/bin/...), outside the repo,
# so only the first build pays. The stamp hashes the wrapper go.mod/go.sum files, so a version
# bump builds a new folder. If KUBEBUILDER_ASSETS is set, its binaries are used and nothing is built
# (the envtest convention); the folder printed is then KUBEBUILDER_ASSETS itself.
#
# Progress goes to stderr (one line per 20 s with packages compiled / total); the folder to stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KUBE_VERSION=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/kube/go.mod")
ETCD_VERSION=$(awk '/^require go.etcd.io\/etcd\/server\/v3 /{print $3}' "$here/etcd/go.mod")
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

log() { printf '[edgewatch build] %s\n' "$*" >&2; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  for b in "${BINARIES[@]}"; do
    [ -x "$KUBEBUILDER_ASSETS/$b" ] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $b"; exit 1; }
  done
  log "using binaries from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS; building nothing"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build the control plane (https://go.dev); or set KUBEBUILDER_ASSETS"; exit 1; }

cache=${EDGEWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgewatch}
stamp=$(cat "$here/build.sh" "$here"/kube/go.mod "$here"/kube/go.sum "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/main.go | sha256sum | cut -c1-12)
out="$cache/bin/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-$stamp"

complete=1
for b in "${BINARIES[@]}"; do [ -x "$out/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$out.tmp"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
start=$(date +%s)

# go build -v prints each package as it compiles it; count them against the total for progress.
build_with_progress() {  # $1 = module dir, $2 = label, $3 = ldflags, rest = packages
  local dir=$1 label=$2 ldflags=$3; shift 3
  local total
  total=$(cd "$dir" && go list -deps "$@" | wc -l)
  log "building $label ($total packages; the first build takes a while on a small machine)"
  (cd "$dir" && go build -v -trimpath -buildvcs=false -ldflags "-s -w $ldflags" -o "$out.tmp/" "$@") 2>&1 | {
    local n=0 last=$(date +%s) now
    while IFS= read -r line; do
      case "$line" in
        *" "*|*:*) printf '%s\n' "$line" >&2 ;;  # compiler errors and warnings pass through
        *) n=$((n + 1)) ;;
      esac
      now=$(date +%s)
      if [ $((now - last)) -ge 20 ]; then
        log "$label: $n/$total packages compiled, $((now - start)) s elapsed"
        last=$now
      fi
    done
  }
  return "${PIPESTATUS[0]}"
}

build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=$build_date -X $pkg.gitCommit=module-k8s.io/kubernetes@$KUBE_VERSION"
done
etcd_ldflags="-X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION"

build_with_progress "$here/etcd" "etcd $ETCD_VERSION" "$etcd_ldflags" .
# `go build -o dir/ .` names the binary after the module path's last element: etcd.
build_with_progress "$here/kube" "Kubernetes $KUBE_VERSION" "$kube_ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

for b in "${BINARIES[@]}"; do [ -x "$out.tmp/$b" ] || { log "build produced no $b"; exit 1; }; done
rm -rf "$out" && mv "$out.tmp" "$out"
for old in "$cache"/bin/k8s-*; do  # older stamps are dead weight (each is ~500 MB)
  [ "$old" = "$out" ] || rm -rf "$old"
done
log "built ${BINARIES[*]} in $(( $(date +%s) - start )) s into $out"
echo "$out"
