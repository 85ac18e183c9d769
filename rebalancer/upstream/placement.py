"""Whether a pod may go on a node, by Kubernetes' matching rules: taints and tolerations,
`nodeSelector`, node affinity (required and preferred).

Upstream: `Toleration.ToleratesTaint` (k8s.io/api core/v1), the scheduler's TaintToleration and
NodeAffinity plugins (`component-helpers/scheduling/corev1/nodeaffinity`). The emulator's
scheduler, DaemonSet controller and autoscaler and `rebalancer simulate`'s world filter nodes
with these; the controller judges which pools a workload fits with them
(`rebalancer.controller.scheduling`). tests/sim/test_scheduler_scoring.py checks the edges
against the real kube-scheduler.

Objects are the API's JSON as plain mappings: a toleration or a taint `{"key", "value",
"effect"}`, a pod spec, a node's labels and name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

Json = Mapping[str, Any]

HARD_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only scores


def tolerates(toleration: Json, taint: Json) -> bool:
    """`ToleratesTaint`: the effect (empty: any), the key (empty: any, with Exists), then Equal
    (the default operator) compares values, Exists tolerates any value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        # The API accepts an empty key only with Exists: it tolerates every taint.
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerated(tolerations: Iterable[Json], taint: Json) -> bool:
    return any(tolerates(toleration, taint) for toleration in tolerations)


def untolerated(tolerations: Iterable[Json], taints: Iterable[Json]) -> list[Json]:
    """The taints that keep the pod off the node (NoSchedule and NoExecute ones)."""
    tolerations = list(tolerations)
    return [
        taint
        for taint in taints
        if taint.get("effect") in HARD_EFFECTS and not tolerated(tolerations, taint)
    ]


def untolerated_prefer_no_schedule(tolerations: Iterable[Json], taints: Iterable[Json]) -> int:
    """The TaintToleration score's count: PreferNoSchedule taints the pod does not tolerate."""
    tolerations = list(tolerations)
    return sum(
        1
        for taint in taints
        if taint.get("effect") == "PreferNoSchedule" and not tolerated(tolerations, taint)
    )


def fits_node_selector_and_affinity(pod_spec: Json, labels: Mapping[str, str], name: str) -> bool:
    """`nodeSelector` (every label equal) and required node affinity (any one term)."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = _node_affinity(pod_spec).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(node_selector_term_matches(term, labels, name) for term in terms)


def preferred_affinity_weight(pod_spec: Json, labels: Mapping[str, str], name: str) -> int:
    """The NodeAffinity score before scaling: the weights of the preferred terms that match."""
    preferred = _node_affinity(pod_spec).get("preferredDuringSchedulingIgnoredDuringExecution")
    return sum(
        int(term.get("weight", 0))
        for term in preferred or []
        if node_selector_term_matches(term.get("preference") or {}, labels, name)
    )


def node_selector_term_matches(term: Json, labels: Mapping[str, str], name: str) -> bool:
    """One `NodeSelectorTerm`: every matchExpression on the labels and every matchField (only
    `metadata.name` exists) holds; a term with neither matches no node."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(
        requirement_matches(expression, labels.get(str(expression.get("key", ""))))
        for expression in expressions
    ) and all(
        requirement_matches(field, name if field.get("key") == "metadata.name" else None)
        for field in fields
    )


def requirement_matches(requirement: Json, value: str | None) -> bool:
    """One `NodeSelectorRequirement` against the label's value (None: no such label)."""
    operator = requirement.get("operator", "")
    values = [str(v) for v in requirement.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        have, bound = _int64(value), _int64(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _node_affinity(pod_spec: Json) -> Json:
    return (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}


_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64 = range(-(2**63), 2**63)


def _int64(text: str) -> int | None:
    """Go's `strconv.ParseInt(text, 10, 64)`: an optional sign and ASCII digits, in range
    (`int()` would also take spaces, underscores and other scripts' digits)."""
    if not _DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if number in _INT64 else None
