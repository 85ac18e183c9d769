"""Node pools as the controller sees them, and which on-demand pools a workload can fail over to.

A pool is the set of Nodes with one `kubernetes.azure.com/agentpool` label (a VMSS agent pool), or
with one `karpenter.sh/nodepool` and one `karpenter.sh/capacity-type` (a Karpenter NodePool's
spot or on-demand part: `rebalancer/pool_kind.py`). Its taints and labels
are those all its nodes share, minus the transient ones (cordon, not-ready, ours), so a pod
template can be checked against the pool rather than against one node's passing state.

A pool the cluster autoscaler keeps at min 0, or a NodePool Karpenter has launched nothing for yet,
has no Node to learn that from, so it can be declared in the settings (`REBALANCER_POOLS`); a
Karpenter NodePool's parts are also read from the NodePool itself (`karpenter.py`
`nodepool_pools`) and enter the same way, a declaration winning over them. A declared pool has no
nodes, and a pool seen on Nodes wins over its declaration. Only the fail-over check looks at
declared pools: returns to spot and cost accounting are about nodes that exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rebalancer import names, pool_kind
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.scheduling import Taint, unmet_placement, untolerated
from rebalancer.setting_values import PoolShape, parse_taint

TRANSIENT_TAINT_PREFIXES = (
    "node.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
    names.PREFIX,
)


@dataclass(frozen=True)
class Pool:
    name: str
    spot: bool
    taints: tuple[Taint, ...]
    labels: Mapping[str, str]
    nodes: tuple[str, ...]
    gpus_per_node: int = 0

    def problems_for(self, template_spec: Mapping[str, Any], gpus: int = 0) -> list[str]:
        """Why pods of this template cannot land here ([] when they can)."""
        tolerations = template_spec.get("tolerations") or []
        problems = [
            f"taint {taint} not tolerated" for taint in untolerated(tolerations, self.taints)
        ]
        if gpus > self.gpus_per_node:
            problems.append(f"needs {gpus} nvidia.com/gpu, nodes have {self.gpus_per_node}")
        problems += [
            f"{unmet} not matched" for unmet in unmet_placement(template_spec, self.labels)
        ]
        return problems


def pools_of(nodes: Iterable[NodeInfo]) -> dict[str, Pool]:
    members: dict[str, list[NodeInfo]] = {}
    for node in nodes:
        members.setdefault(node.pool or "(no pool label)", []).append(node)
    pools = {}
    for name, group in members.items():
        common_taints = set.intersection(*(set(n.taints) for n in group))
        taints = tuple(
            sorted(
                (t for t in common_taints if not t.key.startswith(TRANSIENT_TAINT_PREFIXES)),
                key=str,
            )
        )
        shared = dict(group[0].labels)
        for node in group[1:]:
            shared = {k: v for k, v in shared.items() if node.labels.get(k) == v}
        pools[name] = Pool(
            name=name,
            spot=all(n.spot for n in group),
            taints=taints,
            labels=shared,
            nodes=tuple(sorted(n.name for n in group)),
            gpus_per_node=max(n.allocatable_gpus for n in group),
        )
    return pools


def declared_pools(shapes: Iterable[PoolShape]) -> dict[str, Pool]:
    """The pools of the settings, shaped as their Nodes would show them once they exist."""
    return {
        shape.name: Pool(
            name=shape.name,
            spot=shape.spot,
            taints=tuple(sorted((Taint(*parse_taint(t)) for t in shape.taints), key=str)),
            labels={**pool_kind.labels_of(shape.name), **shape.labels},
            nodes=(),
            gpus_per_node=shape.gpus,
        )
        for shape in shapes
    }


def with_declared(live: Mapping[str, Pool], declared: Mapping[str, Pool]) -> dict[str, Pool]:
    """The live pools, and the declared ones no Node shows yet: the live shape is the truth."""
    return {**declared, **live}


@dataclass(frozen=True)
class Fallback:
    """The on-demand pools a template fits, and for every other on-demand pool, why not."""

    pools: tuple[str, ...]
    rejected: Mapping[str, tuple[str, ...]]

    @property
    def blocked_reason(self) -> str:
        if self.pools:
            return ""
        if not self.rejected:
            return "no on-demand pool in the cluster or declared in REBALANCER_POOLS"
        return "; ".join(
            f"pool {name}: {', '.join(why)}" for name, why in sorted(self.rejected.items())
        )


def on_demand_fallback(
    template_spec: Mapping[str, Any], pools: Mapping[str, Pool], *, gpus: int = 0
) -> Fallback:
    fits: list[str] = []
    rejected: dict[str, tuple[str, ...]] = {}
    for pool in pools.values():
        if pool.spot:
            continue
        problems = pool.problems_for(template_spec, gpus)
        if problems:
            rejected[pool.name] = tuple(problems)
        else:
            fits.append(pool.name)
    return Fallback(pools=tuple(sorted(fits)), rejected=rejected)


@dataclass(frozen=True)
class Options:
    """Where a replacement could go when it was scheduled: the pools that fit its template, by
    kind. Said in an Event so that a user sees where it went and what else there was."""

    on_demand: tuple[str, ...]
    spot_with_room: tuple[str, ...]  # spot pools with a Ready, schedulable node with free GPUs
    spot_evicted: tuple[str, ...]  # spot pools with a notice on one of their nodes


def placement_options(
    template_spec: Mapping[str, Any],
    gpus: int,
    nodes: Iterable[NodeInfo],
    free_gpus: Mapping[str, int],
    noticed: set[str],
) -> Options:
    listed = list(nodes)
    pools = pools_of(listed)
    fits = [p for p in pools.values() if not p.problems_for(template_spec, gpus)]
    by_name = {n.name: n for n in listed}
    room = {
        p.name
        for p in fits
        for n in (by_name[name] for name in p.nodes)
        if n.ready and not n.unschedulable and free_gpus.get(n.name, 0) >= max(1, gpus)
    }
    evicted = {p.name for p in fits if any(name in noticed for name in p.nodes)}
    return Options(
        on_demand=tuple(sorted(p.name for p in fits if not p.spot)),
        spot_with_room=tuple(sorted(p.name for p in fits if p.spot and p.name in room)),
        spot_evicted=tuple(sorted(evicted)),
    )
