#!/usr/bin/env bash
# Stop what tests/cluster/start.sh started (in reverse order) and delete its state dir.
#   tests/cluster/stop.sh [STATE_DIR]     (default: .cache/k8s/current)
#   KEEP_STATE=1 tests/cluster/stop.sh    keeps the dir (logs, certificates, etcd data)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${K8S_CACHE:-$ROOT/.cache/k8s}"
STATE="${1:-$(readlink "$CACHE/current" 2>/dev/null || true)}"
[[ -n "$STATE" && -f "$STATE/pids" ]] || { echo "stop.sh: no running cluster state found" >&2; exit 0; }
# Reverse order: kwok, scheduler, controller-manager, apiserver, etcd.
tac "$STATE/pids" | while read -r name pid; do
  kill -0 "$pid" 2>/dev/null || continue
  kill -TERM "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "stop.sh: $name ($pid) ignored SIGTERM for 10 s; SIGKILL" >&2; kill -KILL "$pid"
  fi
  echo "stop.sh: $name ($pid) stopped" >&2
done
: > "$STATE/pids"
[[ "$(readlink "$CACHE/current" 2>/dev/null)" == "$STATE" ]] && rm -f "$CACHE/current"
if [[ "${KEEP_STATE:-0}" != 1 && "$STATE" == /tmp/spot-k8s.* ]]; then rm -rf "$STATE"; fi
