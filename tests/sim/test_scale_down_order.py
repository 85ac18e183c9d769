"""Which replica a ReplicaSet removes when it scales down, on the emulator and on the real
kube-controller-manager (a conformance case: the same test body on both, issue 7).

The controller's surge rests on this rule (upstream `ActivePodsWithRanks`): an unscheduled pod
goes before a scheduled one, a not-Ready before a Ready one, and only then the lower
`controller.kubernetes.io/pod-deletion-cost` first. That is why the deadline deletes the doomed
pods before it scales back (planning/surge.py), and why replacements Ready give the doomed ones
the lowest cost first.
"""

from __future__ import annotations

from typing import Any

from .backend import Backend
from .conftest import eventually

MERGE = "application/merge-patch+json"
LABELS = {"app": "ranked"}


def _replicaset(replicas: int, placement: dict[str, Any]) -> dict[str, Any]:
    container = {
        "name": "ranked",
        "image": "example/ranked:v1",
        "resources": {"requests": {"cpu": "10m"}, "limits": {"memory": "64Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "ranked", "labels": LABELS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {"containers": [container], **placement},
            },
        },
    }


async def _live(backend: Backend) -> list[dict[str, Any]]:
    return [
        pod
        for pod in await backend.pods(labelSelector="app=ranked")
        if not pod["metadata"].get("deletionTimestamp")
    ]


def _cost(pod: dict[str, Any]) -> str | None:
    annotations = pod["metadata"].get("annotations") or {}
    return annotations.get("controller.kubernetes.io/pod-deletion-cost")


async def test_a_scale_down_removes_the_unscheduled_pod_then_the_lowest_deletion_costs(
    backend: Backend,
) -> None:
    node = (await backend.create_node("ranked", run_pods=True))["metadata"]["name"]
    rs_path = backend.ns_path("replicasets", "ranked", group="apps/v1")
    await backend.create("replicasets", _replicaset(4, backend.on_own_node(node)), group="apps/v1")
    ready = await backend.wait_ready("app=ranked", 4)
    names = sorted(pod["metadata"]["name"] for pod in ready)
    costs = dict(zip(names, ["100", "-5", "7", "50"], strict=True))
    for name, cost in costs.items():
        patch = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": cost}}}
        await backend.ok("PATCH", backend.ns_path("pods", name), body=patch, content_type=MERGE)

    # A fifth replica that cannot be scheduled: its node is cordoned.
    cordon = {"spec": {"unschedulable": True}}
    await backend.ok("PATCH", f"/api/v1/nodes/{node}", body=cordon, content_type=MERGE)
    await backend.ok("PATCH", rs_path, body={"spec": {"replicas": 5}}, content_type=MERGE)

    async def unscheduled() -> list[dict[str, Any]]:
        return [p for p in await _live(backend) if not p["spec"].get("nodeName")]

    (pending,) = await eventually(unscheduled, within=15, message="a fifth, unscheduled pod")

    await backend.ok("PATCH", rs_path, body={"spec": {"replicas": 2}}, content_type=MERGE)

    async def two_left() -> list[dict[str, Any]]:
        live = await _live(backend)
        return live if len(live) == 2 else []

    kept = await eventually(two_left, within=15, message="two replicas left")
    # The unscheduled one and the two lowest costs (-5, 7) went; 100 and 50 stay.
    assert sorted(_cost(pod) or "" for pod in kept) == ["100", "50"]
    assert pending["metadata"]["name"] not in {pod["metadata"]["name"] for pod in kept}


async def test_a_scale_down_takes_the_not_ready_pod_then_the_lowest_cost_then_the_crowded_node(
    backend: Backend,
) -> None:
    """Rule by rule (rebalancer.upstream.replicaset): a not-Ready pod goes first whatever its
    cost; then the lowest cost, wherever it is; then, costs equal, a pod on the node with more
    of the owner's pods. The set has an owner, as a Deployment's have: the counts are of the
    pods of every set of one owner, and a set without one has none (its pods rank alike)."""
    crowded = (await backend.create_node("crowded", run_pods=True))["metadata"]["name"]
    sparse = (await backend.create_node("sparse", run_pods=True))["metadata"]["name"]
    owner = await backend.create("configmaps", {"metadata": {"name": "owner"}})
    rs_path = backend.ns_path("replicasets", "ranked", group="apps/v1")
    replicaset = _replicaset(3, backend.on_own_node(crowded))
    replicaset["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "owner",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    await backend.create("replicasets", replicaset, group="apps/v1")
    on_crowded = sorted(p["metadata"]["name"] for p in await backend.wait_ready("app=ranked", 3))
    # Two more on the other node: new pods follow the set's template, the three stay.
    selector = {"kubernetes.io/hostname": sparse}
    more = {"spec": {"replicas": 5, "template": {"spec": {"nodeSelector": selector}}}}
    await backend.ok("PATCH", rs_path, body=more, content_type=MERGE)
    ready = await backend.wait_ready("app=ranked", 5)
    on_sparse = sorted(p["metadata"]["name"] for p in ready if p["spec"]["nodeName"] == sparse)
    assert len(on_sparse) == 2

    not_ready, cheapest = on_crowded[0], on_sparse[0]
    for name, cost in ((not_ready, "1000"), (cheapest, "-5")):
        patch = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": cost}}}
        await backend.ok("PATCH", backend.ns_path("pods", name), body=patch, content_type=MERGE)
    # Not Ready as a failing readiness probe leaves it: Running, Ready False.
    unready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    await backend.ok(
        "PATCH",
        backend.ns_path("pods", f"{not_ready}/status"),
        body=unready,
        content_type="application/strategic-merge-patch+json",
    )
    assert len(await backend.wait_ready("app=ranked", 4)) == 4

    await backend.ok("PATCH", rs_path, body={"spec": {"replicas": 2}}, content_type=MERGE)

    async def two_left() -> list[dict[str, Any]]:
        live = await _live(backend)
        return live if len(live) == 2 else []

    kept = {
        pod["metadata"]["name"]: pod["spec"]["nodeName"]
        for pod in await eventually(two_left, within=15, message="two replicas left")
    }
    # Gone: the not-Ready one (cost 1000), the cheapest (-5), then one of the two left on the
    # node with three of the set's pods (3 against 2), not the one alone with its cost 0.
    assert not_ready not in kept and cheapest not in kept
    assert on_sparse[1] in kept
    assert sorted(kept.values()) == sorted([crowded, sparse])
