"""KAITO's inference workload under NAP, with KAITO's object shapes: the StatefulSet its workspace
controller creates for a Workspace (kaito-project/kaito at 056b8280,
pkg/workspace/manifests/manifests.go GenerateStatefulSetManifest and
pkg/workspace/inference/preset_inferences.go defaultTolerations) and its pods, on Karpenter
nodes. A policy on the Workspace does not reach the StatefulSet (KAITO copies none of its
annotations); one added on the StatefulSet does (docs/karpenter.md)."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

from rebalancer import names
from rebalancer.controller.actions import Evict, ScaleUp
from rebalancer.controller.admission import View, review
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.controller.snapshot import Snapshot
from tests.unit.test_placement import apply_adds, patch_of
from tests.unit.test_planner import NOW, WATCHED

WORKSPACE = "workspace-phi-3"
NAMESPACE = "kaito"
KAITO_LABEL = "kaito.sh/workspace"
# defaultTolerations on Azure: nvidia.com/gpu (Exists), sku=gpu and the AKS spot taint.
KAITO_TOLERATIONS = [
    {"effect": "NoSchedule", "operator": "Exists", "key": "nvidia.com/gpu"},
    {"effect": "NoSchedule", "value": "gpu", "key": "sku", "operator": "Equal"},
    {"effect": "NoSchedule", "key": names.AKS_SPOT_LABEL, "operator": "Equal", "value": "spot"},
]
WORKSPACE_OWNER = {
    "apiVersion": "kaito.sh/v1beta1",
    "kind": "Workspace",
    "name": WORKSPACE,
    "uid": "uid-ws",
    "controller": True,
    "blockOwnerDeletion": True,
}


def kaito_statefulset(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    selector = {KAITO_LABEL: WORKSPACE}
    return {
        "metadata": {
            "name": WORKSPACE,
            "namespace": NAMESPACE,
            "uid": "uid-sts",
            # KAITO writes its revision; what a user adds stays across KAITO's updates.
            "annotations": {"workspace.kaito.io/revision": "1", **(annotations or {})},
            "ownerReferences": [WORKSPACE_OWNER],
        },
        "spec": {
            "replicas": 2,
            "podManagementPolicy": "Parallel",
            "serviceName": f"{WORKSPACE}-headless",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "tolerations": KAITO_TOLERATIONS,
                    "containers": [
                        {
                            "name": WORKSPACE,
                            "image": "mcr.microsoft.com/aks/kaito/kaito-base:0.0.8",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            },
        },
        "status": {"readyReplicas": 2},
    }


def nap_node(
    name: str, capacity: str, zone: str, *, notice_seconds: float | None = None
) -> NodeInfo:
    conditions = [{"type": "Ready", "status": "True"}]
    if notice_seconds is not None:
        not_before = (NOW + timedelta(seconds=notice_seconds)).strftime("%a, %d %b %Y %H:%M:%S GMT")
        conditions.append(
            {
                "type": names.NPD_PREEMPTION_CONDITION,
                "status": "True",
                "message": f"Preempt Scheduled: {not_before}. EventId: e-1",
                "lastTransitionTime": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    return NodeInfo.from_json(
        {
            "metadata": {
                "name": name,
                "labels": {
                    names.KARPENTER_NODEPOOL_LABEL: "gpu",
                    names.KARPENTER_CAPACITY_TYPE_LABEL: capacity,
                    names.AKS_SPOT_LABEL: "spot" if capacity == "spot" else "regular",
                    names.ZONE_LABEL: zone,
                    names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
                },
            },
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
            "status": {"conditions": conditions, "allocatable": {"nvidia.com/gpu": "1"}},
        }
    )


def kaito_pod(index: int, node: str) -> dict[str, Any]:
    template = kaito_statefulset()["spec"]["template"]
    return {
        "metadata": {
            "name": f"{WORKSPACE}-{index}",
            "namespace": NAMESPACE,
            "uid": f"uid-pod-{index}",
            "labels": copy.deepcopy(template["metadata"]["labels"]),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": WORKSPACE,
                 "uid": "uid-sts", "controller": True}
            ],
        },
        "spec": {**copy.deepcopy(template["spec"]), "nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def cluster(statefulset: dict[str, Any], *, notice_seconds: float | None = None) -> Snapshot:
    nodes = [
        nap_node("nap-spot-0", "spot", "eastus-1", notice_seconds=notice_seconds),
        nap_node("nap-spot-1", "spot", "eastus-2"),
    ]
    pods = [PodInfo.from_json(kaito_pod(0, "nap-spot-0"))]
    workload = WorkloadInfo.from_json("StatefulSet", statefulset)
    return Snapshot(
        now=NOW,
        nodes={n.name: n for n in nodes},
        pods={p.key: p for p in pods},
        workloads={workload.key: workload},
        replicaset_owners={},
        history=WATCHED,
    )


def admission(pod_json: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(pod_json)
    del new["spec"]["nodeName"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": NAMESPACE,
            "object": new,
        },
    }


def view_of(state: Snapshot) -> View:
    risks = assess(nodes=state.nodes.values(), history=WATCHED, now=NOW, settings=RiskSettings())
    return View(state, risks)


def test_a_policy_on_the_workspace_never_reaches_the_statefulset_kaito_creates() -> None:
    # KAITO copies no Workspace annotation onto its StatefulSet: nothing to place by.
    result = review(admission(kaito_pod(1, "")), view_of(cluster(kaito_statefulset())), [])
    assert result.outcome == "no_policy"


def test_a_policy_added_on_kaitos_statefulset_places_its_pods_on_a_nodepool() -> None:
    sts = kaito_statefulset({names.SPREAD: "zone"})
    body = admission(kaito_pod(1, ""))
    result = review(body, view_of(cluster(sts)), [])
    assert result.outcome == "placed"
    assert result.decision is not None
    # Zone spread: the other zone of the NodePool's spot part, by the labels Karpenter knows.
    assert result.decision.placed == "gpu:spot/eastus-2"
    patched = apply_adds(body["request"]["object"], patch_of(result.response))
    (term,) = patched["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    keys = [e["key"] for e in term["preference"]["matchExpressions"]]
    assert keys == [
        names.KARPENTER_NODEPOOL_LABEL,
        names.KARPENTER_CAPACITY_TYPE_LABEL,
        names.ZONE_LABEL,
    ]
    assert json.dumps(patched["spec"]["tolerations"]) == json.dumps(KAITO_TOLERATIONS)  # kept


def test_kaitos_replica_on_a_preempted_nap_node_is_evicted_at_once() -> None:
    # A StatefulSet cannot be surged (a replacement has the same name): its pod is evicted at
    # once so that the replacement starts loading as early as possible.
    state = cluster(kaito_statefulset({names.SPREAD: "zone"}), notice_seconds=30)
    assert state.nodes["nap-spot-0"].notices, "the NPD condition was not read as a notice"
    result = plan(state, Settings())
    assert [a for a in result.actions if isinstance(a, ScaleUp)] == []
    assert [a.pod for a in result.actions if isinstance(a, Evict)] == [
        (NAMESPACE, f"{WORKSPACE}-0")
    ]
