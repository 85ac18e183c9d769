"""The `eviction-aware` policy on hand-made traces: its pods go where the controller's admission
webhook sends them, by the workload's placement policy and the risk the controller's model
assesses from the world's own eviction history.

The scenario is test_policies.py's (10-minute ticks, model load 90 s, notices 30 s, nodes Ready
300 s after they are asked for, scale-down after 600 s, return quiet time 600 s, on-demand $4/h,
spot $1/h), and the warm-up of 30 minutes before t=0. Expected values are derived here, step by
step, from those numbers and the risk formula of docs/risk.md; none is copied from a run.

Every spot pool has a minimum count of one node (`spotPoolMinNodes`, the user's pool setting; the
simulator's default is 0, with which no spot group has a node to be assessed and every replica
stays on demand). The warm-up is the same in every test: at t=-1800 no node exists, so no spot pool has an
assessed risk ("unknown": never accepted) and the webhook sends every replica to on-demand. The
spot pools' minimum nodes are Ready at -1500, the replicas at -1410; the pools have been watched
for the return quiet time at -1200, when their risk is low (one node watched for 600 s: 1.2 /
(24 + 0.165) = 0.0497 < 0.05), and the returns bring the replicas to spot one at a time (each
Ready 90 s after it starts, its on-demand pod gone 5 s later, that node 600 s after that).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.risk import RiskSettings
from rebalancer.simulate.engine import RunResult, run_policy
from rebalancer.simulate.policies import build
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import CHOICES
from rebalancer.simulate.world import World
from tests.simulate.test_policies import (
    BACKOFF,
    HORIZON,
    LOAD,
    MARGIN,
    MAX_PROVISION,
    NOTICE,
    PRICES,
    PROVISION,
    scenario,
    trace,
)

TICKS = int(HORIZON // 600)
STEADY = [1] * TICKS
RECHECK = 300.0  # the simulator re-reads the risk this often (adapter.RISK_RECHECK_SECONDS)


def run_world(traces: list[Trace], **changes: Any) -> tuple[World, list[tuple[float, list[str]]]]:
    """Run eviction-aware; return the world and, at every instant something changed, the pools
    the replicas ran on (sorted)."""
    changes = {"spotPoolMinNodes": 1, **changes}
    world, controller = build(
        "eviction-aware",
        traces=traces,
        scenario=scenario(**changes),
        prices=PRICES,
        horizon=HORIZON,
    )
    timeline: list[tuple[float, list[str]]] = []
    settle = world.settle

    def observed(policy: Any) -> None:
        settle(policy)
        pools = sorted(
            world.nodes[p.node].pool.name for p in world.pods.values() if p.node and not p.deleting
        )
        if not timeline or timeline[-1][1] != pools:
            timeline.append((world.now, pools))

    world.settle = observed  # type: ignore[method-assign]
    world.run(controller)
    return world, timeline


def measure(traces: list[Trace], **changes: Any) -> RunResult:
    changes = {"spotPoolMinNodes": 1, **changes}
    return run_policy(
        "eviction-aware",
        traces=traces,
        scenario=scenario(**changes),
        prices=PRICES,
        horizon=HORIZON,
    )


def pools_at(timeline: list[tuple[float, list[str]]], moment: float) -> list[str]:
    return [pools for at, pools in timeline if at <= moment][-1]


def world_pools(world: World) -> list[str]:
    return [world.nodes[p.node].pool.name for p in world.pods.values() if p.node]


def test_zone_spread_puts_replicas_in_different_zones() -> None:
    # Three pools, two in zone eastus-1 (the part of each name before "_"), one in eastus-2;
    # two replicas. The first return goes to the first pool by name (no replica anywhere yet:
    # the tie goes to the name), eastus-1_a. The second return starts for the next pool with
    # room, eastus-1_b, but its new pod is the webhook's: the zone with fewest replicas is
    # eastus-2, and the preferred term (weight 100 on top of the template's spot preference)
    # wins over eastus-1_b's free node. With `spread: pool` the fewest replicas are in
    # eastus-1_b and eastus-2_c alike, and the name decides: eastus-1_b.
    traces = [trace("eastus-1_a", STEADY), trace("eastus-1_b", STEADY), trace("eastus-2_c", STEADY)]
    by_zone, _ = run_world(traces, replicas=2, maxRisk="high")
    assert sorted(world_pools(by_zone)) == ["eastus-1_a", "eastus-2_c"]
    by_pool, _ = run_world(traces, replicas=2, maxRisk="high", spread="pool")
    assert sorted(world_pools(by_pool)) == ["eastus-1_a", "eastus-1_b"]
    # Both end the warm-up with every replica on spot and the on-demand nodes gone (the last at
    # -1010 + 600): from t=0, three spot nodes (one per pool, the pools' minimum) and nothing
    # else, all Ready.
    result = measure(traces, replicas=2, maxRisk="high")
    assert result.availability == 1.0
    assert result.cost == pytest.approx(3 * PRICES.spot * HORIZON / 3600)


def test_min_on_demand_keeps_one_replica_on_demand() -> None:
    # Two replicas, min-on-demand 1. At -1800 the first pod goes on-demand by rule 2 (0 of 1),
    # the second by rule 4 (no spot pool has a risk yet). At -1200 one returns to spot (pool a,
    # first by name); the other is the one min-on-demand keeps: no return retires it. The spot
    # pools keep ceil((2 - 1) / 2) = 1 node each. From t=0: one on-demand node and two spot
    # nodes (one serving, one idle), all the time.
    traces = [trace("a", STEADY), trace("b", STEADY)]
    world, timeline = run_world(traces, replicas=2, minOnDemand=1)
    assert all(pools == ["a", "ondemand"] for at, pools in timeline if at >= 0)
    result = measure(traces, replicas=2, minOnDemand=1)
    assert result.availability == 1.0
    assert (result.counters.returns, result.counters.failovers) == (0, 0)
    assert result.cost == pytest.approx((PRICES.on_demand + 2 * PRICES.spot) * HORIZON / 3600)
    placed = [p.annotations[names.PLACED] for p in world.pods.values()]
    assert sorted(placed) == ["a/a", "ondemand/"]


# Pool a: two slots, both lost at 600 and back at 1200. Pool b: two slots, never lost.
# Two replicas: after the warm-up one runs in a (the first return), one in b (the second
# return: a has no room, and b's zone has fewer replicas).
WAVE = [2, 0, *[2] * (TICKS - 2)]
EVICTED_AT = 600.0


def risk_after_one_preempt(t: float, *, prior: float = 0.05, weight: float = 24.0) -> float:
    """docs/risk.md's estimate for pool a at time t: one Preempt at 600 (the history decays it
    with a 6-hour half-life), one node watched (the lost one, then the one that replaces it)
    since the record began at -1800."""
    half_life = 6.0
    tau = half_life / math.log(2)
    decayed = 0.5 ** ((t - EVICTED_AT) / 3600 / half_life)
    exposure = tau * (1 - math.exp(-((t + 1800) / 3600) / tau))
    return float((weight * prior + decayed) / (weight + exposure))


def test_a_pool_with_recent_evictions_gets_no_replica_under_a_lower_max_risk() -> None:
    traces = [trace("a", WAVE), trace("b", [2] * TICKS)]
    # At 600 pool a is lost: the replica there gets its notice, its replacement goes on-demand
    # (failover-to on-demand), on a new on-demand node (Ready 900, the replica 990); the doomed
    # one is deleted at the deadline minus the margin (625). Pool a is then risk medium: 0.088
    # at 990, as derived below. The autoscaler asks a for its minimum node at 600, when a has
    # no capacity: the request fails at 600 + 900 (max-node-provision-time) and a backs off
    # for 300 s. Capacity is back at 1200, so the request at 1800 gets a node, Ready at 2100;
    # a has been quiet since 600 long enough for a return. b has no room (its one node serves
    # the other replica).
    assert 0.05 <= risk_after_one_preempt(990) < 0.15
    outage = PROVISION + LOAD - (NOTICE - MARGIN)
    a_ready = EVICTED_AT + MAX_PROVISION + BACKOFF + PROVISION

    # max-risk high accepts medium: the return at 2100 goes to a (its zone has no replica),
    # Ready at 2190, and the on-demand replica goes.
    _, timeline = run_world(traces, replicas=2, maxRisk="high")
    assert pools_at(timeline, a_ready - 1) == ["b", "ondemand"]
    assert pools_at(timeline, a_ready + LOAD + 10) == ["a", "b"]

    # max-risk low does not: a stays medium for the rest of the 3 hours (the decayed Preempt
    # outweighs 5% of the node-hours watched until well after the horizon), so the replica
    # stays on-demand and nothing ever lands in a again.
    assert risk_after_one_preempt(HORIZON) >= 0.05
    _, timeline = run_world(traces, replicas=2, maxRisk="low")
    assert all("a" not in pools for at, pools in timeline if at > EVICTED_AT + NOTICE)
    assert pools_at(timeline, HORIZON) == ["b", "ondemand"]
    result = measure(traces, replicas=2, maxRisk="low")
    assert result.outages == [pytest.approx(outage)]
    # Paid: b's node all along; a's first node until Azure takes it (630) and its replacement,
    # kept as the pool's minimum, from the request that gets capacity (1800: the failed one is
    # not billed); the on-demand node from 600 on.
    spot_seconds = HORIZON + (EVICTED_AT + NOTICE) + (HORIZON - a_ready + PROVISION)
    on_demand_seconds = HORIZON - EVICTED_AT
    expected = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    assert result.cost == pytest.approx(expected)


def test_a_high_risk_pool_gets_replicas_again_only_once_its_risk_falls_to_medium() -> None:
    # The same wave with risk level high from 0.08 evictions per node-hour and max-risk medium:
    # one Preempt makes pool a high (0.088 at 990), which fades clearly below 0.08 (by the
    # level's 10 % band: below 0.072) at `falls`, derived from the formula. Until then no replica
    # lands in a; the return to a starts at the first planner pass after it (at most one risk
    # re-check later) and its replica is Ready 90 s on.
    traces = [trace("a", WAVE), trace("b", [2] * TICKS)]
    high = 0.08
    below = high * (1 - RiskSettings().level_band)
    assert risk_after_one_preempt(990) >= high
    falls = next(t for t in range(990, int(HORIZON)) if risk_after_one_preempt(t) < below)
    assert 1500 < falls < HORIZON - RECHECK - LOAD
    _, timeline = run_world(traces, replicas=2, maxRisk="medium", riskHighRatePerHour=high)
    assert all("a" not in pools for at, pools in timeline if EVICTED_AT + NOTICE < at < falls)
    assert pools_at(timeline, falls + RECHECK + LOAD) == ["a", "b"]


def test_the_policy_words_are_the_controllers() -> None:
    from rebalancer.controller.policy import FAILOVER_TARGETS, SPREADS
    from rebalancer.controller.risk import LEVELS

    assert CHOICES == {"max_risk": LEVELS, "spread": SPREADS, "failover_to": FAILOVER_TARGETS}


def test_each_pod_carries_the_webhooks_placement_and_reason() -> None:
    # min-on-demand 1: the pod kept on demand was placed at -1800, before any spot node existed
    # (risk unknown); the one that returned at -1200 was placed in pool a by its risk, low at
    # 1.2 / (24 + 0.165) = 0.0497.
    world, _ = run_world([trace("a", STEADY), trace("b", STEADY)], replicas=2, minOnDemand=1)
    why = sorted(p.annotations[names.PLACED_WHY] for p in world.pods.values())
    assert why == [
        "on-demand pool ondemand: no spot group within max-risk low "
        "(a/a risk unknown, b/b risk unknown)",
        "spot pool a zone a: risk low (0.050 evictions per node-hour, max-risk low), "
        "0 replicas in zone a",
    ]


def test_spare_replicas_are_kept_on_top_of_the_owners_count() -> None:
    """`spare-replicas: 1` on a workload of 1: the controller's spares method scales the
    Deployment to 2 and records what it added, and the webhook spreads the two replicas over
    the two spot pools (docs/simulate.md said once that the product did not act on it)."""
    world, timeline = run_world([trace("a", STEADY), trace("b", STEADY)], spare_replicas=1)
    (deployment,) = world.deployments.values()
    assert deployment.replicas == 1 + 1
    record = json.loads(deployment.annotations[names.SPARE_RECORD])
    assert (record["base"], record["added"]) == (1, 1)
    assert timeline[-1][1] == ["a", "b"]
    world, _ = run_world([trace("a", STEADY), trace("b", STEADY)], spare_replicas=0)
    (deployment,) = world.deployments.values()
    assert deployment.replicas == 1 and names.SPARE_RECORD not in deployment.annotations
