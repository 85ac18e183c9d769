"""Where a new pod of a workload with a placement policy goes, and the patch that says so.

Pure: the admission webhook (`webhook.py`) calls `choose` with what the controller's caches
show (pools, the risk of each spot group, where the workload's replicas are) and turns the
decision into node affinity with `affinity_patch`. The order of the rules, first match wins:

1. a replacement for a replica under notice (the workload's surge is open) goes where the policy
   says replacements go: on-demand by default;
2. fewer replicas on on-demand than `min-on-demand`: on-demand;
3. a spot group (pool and zone) whose risk the policy accepts and that is not being evicted
   now, spread over zones (or pools) by the workload's replicas already there, then lowest risk;
4. no such spot group: on-demand.

Pools are VMSS agent pools or Karpenter NodePools (by capacity type, `rebalancer/pool_kind.py`);
the affinity names whichever labels select the pool, so Karpenter provisions for it too.
On-demand is required node affinity: on-demand capacity is what the cluster autoscaler or
Karpenter can add,
and a replacement that lands on spot again defeats the fail-over. Spot is preferred node
affinity: spot capacity may not be there, and a replica that cannot have the chosen spot group
is better anywhere else it fits than Pending.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rebalancer import names, pool_kind
from rebalancer.controller.policy import Policy
from rebalancer.controller.pools import Pool
from rebalancer.controller.risk import LEVELS, Risk
from rebalancer.controller.target import open_zones

PREFERRED_WEIGHT = 100  # the most a preferred term can weigh: above the user's own preferences


@dataclass(frozen=True)
class Group:
    """A spot pool in one zone, with its risk (the riskiest VM size in it)."""

    pool: str
    zone: str  # "": the pool shows no zone (no node yet, or zones not labelled)
    level: str
    rate: float  # evictions per node-hour; < 0: unknown


@dataclass(frozen=True)
class Where:
    """A workload's replicas now: per (pool, zone), and how many of them are on on-demand."""

    counts: Mapping[tuple[str, str], int]
    on_demand: int
    under_notice: int = 0  # on spot nodes under notice

    @property
    def spot_kept(self) -> int:
        """Replicas on spot not under notice (Ready or not)."""
        return sum(self.counts.values()) - self.on_demand - self.under_notice

    def in_zone(self, zone: str) -> int:
        return sum(n for (_, z), n in self.counts.items() if z == zone)

    def in_pool(self, pool: str) -> int:
        return sum(n for (p, _), n in self.counts.items() if p == pool)


@dataclass(frozen=True)
class Decision:
    pool: str
    zone: str
    spot: bool
    reason: str
    # An availability target's spot replica: its zone and these spot pools (the zone's that
    # the policy accepts) are required, so the replicas stay spread and one without capacity
    # waits, the autoscaler trying each pool, while the plan covers it on on-demand; the chosen
    # pool is preferred. Empty: spot is only preferred.
    required_pools: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return not self.spot

    @property
    def placed(self) -> str:
        return f"{self.pool}/{self.zone}"


def spot_groups(pools: Iterable[Pool], risks: Mapping[tuple[str, str, str], Risk]) -> list[Group]:
    """Every spot pool per zone; a pool with no assessed group (no node yet) has unknown risk."""
    worst: dict[tuple[str, str], Risk] = {}
    for risk in risks.values():
        key = (risk.pool, risk.zone)
        if key not in worst or risk.rate_per_hour > worst[key].rate_per_hour:
            worst[key] = risk
    groups = []
    for pool in pools:
        if not pool.spot:
            continue
        zones = [(zone, risk) for (name, zone), risk in worst.items() if name == pool.name]
        if not zones:  # no node yet: the zone its nodes will have, if the pool says
            groups.append(Group(pool.name, pool.labels.get(names.ZONE_LABEL, ""), "unknown", -1.0))
        for zone, risk in sorted(zones, key=lambda item: item[0]):
            groups.append(Group(pool.name, zone, risk.level, risk.rate_per_hour))
    return groups


def choose(
    policy: Policy,
    *,
    fits: Iterable[Pool],
    groups: Iterable[Group],
    where: Where,
    failing_over: bool,
    evicting: set[tuple[str, str]],
    target_spot: int | None = None,
    target_waiting: Iterable[str] = (),
) -> Decision | None:
    """The group for one new pod; None when no pool the policy allows fits it (placed as
    without a policy). `fits`: the pools the pod's own template can run on; `evicting`: the
    (pool, zone) of nodes under notice; `target_spot`: with an availability target, the
    replicas its plan keeps on spot; `target_waiting`: its zones waiting for spot capacity,
    which hold one of them."""
    allowed = [pool for pool in fits if policy.allows_pool(pool.name)]
    names_allowed = {pool.name for pool in allowed}
    on_demand = sorted(
        (pool.name for pool in allowed if not pool.spot),
        key=lambda name: (where.in_pool(name), name),
    )
    if target_spot is not None and not failing_over:
        return _for_target(
            policy, target_spot, allowed, groups, where, evicting, on_demand, target_waiting
        )
    if failing_over and policy.failover_to == "on-demand" and on_demand:
        return Decision(
            on_demand[0], "", False,
            f"replacement for a replica under notice: on-demand pool {on_demand[0]} "
            "(failover-to on-demand)",
        )  # fmt: skip
    if where.on_demand < policy.min_on_demand and on_demand:
        return Decision(
            on_demand[0], "", False,
            f"{where.on_demand} of at least {policy.min_on_demand} replicas on on-demand: "
            f"pool {on_demand[0]}",
        )  # fmt: skip
    usable = [g for g in groups if g.pool in names_allowed]
    accepted = [
        g
        for g in usable
        if g.level in LEVELS
        and policy.accepts(g.level)
        and (g.pool, g.zone) not in evicting
        and not any(p == g.pool and not z for p, z in evicting)
    ]
    if accepted:
        best = min(accepted, key=lambda g: _spread_key(policy, where, g))
        spread = {
            "zone": f", {where.in_zone(best.zone)} replicas in zone {best.zone or '(none)'}",
            "pool": f", {where.in_pool(best.pool)} replicas in the pool",
            "none": "",
        }[policy.spread]
        return Decision(
            best.pool, best.zone, True,
            f"spot pool {best.pool} zone {best.zone or '(any)'}: risk {best.level} "
            f"({best.rate:.3f} evictions per node-hour, max-risk {policy.max_risk}){spread}",
        )  # fmt: skip
    if on_demand:
        why = _why_no_spot(usable, policy, evicting)
        return Decision(on_demand[0], "", False, f"on-demand pool {on_demand[0]}: {why}")
    return None


def _for_target(
    policy: Policy,
    target_spot: int,
    allowed: list[Pool],
    groups: Iterable[Group],
    where: Where,
    evicting: set[tuple[str, str]],
    on_demand: list[str],
    waiting: Iterable[str] = (),
) -> Decision | None:
    """An availability target's pod: spot while fewer than the plan's spot replicas are kept
    there (required: a spot replica that cannot have spot waits for it, asking the autoscaler,
    while the plan covers it on on-demand), else on-demand."""
    spot_allowed = {pool.name for pool in allowed if pool.spot}
    planned = [
        g
        for g in groups
        if g.pool in spot_allowed and (g.level not in LEVELS or policy.accepts(g.level))
    ]
    accepted = [g for g in planned if (g.pool, g.zone) not in evicting]
    kept_by_zone: dict[str, int] = {}
    for g in accepted:
        kept_by_zone[g.zone] = kept_by_zone.get(g.zone, 0) + where.counts.get((g.pool, g.zone), 0)
    kept = where.spot_kept
    zones = open_zones(target_spot, kept_by_zone, {g.zone for g in planned}, waiting)
    if zones:
        accepted = [g for g in accepted if g.zone in zones]
    else:  # every zone full: the emptiest group takes it, but no zone waiting for capacity
        waits = set(waiting)
        accepted = [g for g in accepted if g.zone not in waits]
    if kept < target_spot and accepted:
        best = min(accepted, key=lambda g: _spread_key(policy, where, g))
        return Decision(
            best.pool, best.zone, True,
            f"availability target {policy.target} %: {kept} of {target_spot} spot "
            f"replicas kept; spot pool {best.pool} zone {best.zone or '(any)'}, "
            f"{where.in_zone(best.zone)} replicas in the zone",
            required_pools=tuple(sorted({g.pool for g in accepted if g.zone == best.zone})),
        )  # fmt: skip
    if on_demand:
        return Decision(
            on_demand[0], "", False,
            f"availability target {policy.target} %: {kept} of {target_spot} spot "
            f"replicas kept, the rest on on-demand pool {on_demand[0]}",
        )  # fmt: skip
    return None


def _spread_key(policy: Policy, where: Where, group: Group) -> tuple[Any, ...]:
    spread = {
        "zone": where.in_zone(group.zone),
        "pool": where.in_pool(group.pool),
        "none": 0,
    }[policy.spread]
    here = where.counts.get((group.pool, group.zone), 0)
    return (spread, here, group.rate, group.pool, group.zone)


def _why_no_spot(usable: list[Group], policy: Policy, evicting: set[tuple[str, str]]) -> str:
    if not usable:
        return "no spot pool the pods fit is allowed"
    parts = []
    for g in usable:
        if (g.pool, g.zone) in evicting:
            parts.append(f"{g.pool}/{g.zone or '-'} under notice")
        else:
            parts.append(f"{g.pool}/{g.zone or '-'} risk {g.level}")
    return f"no spot group within max-risk {policy.max_risk} ({', '.join(parts)})"


def _any_of(pools: Iterable[str]) -> list[list[dict[str, Any]]]:
    """Node selector requirements, one list per alternative, that together admit the nodes of
    any of these pools: the agent pools in one `In`, each NodePool part by its own labels (a term
    cannot OR two keys, so those are terms of their own)."""
    agent_pools = sorted(p for p in pools if not pool_kind.is_karpenter(p))
    ways = [[{"key": names.AKS_AGENTPOOL_LABEL, "operator": "In", "values": agent_pools}]]
    return (ways if agent_pools else []) + [
        pool_kind.selector(p) for p in sorted(pools) if pool_kind.is_karpenter(p)
    ]


def affinity_patch(pod: Mapping[str, Any], decision: Decision) -> list[dict[str, Any]]:
    """RFC 6902 operations that add the decision to the pod: required node affinity to an
    on-demand pool (added to each of the pod's own required terms, which are ORed), or a
    preferred term for a spot pool and zone; and the `placed` annotation."""
    spec = pod.get("spec") or {}
    affinity = copy.deepcopy(spec.get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    # A NodePool's pool is selected by its NodePool and capacity type: Karpenter launches a node
    # of that capacity type for a pending pod that requires them (an on-demand fail-over).
    pool_exprs = pool_kind.selector(decision.pool)
    if decision.required:
        required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        for term in terms:
            term.setdefault("matchExpressions", []).extend(copy.deepcopy(pool_exprs))
        required["nodeSelectorTerms"] = terms
    else:
        expressions = pool_exprs
        if decision.zone:
            expressions.append(
                {"key": names.ZONE_LABEL, "operator": "In", "values": [decision.zone]}
            )
        if decision.required_pools:
            required = node_affinity.setdefault(
                "requiredDuringSchedulingIgnoredDuringExecution", {}
            )
            zone = (
                [{"key": names.ZONE_LABEL, "operator": "In", "values": [decision.zone]}]
                if decision.zone
                else []
            )
            # Each of the pod's own terms (ORed) with each way of being in one of the pools.
            required["nodeSelectorTerms"] = [
                {**term, "matchExpressions": [*term.get("matchExpressions", []), *way, *zone]}
                for term in required.get("nodeSelectorTerms") or [{}]
                for way in _any_of(decision.required_pools)
            ]
        node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": expressions}}
        )
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/affinity", "value": affinity}]
    annotations = (pod.get("metadata") or {}).get("annotations")
    if annotations is None:
        ops.append(
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {names.PLACED: decision.placed},
            }
        )
    else:
        key = names.PLACED.replace("~", "~0").replace("/", "~1")
        ops.append({"op": "add", "path": f"/metadata/annotations/{key}", "value": decision.placed})
    return ops
