#!/usr/bin/env bash
# Build the Kubernetes binaries edgewatch runs against: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl and kube-proxy, from the Go module proxy,
# through the wrapper modules beside this script. Nothing is fetched from anywhere else.
#
# Usage: hack/binaries/build.sh            build (or reuse) and print the folder holding them
#        hack/binaries/build.sh helm       the same for helm alone (its own folder; see below)
#        hack/binaries/build.sh promtool   the same for promtool and prometheus (one folder; see below)
#        hack/binaries/build.sh superedge  SuperEdge's edge-health and edge-health-admission (one
#                                          folder for both; see below)
#        hack/binaries/build.sh minimum    the same binaries at the oldest Kubernetes edgewatch
#                                          supports, through the wrapper module kube-minimum/
#                                          (make compat; its own folder, kept beside the current one)
#
# Output: $EDGEWATCH_CACHE/bin/<stamp>/ (default ~/.cache/edgewatch/bin/...), outside the repo,
# so only the first build pays. The stamp hashes the wrapper modules (go.mod, go.sum, etcd's
# main.go) and RECIPE below, so a version bump builds a new folder. Binaries are added one by one:
# a folder missing one of BINARIES (say, made before kube-proxy joined the list) gets only the
# missing ones built. A folder for the same versions made before the stamp left out this script
# (no .recipe file inside) is adopted by hard links rather than rebuilt. Concurrent runs wait for
# each other (flock on the cache, at most an hour).
# If KUBEBUILDER_ASSETS is set, its binaries are used and nothing is built (the envtest
# convention); the folder printed is then KUBEBUILDER_ASSETS itself, and kube-proxy is optional
# there (envtest ships none).
#
# Progress goes to stderr (one line per 20 s with packages compiled / total); the folder to stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The wrapper module of the Kubernetes binaries: kube/ (the version everything runs on) or, with
# `minimum`, kube-minimum/ (the oldest supported; make compat). Each keeps its own cache folder.
kube_dir=kube other_dir=kube-minimum
if [ "${1:-}" = minimum ]; then kube_dir=kube-minimum other_dir=kube; fi
KUBE_VERSION=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/$kube_dir/go.mod")
OTHER_KUBE_VERSION=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/$other_dir/go.mod" 2>/dev/null || true)
ETCD_VERSION=$(awk '/^require go.etcd.io\/etcd\/server\/v3 /{print $3}' "$here/etcd/go.mod")
# Each binary of k8s.io/kubernetes is built from k8s.io/kubernetes/cmd/<name>; etcd from ./etcd.
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl kube-proxy kubelet)
BINARIES=(etcd "${KUBE_BINARIES[@]}")
OPTIONAL_IN_ASSETS=(kube-proxy kubelet)  # may be absent from KUBEBUILDER_ASSETS (envtest ships neither)
# How the binaries are built (flags, ldflags). Bump it when the build commands below change in a
# way that changes the binaries: the stamp hashes it instead of this whole script, so adding a
# binary to the lists above does not rebuild the others.
RECIPE="recipe-2: CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags '-s -w' + version ldflags"

log() { printf '[edgewatch build] %s\n' "$*" >&2; }

# One Go tool alone, in its own folder $EDGEWATCH_CACHE/bin/<name>-<version>-<stamp>/ (stamp: the
# wrapper module's go.mod and go.sum and the tool's recipe), so adding or bumping a tool never
# rebuilds the Kubernetes binaries; older folders of the same tool are removed. Prints the folder.
# KUBEBUILDER_ASSETS plays no part (envtest ships neither tool).
# PACKAGE may list several packages (space-separated) of the same module: the folder then holds
# one binary per package, named after its last path element (superedge: edge-health and
# edge-health-admission); with one package the binary is NAME.
#   build_tool NAME RECIPE VERSION PACKAGE LDFLAGS [SHOWN_VERSION]
build_tool() {
  local name=$1 recipe=$2 version=$3 ldflags=$5 shown=${6:-$3}
  local cache stamp out start total b
  local -a pkgs bins
  read -ra pkgs <<<"$4"
  if [ "${#pkgs[@]}" = 1 ]; then bins=("$name"); else bins=("${pkgs[@]##*/}"); fi
  built() { local b; for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
  cache=${EDGEWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgewatch}
  stamp=$( { printf '%s\n' "$recipe"; cat "$here/$name/go.mod" "$here/$name/go.sum"; } | sha256sum | cut -c1-12)
  out="$cache/bin/$name-$version-$stamp"
  if built; then echo "$out"; return 0; fi
  command -v go >/dev/null || { log "Go is required to build $name (https://go.dev)"; return 1; }
  mkdir -p "$cache/bin"
  exec 9>"$cache/bin/.build.lock"
  flock -w 3600 9 || { log "another build has held $cache/bin/.build.lock for an hour; giving up"; return 1; }
  if built; then echo "$out"; return 0; fi  # built while we waited for the lock
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  trap 'rm -rf "'"$out.tmp"'"' EXIT
  start=$(date +%s)
  total=$(cd "$here/$name" && GOFLAGS=-mod=readonly go list -deps "${pkgs[@]}" | wc -l)
  log "building $name $shown ($total packages; the first build takes a few minutes on a small machine)"
  local dest="$out.tmp/$name"; [ "${#pkgs[@]}" = 1 ] || dest="$out.tmp/"  # a folder: one binary per package
  (cd "$here/$name" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -v -trimpath -buildvcs=false -ldflags "$ldflags" \
    -o "$dest" "${pkgs[@]}") 2>&1 | {
    n=0 last=$(date +%s)
    while IFS= read -r line; do
      case "$line" in
        *" "*|*:*) printf '%s\n' "$line" >&2 ;;  # compiler errors and warnings pass through
        *) n=$((n + 1)) ;;
      esac
      now=$(date +%s)
      if [ $((now - last)) -ge 20 ]; then log "$name: $n/$total packages compiled, $((now - start)) s elapsed"; last=$now; fi
    done
  }
  [ "${PIPESTATUS[0]}" = 0 ] || { log "building $name failed"; return 1; }
  for b in "${bins[@]}"; do [ -x "$out.tmp/$b" ] || { log "build produced no $b"; return 1; }; done
  mkdir -p "$out"
  for b in "${bins[@]}"; do mv -f "$out.tmp/$b" "$out/$b"; done
  printf '%s\n' "$recipe" >"$out/.recipe"
  for old in "$cache"/bin/"$name"-*; do [ "$old" = "$out" ] || rm -rf "$old"; done
  log "built $name $shown in $(( $(date +%s) - start )) s into $out"
  echo "$out"
}

# `build.sh helm`: helm.sh/helm/v3/cmd/helm through the wrapper module helm/ (about 2-4 minutes
# the first time).
if [ "${1:-}" = helm ]; then
  HELM_RECIPE="helm-recipe-1: CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags '-s -w' + version ldflags"
  HELM_VERSION=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" {print $3}' "$here/helm/go.mod")
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=archive"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitCommit=module-helm.sh/helm/v3@$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.metadata="
  # As upstream's Makefile: the default Kubernetes version of `helm template`/`lint` follows client-go.
  client_go=$(awk '$1 == "k8s.io/client-go" {print $2}' "$here/helm/go.mod")  # v0.<minor>.<patch>
  k8s_minor=${client_go#v0.}; k8s_minor=${k8s_minor%%.*}
  for p in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$k8s_minor"
  done
  build_tool helm "$HELM_RECIPE" "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "$ldflags"
  exit $?
fi

# `build.sh promtool`: github.com/prometheus/prometheus/cmd/promtool and cmd/prometheus through
# the wrapper module promtool/, both in one folder: promtool for tests/integration/test_alerts.py
# (`promtool check rules` / `test rules` on deploy/monitoring's alert rules), prometheus for the
# playground's `--prometheus` (lab/src/edgewatch_lab/playground/prometheus.py). Plain `go build`,
# without upstream's builtinassets tag: no web UI (the lab uses only the HTTP API), no npm.
# About 5-8 minutes the first time.
if [ "${1:-}" = promtool ]; then
  PROMTOOL_RECIPE="promtool-recipe-3: promtool+prometheus, CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags '-s -w' + version ldflags"
  PROM_VERSION=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" {print $3}' "$here/promtool/go.mod")
  # The module's v0.3XY.Z is Prometheus 3.XY.Z (upstream's tagging since 3.0): report the latter.
  rel=${PROM_VERSION#v0.}; minor=${rel%%.*}; patch=${rel#*.}
  prom_release="${minor:0:1}.$((10#${minor:1})).$patch"
  ldflags="-s -w -X github.com/prometheus/common/version.Version=$prom_release"
  ldflags+=" -X github.com/prometheus/common/version.Revision=module-github.com/prometheus/prometheus@$PROM_VERSION"
  ldflags+=" -X github.com/prometheus/common/version.Branch=module"
  ldflags+=" -X github.com/prometheus/common/version.BuildUser=edgewatch"
  build_tool promtool "$PROMTOOL_RECIPE" "$PROM_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus" "$ldflags" \
    "$prom_release (prometheus module $PROM_VERSION)"
  exit $?
fi

# `build.sh superedge`: SuperEdge's github.com/superedge/superedge/cmd/edge-health and
# cmd/edge-health-admission through the wrapper module superedge/ (the peer system of docs/peers.md's
# comparison; `make peers`), both in one folder. The wrapper pins reflect2 v1.0.2 and json-iterator
# v1.1.12 over v0.9.0's own (see its go.mod).
if [ "${1:-}" = superedge ]; then
  SUPEREDGE_RECIPE="superedge-recipe-1: CGO_ENABLED=0 -trimpath -buildvcs=false -ldflags '-s -w' + version ldflags"
  SUPEREDGE_VERSION=$(awk '$1 == "require" && $2 == "github.com/superedge/superedge" {print $3}' "$here/superedge/go.mod")
  v=github.com/superedge/superedge/pkg/version
  ldflags="-s -w -X $v.gitVersion=$SUPEREDGE_VERSION -X $v.gitBranch=module -X $v.gitTreeState=archive"
  ldflags+=" -X $v.gitCommit=module-github.com/superedge/superedge@$SUPEREDGE_VERSION"
  build_tool superedge "$SUPEREDGE_RECIPE" "$SUPEREDGE_VERSION" \
    "github.com/superedge/superedge/cmd/edge-health github.com/superedge/superedge/cmd/edge-health-admission" "$ldflags"
  exit $?
fi

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ "$kube_dir" = kube ]; then
  for b in "${BINARIES[@]}"; do
    case " ${OPTIONAL_IN_ASSETS[*]} " in *" $b "*) continue ;; esac
    [ -x "$KUBEBUILDER_ASSETS/$b" ] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $b"; exit 1; }
  done
  log "using binaries from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS; building nothing"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

cache=${EDGEWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgewatch}
stamp=$( { printf '%s\n' "$RECIPE"; cat "$here/$kube_dir/go.mod" "$here/$kube_dir/go.sum" "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/main.go; } | sha256sum | cut -c1-12)
out="$cache/bin/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-$stamp"

missing_in() {  # $1 = folder; prints the BINARIES it lacks
  local b
  for b in "${BINARIES[@]}"; do [ -x "$1/$b" ] || printf '%s\n' "$b"; done
}

if [ -z "$(missing_in "$out")" ]; then
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build the Kubernetes binaries (https://go.dev); or set KUBEBUILDER_ASSETS"; exit 1; }

mkdir -p "$cache/bin"
exec 9>"$cache/bin/.build.lock"
flock -w 3600 9 || { log "another build has held $cache/bin/.build.lock for an hour; giving up"; exit 1; }

# A folder for the same versions from before the stamp left out this script has no .recipe file:
# hard-link its binaries (no copy, no disk) instead of rebuilding them. It stays where it is, for
# runs that still use its path.
adopted=""
if [ ! -e "$out/.recipe" ]; then
  for old in "$cache"/bin/k8s-"$KUBE_VERSION"-etcd-"$ETCD_VERSION"-*; do
    [ -d "$old" ] && [ "$old" != "$out" ] && [ ! -e "$old/.recipe" ] || continue
    case "$old" in *.tmp) continue ;; esac
    mkdir -p "$out"
    for b in "${BINARIES[@]}"; do
      [ -x "$old/$b" ] && [ ! -e "$out/$b" ] && ln "$old/$b" "$out/$b" && adopted="$old"
    done
    [ -n "$adopted" ] && { log "reusing the binaries of $old (same versions)"; break; }
  done
fi

mapfile -t missing < <(missing_in "$out")
if [ "${#missing[@]}" = 0 ]; then  # another run built them while we waited for the lock
  printf '%s\n' "$RECIPE" >"$out/.recipe"
  echo "$out"
  exit 0
fi

rm -rf "$out.tmp" && mkdir -p "$out.tmp"
trap 'rm -rf "$out.tmp"' EXIT  # a failed build leaves nothing half-made behind
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

kube_pkgs=()
for b in "${missing[@]}"; do
  if [ "$b" = etcd ]; then
    # `go build -o dir/ .` names the binary after the module path's last element: etcd.
    build_with_progress "$here/etcd" "etcd $ETCD_VERSION" "$etcd_ldflags" .
  else
    kube_pkgs+=("k8s.io/kubernetes/cmd/$b")
  fi
done
if [ "${#kube_pkgs[@]}" -gt 0 ]; then
  build_with_progress "$here/$kube_dir" "Kubernetes $KUBE_VERSION: ${kube_pkgs[*]##*/}" "$kube_ldflags" "${kube_pkgs[@]}"
fi

for b in "${missing[@]}"; do [ -x "$out.tmp/$b" ] || { log "build produced no $b"; exit 1; }; done
mkdir -p "$out"
for b in "${missing[@]}"; do mv -f "$out.tmp/$b" "$out/$b"; done
rm -rf "$out.tmp"
printf '%s\n' "$RECIPE" >"$out/.recipe"
for old in "$cache"/bin/k8s-*; do  # older stamps are dead weight (each is ~500 MB)
  case "${old##*/}" in "k8s-$OTHER_KUBE_VERSION-"*) continue ;; esac  # the other wrapper's folder stays
  [ "$old" = "$out" ] || [ "$old" = "$adopted" ] || rm -rf "$old"
done
log "built ${missing[*]} in $(( $(date +%s) - start )) s into $out"
echo "$out"
