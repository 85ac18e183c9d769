"""Small pure helpers over object dicts: quantities, conditions, owner references, pod state.

Shared by the API server and the controllers; nothing here reads the store or a clock.
"""

from __future__ import annotations

import math
from typing import Any

Obj = dict[str, Any]

_SUFFIXES = {
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
    "Pi": 1024.0**5,
    "Ei": 1024.0**6,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


_SUFFIX_ORDER = sorted(_SUFFIXES, key=len, reverse=True)
_QUANTITIES: dict[str, float] = {}  # the same few quantity strings recur across 50 000 pods


def parse_quantity(value: Any) -> float:
    """`"500m"` -> 0.5, `"2Gi"` -> 2147483648.0, `4` -> 4.0."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    cached = _QUANTITIES.get(text)
    if cached is not None:
        return cached
    number = float(text) if text[-1:].isdigit() else None
    if number is None:
        for suffix in _SUFFIX_ORDER:
            if text.endswith(suffix):
                number = float(text[: -len(suffix)]) * _SUFFIXES[suffix]
                break
        else:
            number = float(text)
    if len(_QUANTITIES) < 10_000:
        _QUANTITIES[text] = number
    return number


def percent_or_int(value: Any, total: int, *, round_up: bool) -> int:
    """An IntOrString such as `1` or `"25%"` scaled against `total`."""
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1]) * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(value)


def pod_requests(pod: Obj) -> dict[str, float]:
    """Summed container requests; a limit stands in for a missing request, as upstream."""
    total: dict[str, float] = {"pods": 1.0}
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources") or {}
        merged = dict(resources.get("limits") or {})
        merged.update(resources.get("requests") or {})
        for name, quantity in merged.items():
            total[name] = total.get(name, 0.0) + parse_quantity(quantity)
    return total


def get_condition(obj: Obj, condition_type: str) -> Obj | None:
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition.get("type") == condition_type:
            return condition  # type: ignore[no-any-return]
    return None


def condition_true(obj: Obj, condition_type: str) -> bool:
    condition = get_condition(obj, condition_type)
    return condition is not None and condition.get("status") == "True"


def with_condition(
    conditions: list[Obj] | None,
    condition_type: str,
    status: str,
    *,
    now: str,
    reason: str = "",
    message: str = "",
    heartbeat: bool = False,
) -> list[Obj]:
    """A new conditions list with one condition set; the transition time moves only on change."""
    result = []
    found = False
    for condition in conditions or []:
        if condition.get("type") != condition_type:
            result.append(condition)
            continue
        found = True
        updated = dict(condition)
        if condition.get("status") != status:
            updated["lastTransitionTime"] = now
        updated["status"] = status
        if reason:
            updated["reason"] = reason
        if message:
            updated["message"] = message
        if heartbeat:
            updated["lastHeartbeatTime"] = now
        result.append(updated)
    if not found:
        new: Obj = {"type": condition_type, "status": status}
        if heartbeat:
            new["lastHeartbeatTime"] = now
        new["lastTransitionTime"] = now
        if reason:
            new["reason"] = reason
        if message:
            new["message"] = message
        result.append(new)
    return result


def is_terminating(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_pod_ready(pod: Obj) -> bool:
    return condition_true(pod, "Ready")


def pod_phase(pod: Obj) -> str:
    return str(pod.get("status", {}).get("phase", "Pending"))


def is_pod_active(pod: Obj) -> bool:
    """Counts towards a controller's replicas: not finished and not terminating."""
    return pod_phase(pod) not in ("Succeeded", "Failed") and not is_terminating(pod)


def controller_ref(obj: Obj) -> Obj | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            found: Obj = ref
            return found
    return None


def owner_reference(owner: Obj, *, controller: bool = True) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def labels_of(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def annotation(obj: Obj, key: str) -> str | None:
    value = (obj["metadata"].get("annotations") or {}).get(key)
    return None if value is None else str(value)
