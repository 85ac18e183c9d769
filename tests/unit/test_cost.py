"""Cost arithmetic: node prices, pool rates, savings, fallback replicas (independent sums)."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer import names
from rebalancer.azure.prices import BUNDLED
from rebalancer.controller.cost import cost_rates, price_nodes, region_of, spot_capable
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.pools import pools_of

A100 = "Standard_NC24ads_A100_v4"
SPOT_TAINTS = [
    {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"},
    {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
]


def node(name: str, pool: str, spot: bool, sku: str = A100, zone: str = "eastus-1") -> NodeInfo:
    return NodeInfo.from_json(
        {
            "metadata": {
                "name": name,
                "labels": {
                    names.AKS_AGENTPOOL_LABEL: pool,
                    names.AKS_SPOT_LABEL: "spot" if spot else "regular",
                    names.INSTANCE_TYPE_LABEL: sku,
                    names.ZONE_LABEL: zone,
                },
            },
            "spec": {"taints": SPOT_TAINTS if spot else SPOT_TAINTS[1:]},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": []},
        }
    )


def pod(name: str, node_name: str) -> PodInfo:
    return PodInfo.from_json(
        {
            "metadata": {"namespace": "ml", "name": name, "uid": name},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running"},
        }
    )


def workload(tolerations: list[dict[str, Any]]) -> WorkloadInfo:
    return WorkloadInfo.from_json(
        "Deployment",
        {
            "metadata": {"namespace": "ml", "name": "llm"},
            "spec": {
                "replicas": 3,
                "template": {
                    "spec": {
                        "tolerations": tolerations,
                        "containers": [
                            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                        ],
                    }
                },
            },
        },
    )


@pytest.mark.parametrize(
    ("labels", "region"),
    [
        ({names.REGION_LABEL: "EastUS"}, "eastus"),
        ({names.ZONE_LABEL: "westus2-3"}, "westus2"),
        ({names.ZONE_LABEL: "0"}, ""),
        ({}, ""),
    ],
)
def test_region(labels: dict[str, str], region: str) -> None:
    assert region_of(labels) == region


def test_rates_equal_the_sum_of_node_prices() -> None:
    nodes = [
        node("s0", "gpuspot", True),
        node("s1", "gpuspot", True),
        node("o0", "gpuondemand", False),
        node("x0", "odd", False, sku="Standard_Unknown"),
    ]
    priced = price_nodes(nodes, BUNDLED)
    tolerant = workload(
        [
            {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Exists"},
            {"key": "sku", "operator": "Exists"},
        ]
    )
    pods = [pod("p0", "s0"), pod("p1", "o0")]
    capable = spot_capable([tolerant], pools_of(nodes))
    rates = cost_rates(priced, pods, capable, {p.key: tolerant.key for p in pods})
    assert rates.by_pool == {
        ("gpuspot", "spot"): pytest.approx(2 * 0.444433),
        ("gpuondemand", "regular"): pytest.approx(3.673),
    }
    assert rates.spend("spot") == pytest.approx(2 * 0.444433)
    assert rates.savings == pytest.approx(2 * (3.673 - 0.444433))
    assert rates.unpriced_nodes == 1
    assert rates.fallback_replicas == 1  # p1 could run on spot but runs on demand
    assert rates.fallback_cost == pytest.approx(3.673)


def test_a_workload_that_cannot_use_spot_is_no_fallback() -> None:
    nodes = [node("s0", "gpuspot", True), node("o0", "gpuondemand", False)]
    only_gpu = workload([{"key": "sku", "operator": "Exists"}])  # no spot toleration
    assert spot_capable([only_gpu], pools_of(nodes)) == set()
    rates = cost_rates(price_nodes(nodes, BUNDLED), [pod("p1", "o0")], set(), {})
    assert rates.fallback_replicas == 0
