"""The policies a simulation compares, each as a cluster set-up plus a controller.

- `on-demand`: every replica on on-demand nodes; no spot pool. The cost baseline.
- `spot-drain`: the product configured as a plain handler (what AKS node auto-drain or NTH do):
  Preempt -> cordon and evict at once, no replacement before, no return to spot. Replicas
  prefer spot and may fall back to on-demand through the autoscaler (cheapest pool first).
- `failover`: today's product with its default settings: make-before-break surge at the notice,
  drain, cool-down, return to spot. Spot pools are kept at their minimum size (replicas spread
  over the spot pools) when capacity allows, which a return needs: room on a Ready spot node.
- `spothedge`: a REFERENCE written from the SpotHedge paper (SkyServe, EuroSys '25) and its
  documentation, not the product and not SkyServe's code: N + k spot replicas spread over the
  spot pools (the active pool with the fewest replicas first; a pool is marked preempted on a
  notice or when it cannot grow, and all are reset once at most one stays active), plus
  on-demand replicas for whatever Ready spot replicas are missing (dynamic on-demand fallback),
  scaled down as spot replicas become Ready. It acts on notices like on preemptions.
- `eviction-aware`: `failover`'s cluster and controller, plus the placement of issue 14: the
  Deployment carries a placement policy (the scenario's `maxRisk`, `minOnDemand`, `spread`,
  `failoverTo`, as `spot-rebalancer.io/...` annotations), every new pod goes through the
  controller's admission webhook (`review`: on-demand by required node affinity, or a spot pool
  and zone by preferred affinity), and the planner's snapshot carries the risk of every spot
  group, assessed by the controller's model from the world's eviction history: so the planner's
  moves off risky groups before any notice, and its returns only to accepted groups, run as in
  the product.

Every policy but `spothedge` runs the controller's own planner through `adapter.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rebalancer import names
from rebalancer.simulate import InputError
from rebalancer.simulate.adapter import (
    Webhook,
    drain_settings,
    failover_settings,
    next_wakeup,
    placement_annotations,
    risk_settings,
    run_planner,
)
from rebalancer.simulate.trace import Trace, slot_timeline
from rebalancer.simulate.workload import Prices, Scenario
from rebalancer.simulate.world import SPOT_TOLERATION, Deployment, PoolModel, World

ON_DEMAND_POOL = "ondemand"
SERVICE = "inference"

POLICIES: Mapping[str, str] = {
    "on-demand": "all on-demand",
    "spot-drain": "spot, plain cordon and drain",
    "failover": "reactive fail-over + return (product defaults)",
    "spothedge": "SpotHedge-like (reference from the paper)",
    "eviction-aware": "placement by policy and eviction risk + fail-over + moves",
}
# Policies a simulation names but cannot run yet, with why (none today).
UNAVAILABLE: Mapping[str, str] = {}
DEFAULT_POLICIES = tuple(POLICIES)


def _spot_preferring_template() -> dict[str, Any]:
    return {
        "tolerations": [SPOT_TOLERATION],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [
                                {
                                    "key": names.AKS_SPOT_LABEL,
                                    "operator": "In",
                                    "values": ["spot"],
                                }
                            ]
                        },
                    }
                ]
            }
        },
    }


class _Planner:
    """A product configuration: the controller's planner with these settings."""

    def __init__(self, name: str, settings: Any, *, risk: Any = None) -> None:
        self.name = name
        self.settings = settings
        self.risk = risk  # the risk model's settings: the snapshot carries risks
        self._planned_version = -1
        self._wake: float | None = None

    def react(self, world: World) -> bool:
        due = self._wake is not None and world.now >= self._wake
        if world.version == self._planned_version and not due:
            return False  # nothing changed since the last plan: the same plan again
        result, changed = run_planner(world, self.settings, risk=self.risk)
        self._planned_version = world.version
        self._wake = next_wakeup(world, result, self.settings, risk=self.risk)
        return changed

    def next_wakeup(self, world: World) -> float | None:
        del world
        return self._wake


class _Idle:
    """No controller: nothing on the cluster ever gets a notice (on-demand only)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def react(self, world: World) -> bool:
        del world
        return False

    def next_wakeup(self, world: World) -> float | None:
        del world
        return None


@dataclass
class _SpotHedge:
    """Reference policy written from the SpotHedge paper (see the module docstring)."""

    name: str
    spot_pools: Sequence[str]
    needed: int
    spare: int
    preempted: set[str] = field(default_factory=set)

    def _deployment(self, pool: str) -> str:
        return f"{SERVICE}-{pool}"

    def react(self, world: World) -> bool:
        changed = False
        keep: dict[str, int] = {}
        doomed: dict[str, int] = {}
        ready_spot = 0
        for name in self.spot_pools:
            pool = world.pools[name]
            pods = [p for p in world.pods_of(self._deployment(name)) if not p.deleting]
            on_doomed = [p for p in pods if p.node and world.nodes[p.node].notice is not None]
            pending = sum(1 for p in pods if p.node is None)
            provisioning = sum(
                1 for n in world.live_nodes(pool) if not n.ready(world.now) and n.notice is None
            )
            # Launches that cannot happen here (no capacity): relaunch them elsewhere.
            failed = 0 if world.can_grow(pool) else max(0, pending - provisioning)
            if on_doomed or failed:
                self.preempted.add(name)
            doomed[name] = len(on_doomed)
            keep[name] = len(pods) - len(on_doomed) - failed
            ready_spot += sum(1 for p in pods if world.pod_ready(p) and p not in on_doomed)
        active = [p for p in self.spot_pools if p not in self.preempted]
        if len(active) <= 1 < len(self.spot_pools):
            self.preempted.clear()
        # Where a launch can succeed: active pools first, then the fewest replicas.
        room = [p for p in self.spot_pools if world.can_grow(world.pools[p])]
        for _ in range(self.needed + self.spare - sum(keep.values())):
            if not room:
                break
            target = min(room, key=lambda p: (p in self.preempted, keep[p], p))
            keep[target] += 1
        for name in self.spot_pools:
            deployment = world.deployments[self._deployment(name)]
            # Replicas on a doomed node are replaced now and go when the node goes.
            wanted = keep[name] + doomed[name]
            if deployment.replicas != wanted:
                deployment.replicas = wanted
                changed = True
        fallback = world.deployments[self._deployment(ON_DEMAND_POOL)]
        wanted_on_demand = max(0, self.needed - ready_spot)
        if fallback.replicas != wanted_on_demand:
            fallback.replicas = wanted_on_demand
            changed = True
        return changed

    @staticmethod
    def _provisioning(world: World, pool: str) -> bool:
        return any(n.pool.name == pool and not n.ready(world.now) for n in world.nodes.values())

    def next_wakeup(self, world: World) -> float | None:
        del world
        return None


def check_scenario(scenario: Scenario) -> None:
    """The placement policy and risk settings, checked by the controller's own rules."""
    placement_annotations(scenario)
    risk_settings(scenario)


def build(
    policy: str,
    *,
    traces: Sequence[Trace],
    scenario: Scenario,
    prices: Prices,
    horizon: float,
) -> tuple[World, Any]:
    """The world this policy runs in (pools, Deployments) and its controller."""
    if policy in UNAVAILABLE:
        raise InputError(f"--policy {policy}: {UNAVAILABLE[policy]}")
    if policy not in POLICIES:
        known = ", ".join([*POLICIES, *UNAVAILABLE])
        raise InputError(f"--policy {policy}: unknown policy (known: {known})")
    needed = scenario.replicas
    limit = scenario.on_demand_limit
    on_demand = PoolModel(
        name=ON_DEMAND_POOL,
        spot=False,
        # A regional pool (no availability zones): AKS labels its nodes zone "0". Never one of
        # the spot pools' zones, so its replicas do not count in a zone spread.
        zone="0",
        price=prices.on_demand,
        provision=scenario.on_demand_provision_seconds,
        max_nodes=limit,
    )
    replicas_per_node = max(1, scenario.node_gpus() // scenario.gpus_per_replica)
    if policy == "on-demand":
        wanted_nodes = math.ceil(needed / replicas_per_node)
        if limit is not None and limit < wanted_nodes:
            raise InputError(
                f"--policy on-demand cannot be met: {needed} replicas need {wanted_nodes} "
                f"on-demand nodes, --on-demand-limit is {limit}"
            )
        deployment = Deployment(SERVICE, needed, {}, scenario.gpus_per_replica)
        world = World(
            scenario=scenario,
            pools=[on_demand],
            deployments=[deployment],
            start=-scenario.warmup_seconds,
            horizon=horizon,
            needed=needed,
        )
        return world, _Idle(policy)
    if not traces:
        raise InputError(f"--policy {policy} needs at least one --trace")
    if limit is not None:
        most = (sum(t.slots for t in traces) + limit) * replicas_per_node
        if most < needed:
            raise InputError(
                f"--policy {policy} cannot be met: at most {most} replicas ever fit (the spot "
                f"pools' largest capacity and --on-demand-limit {limit}), {needed} are needed"
            )
    spare = scenario.hedge_spare if policy == "spothedge" else 0
    on_spot = needed + spare
    if policy == "eviction-aware":
        on_spot = max(0, needed + scenario.spare_replicas - scenario.min_on_demand)
    home = math.ceil(on_spot / len(traces) / replicas_per_node)
    # Spot pools kept at a minimum size: what a return to spot (and a move) needs, room on a
    # Ready spot node.
    kept = policy in ("failover", "eviction-aware")
    spot_pools = [
        PoolModel(
            name=trace.name,
            spot=True,
            zone=trace.zone,
            price=prices.spot,
            provision=scenario.spot_provision_seconds,
            min_nodes=home if kept else 0,
            timeline=slot_timeline(
                trace, seed=scenario.seed, notice=scenario.notice_seconds, until=horizon
            ),
        )
        for trace in traces
    ]
    pools = [*spot_pools, on_demand]
    if policy == "spothedge":
        deployments = [
            Deployment(
                f"{SERVICE}-{pool.name}",
                0,
                {
                    "tolerations": [SPOT_TOLERATION],
                    "nodeSelector": {names.AKS_AGENTPOOL_LABEL: pool.name},
                },
                scenario.gpus_per_replica,
            )
            for pool in spot_pools
        ]
        deployments.append(
            Deployment(
                f"{SERVICE}-{ON_DEMAND_POOL}",
                0,
                {"nodeSelector": {names.AKS_AGENTPOOL_LABEL: ON_DEMAND_POOL}},
                scenario.gpus_per_replica,
            )
        )
        controller: Any = _SpotHedge(
            policy, [p.name for p in spot_pools], needed, scenario.hedge_spare
        )
    else:
        # The same Deployment for every planner policy; with eviction-aware it declares a
        # placement policy too.
        annotations = placement_annotations(scenario) if policy == "eviction-aware" else {}
        deployments = [
            Deployment(
                SERVICE, needed, _spot_preferring_template(), scenario.gpus_per_replica, annotations
            )
        ]
    risk = risk_settings(scenario) if policy == "eviction-aware" else None
    world = World(
        scenario=scenario,
        pools=pools,
        deployments=deployments,
        start=-scenario.warmup_seconds,
        horizon=horizon,
        needed=needed,
        admission=Webhook(risk) if risk is not None else None,
    )
    if policy == "eviction-aware":
        controller = _Planner(policy, failover_settings(world), risk=risk)
    elif policy == "failover":
        controller = _Planner(policy, failover_settings(world))
    elif policy == "spot-drain":
        controller = _Planner(policy, drain_settings(world))
    return world, controller
