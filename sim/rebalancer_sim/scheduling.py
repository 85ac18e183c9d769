"""Pure predicates shared by the scheduler, the DaemonSet controller and the autoscaler:
taints and tolerations, node selectors and affinity, resource fit.

They take plain dicts and return facts; nobody here writes anything. Taints, tolerations and
node affinity are Kubernetes' rules in `rebalancer.upstream.placement`, the ones
`rebalancer simulate`'s world follows too; here they take the emulator's Node objects.
"""

from __future__ import annotations

from typing import Any

from rebalancer.upstream import placement
from rebalancer_sim.objects import Obj, parse_quantity

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def toleration_matches(toleration: Obj, taint: Obj) -> bool:
    return placement.tolerates(toleration, taint)


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    return placement.tolerated(tolerations, taint)


def untolerated_taint(tolerations: list[Obj], taints: list[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint not tolerated (PreferNoSchedule never blocks)."""
    blocking = placement.untolerated(tolerations, taints)
    return dict(blocking[0]) if blocking else None


def prefer_no_schedule_penalty(tolerations: list[Obj], taints: list[Obj]) -> int:
    return placement.untolerated_prefer_no_schedule(tolerations, taints)


def matches_node_selector_and_affinity(pod_spec: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    return placement.fits_node_selector_and_affinity(pod_spec, labels, node["metadata"]["name"])


def preferred_affinity_score(pod_spec: Obj, node: Obj) -> int:
    labels = node["metadata"].get("labels") or {}
    return placement.preferred_affinity_weight(pod_spec, labels, node["metadata"]["name"])


def allocatable(node: Obj) -> dict[str, float]:
    return {
        name: parse_quantity(value)
        for name, value in (node.get("status", {}).get("allocatable") or {}).items()
    }


def insufficient(requests: dict[str, float], free: dict[str, float]) -> list[str]:
    """Upstream's fit failures: `Insufficient cpu`, `Too many pods`."""
    failures = []
    for name, amount in requests.items():
        if amount <= 0:
            continue
        if name == "pods":
            if free.get("pods", 0.0) < amount:
                failures.append("Too many pods")
            continue
        if name not in ("cpu", "memory") and "/" not in name and name not in free:
            continue  # e.g. ephemeral-storage the node does not report
        if free.get(name, 0.0) + 1e-9 < amount:
            failures.append(f"Insufficient {name}")
    return failures


def taint_text(taint: Obj) -> str:
    return f"{{{taint.get('key', '')}: {taint.get('value', '')}}}"


def parse_taint(text: str) -> dict[str, Any]:
    """`key=value:Effect` or `key:Effect` as in `az aks nodepool add --node-taints`."""
    key_value, _, effect = text.partition(":")
    key, _, value = key_value.partition("=")
    taint: dict[str, Any] = {"key": key, "effect": effect or "NoSchedule"}
    if value:
        taint["value"] = value
    return taint
