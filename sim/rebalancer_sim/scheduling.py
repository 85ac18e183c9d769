"""Pure predicates shared by the scheduler, the DaemonSet controller and the autoscaler:
taints and tolerations, node selectors and affinity, resource fit.

They take plain dicts and return facts; nobody here writes anything.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim.objects import Obj, parse_quantity
from rebalancer_sim.selectors import node_selector_term_matches

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def toleration_matches(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    return any(toleration_matches(t, taint) for t in tolerations)


def untolerated_taint(tolerations: list[Obj], taints: list[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint not tolerated (PreferNoSchedule never blocks)."""
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return taint
    return None


def prefer_no_schedule_penalty(tolerations: list[Obj], taints: list[Obj]) -> int:
    return sum(
        1
        for taint in taints
        if taint.get("effect") == "PreferNoSchedule" and not tolerates(tolerations, taint)
    )


def matches_node_selector_and_affinity(pod_spec: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is not None:
        name = node["metadata"]["name"]
        return any(node_selector_term_matches(term, labels, name) for term in terms)
    return True


def preferred_affinity_score(pod_spec: Obj, node: Obj) -> int:
    preferred = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    labels = node["metadata"].get("labels") or {}
    name = node["metadata"]["name"]
    return sum(
        int(term.get("weight", 0))
        for term in preferred
        if node_selector_term_matches(term.get("preference") or {}, labels, name)
    )


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
