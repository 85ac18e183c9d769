"""Defaulting and the little validation the real API server does on create for our kinds.

Upstream's defaulting functions and admission plugins set fields clients rely on (a pod's
`schedulerName`, `terminationGracePeriodSeconds`, the 300 s not-ready/unreachable tolerations
of the DefaultTolerationSeconds plugin, a Deployment's strategy). The store calls `on_create`
for every new object, whoever creates it.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.status import invalid

Obj = dict[str, Any]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def admit_node(node: Obj) -> None:
    """The TaintNodesByCondition admission plugin: a Node created through the API starts
    tainted not-ready (NoSchedule) until the node lifecycle controller sees it Ready. (Nodes the
    emulated cloud registers are Ready at once and skip it.)"""
    spec = node.setdefault("spec", {})
    taints = spec.get("taints") or []
    if not any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
        spec["taints"] = [*taints, {"key": NOT_READY_TAINT, "effect": "NoSchedule"}]


def on_create(resource: ResourceType, obj: Obj) -> None:
    if resource is R.PODS:
        _pod(obj)
    elif resource in (R.DEPLOYMENTS, R.REPLICASETS, R.STATEFULSETS, R.DAEMONSETS):
        _workload(resource, obj)
    elif resource is R.PDBS:
        obj.setdefault(
            "status",
            {
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "disruptionsAllowed": 0,
                "expectedPods": 0,
                "observedGeneration": 0,
            },
        )
    elif resource is R.NODES:
        obj.setdefault("spec", {})
        obj.setdefault("status", {})


def _pod(pod: Obj) -> None:
    name = pod.get("metadata", {}).get("name") or pod.get("metadata", {}).get("generateName", "")
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise invalid(R.PODS, name, [("spec.containers", "FieldValueRequired", "Required value")])
    for index, container in enumerate(spec["containers"]):
        if not container.get("name"):
            raise invalid(
                R.PODS,
                name,
                [(f"spec.containers[{index}].name", "FieldValueRequired", "Required value")],
            )
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any(
            t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations
        ):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    for container in spec["containers"]:
        container.setdefault("resources", {})
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _qos_class(spec: Obj) -> str:
    requests_any = limits_all = False
    guaranteed = True
    for container in spec.get("containers", []):
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
        limits_all = limits_all or bool(limits)
    if guaranteed and limits_all:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def _workload(resource: ResourceType, obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if resource is not R.DAEMONSETS:
        spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if resource is R.DEPLOYMENTS:
        spec.setdefault(
            "strategy",
            {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
        )
        spec.setdefault("progressDeadlineSeconds", 600)
    if resource is R.STATEFULSETS:
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("serviceName", "")
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    pod_spec.setdefault("restartPolicy", "Always")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    obj.setdefault("status", {})
