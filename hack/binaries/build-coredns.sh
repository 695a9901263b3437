#!/usr/bin/env bash
# Build CoreDNS for the lab's nodes (the pool-cache scenario runs it on a cut-off node, reading the
# agent's node-local pool cache): github.com/coredns/coredns from the Go module proxy, through the
# wrapper module beside this script (coredns/: upstream's coremain with the kubernetes, errors, log,
# health, ready and bind plugins compiled in). Nothing is fetched from anywhere else.
#
# Usage: hack/binaries/build-coredns.sh    build (or reuse) and print the folder holding `coredns`
#
# Output: $EDGEWATCH_CACHE/bin/coredns-<version>-<stamp>/ (default ~/.cache/edgewatch/bin/...),
# beside the other binaries, outside the repo. The stamp hashes the wrapper module and RECIPE.
# Static (CGO_ENABLED=0). Waits for other builds (the same flock as build.sh, at most an hour).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RECIPE="coredns-recipe-1: CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags '-s -w'"
COREDNS_VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$here/coredns/go.mod")

log() { printf '[edgewatch build-coredns] %s\n' "$*" >&2; }

cache=${EDGEWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgewatch}
stamp=$( { printf '%s\n' "$RECIPE"; cat "$here"/coredns/go.mod "$here"/coredns/go.sum "$here"/coredns/main.go; } \
  | sha256sum | cut -c1-12)
out="$cache/bin/coredns-$COREDNS_VERSION-$stamp"

if [ -x "$out/coredns" ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "Go is required (https://go.dev)"; exit 1; }

mkdir -p "$cache/bin"
exec 9>"$cache/bin/.build.lock"
flock -w 3600 9 || { log "another build has held $cache/bin/.build.lock for an hour; giving up"; exit 1; }
if [ -x "$out/coredns" ]; then echo "$out"; exit 0; fi

rm -rf "$out.tmp" && mkdir -p "$out.tmp"
trap 'rm -rf "$out.tmp"' EXIT
start=$(date +%s)
log "CoreDNS $COREDNS_VERSION (kubernetes, errors, log, health, ready, bind; the first build takes a few minutes)"
(cd "$here/coredns" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false -ldflags "-s -w" \
  -o "$out.tmp/coredns" .)
[ -x "$out.tmp/coredns" ] || { log "build produced no coredns"; exit 1; }
mkdir -p "$out"
mv -f "$out.tmp/coredns" "$out/coredns"
printf '%s\n' "$RECIPE" >"$out/.recipe"
for old in "$cache"/bin/coredns-*; do [ "$old" = "$out" ] || rm -rf "$old"; done
log "built coredns in $(( $(date +%s) - start )) s into $out"
echo "$out"
