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
