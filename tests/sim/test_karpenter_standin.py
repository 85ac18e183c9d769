"""The emulator's Karpenter stand-in (sim/rebalancer_sim/karpenter.py) in virtual time
(ManualClock, no HTTP): what it launches for which pod, and what it removes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from aiohttp import ClientSession

from rebalancer.clock import ManualClock
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import ScenarioError, parse_scenario

GPU_TOLERATION = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def scenario(
    nodepool: dict[str, Any],
    *,
    tolerations: list[Any] | None = None,
    replicas: int = 2,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "name": "karpenter",
        "settings": {"nodeAutoDrain": False, "shutdownSeconds": 0.5},
        "pools": [{"name": "system", "vmSize": "Standard_D4s_v5", "cpu": 4, "memory": "16Gi"}],
        "nodePools": [{"name": "gpu", "taints": ["sku=gpu:NoSchedule"], "zones": ["1", "2"],
                       "provisioningSeconds": 5, **nodepool}],
        "workloads": [{"name": "llm", "replicas": replicas,
                       "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
                       "tolerations": [GPU_TOLERATION] if tolerations is None else tolerations,
                       "nodeSelector": node_selector or {}}],
    }  # fmt: skip


def launched_nodes(cluster: ClusterEmulator) -> list[tuple[str, str, str]]:
    """(capacity type, zone, node's taints) of each NodeClaim's node, sorted."""
    found = []
    for node in cluster.store.items(R.NODES):
        labels = node["metadata"]["labels"]
        if "karpenter.sh/nodepool" in labels:
            taints = ",".join(f"{t['key']}={t.get('value', '')}" for t in node["spec"]["taints"])
            found.append((labels["karpenter.sh/capacity-type"],
                          labels["topology.kubernetes.io/zone"], taints))  # fmt: skip
    return sorted(found)


async def test_spot_first_then_on_demand_once_spot_capacity_is_gone() -> None:
    cluster = ClusterEmulator(
        parse_scenario(scenario({"capacityTypes": ["spot", "on-demand"], "spotCapacity": 1})),
        clock=ManualClock(),
    )
    await cluster.advance(6)
    # The NodePool's taint only: karpenter-provider-azure adds no spot taint.
    assert launched_nodes(cluster) == [("on-demand", "eastus-1", "sku=gpu"),
                                       ("spot", "eastus-1", "sku=gpu")]  # fmt: skip
    spot = next(n for n in cluster.store.items(R.NODES)
                if n["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot")  # fmt: skip
    labels = spot["metadata"]["labels"]
    assert labels["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert labels["karpenter.azure.com/sku-gpu-count"] == "1"
    assert labels["node.kubernetes.io/instance-type"] == "Standard_NC24ads_A100_v4"
    claims = {c["status"]["nodeName"]: c for c in cluster.store.items(R.NODECLAIMS)}
    assert [c["type"] for c in claims[spot["metadata"]["name"]]["status"]["conditions"]][-1] == (
        "Ready"
    )
    assert all(p["spec"].get("nodeName") for p in cluster.pods())


async def test_a_pod_that_requires_on_demand_or_a_zone_gets_it() -> None:
    selector = {
        "karpenter.sh/capacity-type": "on-demand",
        "topology.kubernetes.io/zone": "eastus-2",
    }
    cluster = ClusterEmulator(
        parse_scenario(scenario({"capacityTypes": ["spot", "on-demand"]}, replicas=1,
                                node_selector=selector)),
        clock=ManualClock(),
    )  # fmt: skip
    await cluster.advance(6)
    assert launched_nodes(cluster) == [("on-demand", "eastus-2", "sku=gpu")]


@pytest.mark.parametrize(
    ("nodepool", "tolerations"),
    [
        ({"capacityTypes": ["spot"]}, []),  # the NodePool's taint not tolerated
        ({"capacityTypes": ["spot"], "spotCapacity": 0}, None),  # no spot left, no on-demand
        ({"vmSize": "Standard_D4s_v5", "cpu": 4, "memory": "16Gi", "gpus": 0}, None),  # no GPU
    ],
)
async def test_nothing_is_launched_for_a_pod_the_nodepool_does_not_admit(
    nodepool: dict[str, Any], tolerations: list[Any] | None
) -> None:
    cluster = ClusterEmulator(
        parse_scenario(scenario(nodepool, tolerations=tolerations)), clock=ManualClock()
    )
    await cluster.advance(10)
    assert launched_nodes(cluster) == []
    assert list(cluster.store.items(R.NODECLAIMS)) == []


async def test_empty_nodes_go_after_consolidate_after_unless_a_pod_says_do_not_disrupt() -> None:
    cluster = ClusterEmulator(
        parse_scenario(scenario({"capacityTypes": ["spot"], "consolidateAfter": "30s"})),
        clock=ManualClock(),
    )
    await cluster.advance(6)
    assert len(launched_nodes(cluster)) == 2
    held = next(n["metadata"]["name"] for n in cluster.store.items(R.NODES)
                if "karpenter.sh/nodepool" in n["metadata"]["labels"])  # fmt: skip
    # A DaemonSet-like pod that stays: no workload, but it asks not to be disrupted.
    cluster.store.create(R.PODS, {
        "metadata": {"name": "logger", "namespace": "default",
                     "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                          "name": "logger", "uid": "u", "controller": True}]},
        "spec": {"nodeName": held, "tolerations": [GPU_TOLERATION],
                 "containers": [{"name": "c", "image": "busybox"}]},
    })  # fmt: skip
    cluster.scale("llm", 0)
    await cluster.advance(29)
    assert len(launched_nodes(cluster)) == 2  # not yet consolidateAfter
    await cluster.advance(3)
    assert [n["metadata"]["name"] for n in cluster.store.items(R.NODES)
            if "karpenter.sh/nodepool" in n["metadata"]["labels"]] == [held]  # fmt: skip
    assert len(list(cluster.store.items(R.NODECLAIMS))) == 1


async def test_a_preempted_nodeclaims_vm_takes_its_nodeclaim_and_a_new_one_is_launched() -> None:
    cluster = ClusterEmulator(
        parse_scenario(scenario({"capacityTypes": ["spot"]}, replicas=1)), clock=ManualClock()
    )
    await cluster.advance(6)
    (node,) = [n["metadata"]["name"] for n in cluster.store.items(R.NODES)
               if "karpenter.sh/nodepool" in n["metadata"]["labels"]]  # fmt: skip
    (first,) = [c["metadata"]["name"] for c in cluster.store.items(R.NODECLAIMS)]
    cluster.preempt(node, notice_seconds=5)
    await cluster.advance(20)
    claims = [c["metadata"]["name"] for c in cluster.store.items(R.NODECLAIMS)]
    assert first not in claims and len(claims) == 1  # the replacement pod's
    assert cluster.store.get(R.NODES, "", node) is None
    assert all(p["spec"].get("nodeName") for p in cluster.pods())


async def test_a_disrupted_node_is_tainted_drained_through_its_budgets_then_removed() -> None:
    cluster = ClusterEmulator(
        parse_scenario(scenario({"capacityTypes": ["spot"]}, replicas=1)), clock=ManualClock()
    )
    await cluster.advance(6)
    (node,) = [n["metadata"]["name"] for n in cluster.store.items(R.NODES)
               if "karpenter.sh/nodepool" in n["metadata"]["labels"]]  # fmt: skip
    (replica,) = [p["metadata"]["name"] for p in cluster.pods()]
    # A budget that allows nothing: the drain waits, the node stays, tainted.
    cluster.store.create(R.PDBS, {
        "metadata": {"name": "llm", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "llm"}}},
    })  # fmt: skip
    cluster.karpenter.disrupt(node)
    taints = cluster.store.must_get(R.NODES, "", node)["spec"]["taints"]
    assert {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"} in taints
    await cluster.advance(5)
    assert cluster.store.get(R.NODES, "", node) is not None
    assert cluster.karpenter.evicted == [] and {n for _, n in cluster.karpenter.refused} == {
        replica
    }
    cluster.store.delete(R.PDBS, "default", "llm")
    await cluster.advance(10)
    assert [n for _, n in cluster.karpenter.evicted] == [replica]
    assert cluster.store.get(R.NODES, "", node) is None
    assert all(c["status"].get("nodeName") != node for c in cluster.store.items(R.NODECLAIMS))


async def test_nodepools_and_nodeclaims_are_served() -> None:
    cluster = ClusterEmulator(parse_scenario(scenario({})), clock=ManualClock())
    async with cluster:
        await cluster.advance(6)
        assert cluster.urls is not None
        async with ClientSession() as session:
            async with session.get(f"{cluster.urls.api}/apis/karpenter.sh/v1/nodepools") as r:
                nodepools = await r.json()
            async with session.get(f"{cluster.urls.api}/apis/karpenter.sh/v1/nodeclaims") as r:
                nodeclaims = await r.json()
    assert [n["metadata"]["name"] for n in nodepools["items"]] == ["gpu"]
    assert len(nodeclaims["items"]) == 2


def test_a_nodepools_scenario_errors_are_named() -> None:
    bad = scenario({"capacityTypes": ["reserved"]})
    with pytest.raises(ScenarioError, match=r"nodePools\[0\].capacityTypes"):
        parse_scenario(bad)
    bad = copy.deepcopy(scenario({"consolidateAfter": "soon"}))
    with pytest.raises(ScenarioError, match="consolidateAfter"):
        parse_scenario(bad)
