"""What the cluster's GPU capacity costs per hour, and what spot saves: pure arithmetic.

From the nodes (SKU, region, priority), the pods and a price table:
- cost per hour of each pool = sum over its nodes of the node's price (spot price on spot nodes,
  on-demand price on regular ones); a node whose price is unknown is counted as unpriced;
- savings per hour = sum over spot nodes of (on-demand price - spot price) of the same SKU;
- fallback replicas = replicas of managed workloads that could run on spot (a spot pool fits
  their template) but run on a regular node; their cost per hour is their share of that node's
  price (GPUs asked / GPUs the node has, or the whole node when it has none).
The controller integrates these rates over time into counters (spend, savings, fallback
replica-hours); see docs/cost.md for the formulas as users see them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rebalancer import names
from rebalancer.azure.prices import PriceTable
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.pools import Pool


def region_of(labels: Mapping[str, str]) -> str:
    """`topology.kubernetes.io/region`, else the region part of a zone such as `eastus-1`."""
    region = labels.get(names.REGION_LABEL, "")
    if region:
        return region.lower()
    zone = labels.get(names.ZONE_LABEL, "")
    return zone.rsplit("-", 1)[0].lower() if "-" in zone else ""


@dataclass(frozen=True)
class PricedNode:
    name: str
    pool: str
    spot: bool
    sku: str
    region: str
    price: float | None  # what this node costs per hour (its own priority's price)
    on_demand: float | None  # what the same SKU costs on demand
    gpus: int


def price_nodes(nodes: Iterable[NodeInfo], table: PriceTable) -> list[PricedNode]:
    priced = []
    for node in nodes:
        region = region_of(node.labels)
        priced.append(
            PricedNode(
                name=node.name,
                pool=node.pool,
                spot=node.spot,
                sku=node.sku,
                region=region,
                price=table.price(node.sku, region, spot=node.spot),
                on_demand=table.price(node.sku, region, spot=False),
                gpus=node.allocatable_gpus,
            )
        )
    return priced


@dataclass(frozen=True)
class CostRates:
    """Rates in USD per hour at one moment."""

    by_pool: Mapping[tuple[str, str], float]  # (pool, "spot" | "regular") -> $/h
    savings: float  # $/h that spot saves against the same nodes on demand
    fallback_replicas: int
    fallback_cost: float  # $/h of the fallback replicas' share of on-demand nodes
    unpriced_nodes: int

    def spend(self, priority: str) -> float:
        return sum(rate for (_, p), rate in self.by_pool.items() if p == priority)


def cost_rates(
    nodes: list[PricedNode],
    pods: Iterable[PodInfo],
    spot_capable: Iterable[tuple[str, str, str]],
    workload_of: Mapping[tuple[str, str], tuple[str, str, str]],
) -> CostRates:
    """`spot_capable`: keys of managed workloads a spot pool fits; `workload_of`: pod -> its
    workload's key."""
    by_pool: dict[tuple[str, str], float] = defaultdict(float)
    savings = 0.0
    unpriced = 0
    by_name = {node.name: node for node in nodes}
    for node in nodes:
        if node.price is None:
            unpriced += 1
            continue
        by_pool[(node.pool, "spot" if node.spot else "regular")] += node.price
        if node.spot and node.on_demand is not None:
            savings += node.on_demand - node.price
    capable = set(spot_capable)
    fallback = 0
    fallback_cost = 0.0
    for pod in pods:
        host = by_name.get(pod.node_name)
        if host is None or host.spot or pod.deleting or pod.finished:
            continue
        if workload_of.get(pod.key) not in capable:
            continue
        fallback += 1
        if host.price is not None:
            share = min(1.0, pod.gpus / host.gpus) if host.gpus and pod.gpus else 1.0
            fallback_cost += host.price * share
    return CostRates(dict(by_pool), savings, fallback, fallback_cost, unpriced)


def spot_capable(
    workloads: Iterable[WorkloadInfo], pools: Mapping[str, Pool]
) -> set[tuple[str, str, str]]:
    """Workloads that some spot pool could take (their replicas on on-demand are a fallback)."""
    spot_pools = [pool for pool in pools.values() if pool.spot]
    return {
        workload.key
        for workload in workloads
        if any(
            not pool.problems_for(workload.template_spec, workload.gpus_per_replica)
            for pool in spot_pools
        )
    }
