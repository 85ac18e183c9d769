"""bench/target_binds.py: a run's time split by the plan in force, which changes at passes
between the traces' ticks."""

from __future__ import annotations

import pytest

from bench.target_binds import in_force
from bench.target_cost_by_zones import split_by
from rebalancer.simulate.engine import RunResult
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.world import Counters, Sample

TWO_SPOT = (2, "3 spot + 0", "group")
ALL_ON_DEMAND = (2, "all on-demand", "pair")


def test_the_plan_in_force_is_the_last_of_its_pass_until_the_next_pass() -> None:
    times, state_at = in_force([(10.0, ALL_ON_DEMAND), (10.0, TWO_SPOT), (70.0, ALL_ON_DEMAND)])
    assert times == [10.0, 70.0]
    assert state_at(5.0) == (0, "no plan yet", "-")
    assert state_at(10.0) == state_at(69.9) == TWO_SPOT
    assert state_at(70.0) == ALL_ON_DEMAND


def test_a_runs_time_splits_at_plan_changes_between_ticks() -> None:
    # One trace of 300 s ticks; samples: 2 Ready at $3/h from 0, 1 Ready at $6/h from 100 s,
    # for 600 s. Plans: the two-spot one from 0, all on-demand from 50 s, two-spot from 250 s.
    trace = Trace("us-east-1a_gpu_1", "a.csv", 300.0, (1, 1))
    samples = (Sample(0.0, 2, 3.0, 0, 2), Sample(100.0, 1, 6.0, 1, 1))
    result = RunResult("target", "target", 600.0, 2, samples, Counters(), 10.0, 0.0)
    times, state_at = in_force([(0.0, TWO_SPOT), (50.0, ALL_ON_DEMAND), (250.0, TWO_SPOT)])
    parts = split_by(result, [trace], state_at, times)
    # Two-spot: 0-50 s (2 Ready) and 250-600 s (1 Ready: below); all on-demand 50-250 s, of
    # which 100-250 s below. Cost: $3/h for 50 s; $3/h for 50 s + $6/h for 150 s; $6/h 350 s.
    assert parts[TWO_SPOT].seconds == 400.0 and parts[ALL_ON_DEMAND].seconds == 200.0
    assert (parts[TWO_SPOT].below, parts[ALL_ON_DEMAND].below) == (350.0, 150.0)
    assert parts[TWO_SPOT].cost == pytest.approx((3 * 50 + 6 * 350) / 3600)
    assert parts[ALL_ON_DEMAND].cost == pytest.approx((3 * 50 + 6 * 150) / 3600)
    # At the ticks and samples alone each piece takes the plan at its start: 0-100 s
    # two-spot, 100-300 s all on-demand (all below), 300-600 s two-spot.
    ticks = split_by(result, [trace], state_at)
    assert (ticks[TWO_SPOT].below, ticks[ALL_ON_DEMAND].below) == (300.0, 200.0)
