#!/usr/bin/env bash
# Build what a real lab node runs besides the kubelet (docs/real-nodes.md): containerd, its runc shim and ctr;
# runc; the CNI plugins bridge, loopback, host-local and portmap; and the pause binary of the
# sandbox image. Everything comes from the Go module proxy through the wrapper modules beside this
# script; pause is compiled from build/pause/linux/pause.c of the k8s.io/kubernetes module with
# gcc -static. Nothing is fetched from anywhere else. The kubelet itself is built by build.sh with
# the control plane (same k8s.io/kubernetes module).
#
# Usage: hack/binaries/build-node.sh       build (or reuse) and print the folder holding them
#
# Output: $EDGEWATCH_CACHE/bin/node-<stamp>/ (default ~/.cache/edgewatch/bin/...), outside the repo.
# The stamp hashes the wrapper modules and RECIPE below. runc needs cgo (gcc) and libseccomp
# (Debian: libseccomp-dev; `make node-binaries` installs both): containerd gives every pod sandbox a
# seccomp profile, which a runc without seccomp refuses. containerd, the shim, ctr and the CNI
# plugins are static (CGO_ENABLED=0; btrfs and pkcs11, the only cgo parts, drop out). Concurrent
# runs wait for each other (flock, at most an hour).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RECIPE="node-recipe-2: containerd/shim/ctr/cni CGO_ENABLED=0 -trimpath -ldflags '-s -w'; runc cgo with seccomp; pause gcc -static -Os"
BINARIES=(containerd containerd-shim-runc-v2 ctr runc bridge loopback host-local portmap pause)

log() { printf '[edgewatch build-node] %s\n' "$*" >&2; }

version_of() { awk -v m="$2" '$1 == "require" && $2 == m {print $3} $1 == m {print $2}' "$here/$1/go.mod" | head -1; }
CONTAINERD_VERSION=$(version_of containerd github.com/containerd/containerd/v2)
RUNC_VERSION=$(version_of runc github.com/opencontainers/runc)
CNI_VERSION=$(version_of cni github.com/containernetworking/plugins)
KUBE_VERSION=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/kube/go.mod")

cache=${EDGEWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgewatch}
stamp=$( { printf '%s\n' "$RECIPE" "$KUBE_VERSION"; cat "$here"/containerd/go.mod "$here"/containerd/go.sum \
  "$here"/runc/go.mod "$here"/runc/go.sum "$here"/cni/go.mod "$here"/cni/go.sum; } | sha256sum | cut -c1-12)
out="$cache/bin/node-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION-cni-$CNI_VERSION-$stamp"

complete() { local b; for b in "${BINARIES[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if complete; then echo "$out"; exit 0; fi

command -v go >/dev/null || { log "Go is required (https://go.dev)"; exit 1; }
command -v gcc >/dev/null || { log "gcc is required for runc (cgo) and pause (apt-get install gcc libc6-dev)"; exit 1; }
[ -e /usr/include/seccomp.h ] || { log "libseccomp is required for runc (apt-get install libseccomp-dev)"; exit 1; }

mkdir -p "$cache/bin"
exec 9>"$cache/bin/.build.lock"
flock -w 3600 9 || { log "another build has held $cache/bin/.build.lock for an hour; giving up"; exit 1; }
if complete; then echo "$out"; exit 0; fi

rm -rf "$out.tmp" && mkdir -p "$out.tmp"
trap 'rm -rf "$out.tmp"' EXIT
export GOFLAGS=-mod=readonly
start=$(date +%s)

log "containerd $CONTAINERD_VERSION (containerd, containerd-shim-runc-v2, ctr)"
(cd "$here/containerd" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
  -tags no_btrfs,no_zfs,no_devmapper,urfave_cli_no_docs \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
  -o "$out.tmp/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr)
(cd "$here/containerd" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -tags no_grpc,urfave_cli_no_docs \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
  -o "$out.tmp/" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)

log "runc $RUNC_VERSION (cgo, with seccomp)"
(cd "$here/runc" && CGO_ENABLED=1 go build -trimpath -buildvcs=false -tags seccomp,urfave_cli_no_docs \
  -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" -o "$out.tmp/runc" github.com/opencontainers/runc)

log "CNI plugins $CNI_VERSION (bridge, loopback, host-local, portmap)"
(cd "$here/cni" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$out.tmp/" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/meta/portmap)

log "pause from k8s.io/kubernetes $KUBE_VERSION (gcc -static)"
kube_dir=$(cd "$here/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
[ -n "$kube_dir" ] || (cd "$here/kube" && go mod download k8s.io/kubernetes)
kube_dir=$(cd "$here/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
gcc -Os -Wall -Werror -static -DVERSION="$KUBE_VERSION-edgewatch" -o "$out.tmp/pause" "$kube_dir/build/pause/linux/pause.c"
strip "$out.tmp/pause" 2>/dev/null || true

for b in "${BINARIES[@]}"; do [ -x "$out.tmp/$b" ] || { log "build produced no $b"; exit 1; }; done
mkdir -p "$out"
for b in "${BINARIES[@]}"; do mv -f "$out.tmp/$b" "$out/$b"; done
printf '%s\n' "$RECIPE" >"$out/.recipe"
for old in "$cache"/bin/node-*; do [ "$old" = "$out" ] || rm -rf "$old"; done
log "built ${BINARIES[*]} in $(( $(date +%s) - start )) s into $out"
echo "$out"
