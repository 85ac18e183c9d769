"""The reference policies (`dynamic-fallback`, `oracle`) and the cluster rules they are judged
under (pools at their minimum counts, spot capacity found only by asking, one region per
cluster), on hand-made traces.

test_policies.py's scenario: model load 90 s, shutdown 5 s, notices 30 s, nodes Ready 300 s
after they are asked for, scale-down after 600 s, a spot request without capacity failing after
900 s and its pool backing off 300 s (doubling per failure in a row), the warm-up of 30 minutes
before t=0, on-demand $4/h, spot $1/h. Expected values are derived here from those numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rebalancer.azure.prices import BUNDLED
from rebalancer.cli import main
from rebalancer.simulate import InputError
from rebalancer.simulate.engine import run_policy, simulate
from rebalancer.simulate.policies import build
from rebalancer.simulate.workload import prices_for
from tests.simulate.test_policies import (
    AWAY_AND_BACK,
    BACKOFF,
    HORIZON,
    HOUR,
    LOAD,
    MAX_PROVISION,
    NOTICE,
    PRICES,
    PROVISION,
    SCALE_DOWN,
    SHUTDOWN,
    run,
    scenario,
    trace,
)

STEADY = [1] * 18


def test_the_oracle_runs_on_demand_exactly_where_spot_cannot_serve() -> None:
    # One replica, one spot slot: alive from the warm-up's start, lost at 3600 (gone at 3630),
    # back at 7200. A spot node serves at the earliest 300 + 90 s after its slot is alive:
    # spot can serve on [-1410, 3630) and from 7590. On-demand must be paid where spot cannot
    # serve, and from 390 s (its node and load) before: [3630 - 390, 7590); spot the rest.
    result = run("oracle", [trace("a", AWAY_AND_BACK)])
    assert result.availability == 1.0
    on_demand_from = (HOUR + NOTICE) - (PROVISION + LOAD)  # 3240
    on_demand_until = 2 * HOUR + PROVISION + LOAD  # 7590
    on_demand_seconds = on_demand_until - on_demand_from
    spot_seconds = HORIZON - on_demand_seconds
    expected = (on_demand_seconds * PRICES.on_demand + spot_seconds * PRICES.spot) / 3600
    assert result.cost == pytest.approx(expected)


def test_the_oracle_costs_no_more_than_any_policy_that_kept_every_replica_ready() -> None:
    # Two pools whose losses overlap in part: whatever a policy paid for 100 % all-Ready, the
    # lower bound is at most that.
    traces = [trace("a", [1] * 5 + [0] * 3 + [1] * 10), trace("b", [1] * 7 + [0] * 4 + [1] * 7)]
    oracle = run("oracle", traces, replicas=2)
    full = [
        result
        for policy in ("on-demand", "spothedge", "dynamic-fallback")
        if (result := run(policy, traces, replicas=2)).availability == 1.0
    ]
    assert full  # on-demand at least
    assert all(oracle.cost <= result.cost + 1e-9 for result in full)
    assert oracle.cost < full[0].cost  # spot serves most of the time: well below on-demand


def test_dynamic_fallback_replaces_every_lost_spot_replica_on_demand_until_spot_is_ready() -> None:
    # N=1, k=2: three spot replicas, one per zone. All three pools lose their node at 3600:
    # no Ready spot replica is left that is not under notice, so N + k = 3 on-demand replicas
    # are asked for at once (nodes Ready 3900, replicas 3990); the doomed ones serve until
    # their nodes go (3630). The spot replicas are relaunched and each request fails (no
    # capacity): at 4500, 5700 and 7200 (asked at 6300, before capacity came back at 7200),
    # backing off 300, 600 and 1200 s; asked at 8400 they get nodes (Ready 8700, replicas
    # 8790), and the three on-demand replicas go at once (pods gone 5 s later, nodes 600 s
    # after that).
    traces = [trace(f"eastus-{zone}_gpu", AWAY_AND_BACK) for zone in (1, 2, 3)]
    result = run("dynamic-fallback", traces)
    outage = (HOUR + PROVISION + LOAD) - (HOUR + NOTICE)
    assert result.outages == [pytest.approx(outage)]
    assert result.availability == pytest.approx(1 - outage / HORIZON)
    assert result.counters.failovers == 3
    assert result.counters.returns == 3
    spot_back = HOUR + 3 * MAX_PROVISION + BACKOFF * (1 + 2 + 4)  # 8400
    on_demand_gone = spot_back + PROVISION + LOAD + SHUTDOWN + SCALE_DOWN
    spot_seconds = 3 * (HOUR + NOTICE) + 3 * (HORIZON - spot_back)
    on_demand_seconds = 3 * (on_demand_gone - HOUR)
    expected = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    assert result.cost == pytest.approx(expected)


def test_dynamic_fallback_puts_its_spot_replicas_in_distinct_zones() -> None:
    # Pools a and b share a zone, c has its own: N + k = 2 replicas go one to each zone.
    traces = [trace("eastus-1_a", STEADY), trace("eastus-1_b", STEADY), trace("eastus-2_c", STEADY)]
    world, controller = build(
        "dynamic-fallback",
        traces=traces,
        scenario=scenario(fallbackSpare=1),
        prices=PRICES,
        horizon=HORIZON,
    )
    world.run(controller)
    pools = sorted(world.nodes[p.node].pool.name for p in world.pods.values() if p.node)
    assert pools == ["eastus-1_a", "eastus-2_c"]


def test_spot_pools_keep_no_idle_node_unless_a_minimum_is_configured() -> None:
    # One replica, two spot pools always available: with minimum counts of 0 (the default)
    # only the replica's node is paid; with a minimum of one per pool, the second pool's idle
    # node is paid too.
    traces = [trace("a", STEADY), trace("b", STEADY)]
    assert run("failover", traces).cost == pytest.approx(HORIZON * PRICES.spot / 3600)
    kept = run("failover", traces, spotPoolMinNodes=1)
    assert kept.cost == pytest.approx(2 * HORIZON * PRICES.spot / 3600)


def test_an_autoscaler_that_knows_spot_capacity_goes_on_demand_at_once() -> None:
    # test_plain_drain's scenario with capacity known in advance: no failed spot request first.
    result = run("spot-drain", [trace("a", AWAY_AND_BACK)], spotCapacityKnown=True)
    assert result.outages == [pytest.approx(PROVISION + LOAD)]


def test_pools_of_two_regions_are_not_one_cluster_unless_asked() -> None:
    traces = [trace("us-west-2a_v100", STEADY), trace("us-east-1f_v100", STEADY)]
    with pytest.raises(InputError, match=r"2 regions \(us-east-1, us-west-2\)"):
        simulate(["failover"], traces=traces, scenario=scenario(), prices=PRICES)
    joined = simulate(
        ["failover"], traces=traces, scenario=scenario(multiRegion=True), prices=PRICES
    )
    assert joined[0].availability == 1.0


def test_spot_pools_are_priced_in_their_own_region() -> None:
    traces = [trace("us-west-2a_v100", STEADY), trace("us-east-1f_v100", STEADY)]
    workload = scenario(multiRegion=True, vmSize="Standard_NC24ads_A100_v4", region="eastus")
    prices = prices_for(workload, BUNDLED, regions={"us-west-2": "westus2"})
    world, _ = build("failover", traces=traces, scenario=workload, prices=prices, horizon=HORIZON)
    west = BUNDLED.price("Standard_NC24ads_A100_v4", "westus2", spot=True)
    east = BUNDLED.price("Standard_NC24ads_A100_v4", "eastus", spot=True)
    assert west != east
    assert world.pools["us-west-2a_v100"].price == west
    assert world.pools["us-east-1f_v100"].price == east  # unmapped: the cluster's region


def test_the_command_refuses_traces_of_several_regions_in_one_line(
    write_trace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    west = write_trace("us-west-2a_v100_1", [1, 1, 1])
    east = write_trace("us-east-2b_v100_1", [1, 1, 1])
    assert main(["simulate", "--trace", str(west), "--trace", str(east)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0
    assert "--multi-region" in error
    args = ["simulate", "--trace", str(west), "--trace", str(east), "--multi-region", "--json"]
    assert main([*args, "--policy", "oracle"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["results"][0]["reference"] is True


def test_the_oracle_is_computed_not_run() -> None:
    # The oracle is a bound, not a run: no planner call, no notice on a node of its own.
    result = run_policy(
        "oracle",
        traces=[trace("a", AWAY_AND_BACK)],
        scenario=scenario(),
        prices=PRICES,
        horizon=HORIZON,
    )
    assert result.counters.planner_calls == 0
    assert result.samples[0].at == 0.0


def test_a_pool_that_never_has_capacity_backs_off_at_most_the_maximum_forever() -> None:
    # dynamic-fallback keeps asking a spot pool that has no capacity for its 3 spot replicas:
    # requests failing after 1 s, back-off 1 s, over the 30-minute warm-up and 10 minutes:
    # some 3 600 failures in a row, far past the doubling's range. N + k = 3 replicas run on
    # demand all along.
    horizon = 600.0
    result = run_policy(
        "dynamic-fallback",
        traces=[trace("a", [0] * 18)],
        scenario=scenario(maxNodeProvisionSeconds=1, initialBackoffSeconds=1, maxBackoffSeconds=1),
        prices=PRICES,
        horizon=horizon,
    )
    assert result.availability == 1.0
    assert result.cost == pytest.approx(3 * horizon * PRICES.on_demand / 3600)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--price-region", "us-west-2"], "expected TRACE_REGION=REGION"),
        (["--price-region", "us-west-2=atlantis"], "no Standard_NC24ads_A100_v4 spot price"),
        (["--initial-backoff-seconds", "0"], "initialBackoffSeconds must be above 0"),
        (["--max-node-provision-seconds", "0"], "maxNodeProvisionSeconds must be above 0"),
        (["--initial-backoff-seconds", "600", "--max-backoff-seconds", "300"], "above maxBack"),
    ],
)
def test_bad_cluster_settings_are_refused_in_one_line(
    write_trace: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    says: str,
) -> None:
    trace_file = write_trace("us-west-2a_v100_1", [1, 1, 1])
    assert main(["simulate", "--trace", str(trace_file), *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert says in error
    assert "\n" not in error
