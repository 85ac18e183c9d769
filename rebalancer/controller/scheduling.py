"""Would a pod template fit a node pool? Taints, tolerations, nodeSelector, node affinity.

Pure functions with upstream's matching rules, used to find the on-demand pools a workload can
fail over to ("pools that share the toleration config") and to say exactly why one cannot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Taint:
        return cls(
            key=str(data.get("key", "")),
            value=str(data.get("value") or ""),
            effect=str(data.get("effect", "")),
        )


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Upstream's ToleratesTaint: effect, key and operator (Equal by default, or Exists)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # an empty key with Exists tolerates every taint
    if key != taint.key:
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == taint.value


def untolerated(tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Taint]) -> list[Taint]:
    """Taints that keep the pod off (NoSchedule and NoExecute only; PreferNoSchedule is soft)."""
    return [
        taint
        for taint in taints
        if taint.effect in HARD_EFFECTS and not any(tolerates(t, taint) for t in tolerations)
    ]


def match_expression(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expression.get("key", ""))
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        have, want = _integer(labels[key]), _integer(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def required_affinity_terms(template_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    affinity = (template_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def unmet_placement(template_spec: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """Why these node labels fail the pod's nodeSelector or required node affinity ([] if not)."""
    problems = [
        f"nodeSelector {key}={value}"
        for key, value in (template_spec.get("nodeSelector") or {}).items()
        if labels.get(key) != value
    ]
    terms = required_affinity_terms(template_spec)
    if terms and not any(
        all(match_expression(e, labels) for e in term.get("matchExpressions") or [])
        and all(match_expression(e, labels) for e in term.get("matchFields") or [])
        for term in terms
    ):
        first = terms[0].get("matchExpressions") or [{}]
        described = ", ".join(
            f"{e.get('key')} {e.get('operator')} {e.get('values') or ''}".strip() for e in first
        )
        problems.append(f"required node affinity ({described})")
    return problems


def preferred_weight(template_spec: Mapping[str, Any], labels: Mapping[str, str]) -> int:
    """Sum of the preferred node-affinity weights these labels satisfy (the scheduler's score)."""
    affinity = (template_spec.get("affinity") or {}).get("nodeAffinity") or {}
    total = 0
    for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        preference = term.get("preference") or {}
        if all(match_expression(e, labels) for e in preference.get("matchExpressions") or []):
            total += int(term.get("weight", 0))
    return total


_INTEGER = re.compile(r"-?[0-9]{1,18}", re.ASCII)


def _integer(text: str) -> int | None:
    """An int64 as Kubernetes reads one for Gt and Lt: ASCII digits only (`int()` would take
    full-width digits and thousands of them)."""
    return int(text) if _INTEGER.fullmatch(text) else None
