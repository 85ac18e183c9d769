"""Server-side printing: `meta.k8s.io/v1` Table answers for `kubectl get` without `-o`.

kubectl asks for a Table by default; a few columns per kind (the ones `kubectl get` shows for
nodes, pods and deployments) keep its output familiar. Other kinds get NAME and AGE.
"""

from __future__ import annotations

from typing import Any

from rebalancer.sim.objects import Obj, condition_true, is_terminating, pod_phase
from rebalancer.sim.resources import ResourceType
from rebalancer.sim.store import Store, parse_time


def _age(obj: Obj, store: Store) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = max(0, int((store.clock.now() - parse_time(created)).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _node_row(node: Obj) -> list[Any]:
    status = "Ready" if condition_true(node, "Ready") else "NotReady"
    if node.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = labels.get("kubernetes.azure.com/mode", "<none>")
    version = node.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")
    return [status, roles, version]


def _pod_row(pod: Obj) -> list[Any]:
    containers = pod.get("status", {}).get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    total = len(pod.get("spec", {}).get("containers") or [])
    status = "Terminating" if is_terminating(pod) else pod_phase(pod)
    return [f"{ready}/{total}", status, 0, pod.get("spec", {}).get("nodeName", "<none>")]


def _deployment_row(deployment: Obj) -> list[Any]:
    status = deployment.get("status", {})
    wanted = deployment.get("spec", {}).get("replicas", 0)
    return [
        f"{status.get('readyReplicas', 0)}/{wanted}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
    ]


_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "Node": [("Status", "string"), ("Roles", "string"), ("Version", "string")],
    "Pod": [("Ready", "string"), ("Status", "string"), ("Restarts", "integer"), ("Node", "string")],
    "Deployment": [("Ready", "string"), ("Up-to-date", "integer"), ("Available", "integer")],
}
_ROWS = {"Node": _node_row, "Pod": _pod_row, "Deployment": _deployment_row}


def table(resource: ResourceType, items: list[Obj], meta: dict[str, Any], store: Store) -> Obj:
    extra = _COLUMNS.get(resource.kind, [])
    row_of = _ROWS.get(resource.kind)
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}
    ]
    definitions += [
        {"name": n, "type": t, "format": "", "description": "", "priority": 0} for n, t in extra
    ]
    definitions.append(
        {"name": "Age", "type": "string", "format": "", "description": "", "priority": 0}
    )
    rows = []
    for obj in items:
        cells = [obj["metadata"]["name"]]
        if row_of is not None:
            cells += row_of(obj)
        cells.append(_age(obj, store))
        rows.append(
            {
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }
