"""Label and field selectors: the string forms of list/watch queries and `LabelSelector` objects.

A parsed selector is a predicate over an object dict. Parsing errors raise `ApiError` 400 as
the real API server does ("unable to parse requirement" and similar).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rebalancer_sim.status import bad_request

Labels = Mapping[str, str]
LabelPredicate = Callable[[Labels], bool]
ObjectPredicate = Callable[[dict[str, Any]], bool]

_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<value>\([^)]*\)|[A-Za-z0-9_.-]*))?\s*$"
)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in (part.strip() for part in parts) if p]


def parse_label_selector(text: str) -> LabelPredicate:
    """`app=web,tier!=db,env in (a,b),!legacy,gpu` -> predicate over a labels mapping."""
    requirements: list[LabelPredicate] = []
    for part in _split_top_level(text):
        match = _REQUIREMENT.match(part)
        if match is None:
            raise bad_request(f"unable to parse requirement: found '{part}', expected: identifier")
        key, op, value, neg = match["key"], match["op"], match["value"], match["neg"]
        if neg and op:
            raise bad_request(f"unable to parse requirement: {part!r}")
        requirements.append(_requirement(key, "!" if neg else (op or "").strip(), value or ""))
    return lambda labels: all(requirement(labels) for requirement in requirements)


def _requirement(key: str, op: str, value: str) -> LabelPredicate:
    if op == "!":
        return lambda labels: key not in labels
    if not op:
        return lambda labels: key in labels
    if op in ("in", "notin"):
        if not value.startswith("("):
            raise bad_request(f"unable to parse requirement: found '{value}', expected: '('")
        values = frozenset(v.strip() for v in value[1:-1].split(",") if v.strip())
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if op in ("=", "=="):
        return lambda labels: labels.get(key) == value
    return lambda labels: labels.get(key) != value


def label_selector_object(selector: Mapping[str, Any] | None) -> LabelPredicate:
    """A `metav1.LabelSelector` (matchLabels, matchExpressions). An empty selector matches all;
    a missing (None) one matches nothing, as for PodDisruptionBudgets."""
    if selector is None:
        return lambda labels: False
    match_labels = dict(selector.get("matchLabels") or {})
    expressions = list(selector.get("matchExpressions") or [])

    def predicate(labels: Labels) -> bool:
        for key, value in match_labels.items():
            if labels.get(key) != value:
                return False
        for expr in expressions:
            key, op = expr.get("key", ""), expr.get("operator", "")
            values = expr.get("values") or []
            if op == "In" and labels.get(key) not in values:
                return False
            if op == "NotIn" and key in labels and labels[key] in values:
                return False
            if op == "Exists" and key not in labels:
                return False
            if op == "DoesNotExist" and key in labels:
                return False
        return True

    return predicate


# Fields the real API server accepts per kind (others get 400, as upstream).
FIELD_GETTERS: dict[str, dict[str, Callable[[dict[str, Any]], str]]] = {
    "Pod": {
        "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
        "status.phase": lambda o: o.get("status", {}).get("phase", ""),
        "spec.schedulerName": lambda o: o.get("spec", {}).get("schedulerName", ""),
        "spec.restartPolicy": lambda o: o.get("spec", {}).get("restartPolicy", ""),
        "spec.serviceAccountName": lambda o: o.get("spec", {}).get("serviceAccountName", ""),
        "status.podIP": lambda o: o.get("status", {}).get("podIP", ""),
        "status.nominatedNodeName": lambda o: o.get("status", {}).get("nominatedNodeName", ""),
    },
    "Node": {"spec.unschedulable": lambda o: str(bool(o.get("spec", {}).get("unschedulable")))},
    "Event": {
        "involvedObject.kind": lambda o: o.get("involvedObject", {}).get("kind", ""),
        "involvedObject.name": lambda o: o.get("involvedObject", {}).get("name", ""),
        "involvedObject.namespace": lambda o: o.get("involvedObject", {}).get("namespace", ""),
        "involvedObject.uid": lambda o: o.get("involvedObject", {}).get("uid", ""),
        "reason": lambda o: o.get("reason", ""),
        "type": lambda o: o.get("type", ""),
    },
    "Namespace": {"status.phase": lambda o: o.get("status", {}).get("phase", "")},
}


_META_GETTERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda o: str(o["metadata"].get("name", "")),
    "metadata.namespace": lambda o: str(o["metadata"].get("namespace", "")),
}


def _field_check(getter: Callable[[dict[str, Any]], str], op: str, value: str) -> ObjectPredicate:
    if op == "!=":
        return lambda obj: getter(obj) != value
    return lambda obj: getter(obj) == value


def parse_field_selector(text: str, kind: str) -> tuple[ObjectPredicate, str | None]:
    """Returns (predicate, node name if the selector pins `spec.nodeName=<n>`, for the index)."""
    checks: list[ObjectPredicate] = []
    node_name: str | None = None
    getters = FIELD_GETTERS.get(kind, {})
    for part in _split_top_level(text):
        for op in ("!=", "==", "="):
            if op in part:
                field, value = (s.strip() for s in part.split(op, 1))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        if field in _META_GETTERS:
            getter = _META_GETTERS[field]
        elif field in getters:
            getter = getters[field]
        else:
            raise bad_request(f"field label not supported: {field}")
        if field == "spec.nodeName" and op != "!=":
            node_name = value
        checks.append(_field_check(getter, op, value))
    return (lambda obj: all(check(obj) for check in checks)), node_name
