"""Where the scheduler puts a pod when several nodes fit, on the emulator and on the real
kube-scheduler (a conformance case: the same test body on both).

The real scheduler adds weighted scores (TaintToleration 3, NodeAffinity 2, ...), each scaled to
0-100 over the feasible nodes: an untolerated PreferNoSchedule taint outweighs a preferred
node affinity. The controller counts on this: its cool-down taints an evicted pool
PreferNoSchedule, and the admission webhook's placement prefers a pool by node affinity.
"""

from __future__ import annotations

from typing import Any

from .backend import CONFORMANCE_TAINT, Backend
from .conftest import eventually

MERGE = "application/merge-patch+json"
POOL_LABEL = "conformance.spot-rebalancer.io/pool"  # this test's nodes


async def _ready_for_pods(backend: Backend, name: str) -> dict[str, Any]:
    """The node once the node lifecycle controller lifted its `not-ready` taint."""

    async def settled() -> dict[str, Any] | None:
        node: dict[str, Any] = await backend.ok("GET", f"/api/v1/nodes/{name}")
        keys = [taint["key"] for taint in node["spec"].get("taints") or []]
        return node if keys == [CONFORMANCE_TAINT] else None

    result: dict[str, Any] = await eventually(settled, within=15, message=f"{name} schedulable")
    return result


def _pod(backend: Backend, name: str, node_affinity: dict[str, Any]) -> dict[str, Any]:
    """A pod for this test's nodes only (their label and taint), with this node affinity."""
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "app", "image": "example/app:v1"}],
            "nodeSelector": {POOL_LABEL: backend.namespace},
            "tolerations": [
                {"key": CONFORMANCE_TAINT, "operator": "Equal", "value": backend.namespace}
            ],
            "affinity": {"nodeAffinity": node_affinity},
        },
    }


async def test_an_untolerated_prefer_no_schedule_taint_outweighs_a_preferred_node_affinity(
    backend: Backend,
) -> None:
    shared = {POOL_LABEL: backend.namespace}
    preferred_but_tainted = await backend.create_node(
        "preferred", run_pods=True, labels={**shared, "example.com/preferred": "yes"}
    )
    plain = await backend.create_node("plain", run_pods=True, labels=shared)
    tainted_name = preferred_but_tainted["metadata"]["name"]
    await _ready_for_pods(backend, plain["metadata"]["name"])
    settled = await _ready_for_pods(backend, tainted_name)
    taints = [
        *settled["spec"]["taints"],
        {"key": "example.com/cooling-down", "effect": "PreferNoSchedule"},
    ]
    await backend.ok(
        "PATCH",
        f"/api/v1/nodes/{tainted_name}",
        body={"spec": {"taints": taints}},
        content_type=MERGE,
    )
    preference = {
        "matchExpressions": [{"key": "example.com/preferred", "operator": "In", "values": ["yes"]}]
    }
    affinity = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": preference}
        ]
    }
    await backend.create("pods", _pod(backend, "placed", affinity))

    async def bound() -> str:
        placed = await backend.ok("GET", backend.ns_path("pods", "placed"))
        return str(placed["spec"].get("nodeName") or "")

    node = await eventually(bound, within=15, message="the pod bound")
    assert node == plain["metadata"]["name"]


async def test_a_required_term_without_requirements_matches_no_node_and_match_fields_pin_a_name(
    backend: Backend,
) -> None:
    """Node affinity terms are ORed: an empty one matches nothing (not everything), a
    `metadata.name` matchField matches the node of that name."""
    shared = {POOL_LABEL: backend.namespace}
    first = (await backend.create_node("first", run_pods=True, labels=shared))["metadata"]["name"]
    second = (await backend.create_node("second", run_pods=True, labels=shared))["metadata"]["name"]
    for name in (first, second):
        await _ready_for_pods(backend, name)
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [second]}]}

    def required(*terms: dict[str, Any]) -> dict[str, Any]:
        return {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }

    await backend.create("pods", _pod(backend, "pinned", required({}, by_name)))
    await backend.create("pods", _pod(backend, "nowhere", required({})))

    async def outcome() -> tuple[str, str] | None:
        pinned = await backend.ok("GET", backend.ns_path("pods", "pinned"))
        nowhere = await backend.ok("GET", backend.ns_path("pods", "nowhere"))
        scheduled = next(
            (c for c in nowhere["status"].get("conditions") or [] if c["type"] == "PodScheduled"),
            {},
        )
        node = pinned["spec"].get("nodeName")
        if node and scheduled.get("reason") == "Unschedulable":
            return str(node), str(nowhere["spec"].get("nodeName") or "")
        return None

    assert await eventually(outcome, within=15, message="one bound, one unschedulable") == (
        second,
        "",
    )
