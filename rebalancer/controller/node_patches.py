"""Merge patches for our marks on a Node, each computed from the Node as just read.

Each returns None when the Node already looks as wanted, so applying twice writes once. What we
change is recorded on the Node (the event, whether it was unschedulable before, whether we added
the load-balancer label), so `restore` undoes exactly what `cordon` did and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from rebalancer import names
from rebalancer.names import (
    ADDED_LB_EXCLUSION,
    COOLDOWN_TAINT,
    COOLDOWN_UNTIL,
    CORDONED_FOR,
    EVICTING_TAINT,
    LB_EXCLUSION_LABEL,
    WAS_UNSCHEDULABLE,
)
from rebalancer.timefmt import iso

Node = Mapping[str, Any]
Builder = Callable[[Node], dict[str, Any] | None]


def _parts(node: Node) -> tuple[dict[str, str], dict[str, str], list[dict[str, Any]], bool]:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return (
        dict(meta.get("annotations") or {}),
        dict(meta.get("labels") or {}),
        [dict(t) for t in spec.get("taints") or []],
        bool(spec.get("unschedulable", False)),
    )


def cordon(event_id: str, event_type: str) -> Builder:
    def build(node: Node) -> dict[str, Any] | None:
        annotations, labels, taints, unschedulable = _parts(node)
        has_taint = any(t.get("key") == EVICTING_TAINT for t in taints)
        if CORDONED_FOR in annotations and has_taint and unschedulable:
            return None
        patch_annotations: dict[str, str | None] = {}
        if CORDONED_FOR not in annotations:
            patch_annotations[CORDONED_FOR] = event_id
            patch_annotations[WAS_UNSCHEDULABLE] = "true" if unschedulable else "false"
            if LB_EXCLUSION_LABEL not in labels:
                patch_annotations[ADDED_LB_EXCLUSION] = "true"
        if not has_taint:
            taints.append({"key": EVICTING_TAINT, "value": event_type, "effect": "NoSchedule"})
        return {
            "metadata": {"annotations": patch_annotations, "labels": {LB_EXCLUSION_LABEL: "true"}},
            "spec": {"unschedulable": True, "taints": taints},
        }

    return build


def restore(node: Node) -> dict[str, Any] | None:
    annotations, _, taints, _ = _parts(node)
    if CORDONED_FOR not in annotations:
        return None
    patch: dict[str, Any] = {
        "metadata": {
            "annotations": {
                CORDONED_FOR: None,
                WAS_UNSCHEDULABLE: None,
                ADDED_LB_EXCLUSION: None,
                names.DRAINED_FOR_ANNOTATION: None,
            }
        },
        "spec": {
            "unschedulable": annotations.get(WAS_UNSCHEDULABLE) == "true",
            "taints": [t for t in taints if t.get("key") != EVICTING_TAINT],
        },
    }
    if annotations.get(ADDED_LB_EXCLUSION) == "true":
        patch["metadata"]["labels"] = {LB_EXCLUSION_LABEL: None}
    return patch


def mark_drained(event_id: str) -> Builder:
    def build(node: Node) -> dict[str, Any] | None:
        annotations, _, _, _ = _parts(node)
        current = [p.strip() for p in annotations.get(names.DRAINED_FOR_ANNOTATION, "").split(",")]
        current = [p for p in current if p]
        if event_id.upper() in (p.upper() for p in current):
            return None
        value = ",".join([*current, event_id])
        return {"metadata": {"annotations": {names.DRAINED_FOR_ANNOTATION: value}}}

    return build


def start_cooldown(until: datetime) -> Builder:
    stamp = iso(until)

    def build(node: Node) -> dict[str, Any] | None:
        annotations, _, taints, _ = _parts(node)
        has_taint = any(t.get("key") == COOLDOWN_TAINT for t in taints)
        if has_taint and annotations.get(COOLDOWN_UNTIL) == stamp:
            return None
        if not has_taint:
            taints.append({"key": COOLDOWN_TAINT, "effect": "PreferNoSchedule"})
        return {"metadata": {"annotations": {COOLDOWN_UNTIL: stamp}}, "spec": {"taints": taints}}

    return build


def end_cooldown(node: Node) -> dict[str, Any] | None:
    annotations, _, taints, _ = _parts(node)
    has_taint = any(t.get("key") == COOLDOWN_TAINT for t in taints)
    if not has_taint and COOLDOWN_UNTIL not in annotations:
        return None
    return {
        "metadata": {"annotations": {COOLDOWN_UNTIL: None}},
        "spec": {"taints": [t for t in taints if t.get("key") != COOLDOWN_TAINT]},
    }
