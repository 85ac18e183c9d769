#!/usr/bin/env bash
# Build a real Kubernetes control plane for tests, once, from Go modules at pinned versions.
#
#   tests/cluster/build.sh            # build what is missing into .cache/k8s/bin
#   tests/cluster/build.sh --force    # rebuild everything
#   tests/cluster/build.sh --prune    # drop each build module's Go module and build caches (9 GB
#                                     # in all) once its binaries are out, keeping only the
#                                     # binaries (~550 MB) for a CI cache
#   tests/cluster/build.sh etcd       # one target: etcd, kubernetes, kwok, karpenter, keda
#
# Everything (binaries, Go module cache, Go build cache, build modules, timing log) lives under
# .cache/k8s/ (ignored by git), so CI can cache that one folder. A binary is rebuilt only when its
# pinned version changes (a stamp file beside it records what it was built from).
# Heavy steps run under `nice -n 19`; go builds use at most BUILD_JOBS parallel jobs (default 2).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.4}"      # kube-apiserver, kube-controller-manager, kube-scheduler
ETCD_VERSION="${ETCD_VERSION:-v3.6.4}"     # the etcd that k8s.io/kubernetes v1.34.4's go.mod uses
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"     # sigs.k8s.io/kwok
KARPENTER_VERSION="${KARPENTER_VERSION:-v1.15.0}"   # sigs.k8s.io/karpenter, its KWOK cloud provider
KARPENTER_GO="${KARPENTER_GO:-go1.27.3}"  # karpenter v1.14+ needs a newer Go than the machine's
# KEDA's operator: v2.21.0 is the newest that builds here (v2.21.1's go.mod asks for Go 1.27.4,
# newer than the one approved toolchain, 1.27.3); v2.21.0 needs only Go 1.26.
KEDA_VERSION="${KEDA_VERSION:-v2.21.0}"    # github.com/kedacore/keda/v2
BUILD_JOBS="${BUILD_JOBS:-2}"

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${K8S_CACHE:-$ROOT/.cache/k8s}"
BIN="$CACHE/bin"
MODS="$CACHE/modules"
LOG="$CACHE/build-times.log"
FORCE=0 PRUNE=0 what=()
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    --prune) PRUNE=1 ;;
    etcd|kubernetes|kwok|karpenter|keda) what+=("$a") ;;
    *) echo "build.sh: unknown argument $a (--force, --prune, etcd, kubernetes, kwok, karpenter, keda)" >&2; exit 2 ;;
  esac
done
((${#what[@]})) || what=(etcd kubernetes kwok karpenter keda)

mkdir -p "$BIN" "$MODS"
export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gocache" GOPATH="$CACHE/gopath"
export GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
GO_VERSION="$(go env GOVERSION)"

NICE=(nice -n 19)
# No debug information: -ldflags "-s -w" drops it at link anyway, and not making it saves about
# 4 % of the compiler's CPU (kwok from empty caches: 257 s instead of 267).
NO_DWARF="-dwarf=false"

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }

# drop DIR...: delete caches without waiting for it: moved aside at once (the same filesystem),
# deleted in the background beside whatever runs next (4 GB took 16 s).
drop() {
  local trash d
  trash="$(mktemp -d "$CACHE/trash.XXXXXX")"
  # A folder gone meanwhile is fine: another build.sh may be deleting it (the tests call this
  # script beside each other while a prune's deletion still runs).
  for d in "$@"; do mv "$d" "$trash"/ 2>/dev/null || true; done
  (chmod -R u+w "$trash"; rm -rf "$trash") >/dev/null 2>&1 &
}
((!PRUNE)) || drop "$CACHE"/trash.*  # what an interrupted one left

# timed LABEL CMD... : run CMD niced (a function of this script nices its own steps), log its
# wall time.
timed() {
  local label="$1"; shift
  local t0=$SECONDS
  if declare -F "$1" >/dev/null; then "$@"; else "${NICE[@]}" "$@"; fi
  log "$label: $((SECONDS - t0)) s"
}

# go_build OUT LDFLAGS PKG...: `go build -o OUT` of the main packages PKG..., in stages;
# GCFLAGS: more compiler flags for every package.
# A `go build` keeps every archive it compiles in its work folder (under /tmp) until it exits,
# as much again as it adds to GOCACHE: the three builds side by side held 4 GB there on top of
# 9 GB of caches, and a CI machine ran out of disk. So the packages they import are compiled
# first in STAGES runs of their own, in dependency order (`go list -deps` lists a package after
# what it imports): each run's folder holds only its share and is gone when it ends, and the
# last run finds everything in GOCACHE and only links.
STAGES="${STAGES:-4}"
go_build() {
  local out=$1 ld=$2; shift 2
  local flags=(-p "$BUILD_JOBS" -trimpath "-gcflags=all=$NO_DWARF ${GCFLAGS:-}") deps=() i n
  mapfile -t deps < <(go list -deps \
    -f '{{if and (not .Standard) (ne .Name "main")}}{{.ImportPath}}{{end}}' "$@" | grep .)
  n=$(( (${#deps[@]} + STAGES - 1) / STAGES ))
  for ((i = 0; i < ${#deps[@]}; i += n)); do
    "${NICE[@]}" go build "${flags[@]}" "${deps[@]:i:n}"
  done
  "${NICE[@]}" go build "${flags[@]}" -ldflags "$ld" -o "$out" "$@"
}

up_to_date() { # NAME STAMP
  [[ $FORCE == 0 && -x "$BIN/$1" && "$(cat "$BIN/$1.stamp" 2>/dev/null)" == "$2" ]]
}

# ---------------------------------------------------------------- Kubernetes control plane
# One build module for the Kubernetes binaries and etcd: k8s.io/kubernetes's go.mod already pins
# go.etcd.io/etcd/server/v3 (its integration tests run that etcd), so etcd is built from exactly
# those versions and shares every package it has in common with the apiserver (grpc, protobuf,
# the etcd client...) instead of compiling them a second time.
K8S_MODULE="$MODS/control-plane-$K8S_VERSION-etcd-$ETCD_VERSION"
kubernetes_module() {
  local dir="$K8S_MODULE"
  mkdir -p "$dir"
  [[ ! -f "$dir/go.sum" || $FORCE == 1 ]] || return 0
  local pkgs=(kube-apiserver kube-controller-manager kube-scheduler)
  pkgs=("${pkgs[@]/#/k8s.io/kubernetes/cmd/}")
  # k8s.io/kubernetes's go.mod points every staging module at ./staging/src/...; a module that
  # depends on it must replace each of them with the published v0.<minor>.<patch> instead.
  local staging="v0.${K8S_VERSION#v1.}"
  local gomod
  (cd "$dir" && timed "download k8s.io/kubernetes@$K8S_VERSION" \
    go mod download -json k8s.io/kubernetes@"$K8S_VERSION" > "$dir/download.json")
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' "$dir/download.json")"
  {
    echo "module spot-rebalancer/k8s-build"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } > "$dir/go.mod"
  (cd "$dir" && timed "resolve kubernetes and etcd deps (go get)" \
    go get "${pkgs[@]/%/@$K8S_VERSION}" go.etcd.io/etcd/server/v3@"$ETCD_VERSION")
}

# One `go build` for every Kubernetes binary and etcd that is missing: one action graph, so what
# they share compiles once and the links (one core each, 10-30 s apiece) run beside the compiles
# and each other instead of one after the other.
build_control_plane() {
  local k8s_stamp="k8s.io/kubernetes@$K8S_VERSION go=$GO_VERSION"
  local etcd_stamp="go.etcd.io/etcd/server/v3@$ETCD_VERSION with k8s.io/kubernetes@$K8S_VERSION go=$GO_VERSION"
  local todo=() pkgs=() c
  if wanted kubernetes; then
    for c in kube-apiserver kube-controller-manager kube-scheduler; do
      up_to_date "$c" "$k8s_stamp" || { todo+=("$c"); pkgs+=("k8s.io/kubernetes/cmd/$c"); }
    done
  fi
  if wanted etcd && ! up_to_date etcd "$etcd_stamp"; then
    todo+=(etcd); pkgs+=(go.etcd.io/etcd/server/v3)
  fi
  if ! ((${#todo[@]})); then
    ! { wanted kubernetes || wanted etcd; } || log "kubernetes $K8S_VERSION and etcd $ETCD_VERSION: up to date"
    return
  fi
  kubernetes_module
  local dir="$K8S_MODULE" out="$K8S_MODULE/out/"
  local ld="-s -w"
  ld+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ld+=" -X k8s.io/component-base/version.gitMajor=1"
  ld+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
  ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  rm -rf "$out" && mkdir -p "$out"
  (cd "$dir" && timed "build ${todo[*]} (kubernetes $K8S_VERSION, etcd $ETCD_VERSION)" \
    go_build "$out" "$ld" "${pkgs[@]}")
  # Go names a binary after its package path's last element before a major version: etcd's
  # server/v3 comes out as "server".
  [[ ! -e "$out/server" ]] || mv "$out/server" "$out/etcd"
  for c in "${todo[@]}"; do
    mv "$out/$c" "$BIN/$c"
    if [[ $c == etcd ]]; then echo "$etcd_stamp"; else echo "$k8s_stamp"; fi > "$BIN/$c.stamp"
  done
}

# ---------------------------------------------------------------- kwok and Karpenter
# One build module for kwok and Karpenter's KWOK provider: both are built on the same Kubernetes
# libraries (k8s.io/* v0.36, controller-runtime, ...), about three quarters of kwok's packages, so
# compiled once they are shared. Karpenter's go.mod needs a newer Go than the machine's, so both
# are built with that toolchain: GOTOOLCHAIN fetches it through the module proxy (into GOMODCACHE).
NODES_MODULE="$MODS/kwok-$KWOK_VERSION-karpenter-$KARPENTER_VERSION"
# Its own Go caches: built with another Go on other k8s.io/* versions, it shares no compiled
# package with the other modules, so with --prune its 2 GB go as soon as it is done, minutes
# before the others are (the three builds' peak: 10.9 GB of disk without this, 9.3 with it).
NODES_GOMOD="$CACHE/gomod-nodes" NODES_GOCACHE="$CACHE/gocache-nodes"
nodes_go() { GOTOOLCHAIN="$KARPENTER_GO" "$@"; }
nodes_module() {
  mkdir -p "$NODES_MODULE"
  [[ ! -f "$NODES_MODULE/go.sum" || $FORCE == 1 ]] || return 0
  printf 'module spot-rebalancer/nodes-build\n\ngo 1.24\n\nrequire (\n\tsigs.k8s.io/kwok %s\n\tsigs.k8s.io/karpenter %s\n)\n' \
    "$KWOK_VERSION" "$KARPENTER_VERSION" > "$NODES_MODULE/go.mod"
  (cd "$NODES_MODULE" && nodes_go timed "resolve kwok and karpenter deps (go get)" \
    go get sigs.k8s.io/kwok/cmd/kwok@"$KWOK_VERSION" sigs.k8s.io/karpenter/kwok@"$KARPENTER_VERSION")
}

# kwok and Karpenter's KWOK provider in one `go build` (one action graph, as above). Karpenter's
# main package is tests/cluster/karpenter-kwok/main.go (below), copied into the build module: Go
# refuses overlays of files in GOMODCACHE. Its stamp carries the file's hash, so editing it rebuilds.
KARPENTER_MAIN="$ROOT/tests/cluster/karpenter-kwok/main.go"
build_nodes() {
  export GOMODCACHE="$NODES_GOMOD" GOCACHE="$NODES_GOCACHE"  # in this background job only
  local kwok_stamp="sigs.k8s.io/kwok@$KWOK_VERSION with sigs.k8s.io/karpenter@$KARPENTER_VERSION go=$KARPENTER_GO"
  local main_hash; main_hash="$(sha256sum "$KARPENTER_MAIN" | cut -c1-12)"
  local karpenter_stamp="sigs.k8s.io/karpenter@$KARPENTER_VERSION with sigs.k8s.io/kwok@$KWOK_VERSION go=$KARPENTER_GO main.go=$main_hash"
  local todo=() pkgs=() c
  if wanted kwok && ! { up_to_date kwok "$kwok_stamp" && [[ -f "$CACHE/kwok-stages.yaml" ]]; }; then
    todo+=(kwok); pkgs+=(sigs.k8s.io/kwok/cmd/kwok)
  fi
  if wanted karpenter && ! up_to_date karpenter-kwok "$karpenter_stamp"; then
    todo+=(karpenter-kwok); pkgs+=(./karpenter-kwok)
  fi
  if ((${#todo[@]})); then
    nodes_module
    local out="$NODES_MODULE/out/"
    rm -rf "$out" && mkdir -p "$out" "$NODES_MODULE/karpenter-kwok"
    cp "$KARPENTER_MAIN" "$NODES_MODULE/karpenter-kwok/main.go"
    (cd "$NODES_MODULE" && nodes_go timed "build ${todo[*]} (kwok $KWOK_VERSION, karpenter $KARPENTER_VERSION)" \
      go_build "$out" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" "${pkgs[@]}")
    for c in "${todo[@]}"; do mv "$out/$c" "$BIN/$c"; done
    [[ " ${todo[*]} " != *" kwok "* ]] || { echo "$kwok_stamp" > "$BIN/kwok.stamp"; write_kwok_stages; }
    if [[ " ${todo[*]} " == *" karpenter-kwok "* ]]; then
      echo "$karpenter_stamp" > "$BIN/karpenter-kwok.stamp"
      rm -f "$CACHE/karpenter-crds.yaml"
    fi
  elif wanted kwok || wanted karpenter; then
    log "kwok $KWOK_VERSION and karpenter $KARPENTER_VERSION: up to date"
  fi
  ! wanted karpenter || [[ -f "$CACHE/karpenter-crds.yaml" ]] || write_karpenter_crds
  if ((PRUNE)) && [[ -e $GOMODCACHE || -e $GOCACHE ]]; then
    drop "$GOMODCACHE" "$GOCACHE"
    log "kwok and karpenter: dropped their Go caches"
  fi
}

# kwok itself embeds no stages (kwokctl passes them): take the "fast" node and pod stages and the
# lease heartbeat from the kwok module at the pinned version, as one --config file for start.sh.
write_kwok_stages() {
  local src="$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage" f
  [[ -d "$src" ]] || (nodes_module && cd "$NODES_MODULE" && nodes_go go mod download sigs.k8s.io/kwok@"$KWOK_VERSION")
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; cat "$src/$f"
  done > "$CACHE/kwok-stages.yaml"
}

# ---------------------------------------------------------------- Karpenter (KWOK cloud provider)
# Karpenter core with its KWOK cloud provider: it launches NodeClaims as kwok-managed Nodes
# (annotation kwok.x-k8s.io/node=fake, which start.sh's kwok manages). Its main package is
# upstream's kwok/main.go with one addition: the cloud provider also declares
# karpenter-provider-azure's repair policy for PreemptionScheduled, which acts only with
# FEATURE_GATES=NodeRepair=true (docs/karpenter.md).

# Karpenter's CRDs from the same module at the pinned version: NodePool, NodeClaim, NodeOverlay,
# CapacityBuffer (pkg/apis/crds) and the KWOK provider's KWOKNodeClass (kwok/apis/crds), as one
# file beside the binary (it outlives a --prune).
write_karpenter_crds() {
  local src="$GOMODCACHE/sigs.k8s.io/karpenter@$KARPENTER_VERSION" f
  [[ -d "$src" ]] || (nodes_module && cd "$NODES_MODULE" \
    && nodes_go go mod download sigs.k8s.io/karpenter@"$KARPENTER_VERSION")
  for f in "$src"/pkg/apis/crds/*.yaml "$src"/kwok/apis/crds/*.yaml; do
    echo "---"; cat "$f"
  done > "$CACHE/karpenter-crds.yaml"
}

# ---------------------------------------------------------------- KEDA
# KEDA's operator (the ScaledObject controller that makes and owns an HPA per ScaledObject), for
# the tests of availability targets on KEDA-scaled Deployments. Its own build module: KEDA pins
# k8s.io/* and controller-runtime versions of its own, and its scalers bring most cloud SDKs.
# A module that depends on KEDA does not inherit its go.mod's replace and exclude directives, so
# they are copied (one line each in KEDA's go.mod).
KEDA_MODULE="$MODS/keda-$KEDA_VERSION"
keda_module() {
  mkdir -p "$KEDA_MODULE"
  [[ ! -f "$KEDA_MODULE/go.sum" || $FORCE == 1 ]] || return 0
  local gomod
  (cd "$KEDA_MODULE" && timed "download github.com/kedacore/keda/v2@$KEDA_VERSION" \
    go mod download -json github.com/kedacore/keda/v2@"$KEDA_VERSION" > "$KEDA_MODULE/download.json")
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' "$KEDA_MODULE/download.json")"
  {
    printf 'module spot-rebalancer/keda-build\n\ngo %s\n\n' "$(sed -n 's/^go //p' "$gomod")"
    printf 'require github.com/kedacore/keda/v2 %s\n\n' "$KEDA_VERSION"
    grep -E '^(replace|exclude) [^(]' "$gomod" || true
  } > "$KEDA_MODULE/go.mod"
  (cd "$KEDA_MODULE" && timed "resolve keda deps (go get)" \
    go get github.com/kedacore/keda/v2/cmd/operator@"$KEDA_VERSION")
}

build_keda() {
  wanted keda || return 0
  local stamp="github.com/kedacore/keda/v2@$KEDA_VERSION go=$GO_VERSION"
  if up_to_date keda-operator "$stamp"; then
    log "keda $KEDA_VERSION: up to date"
  else
    keda_module
    local out="$KEDA_MODULE/out/"
    rm -rf "$out" && mkdir -p "$out"
    # Not optimized (-N -l): the tests only need it to make one HPA, and its 3300 packages
    # (every scaler's cloud SDK) compiled in 468 s of CPU instead of 653; its test took 94 s
    # against 82.
    (cd "$KEDA_MODULE" && GCFLAGS="-N -l" timed "build keda-operator (keda $KEDA_VERSION)" \
      go_build "$out" "-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION" \
        github.com/kedacore/keda/v2/cmd/operator)
    mv "$out/operator" "$BIN/keda-operator"
    echo "$stamp" > "$BIN/keda-operator.stamp"
    rm -f "$CACHE/keda-crds.yaml"
  fi
  [[ -f "$CACHE/keda-crds.yaml" ]] || write_keda_crds
}

# KEDA's CRDs (ScaledObject, ScaledJob, TriggerAuthentication, ...) from the module at the pinned
# version, as one file beside the binary (it outlives a --prune).
write_keda_crds() {
  local src="$GOMODCACHE/github.com/kedacore/keda/v2@$KEDA_VERSION" f
  [[ -d "$src" ]] || (keda_module && cd "$KEDA_MODULE" \
    && go mod download github.com/kedacore/keda/v2@"$KEDA_VERSION")
  for f in "$src"/config/crd/bases/*.yaml; do
    echo "---"; cat "$f"
  done > "$CACHE/keda-crds.yaml"
}

wanted() { [[ " ${what[*]} " == *" $1 "* ]]; }

# The three build modules side by side (all niced, -p BUILD_JOBS each): their downloads overlap,
# and each fills the others' single-threaded steps (go get, links) with compiles.
t0=$SECONDS
build_control_plane & control_plane=$!
build_nodes & nodes=$!
build_keda & keda=$!
status=0
wait "$control_plane" || status=$?
wait "$nodes" || status=$?
wait "$keda" || status=$?
((status == 0)) || { log "build.sh failed (exit $status)"; exit "$status"; }
if ((PRUNE)); then
  drop "$GOMODCACHE" "$GOCACHE" "$GOPATH" "$NODES_GOMOD" "$NODES_GOCACHE"
  log "pruned the Go module and build caches"
fi
log "build.sh total: $((SECONDS - t0)) s; cache: $(du -sh --exclude='trash.*' "$CACHE" | cut -f1) (bin $(du -sh "$BIN" | cut -f1)); $(df -h --output=avail "$CACHE" | tail -1 | tr -d ' ') free"
