#!/usr/bin/env bash
# Build etcd for one Linux architecture, for the edgewatch image's /usr/local/bin/etcd (the pool
# coordinator pod runs it, as the Dockerfile's image does): the wrapper module etcd/ beside this
# script (upstream's etcdmain, unchanged; the version its go.mod requires), cross-compiled with
# GOOS=linux GOARCH=<arch> and otherwise exactly build.sh's etcd flags (CGO_ENABLED=0, -trimpath,
# -buildvcs=false, -ldflags '-s -w' + the GitSHA ldflag). Only the Go module proxy is used.
#
# Usage: hack/binaries/build-etcd.sh ARCH     ARCH: amd64 or arm64 (Go's names, = Debian's here)
#
# Output: $EDGEWATCH_CACHE/bin/etcd-<version>-<arch>-<stamp>/etcd (default ~/.cache/edgewatch/...),
# printed on stdout; a no-op when already there. The stamp hashes the wrapper module (go.mod,
# go.sum, main.go) and RECIPE below, so a version bump or a flag change builds a new folder (older
# folders of the same architecture are then removed). The build goes into <folder>.tmp, renamed
# when complete; concurrent runs (this script's and build.sh's) wait for each other through the
# same flock on the cache (at most an hour). Progress goes to stderr.
# Used by lab/src/edgewatch_lab/testing/images.py (the lab's offline image builder).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[edgewatch build-etcd] %s\n' "$*" >&2; }

arch=${1:-}
case "$arch" in
  amd64|arm64) ;;
  *) log "usage: $0 ARCH (amd64 or arm64)"; exit 2 ;;
esac

ETCD_VERSION=$(awk '/^require go.etcd.io\/etcd\/server\/v3 /{print $3}' "$here/etcd/go.mod")
[ -n "$ETCD_VERSION" ] || { log "no 'require go.etcd.io/etcd/server/v3' in $here/etcd/go.mod"; exit 1; }
# How etcd is built (bump it when the build command below changes the binary): the stamp hashes it.
RECIPE="etcd-cross-recipe-1: GOOS=linux CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags '-s -w' + GitSHA ldflag"

cache=${EDGEWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgewatch}
stamp=$( { printf '%s\n' "$RECIPE"; cat "$here/etcd/go.mod" "$here/etcd/go.sum" "$here/etcd/main.go"; } | sha256sum | cut -c1-12)
out="$cache/bin/etcd-$ETCD_VERSION-$arch-$stamp"

if [ -x "$out/etcd" ]; then echo "$out"; exit 0; fi

command -v go >/dev/null || { log "Go is required to build etcd (https://go.dev)"; exit 1; }
mkdir -p "$cache/bin"
exec 9>"$cache/bin/.build.lock"
flock -w 3600 9 || { log "another build has held $cache/bin/.build.lock for an hour; giving up"; exit 1; }
if [ -x "$out/etcd" ]; then echo "$out"; exit 0; fi  # built while we waited for the lock

rm -rf "$out.tmp" && mkdir -p "$out.tmp"
trap 'rm -rf "$out.tmp"' EXIT  # a failed build leaves nothing half-made behind
export GOOS=linux GOARCH=$arch CGO_ENABLED=0 GOFLAGS=-mod=readonly
start=$(date +%s)
total=$(cd "$here/etcd" && go list -deps . | wc -l)
log "building etcd $ETCD_VERSION for linux/$arch ($total packages; the first build takes a few minutes)"
ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION"
(cd "$here/etcd" && go build -v -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out.tmp/etcd" .) 2>&1 | {
  n=0 last=$(date +%s)
  while IFS= read -r line; do
    case "$line" in
      *" "*|*:*) printf '%s\n' "$line" >&2 ;;  # compiler errors and warnings pass through
      *) n=$((n + 1)) ;;
    esac
    now=$(date +%s)
    if [ $((now - last)) -ge 20 ]; then log "etcd/$arch: $n/$total packages compiled, $((now - start)) s elapsed"; last=$now; fi
  done
}
[ "${PIPESTATUS[0]}" = 0 ] || { log "building etcd for linux/$arch failed"; exit 1; }
[ -x "$out.tmp/etcd" ] || { log "the build produced no etcd"; exit 1; }
printf '%s\n' "$RECIPE" >"$out.tmp/.recipe"
rm -rf "$out"
mv "$out.tmp" "$out"  # atomic: the folder appears whole or not at all
trap - EXIT
for old in "$cache"/bin/etcd-*-"$arch"-*; do  # older stamps of this architecture
  case "$old" in "$out") ;; *) rm -rf "$old" ;; esac
done
log "built etcd $ETCD_VERSION for linux/$arch in $(( $(date +%s) - start )) s into $out"
echo "$out"
