#!/usr/bin/env bash
# Stop what tests/cluster/start.sh started and delete its state dir.
#   tests/cluster/stop.sh [STATE_DIR]     (default: .cache/k8s/current)
#   KEEP_STATE=1 tests/cluster/stop.sh    keeps the dir (logs, certificates, etcd data)
# First kwok, scheduler, controller-manager and apiserver together (SIGTERM, SIGKILL after 10 s),
# then etcd, so the apiserver never loses its storage while it is still serving.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${K8S_CACHE:-$ROOT/.cache/k8s}"
STATE="${1:-$(readlink "$CACHE/current" 2>/dev/null || true)}"
[[ -n "$STATE" && -f "$STATE/pids" ]] || { echo "stop.sh: no running cluster state found" >&2; exit 0; }

stop_all() { # NAME PID pairs
  local -a names=() pids=() ; local i t0=$SECONDS
  while (($#)); do
    if kill -0 "$2" 2>/dev/null; then kill -TERM "$2"; names+=("$1"); pids+=("$2"); fi
    shift 2
  done
  for _ in $(seq 1 100); do
    local alive=0
    for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "stop.sh: ${names[$i]} (${pids[$i]}) ignored SIGTERM for 10 s: SIGKILL" >&2
      kill -KILL "${pids[$i]}"
    fi
  done
  ((${#names[@]})) && echo "stop.sh: stopped ${names[*]} in $((SECONDS - t0)) s" >&2
  return 0
}
# shellcheck disable=SC2046
stop_all $(awk '$1 != "etcd"' "$STATE/pids")
# shellcheck disable=SC2046
stop_all $(awk '$1 == "etcd"' "$STATE/pids")
: > "$STATE/pids"
[[ "$(readlink "$CACHE/current" 2>/dev/null)" == "$STATE" ]] && rm -f "$CACHE/current"
if [[ "${KEEP_STATE:-0}" != 1 && "$STATE" == /tmp/spot-k8s.* ]]; then rm -rf "$STATE"; fi
exit 0
