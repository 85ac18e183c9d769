"""The policies a simulation compares, each as a cluster set-up plus a controller.

- `on-demand`: every replica on on-demand nodes; no spot pool. The cost baseline.
- `spot-drain`: the product configured as a plain handler (what AKS node auto-drain or NTH do):
  Preempt -> cordon and evict at once, no replacement before, no return to spot. Replicas
  prefer spot and may fall back to on-demand through the autoscaler (cheapest pool first).
- `failover`: today's product with its default settings: make-before-break surge at the notice,
  drain, cool-down, return to spot. A return needs room on a Ready spot node: only the pools'
  configured minimum counts (default 0) keep one.
- `spothedge`: a REFERENCE written from the SpotHedge paper (SkyServe, EuroSys '25) and
  SkyServe's published rules, not the product: N + k spot replicas spread over the spot pools
  (the active pool with the fewest replicas first; a pool is marked preempted on a notice or a
  failed launch, and all are reset once at most one stays active), plus on-demand replicas =
  min(N, N + k - Ready spot replicas) (dynamic on-demand fallback), scaled down as spot
  replicas become Ready. It acts on notices like on preemptions.
- `dynamic-fallback`: a REFERENCE, the N + k baseline of issue 22: N + k spot replicas spread
  over distinct zones (the zone with the fewest first), on-demand replicas = max(0, N + k -
  Ready spot replicas not under notice), removed as soon as spot replicas are Ready again.
- `oracle`: a REFERENCE that knows the trace: the cost lower bound at 100 % all-Ready
  availability (`oracle.py`); nothing of it runs in the world.
- `eviction-aware`: `failover`'s cluster and controller, plus the placement of issue 14: the
  Deployment carries a placement policy (the scenario's `maxRisk`, `minOnDemand`, `spread`,
  `failoverTo`, as `spot-rebalancer.io/...` annotations), every new pod goes through the
  controller's admission webhook (`review`: on-demand by required node affinity, or a spot pool
  and zone by preferred affinity), and the planner's snapshot carries the risk of every spot
  group, assessed by the controller's model from the world's eviction history: so the planner's
  moves off risky groups before any notice, and its returns only to accepted groups, run as in
  the product.

`spot-drain`, `failover` and `eviction-aware` run the controller's own planner through
`adapter.py`; the references (`REFERENCE`) are not the product.
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
    target_settings,
)
from rebalancer.simulate.trace import Trace, slot_timeline
from rebalancer.simulate.workload import Prices, Scenario
from rebalancer.simulate.world import SPOT_TOLERATION, Deployment, PoolModel, World

ON_DEMAND_POOL = "ondemand"
SERVICE = "inference"

ORACLE = "oracle"
POLICIES: Mapping[str, str] = {
    "on-demand": "all on-demand",
    "spot-drain": "spot, plain cordon and drain",
    "failover": "reactive fail-over + return (product defaults)",
    "spothedge": "SpotHedge-like (reference from the paper)",
    "eviction-aware": "placement by policy and eviction risk + fail-over + moves",
    "target": "availability target: spot and on-demand replicas decided from the risk",
    "dynamic-fallback": "N+k spot on distinct zones, on-demand for missing Ready spot (reference)",
    ORACLE: "clairvoyant cost lower bound at 100% all Ready (reference)",
}
# Yardsticks, not the product: marked `"reference": true` in --json.
REFERENCE = frozenset({"on-demand", "spothedge", "dynamic-fallback", ORACLE})
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
class _Fallback:
    """A controller that sizes one spot Deployment per pool and an on-demand one itself.

    `spothedge` (the reference from the paper, see the module docstring) and
    `dynamic-fallback` (the N + k baseline of issue 22) differ in three rules, named here.
    Neither knows where capacity is: a launch in a pool whose request failed (the pool backs
    off) is relaunched elsewhere, as SkyServe relaunches a failed launch.
    """

    name: str
    spot_pools: Sequence[str]
    zones: Mapping[str, str]  # pool -> zone
    needed: int
    spare: int
    # SkyServe's rule (sky/serve/autoscalers.py): on-demand = min(N, N + k - Ready spot);
    # the baseline's: N + k - Ready spot, uncapped.
    cap_on_demand_at_needed: bool
    # SkyServe's placer marks a pool preempted and launches in active pools first; the
    # baseline spreads over zones (the zone with the fewest replicas first), then pools.
    mark_preempted: bool
    preempted: set[str] = field(default_factory=set)
    counts_first = True  # see World.settle

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
            # Launches whose request failed (the pool backs off): relaunch them elsewhere.
            failed = max(0, pending - provisioning) if world.in_backoff(pool) else 0
            if on_doomed or failed:
                self.preempted.add(name)
            doomed[name] = len(on_doomed)
            keep[name] = len(pods) - len(on_doomed) - failed
            ready_spot += sum(1 for p in pods if world.pod_ready(p) and p not in on_doomed)
        if self.mark_preempted:
            active = [p for p in self.spot_pools if p not in self.preempted]
            if len(active) <= 1 < len(self.spot_pools):
                self.preempted.clear()
        # Where a launch may be asked for: pools not backing off.
        room = [p for p in self.spot_pools if world.can_grow(world.pools[p])]
        per_zone: dict[str, int] = {}
        for pool_name, count in keep.items():
            zone = self.zones[pool_name]
            per_zone[zone] = per_zone.get(zone, 0) + count
        for _ in range(self.needed + self.spare - sum(keep.values())):
            if not room:
                break
            if self.mark_preempted:
                target = min(room, key=lambda p: (p in self.preempted, keep[p], p))
            else:
                target = min(room, key=lambda p: (per_zone[self.zones[p]], keep[p], p))
            keep[target] += 1
            per_zone[self.zones[target]] += 1
        for name in self.spot_pools:
            deployment = world.deployments[self._deployment(name)]
            # Replicas on a doomed node are replaced now and go when the node goes.
            wanted = keep[name] + doomed[name]
            if deployment.replicas != wanted:
                deployment.replicas = wanted
                changed = True
        fallback = world.deployments[self._deployment(ON_DEMAND_POOL)]
        wanted_on_demand = max(0, self.needed + self.spare - ready_spot)
        if self.cap_on_demand_at_needed:
            wanted_on_demand = min(self.needed, wanted_on_demand)
        if fallback.replicas != wanted_on_demand:
            fallback.replicas = wanted_on_demand
            changed = True
        return changed

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
        on_demand.min_nodes = scenario.on_demand_pool_min_nodes
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
    # Every pool at the minimum count the user configured (default 0), whatever the policy:
    # idle spot nodes kept for returns are paid for, and counted.
    on_demand.min_nodes = scenario.on_demand_pool_min_nodes
    spot_pools = [
        PoolModel(
            name=trace.name,
            spot=True,
            zone=trace.zone,
            price=prices.spot_in(trace.region),
            provision=scenario.spot_provision_seconds,
            min_nodes=scenario.spot_pool_min_nodes,
            timeline=slot_timeline(
                trace, seed=scenario.seed, notice=scenario.notice_seconds, until=horizon
            ),
        )
        for trace in traces
    ]
    pools = [*spot_pools, on_demand]
    if policy in ("spothedge", "dynamic-fallback"):
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
        hedge = policy == "spothedge"
        controller: Any = _Fallback(
            policy,
            [p.name for p in spot_pools],
            {p.name: p.zone for p in spot_pools},
            needed,
            scenario.hedge_spare if hedge else scenario.fallback_spare,
            cap_on_demand_at_needed=hedge,
            mark_preempted=hedge,
        )
    elif policy == ORACLE:
        deployments = []  # nothing runs: the engine reads the pools' timelines
        controller = _Idle(policy)
    else:
        # The same Deployment for every planner policy; with eviction-aware it declares a
        # placement policy too.
        annotations = placement_annotations(scenario) if policy == "eviction-aware" else {}
        if policy == "target":
            annotations = {names.AVAILABILITY_TARGET: scenario.availability_target}
        deployments = [
            Deployment(
                SERVICE, needed, _spot_preferring_template(), scenario.gpus_per_replica, annotations
            )
        ]
    risk = risk_settings(scenario) if policy in ("eviction-aware", "target") else None
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
    elif policy == "target":
        controller = _Planner(policy, target_settings(world, prices), risk=risk)
    elif policy == "failover":
        controller = _Planner(policy, failover_settings(world))
    elif policy == "spot-drain":
        controller = _Planner(policy, drain_settings(world))
    return world, controller
