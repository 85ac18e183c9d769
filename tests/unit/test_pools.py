"""Pools declared in the settings (pools at zero nodes) next to the pools seen on Nodes."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer import names
from rebalancer.config import PoolShape
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.pools import (
    Pool,
    declared_pools,
    on_demand_fallback,
    pools_of,
    with_declared,
)
from rebalancer.controller.scheduling import Taint

SPOT_TAINT = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "value": "spot",
    "effect": "NoSchedule",
}
GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
TOLERATE_SPOT_AND_GPU: dict[str, Any] = {
    "tolerations": [
        {"key": SPOT_TAINT["key"], "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    ]
}
GPU_ON_DEMAND = PoolShape(
    name="gpuondemand",
    gpus=1,
    labels={"sku": "gpu"},
    taints=["sku=gpu:NoSchedule"],
)


def node(name: str, pool: str, *, spot: bool, taints: list[dict[str, str]]) -> NodeInfo:
    return NodeInfo.from_json(
        {
            "metadata": {
                "name": name,
                "labels": {
                    names.AKS_AGENTPOOL_LABEL: pool,
                    names.AKS_SPOT_LABEL: "spot" if spot else "regular",
                },
            },
            "spec": {"taints": taints},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": []},
        }
    )


SPOT_ONLY = pools_of([node("spot-0", "gpuspot", spot=True, taints=[SPOT_TAINT, GPU_TAINT])])


def test_a_declared_pool_has_the_shape_its_nodes_would_have() -> None:
    (pool,) = declared_pools([GPU_ON_DEMAND]).values()
    assert pool == Pool(
        name="gpuondemand",
        spot=False,
        taints=(Taint("sku", "gpu", "NoSchedule"),),
        labels={names.AKS_AGENTPOOL_LABEL: "gpuondemand", "sku": "gpu"},
        nodes=(),
        gpus_per_node=1,
    )


def test_the_defaults_of_a_declaration() -> None:
    (pool,) = declared_pools([PoolShape(name="cpu")]).values()
    assert (pool.spot, pool.taints, pool.gpus_per_node) == (False, (), 0)
    assert pool.labels == {names.AKS_AGENTPOOL_LABEL: "cpu"}


def test_a_pool_seen_on_nodes_wins_over_its_declaration() -> None:
    live = pools_of(
        [node("od-0", "gpuondemand", spot=False, taints=[{**GPU_TAINT, "value": "a100"}])]
    )
    merged = with_declared(live, declared_pools([GPU_ON_DEMAND, PoolShape(name="other")]))
    assert merged["gpuondemand"] is live["gpuondemand"]
    assert merged["gpuondemand"].nodes == ("od-0",)
    assert merged["other"].nodes == ()
    # The live taint (sku=a100), not the declared one, decides.
    fallback = on_demand_fallback(TOLERATE_SPOT_AND_GPU, merged, gpus=1)
    assert fallback.rejected["gpuondemand"] == ("taint sku=a100:NoSchedule not tolerated",)


def test_a_declared_pool_at_zero_nodes_is_a_fail_over_target() -> None:
    blocked = on_demand_fallback(TOLERATE_SPOT_AND_GPU, SPOT_ONLY, gpus=1)
    assert blocked.pools == ()
    assert blocked.blocked_reason == (
        "no on-demand pool in the cluster or declared in REBALANCER_POOLS"
    )
    merged = with_declared(SPOT_ONLY, declared_pools([GPU_ON_DEMAND]))
    fallback = on_demand_fallback(TOLERATE_SPOT_AND_GPU, merged, gpus=1)
    assert fallback.pools == ("gpuondemand",)
    assert fallback.blocked_reason == ""


@pytest.mark.parametrize(
    ("shape", "template", "reason"),
    [
        (
            GPU_ON_DEMAND,
            {"tolerations": TOLERATE_SPOT_AND_GPU["tolerations"][:1]},
            "pool gpuondemand: taint sku=gpu:NoSchedule not tolerated",
        ),
        (
            PoolShape(name="gpuondemand", taints=["sku=gpu:NoSchedule"]),
            TOLERATE_SPOT_AND_GPU,
            "pool gpuondemand: needs 1 nvidia.com/gpu, nodes have 0",
        ),
        (
            GPU_ON_DEMAND,
            {**TOLERATE_SPOT_AND_GPU, "nodeSelector": {"sku": "h100"}},
            "pool gpuondemand: nodeSelector sku=h100 not matched",
        ),
    ],
)
def test_a_declared_pool_the_template_does_not_fit_is_rejected_with_why(
    shape: PoolShape, template: dict[str, Any], reason: str
) -> None:
    merged = with_declared(SPOT_ONLY, declared_pools([shape]))
    fallback = on_demand_fallback(template, merged, gpus=1)
    assert fallback.pools == ()
    assert fallback.blocked_reason == reason


def test_a_declared_spot_pool_is_no_fail_over_target() -> None:
    spot = PoolShape(name="spot2", spot=True, gpus=1, taints=["sku=gpu:NoSchedule"])
    merged = with_declared(SPOT_ONLY, declared_pools([spot]))
    fallback = on_demand_fallback(TOLERATE_SPOT_AND_GPU, merged, gpus=1)
    assert (fallback.pools, dict(fallback.rejected)) == ((), {})
