"""Raw Kubernetes objects, as the API serves them, for the doctor's and the plugin's tables.
Taints and tolerations are written in kubectl's form, `key=value:Effect`."""

from __future__ import annotations

from typing import Any

from rebalancer import names
from rebalancer.config import parse_taint

A100 = "Standard_NC24ads_A100_v4"
Obj = dict[str, Any]


def taint(text: str) -> dict[str, str]:
    key, value, effect = parse_taint(text)
    return (
        {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}
    )


def toleration(text: str) -> dict[str, str]:
    found = taint(text)
    if "value" in found:
        return {"key": found["key"], "operator": "Equal", "value": found["value"],
                "effect": found["effect"]}  # fmt: skip
    return {"key": found["key"], "operator": "Exists", "effect": found["effect"]}


def node(
    name: str,
    pool: str,
    *,
    spot: bool,
    gpus: int,
    taints: list[str],
    ready: bool = True,
    zone: str = "eastus-1",
    sku: str = A100,
    annotations: dict[str, str] | None = None,
    conditions: list[Obj] | None = None,
    created: str | None = None,
) -> Obj:
    labels = {
        names.AKS_AGENTPOOL_LABEL: pool,
        names.INSTANCE_TYPE_LABEL: sku,
        names.ZONE_LABEL: zone,
        names.REGION_LABEL: zone.rsplit("-", 1)[0],
    }
    if spot:
        labels[names.AKS_SPOT_LABEL] = "spot"
    if labels[names.INSTANCE_TYPE_LABEL].lower().startswith("standard_n"):
        labels[names.AKS_ACCELERATOR_LABEL] = "nvidia"
    allocatable = {"cpu": "24", "nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "4"}
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels,
                     "annotations": annotations or {},
                     **({"creationTimestamp": created} if created else {})},
        "spec": {"taints": [taint(t) for t in taints]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"},
                           *(conditions or [])],
            "allocatable": allocatable,
        },
    }  # fmt: skip


def _template(tolerations: list[str], **spec: Any) -> Obj:
    return {"tolerations": [toleration(t) for t in tolerations], **spec}


def daemonset(
    name: str,
    namespace: str,
    tolerations: list[str],
    *,
    image: str = "registry.k8s.io/pause:3.10",
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> Obj:
    spec = _template(tolerations, containers=[{"name": "c", "image": image}])
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "labels": labels or {}},
        "spec": {"template": {"spec": spec}},
        "status": {"desiredNumberScheduled": 2, "numberReady": 2},
    }  # fmt: skip


def deployment(
    name: str,
    tolerations: list[str],
    *,
    gpus: int = 1,
    replicas: int = 2,
    namespace: str = "inference",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> Obj:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec = _template(tolerations, containers=[{"name": "c", "resources": resources}])
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "annotations": annotations or {}, "labels": labels or {}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"spec": spec}},
        "status": {"readyReplicas": replicas},
    }  # fmt: skip


def replicaset(deployment_name: str, namespace: str = "inference") -> Obj:
    return {
        "metadata": {
            "name": f"{deployment_name}-abc",
            "namespace": namespace,
            "ownerReferences": [
                {"kind": "Deployment", "name": deployment_name, "controller": True}
            ],
        }
    }


def pod(
    name: str,
    node_name: str,
    *,
    owner: tuple[str, str],
    gpus: int = 1,
    ready: bool = True,
    namespace: str = "inference",
) -> Obj:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "ownerReferences": [{"kind": owner[0], "name": owner[1],
                                          "controller": True}]},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running" if node_name else "Pending",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip
