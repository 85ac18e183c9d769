#!/usr/bin/env bash
# Start a real Kubernetes control plane on 127.0.0.1 for tests (binaries from tests/cluster/build.sh).
#
#   tests/cluster/start.sh [STATE_DIR]      # prints the state dir; KUBECONFIG=STATE_DIR/admin.kubeconfig
#   tests/cluster/stop.sh  [STATE_DIR]
#
# Starts etcd, kube-apiserver (RBAC, service-account token signing, default admission plugins plus
# a few explicit ones), kube-controller-manager, kube-scheduler and kwok (when built), waits until the
# API server is ready, writes an admin kubeconfig and creates AKS-shaped fake nodes that kwok keeps
# Ready. Certificates and keys are made with openssl in STATE_DIR (default: a new /tmp dir).
# .cache/k8s/current points at the last state dir, so stop.sh needs no argument.
#
# Node pools (counts from the environment):
#   SYSTEM_NODES (1)   aks-system-...    mode=system, no taints
#   SPOT_NODES (3)     aks-gpuspot-...   spot, taints scalesetpriority=spot:NoSchedule and sku=gpu:NoSchedule
#   ONDEMAND_NODES (2) aks-gpuondemand-... taint sku=gpu:NoSchedule
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${K8S_CACHE:-$ROOT/.cache/k8s}"
BIN="$CACHE/bin"
ETCD_BIN="${ETCD_BIN:-$BIN/etcd}"   # e.g. ETCD_BIN=/usr/bin/etcd (Debian etcd-server 3.4.23)
STATE="${1:-$(mktemp -d /tmp/spot-k8s.XXXXXX)}"
mkdir -p "$STATE/pki" "$STATE/logs"
STATE="$(cd "$STATE" && pwd)"
KUBECTL="${KUBECTL:-kubectl}"
READY_TIMEOUT="${READY_TIMEOUT:-120}"
SYSTEM_NODES="${SYSTEM_NODES:-1}" SPOT_NODES="${SPOT_NODES:-3}" ONDEMAND_NODES="${ONDEMAND_NODES:-2}"
REGION="${REGION:-eastus}"

[[ -x "$ETCD_BIN" ]] || { echo "start.sh: $ETCD_BIN missing; run tests/cluster/build.sh" >&2; exit 1; }
[[ -x "$BIN/kube-apiserver" ]] || { echo "start.sh: $BIN/kube-apiserver missing; run tests/cluster/build.sh" >&2; exit 1; }
command -v openssl >/dev/null || { echo "start.sh: openssl missing" >&2; exit 1; }

log() { echo "[start $(date -u +%H:%M:%S)] $*" >&2; }
free_port() { python3 "$ROOT/tests/ports.py"; }  # below the ephemeral range (ports.py says why)

ETCD_PORT="$(free_port)" ETCD_PEER_PORT="$(free_port)" API_PORT="$(free_port)"
SERVER="https://127.0.0.1:$API_PORT"
ln -sfn "$STATE" "$CACHE/current"
: > "$STATE/pids"

start_bg() { # NAME CMD...
  local name="$1"; shift
  "$@" > "$STATE/logs/$name.log" 2>&1 &
  echo "$name $!" >> "$STATE/pids"
  log "$name started (pid $!, log $STATE/logs/$name.log)"
}
fail() { echo "start.sh: $*" >&2; tail -n 30 "$STATE"/logs/*.log >&2 || true; KEEP_STATE=1 "$ROOT/tests/cluster/stop.sh" "$STATE" || true; exit 1; }

# ------------------------------------------------------------------ certificates (openssl)
T0=$SECONDS
P="$STATE/pki"
openssl_q() { openssl "$@" 2>/dev/null; }
openssl_q req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=spot-rebalancer-test-ca" \
  -keyout "$P/ca.key" -out "$P/ca.crt"
# cert NAME SUBJECT [SAN]
cert() {
  local name="$1" subj="$2" san="${3:-}"
  openssl_q req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$P/$name.key" -out "$P/$name.csr"
  if [[ -n "$san" ]]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > "$P/$name.ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' > "$P/$name.ext"
  fi
  openssl_q x509 -req -in "$P/$name.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -days 2 -extfile "$P/$name.ext" -out "$P/$name.crt"
}
cert apiserver "/CN=kube-apiserver" \
  "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=kubernetes-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert kwok "/O=system:masters/CN=kwok"   # kwok patches node/pod status of many nodes: admin rights
openssl_q genrsa -out "$P/sa.key" 2048
openssl_q rsa -in "$P/sa.key" -pubout -out "$P/sa.pub"
log "certificates: $((SECONDS - T0)) s"

kubeconfig() { # NAME -> STATE/NAME.kubeconfig
  cat > "$STATE/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: spot-test
  cluster: {server: "$SERVER", certificate-authority: "$P/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$P/$1.crt", client-key: "$P/$1.key"}
contexts:
- name: $1@spot-test
  context: {cluster: spot-test, user: $1}
current-context: $1@spot-test
KC
}
for k in admin controller-manager scheduler kwok; do kubeconfig "$k"; done

# ------------------------------------------------------------------ etcd
start_bg etcd "$ETCD_BIN" --name default --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null && break; sleep 0.2
done
curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null || fail "etcd did not become healthy"
log "etcd healthy at 127.0.0.1:$ETCD_PORT after $((SECONDS - T0)) s"

# ------------------------------------------------------------------ kube-apiserver
# --enable-aggregator-routing: an admission webhook's Service is dialled at its endpoints, not at
# its ClusterIP (no kube-proxy here); tests/k8s/test_webhook.py points one at a host process.
start_bg kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
  --client-ca-file "$P/ca.crt" \
  --authorization-mode RBAC --anonymous-auth=false \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
  --service-cluster-ip-range 10.0.0.0/24 \
  --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds,Priority,PodSecurity,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
  --allow-privileged=true --profiling=false --enable-priority-and-fairness=false \
  --endpoint-reconciler-type none \
  --enable-aggregator-routing=true \
  --cert-dir "$STATE/apiserver-certs"
ready=0
for _ in $(seq 1 $((READY_TIMEOUT * 2))); do
  if curl -sf --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" "$SERVER/readyz" >/dev/null; then
    ready=1; break
  fi
  kill -0 "$(awk '$1=="kube-apiserver"{print $2}' "$STATE/pids")" 2>/dev/null || fail "kube-apiserver exited"
  sleep 0.5
done
((ready)) || fail "kube-apiserver not ready after ${READY_TIMEOUT} s"
log "kube-apiserver ready at $SERVER after $((SECONDS - T0)) s"

# ------------------------------------------------------------------ controller-manager, scheduler
if [[ -x "$BIN/kube-controller-manager" ]]; then
  start_bg kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
    --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
    --service-cluster-ip-range 10.0.0.0/24 --allocate-node-cidrs=false \
    --controllers '*,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller'
else
  log "kube-controller-manager not built: skipped"
fi
if [[ -x "$BIN/kube-scheduler" ]]; then
  start_bg kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false
else
  log "kube-scheduler not built: skipped"
fi

# ------------------------------------------------------------------ kwok
if [[ -x "$BIN/kwok" && -f "$CACHE/kwok-stages.yaml" ]]; then
  # kwok's "fast" pod-ready stage, plus a start-up delay that a pod may ask for with an annotation
  # (a duration, e.g. "8s"), as a model server loads its weights: make-before-break needs it.
  awk '
    /^---/ { ready = 0 }
    /^  name: pod-ready$/ { ready = 1 }
    ready && /^  next:$/ {
      print "  delay:"
      print "    durationMilliseconds: 0"
      print "    durationFrom:"
      print "      expressionFrom: '\''.metadata.annotations[\"pod-ready.stage.kwok.x-k8s.io/delay\"]'\''"
    }
    { print }
  ' "$CACHE/kwok-stages.yaml" > "$STATE/kwok-stages.yaml"
  grep -q 'pod-ready.stage.kwok.x-k8s.io/delay' "$STATE/kwok-stages.yaml" || fail "kwok pod-ready stage not found"
  start_bg kwok "$BIN/kwok" --kubeconfig "$STATE/kwok.kubeconfig" --config "$STATE/kwok-stages.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --disregard-status-with-annotation-selector kwok.x-k8s.io/status=custom \
    --node-lease-duration-seconds 40 --cidr 10.244.0.0/16 --node-ip 10.224.0.1
else
  log "kwok not built: nodes are created but nobody keeps them Ready"
fi

# ------------------------------------------------------------------ AKS-shaped nodes
# node POOL INDEX PRIORITY(spot|regular) INSTANCE_TYPE CPU MEMORY GPUS TAINTS_YAML MODE
node() {
  local pool="$1" i="$2" prio="$3" sku="$4" cpu="$5" mem="$6" gpus="$7" taints="$8" mode="$9"
  local name zone="$REGION-$(( i % 3 + 1 ))"
  name="aks-$pool-12345678-vmss$(printf '%06d' "$i")"
  local spot_label="" gpu_labels="" gpu_cap=""
  [[ "$prio" == spot ]] && spot_label="    kubernetes.azure.com/scalesetpriority: spot"
  if (( gpus > 0 )); then
    gpu_labels="    kubernetes.azure.com/accelerator: nvidia
    sku: gpu"
    gpu_cap="    nvidia.com/gpu: \"$gpus\""
  fi
  cat <<NODE
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $name
    kubernetes.azure.com/agentpool: $pool
    agentpool: $pool
    kubernetes.azure.com/mode: $mode
    kubernetes.azure.com/role: agent
    kubernetes.azure.com/cluster: MC_spot-test_spot-test_$REGION
    node.kubernetes.io/instance-type: $sku
    beta.kubernetes.io/instance-type: $sku
    topology.kubernetes.io/region: $REGION
    topology.kubernetes.io/zone: $zone
    failure-domain.beta.kubernetes.io/region: $REGION
    failure-domain.beta.kubernetes.io/zone: $zone
$spot_label
$gpu_labels
spec:
  providerID: azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/mc_spot-test_spot-test_$REGION/providers/Microsoft.Compute/virtualMachineScaleSets/aks-$pool-12345678-vmss/virtualMachines/$i
  taints: $taints
status:
  capacity:
    cpu: "$cpu"
    memory: $mem
    pods: "110"
    ephemeral-storage: 128Gi
$gpu_cap
  allocatable:
    cpu: "$cpu"
    memory: $mem
    pods: "110"
    ephemeral-storage: 128Gi
$gpu_cap
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: fake
NODE
}
SPOT_TAINTS='[{key: kubernetes.azure.com/scalesetpriority, value: spot, effect: NoSchedule}, {key: sku, value: gpu, effect: NoSchedule}]'
GPU_TAINTS='[{key: sku, value: gpu, effect: NoSchedule}]'
{
  for ((i = 0; i < SYSTEM_NODES; i++)); do node system "$i" regular Standard_D4ds_v5 4 16Gi 0 '[]' system; done
  for ((i = 0; i < SPOT_NODES; i++)); do node gpuspot "$i" spot Standard_NC24ads_A100_v4 24 220Gi 1 "$SPOT_TAINTS" user; done
  for ((i = 0; i < ONDEMAND_NODES; i++)); do node gpuondemand "$i" regular Standard_NC24ads_A100_v4 24 220Gi 1 "$GPU_TAINTS" user; done
} | grep -v '^$' > "$STATE/nodes.yaml"
"$KUBECTL" --kubeconfig "$STATE/admin.kubeconfig" create -f "$STATE/nodes.yaml" >&2 || fail "creating nodes failed"

if [[ -x "$BIN/kwok" && -f "$CACHE/kwok-stages.yaml" ]]; then
  "$KUBECTL" --kubeconfig "$STATE/admin.kubeconfig" wait --for=condition=Ready node -l type=kwok --timeout=60s >&2 \
    || fail "kwok nodes did not become Ready"
  # The node lifecycle controller tainted them not-ready at creation; it lifts the taint a few
  # seconds after Ready. Pods would not schedule until then.
  for _ in $(seq 1 120); do
    "$KUBECTL" --kubeconfig "$STATE/admin.kubeconfig" get nodes -o jsonpath='{.items[*].spec.taints[*].key}' \
      | grep -q 'node.kubernetes.io/not-ready' || break
    sleep 0.5
  done
fi
cat > "$STATE/env" <<ENV
export KUBECONFIG=$STATE/admin.kubeconfig
export K8S_TEST_STATE=$STATE
export K8S_TEST_SERVER=$SERVER
ENV
log "cluster up in $((SECONDS - T0)) s: source $STATE/env"
echo "$STATE"
