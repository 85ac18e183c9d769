"""The scheduler: binds Pending pods to nodes, or says why not as upstream does.

Filters: node ready taints (the node controller's `not-ready`/`unreachable` taints), cordon
(`spec.unschedulable`, unless the pod tolerates `node.kubernetes.io/unschedulable` like
DaemonSet pods), NoSchedule/NoExecute taints, nodeSelector, required node affinity, resource fit
(cpu, memory, pods, extended resources such as `nvidia.com/gpu`). Score, best first: the
ranking `rebalancer simulate` uses too (`rebalancer.upstream.scheduling`: fewer untolerated
PreferNoSchedule taints, then preferred node-affinity weight, then fewer pods of the same
controller on the node), then least allocated.

Pods with the same controller and scheduling spec are placed as one group with a heap over the
feasible nodes, so placing 50 000 pods is O(pods log nodes), not O(pods x nodes). A pod that fits
nowhere gets `PodScheduled=False`, reason `Unschedulable`, message like upstream's "0/5 nodes
are available: 2 node(s) had untolerated taint {sku: gpu}, 3 Insufficient nvidia.com/gpu.".
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from typing import Any

from rebalancer.upstream.scheduling import node_preference
from rebalancer_sim import resources as R
from rebalancer_sim.objects import Obj, controller_ref, is_terminating, pod_requests, with_condition
from rebalancer_sim.scheduling import (
    UNSCHEDULABLE_TAINT,
    allocatable,
    insufficient,
    matches_node_selector_and_affinity,
    prefer_no_schedule_penalty,
    preferred_affinity_score,
    taint_text,
    tolerates,
    untolerated_taint,
)
from rebalancer_sim.store import Change, Store, format_time

PodKey = tuple[str, str]


class Scheduler:
    def __init__(self, store: Store, *, scheduler_name: str = "default-scheduler") -> None:
        self.store = store
        self.scheduler_name = scheduler_name
        self._pending: dict[PodKey, None] = {}
        self._used: dict[str, dict[str, float]] = {}  # node -> summed requests of its pods
        self._cluster_changed = True
        self._allocatable: dict[str, tuple[str, dict[str, float]]] = {}
        self._static: dict[str, dict[str, tuple[str, str, int, int]]] = {}
        self.bound = 0
        store.listeners.append(self._on_change)
        for pod in store.items(R.PODS):
            self._on_change(Change(R.PODS, "ADDED", None, pod, b"", 0))

    # ---- bookkeeping -------------------------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        if change.resource is R.NODES:
            self._cluster_changed = True
            return
        if change.resource is not R.PODS:
            return
        old, new = change.old, None if change.type == "DELETED" else change.new
        old_node = _counted_node(old)
        new_node = _counted_node(new)
        if old_node != new_node or (old_node and new is None):
            if old_node and old is not None:
                self._add_usage(old_node, pod_requests(old), -1.0)
                self._cluster_changed = True  # resources freed
            if new_node and new is not None:
                self._add_usage(new_node, pod_requests(new), 1.0)
        key = (change.new["metadata"].get("namespace", ""), change.new["metadata"]["name"])
        if new is not None and self._wants(new):
            self._pending[key] = None
            if old is not None and old.get("spec") != new.get("spec"):
                self._cluster_changed = True  # e.g. a toleration added: try it again
        else:
            self._pending.pop(key, None)

    def _wants(self, pod: Obj) -> bool:
        spec = pod.get("spec", {})
        return (
            not spec.get("nodeName")
            and not is_terminating(pod)
            and spec.get("schedulerName", "default-scheduler") == self.scheduler_name
            and pod.get("status", {}).get("phase", "Pending") == "Pending"
        )

    def _add_usage(self, node: str, requests: dict[str, float], sign: float) -> None:
        used = self._used.setdefault(node, {})
        for name, amount in requests.items():
            used[name] = used.get(name, 0.0) + sign * amount

    def used_on(self, node_name: str) -> dict[str, float]:
        return dict(self._used.get(node_name, {}))

    def pending_keys(self) -> list[PodKey]:
        return list(self._pending)

    def pending_count(self) -> int:
        return len(self._pending)

    # ---- scheduling --------------------------------------------------------------------------

    def reconcile(self) -> int:
        """One scheduling pass over pending pods; returns how many were bound."""
        if not self._pending:
            return 0
        retry_all = self._cluster_changed
        self._cluster_changed = False
        nodes = list(self.store.items(R.NODES))
        groups: dict[str, list[Obj]] = {}
        for key in list(self._pending):
            pod = self.store.get(R.PODS, *key)
            if pod is None or not self._wants(pod):
                self._pending.pop(key, None)
                continue
            if not retry_all and _already_unschedulable(pod):
                continue
            groups.setdefault(_signature(pod), []).append(pod)
        bound = 0
        for pods in groups.values():
            bound += self._schedule_group(pods, nodes)
        self.bound += bound
        return bound

    def _schedule_group(self, pods: list[Obj], nodes: list[Obj]) -> int:
        sample = pods[0]
        spec = sample["spec"]
        tolerations = spec.get("tolerations") or []
        requests = pod_requests(sample)
        ref = controller_ref(sample)
        owner_uid = ref["uid"] if ref else None
        tolerates_cordon = tolerates(
            tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        )
        reasons: Counter[str] = Counter()
        owner_counts = self._owner_counts(owner_uid)
        # (preference, least allocated, name); `static_scores`: name -> (affinity, penalty).
        heap: list[tuple[tuple[int, int, int], float, str]] = []
        static_scores: dict[str, tuple[int, int]] = {}
        free_of: dict[str, dict[str, float]] = {}
        pinned = _pinned_node_names(spec)
        if pinned is not None:  # DaemonSet pods: one node by name, skip the other 4 999
            reasons["node(s) didn't match Pod's node affinity/selector"] += sum(
                1 for node in nodes if node["metadata"]["name"] not in pinned
            )
            nodes = [node for node in nodes if node["metadata"]["name"] in pinned]
        static = self._static_cache(spec)
        for node in nodes:
            name = node["metadata"]["name"]
            version = node["metadata"]["resourceVersion"]
            cached = static.get(name)
            if cached is None or cached[0] != version:
                cached = (version, *self._static_filter(spec, tolerations, tolerates_cordon, node))
                static[name] = cached
            _, reason, preferred, penalty = cached
            if reason:
                reasons[reason] += 1
                continue
            capacity = self._capacity(node)
            used = self._used.get(name, {})
            free = {k: v - used.get(k, 0.0) for k, v in capacity.items()}
            failures = insufficient(requests, free)
            if failures:
                for failure in failures:
                    reasons[failure] += 1
                continue
            free_of[name] = free
            static_scores[name] = preferred, penalty
            preference = _preference(preferred, penalty, owner_counts.get(name, 0))
            heapq.heappush(heap, (preference, _allocated_fraction(free, capacity), name))
        capacities = {
            n["metadata"]["name"]: self._capacity(n)
            for n in nodes
            if n["metadata"]["name"] in free_of
        }
        bound = 0
        now = format_time(self.store.clock.now())
        for pod in pods:
            placed = False
            while heap:
                _, _, name = heapq.heappop(heap)
                free = free_of[name]
                failures = insufficient(requests, free)
                if failures:
                    for failure in failures:
                        reasons[failure] += 1
                    continue
                for resource_name, amount in requests.items():
                    free[resource_name] = free.get(resource_name, 0.0) - amount
                self._bind(pod, name, now)
                bound += 1
                placed = True
                owner_counts[name] += 1
                preference = _preference(*static_scores[name], owner_counts[name])
                fraction = _allocated_fraction(free, capacities[name])
                heapq.heappush(heap, (preference, fraction, name))
                break
            if not placed:
                self._mark_unschedulable(pod, len(nodes), reasons, now)
        return bound

    def _static_cache(self, spec: Obj) -> dict[str, tuple[str, str, int, int]]:
        """Per scheduling constraints (tolerations, selector, affinity): node name ->
        (node resourceVersion, failure reason or "", preferred-affinity score, penalty). Pods
        of a hundred Deployments share a few constraint sets, so filtering is mostly lookups."""
        key = json.dumps(
            [spec.get("tolerations"), spec.get("nodeSelector"), spec.get("affinity")],
            sort_keys=True,
        )
        cache = self._static.get(key)
        if cache is None:
            if len(self._static) >= 64:
                self._static.clear()  # bounded: constraint sets come and go
            cache = self._static[key] = {}
        return cache

    @staticmethod
    def _static_filter(
        spec: Obj, tolerations: list[Obj], tolerates_cordon: bool, node: Obj
    ) -> tuple[str, int, int]:
        node_spec = node.get("spec", {})
        taints = node_spec.get("taints") or []
        if is_terminating(node):
            return "node(s) were being deleted", 0, 0
        if node_spec.get("unschedulable") and not tolerates_cordon:
            return "node(s) were unschedulable", 0, 0
        taint = untolerated_taint(tolerations, taints)
        if taint is not None:
            return f"node(s) had untolerated taint {taint_text(taint)}", 0, 0
        if not matches_node_selector_and_affinity(spec, node):
            return "node(s) didn't match Pod's node affinity/selector", 0, 0
        return (
            "",
            preferred_affinity_score(spec, node),
            prefer_no_schedule_penalty(tolerations, taints),
        )

    def _capacity(self, node: Obj) -> dict[str, float]:
        """Parsed allocatable, cached per node resourceVersion (parsing dominated scheduling)."""
        name, version = node["metadata"]["name"], node["metadata"]["resourceVersion"]
        cached = self._allocatable.get(name)
        if cached is None or cached[0] != version:
            cached = (version, allocatable(node))
            self._allocatable[name] = cached
        return cached[1]

    def _owner_counts(self, owner_uid: str | None) -> Counter[str]:
        counts: Counter[str] = Counter()
        if owner_uid is None:
            return counts
        for resource, obj in self.store.dependents_of(owner_uid):
            if resource is R.PODS and not is_terminating(obj):
                node = obj.get("spec", {}).get("nodeName")
                if node:
                    counts[node] += 1
        return counts

    def _bind(self, pod: Obj, node_name: str, now: str) -> None:
        updated = dict(pod)
        updated["spec"] = dict(pod["spec"], nodeName=node_name)
        status = dict(pod.get("status") or {})
        status["conditions"] = with_condition(
            [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"],
            "PodScheduled",
            "True",
            now=now,
        )
        updated["status"] = status
        self.store.update(R.PODS, updated)

    def _mark_unschedulable(
        self, pod: Obj, node_count: int, reasons: Counter[str], now: str
    ) -> None:
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        message = f"0/{node_count} nodes are available"
        message += f": {parts}." if parts else "."
        message += (
            f" preemption: 0/{node_count} nodes are available: {node_count} Preemption is not "
            "helpful for scheduling."
        )
        status = dict(pod.get("status") or {})
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("message") == message:
            return
        status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
                "reason": "Unschedulable",
                "message": message,
            }
        ]
        updated = dict(pod)
        updated["status"] = status
        self.store.update(R.PODS, updated)


def _preference(preferred: int, penalty: int, owner_pods: int) -> tuple[int, int, int]:
    return node_preference(
        untolerated_prefer_no_schedule=penalty,
        preferred_affinity_weight=preferred,
        owner_pods_on_node=owner_pods,
    )


def _pinned_node_names(spec: Obj) -> frozenset[str] | None:
    """Node names a pod is pinned to by a `metadata.name` matchFields term (DaemonSet pods)."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    names: set[str] = set()
    for term in terms:
        fields = term.get("matchFields") or []
        pinned = [
            f for f in fields if f.get("key") == "metadata.name" and f.get("operator") == "In"
        ]
        if not pinned:
            return None  # some term does not pin: any node may match it
        for field in pinned:
            names.update(field.get("values") or [])
    return frozenset(names) if terms else None


def _counted_node(pod: Obj | None) -> str | None:
    if pod is None:
        return None
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return None
    node = pod.get("spec", {}).get("nodeName")
    return str(node) if node else None


def _already_unschedulable(pod: Obj) -> bool:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return True
    return False


def _signature(pod: Obj) -> str:
    spec = pod["spec"]
    ref = controller_ref(pod)
    relevant: dict[str, Any] = {
        "owner": ref["uid"] if ref else pod["metadata"]["uid"],
        "tolerations": spec.get("tolerations"),
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": spec.get("affinity"),
        "requests": pod_requests(pod),
    }
    return json.dumps(relevant, sort_keys=True)


def _allocated_fraction(free: dict[str, float], capacity: dict[str, float]) -> float:
    fractions = [
        1.0 - free.get(name, 0.0) / capacity[name]
        for name in ("cpu", "memory")
        if capacity.get(name)
    ]
    return max(fractions) if fractions else 0.0
