"""Whatever the trace, every policy settles and its figures are consistent."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.simulate.engine import simulate
from rebalancer.simulate.policies import DEFAULT_POLICIES
from rebalancer.simulate.trace import parse_trace
from rebalancer.simulate.workload import Prices, scenario_from

PRICES = Prices(on_demand=4.0, spot=1.0)
counts = st.lists(st.integers(min_value=0, max_value=4), min_size=2, max_size=40)


@settings(max_examples=25, deadline=None)
@given(
    pools=st.lists(counts, min_size=1, max_size=3),
    replicas=st.integers(min_value=1, max_value=4),
    notice=st.sampled_from(["30", "0", "choice:30@0.8,5@0.2", "uniform:0:200"]),
    seed=st.integers(min_value=0, max_value=5),
)
def test_every_policy_settles_with_consistent_figures(
    pools: list[list[int]], replicas: int, notice: str, seed: int
) -> None:
    traces = [
        parse_trace(
            json.dumps({"metadata": {"gap_seconds": 300}, "data": data}),
            source=f"p{i}.json",
            name=f"p{i}",
        )
        for i, data in enumerate(pools)
    ]
    scenario = scenario_from(
        {"replicas": replicas, "noticeSeconds": notice, "seed": seed}, source="test"
    )
    results = simulate(DEFAULT_POLICIES, traces=traces, scenario=scenario, prices=PRICES)
    for result in results:
        assert 0.0 <= result.availability <= result.any_ready <= 1.0
        assert result.deficit_replica_hours <= replicas * result.horizon / 3600 + 1e-9
        assert sum(result.outages) <= result.horizon + 1e-9
        assert result.cost >= 0.0
        # Never fewer nodes than Ready replicas (1 GPU each), each at least the spot price.
        ready_hours = (
            sum(
                s.ready * (end - s.at)
                for s, end in zip(
                    result.samples,
                    [*(x.at for x in result.samples[1:]), result.horizon],
                    strict=True,
                )
            )
            / 3600
        )
        assert result.cost >= ready_hours * PRICES.spot - 1e-6
    on_demand = results[0]
    assert on_demand.availability == 1.0
    # The oracle is a lower bound: whatever kept every replica Ready paid at least as much.
    oracle = next(r for r in results if r.policy == "oracle")
    assert oracle.availability == 1.0
    for result in results:
        if result.availability == 1.0:
            assert oracle.cost <= result.cost + 1e-9, result.policy
    assert abs(on_demand.cost - replicas * PRICES.on_demand * on_demand.horizon / 3600) < 1e-6
