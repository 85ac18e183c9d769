"""Would a pod template fit a node pool? Taints, tolerations, nodeSelector, node affinity.

Kubernetes' matching rules (`rebalancer.upstream.placement`, the ones the emulator and
`rebalancer simulate` follow, checked against the real scheduler) applied to pools, to find the
on-demand pools a workload can fail over to ("pools that share the toleration config") and to
say exactly why one cannot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rebalancer.upstream import placement

HARD_EFFECTS = placement.HARD_EFFECTS


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"

    def as_json(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Taint:
        return cls(
            key=str(data.get("key", "")),
            value=str(data.get("value") or ""),
            effect=str(data.get("effect", "")),
        )


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Upstream's ToleratesTaint: effect, key and operator (Equal by default, or Exists)."""
    return placement.tolerates(toleration, taint.as_json())


def untolerated(tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Taint]) -> list[Taint]:
    """Taints that keep the pod off (NoSchedule and NoExecute only; PreferNoSchedule is soft)."""
    return [
        taint
        for taint in taints
        if taint.effect in HARD_EFFECTS and not placement.tolerated(tolerations, taint.as_json())
    ]


def match_expression(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return placement.requirement_matches(expression, labels.get(str(expression.get("key", ""))))


def required_affinity_terms(template_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    affinity = (template_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def unmet_placement(template_spec: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """Why these node labels fail the pod's nodeSelector or required node affinity ([] if not).
    A pool has no node name yet: a term on `metadata.name` does not match it."""
    problems = [
        f"nodeSelector {key}={value}"
        for key, value in (template_spec.get("nodeSelector") or {}).items()
        if labels.get(key) != value
    ]
    terms = required_affinity_terms(template_spec)
    if terms and not any(placement.node_selector_term_matches(t, labels, "") for t in terms):
        first = terms[0].get("matchExpressions") or []
        described = ", ".join(
            f"{e.get('key')} {e.get('operator')} {e.get('values') or ''}".strip() for e in first
        )
        described = described or "a term without expressions"
        problems.append(f"required node affinity ({described})")
    return problems


def preferred_weight(template_spec: Mapping[str, Any], labels: Mapping[str, str]) -> int:
    """Sum of the preferred node-affinity weights these labels satisfy (the scheduler's score)."""
    return placement.preferred_affinity_weight(template_spec, labels, "")
