"""Each policy on a hand-made trace, with the figures the scenario makes unavoidable.

The scenario: one replica (or two), 1 GPU per node, model load 90 s, shutdown 5 s, notices 30 s,
on-demand and spot nodes Ready 300 s after they are asked for, 10-minute ticks, node pools with
no minimum count unless a test says so. Spot capacity is not known before a request: the
autoscaler asks the cheapest pool first (spot), and a request in a pool without capacity fails
after 900 s, then that pool backs off (300 s, doubling per failure in a row). Expected values
are derived here from those numbers, step by step, not copied from a run.
"""

from __future__ import annotations

import json

import pytest

from rebalancer.simulate.engine import RunResult, run_policy
from rebalancer.simulate.trace import Trace, parse_trace
from rebalancer.simulate.workload import Prices, Scenario, scenario_from

GAP = 600.0
LOAD = 90.0
SHUTDOWN = 5.0
NOTICE = 30.0
PROVISION = 300.0
MARGIN = 5.0  # the planner's default deadline margin
SCALE_DOWN = 600.0
QUIET = 600.0  # the planner's default return quiet time
# The cluster autoscaler's defaults: a spot request without capacity fails after 900 s, then the
# pool backs off 300 s (doubling for each failure in a row).
MAX_PROVISION = 900.0
BACKOFF = 300.0
PRICES = Prices(on_demand=4.0, spot=1.0)


def scenario(**changes: object) -> Scenario:
    base: dict[str, object] = {
        "replicas": 1,
        "loadSeconds": LOAD,
        "shutdownSeconds": SHUTDOWN,
        "noticeSeconds": NOTICE,
        "onDemandProvisionSeconds": PROVISION,
        "spotProvisionSeconds": PROVISION,
        "scaleDownSeconds": SCALE_DOWN,
    }
    base.update(changes)
    return scenario_from(base, source="test")


def trace(name: str, data: list[int]) -> Trace:
    text = json.dumps({"metadata": {"gap_seconds": GAP}, "data": data})
    return parse_trace(text, source=f"{name}.json", name=name)


# Spot available for an hour, gone for an hour, back for an hour.
HOUR = 3600.0
AWAY_AND_BACK = [1] * 6 + [0] * 6 + [1] * 6
HORIZON = 3 * HOUR


def run(policy: str, traces: list[Trace], **changes: object) -> RunResult:
    return run_policy(
        policy, traces=traces, scenario=scenario(**changes), prices=PRICES, horizon=HORIZON
    )


def test_all_on_demand_is_always_available_at_the_full_price() -> None:
    result = run("on-demand", [trace("a", AWAY_AND_BACK)])
    assert result.availability == 1.0
    assert result.outages == []
    assert result.counters.notices == 0
    assert result.cost == pytest.approx(PRICES.on_demand * HORIZON / 3600)
    assert result.cost / result.all_on_demand_cost == pytest.approx(1.0)


def test_plain_drain_loses_the_replica_at_the_notice_and_stays_on_demand() -> None:
    result = run("spot-drain", [trace("a", AWAY_AND_BACK)])
    # t=0: the replica serves on spot ("1" is available). t=3600: the slot is lost; the notice
    # arrives and the drain evicts at once. The autoscaler asks the spot pool first (it does not
    # know the pool has no capacity): the request fails at 3600+900 and the pool backs off, so
    # it asks for an on-demand node (Ready 300 s later) and the replica loads there (+90).
    outage = MAX_PROVISION + PROVISION + LOAD
    assert result.outages == [pytest.approx(outage)]
    assert result.availability == pytest.approx(1 - outage / HORIZON)
    assert result.counters.notices == 1
    assert result.counters.failovers == 1
    assert result.counters.returns == 0  # spot comes back at 7200; nothing moves the replica
    spot_seconds = HOUR + NOTICE  # the spot node is paid until Azure takes it
    on_demand_seconds = HORIZON - HOUR - MAX_PROVISION  # the failed request is not billed
    expected = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    assert result.cost == pytest.approx(expected)


def test_failover_serves_until_the_deadline_then_returns_to_spot() -> None:
    # The spot pool has a minimum count of 1: a return needs a Ready spot node.
    result = run("failover", [trace("a", AWAY_AND_BACK)], spotPoolMinNodes=1)
    # Surge at the notice (3600). The autoscaler asks the spot pool for its minimum node, and
    # the replacement waits for that node: the request fails at 4500 (no capacity), the pool
    # backs off, and an on-demand node is asked for (Ready 4800, the replica Ready at 4890).
    # The old replica serves until the deadline minus the margin (3625), when the planner
    # deletes it: the outage is what the notice could not cover.
    deleted = HOUR + NOTICE - MARGIN
    replacement_ready = HOUR + MAX_PROVISION + PROVISION + LOAD
    assert result.outages == [pytest.approx(replacement_ready - deleted)]
    assert result.counters.failovers == 1
    # The minimum node is asked for again when each back-off ends: at 4800 (fails at 5700, the
    # second failure: 600 s back-off), at 6300 (capacity comes back at 7200, but this request
    # met none: fails at 7200, 1200 s back-off), at 8400: a node, Ready at 8700. The pool has
    # been quiet since 3600: the return surges onto it (Ready at 8790) and the on-demand
    # replica is scaled away (gone 5 s later; its node after the scale-down delay).
    assert result.counters.returns == 1
    spot_back = 2 * HOUR + BACKOFF * 4
    on_demand_gone = spot_back + PROVISION + LOAD + SHUTDOWN + SCALE_DOWN
    spot_seconds = (HOUR + NOTICE) + (HORIZON - spot_back)
    on_demand_seconds = on_demand_gone - (HOUR + MAX_PROVISION)
    expected = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    assert result.cost == pytest.approx(expected)


def test_failover_takes_the_controllers_settings_from_the_scenario() -> None:
    # A 15 s deadline margin: the old replica is deleted at 3600 + 30 - 15, 10 s earlier than
    # with the default 5 s. A 2-hour quiet time: spot is back at 7200, but the pool was evicted
    # at 3600, so no return before 10800, the end: the replica stays on demand.
    margin, quiet = 15.0, 2 * HOUR
    result = run(
        "failover",
        [trace("a", AWAY_AND_BACK)],
        deadlineMarginSeconds=margin,
        returnQuietSeconds=quiet,
    )
    # (The on-demand node is asked for once the spot request failed, 900 s after the notice.)
    assert result.outages == [pytest.approx(MAX_PROVISION + PROVISION + LOAD - (NOTICE - margin))]
    assert result.counters.returns == 0
    assert result.samples[-1].on_demand_nodes == 1


def test_failover_covers_the_notice_when_a_spare_spot_node_is_ready() -> None:
    # Two pools, one replica, a minimum count of one node per spot pool, so the surge lands at
    # once on the other pool's Ready node. The model loads for 90 s, longer than the notice:
    # the outage is the load time minus the notice left before the planner deletes the old
    # replica (deadline minus margin).
    result = run("failover", [trace("a", AWAY_AND_BACK), trace("b", [1] * 18)], spotPoolMinNodes=1)
    assert result.outages == [pytest.approx(LOAD - (NOTICE - MARGIN))]
    assert result.counters.failovers == 0  # no on-demand node was needed


def test_failover_is_seamless_when_the_notice_is_longer_than_the_load() -> None:
    result = run(
        "failover",
        [trace("a", AWAY_AND_BACK), trace("b", [1] * 18)],
        noticeSeconds=LOAD + 60,
        spotPoolMinNodes=1,
    )
    assert result.availability == 1.0
    assert result.counters.notices == 1


def test_spothedge_spare_replica_in_another_pool_keeps_the_service_whole() -> None:
    # N=1 plus k=1 spare, spread over two pools. Pool a loses its node at 3600; the spare in
    # b still serves, so nothing is missing. SkyServe's rule asks for min(N, N + k - Ready
    # spot) = min(1, 2 - 1) = 1 on-demand replica at once (Ready 3600+300+90), kept to the end:
    # the relaunched spot replica never gets capacity (b holds its one slot, a has none), each
    # request failing after 900 s and costing nothing.
    result = run("spothedge", [trace("a", [1] * 6 + [0] * 12), trace("b", [1] * 18)], hedgeSpare=1)
    assert result.availability == 1.0
    assert result.counters.notices == 1
    assert result.counters.failovers == 1
    spot_seconds = (HOUR + NOTICE) + HORIZON
    on_demand_seconds = HORIZON - HOUR
    expected = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    assert result.cost == pytest.approx(expected)


def test_spothedge_falls_back_to_on_demand_when_every_pool_is_gone() -> None:
    # Both pools lose their node at 3600: no Ready spot replica is left that is not doomed, so
    # on-demand replaces them at once (Ready 300 + 90 s later); the doomed replicas serve until
    # their nodes go at the deadline (3630). Spot is back at 7200 and, once both spot replicas
    # are Ready again (N + k - Ready spot = 0), the on-demand replica is scaled away: one
    # fail-over, one return.
    gone = [1] * 6 + [0] * 6 + [1] * 6
    result = run("spothedge", [trace("a", gone), trace("b", gone)], hedgeSpare=1)
    assert result.outages == [pytest.approx(PROVISION + LOAD - NOTICE)]
    assert result.counters.failovers == 1
    assert result.counters.returns == 1


# Found by the simulator: after a return gave up (a notice in the target pool), its completed
# record stayed on the Deployment as long as the on-demand pod it meant to retire existed, and
# `plan_returns` starts no return while any record is there: the workload never went back to
# spot. Fixed in rebalancer/controller/returns.py (a give-up waits for its new pod only).
def test_failover_returns_again_after_a_return_gave_up() -> None:
    # One pool, two slots, a minimum count of one node, a model that loads for 400 s (within
    # the 600 s return timeout). 3600: the pool is lost; the request for the minimum node
    # fails at 4500, the replica fails over (on-demand Ready 4800, loaded 5200). 4800: the
    # back-off ends and capacity is back: the pool's one node is Ready at 5100; the pool has
    # been quiet since 3600, so a return starts at 5100 (its replica would be Ready at 5500).
    # 5400: the pool is lost again during the return: give up, cool down until 6000; the
    # request for the minimum node (5400, no capacity) fails at 6300, back-off until 6600.
    # 6600: a node, Ready at 6900; the pool has been quiet since 5400: the return starts
    # again and its replica is Ready at 7300, well before the horizon.
    data = [2] * 6 + [0, 0, 2, 0] + [2] * 8
    result = run("failover", [trace("a", data)], loadSeconds=400, spotPoolMinNodes=1)
    assert result.counters.returns == 1


def test_the_controllers_settings_come_from_the_scenario_never_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rebalancer.simulate.adapter import failover_settings, risk_settings
    from rebalancer.simulate.world import World

    monkeypatch.setenv("REBALANCER_COOLDOWN_SECONDS", "5")
    monkeypatch.setenv("REBALANCER_RISK_PRIOR_RATE_PER_HOUR", "0.5")
    scenario = scenario_from(
        {"returnQuietSeconds": 60, "riskMediumRatePerHour": 0.1}, source="test"
    )
    world = World(scenario=scenario, pools=[], deployments=[], start=0, horizon=0, needed=0)
    planner, risk = failover_settings(world), risk_settings(scenario)
    assert (planner.cooldown_seconds, planner.returns.quiet_seconds) == (600, 60)
    assert (risk.prior_rate_per_hour, risk.medium_rate_per_hour) == (0.05, 0.1)
