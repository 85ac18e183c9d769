"""Server-side printing: `meta.k8s.io/v1` Table answers for `kubectl get` without `-o`.

kubectl asks for a Table by default; a few columns per kind (the ones `kubectl get` shows for
nodes, pods, deployments and events) keep its output familiar. Other kinds get NAME and AGE.
Each row carries its object as `includeObject` asks (`Metadata` by default, `Object` for
`kubectl get --sort-by`, which sorts on the objects' fields, or `None`).
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim.objects import Obj, condition_true, is_terminating, pod_phase
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.store import Store, parse_time


def _age(obj: Obj, store: Store) -> str:
    return _since(obj["metadata"].get("creationTimestamp"), store)


def _since(stamp: str | None, store: Store) -> str:
    if not stamp:
        return "<unknown>"
    seconds = max(0, int((store.clock.now() - parse_time(stamp)).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _node_row(node: Obj, age: str) -> list[Any]:
    status = "Ready" if condition_true(node, "Ready") else "NotReady"
    if node.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = labels.get("kubernetes.azure.com/mode", "<none>")
    info = node.get("status", {}).get("nodeInfo", {})
    addresses = {
        a.get("type"): a.get("address") for a in node.get("status", {}).get("addresses") or []
    }
    return [
        status,
        roles,
        age,
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        "<none>",
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def _pod_row(pod: Obj, age: str) -> list[Any]:
    containers = pod.get("status", {}).get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    total = len(pod.get("spec", {}).get("containers") or [])
    status = "Terminating" if is_terminating(pod) else pod_phase(pod)
    return [
        f"{ready}/{total}",
        status,
        0,
        age,
        pod.get("status", {}).get("podIP", "<none>"),
        pod.get("spec", {}).get("nodeName", "<none>"),
        "<none>",
        "<none>",
    ]


def _deployment_row(deployment: Obj, age: str) -> list[Any]:
    status = deployment.get("status", {})
    wanted = deployment.get("spec", {}).get("replicas", 0)
    return [
        f"{status.get('readyReplicas', 0)}/{wanted}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        age,
    ]


def _event_row(event: Obj, store: Store) -> list[Any]:
    """Upstream's printEvent, wide (the server always prints wide; kubectl hides priority 1)."""
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    first = event.get("firstTimestamp") or event.get("eventTime")
    last = event.get("lastTimestamp") or first
    count = event.get("count") or 1
    series = event.get("series")
    if series:
        last, count = series.get("lastObservedTime") or last, series.get("count") or count
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [
        _since(last, store),
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        str(event.get("message", "")).strip(),
        _since(first, store),
        int(count),
        event["metadata"]["name"],
    ]


def _webhook_configuration_row(configuration: Obj, age: str) -> list[Any]:
    return [len(configuration.get("webhooks") or []), age]


# (name, type, priority): priority 1 columns show with `-o wide`, as upstream's.
_COLUMNS: dict[str, list[tuple[str, str, int]]] = {
    "Node": [
        ("Status", "string", 0),
        ("Roles", "string", 0),
        ("Age", "string", 0),
        ("Version", "string", 0),
        ("Internal-IP", "string", 1),
        ("External-IP", "string", 1),
        ("OS-Image", "string", 1),
        ("Kernel-Version", "string", 1),
        ("Container-Runtime", "string", 1),
    ],
    "Pod": [
        ("Ready", "string", 0),
        ("Status", "string", 0),
        ("Restarts", "string", 0),
        ("Age", "string", 0),
        ("IP", "string", 1),
        ("Node", "string", 1),
        ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1),
    ],
    "Deployment": [
        ("Ready", "string", 0),
        ("Up-to-date", "integer", 0),
        ("Available", "integer", 0),
        ("Age", "string", 0),
    ],
    "MutatingWebhookConfiguration": [("Webhooks", "integer", 0), ("Age", "string", 0)],
}
# Events print no leading Name column: upstream's is the last one, and wide only.
_EVENT_COLUMNS = [
    ("Last Seen", "string", 0),
    ("Type", "string", 0),
    ("Reason", "string", 0),
    ("Object", "string", 0),
    ("Subobject", "string", 1),
    ("Source", "string", 1),
    ("Message", "string", 0),
    ("First Seen", "string", 1),
    ("Count", "string", 1),
    ("Name", "string", 1),
]
_ROWS = {
    "Node": _node_row,
    "Pod": _pod_row,
    "Deployment": _deployment_row,
    "MutatingWebhookConfiguration": _webhook_configuration_row,
}


def table(
    resource: ResourceType,
    items: list[Obj],
    meta: dict[str, Any],
    store: Store,
    *,
    include_object: str = "Metadata",
) -> Obj:
    if resource.kind == "Event":
        columns = _EVENT_COLUMNS
    else:
        columns = [("Name", "string", 0), *_COLUMNS.get(resource.kind, [("Age", "string", 0)])]
    definitions = [
        {
            "name": name,
            "type": kind,
            "format": "name" if name == "Name" else "",
            "description": "",
            "priority": priority,
        }
        for name, kind, priority in columns
    ]
    row_of = _ROWS.get(resource.kind)
    rows = []
    for obj in items:
        if resource.kind == "Event":
            cells = _event_row(obj, store)
        else:
            age = _age(obj, store)
            cells = [obj["metadata"]["name"], *(row_of(obj, age) if row_of else [age])]
        row: dict[str, Any] = {"cells": cells}
        if include_object == "Object":  # as a GET returns it, kind and apiVersion first
            row["object"] = {"kind": resource.kind, "apiVersion": resource.api_version, **obj}
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }
