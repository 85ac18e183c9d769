"""bench/target_stratum_mix.py's linear programme: the cheapest mix, per kind of stretch, of
ways to run it, with the seconds below within an allowance."""

from __future__ import annotations

import pytest

from bench.target_stratum_mix import age_bucket, capacity_ages, cheapest_mix, hull
from rebalancer.simulate.trace import Trace


def test_the_hull_keeps_only_mixes_worth_having() -> None:
    points = [(0.0, 10.0, "od"), (100.0, 4.0, "a"), (200.0, 3.5, "b"), (300.0, 1.0, "c"),
              (400.0, 2.0, "d")]  # fmt: skip
    # b lies above the line from a to c (3.5 > 2.5); d saves nothing for more seconds below.
    assert [p[2] for p in hull(points)] == ["od", "a", "c"]


def test_the_allowance_goes_where_a_second_below_saves_the_most() -> None:
    stretches = {
        # 6 points saved for 600 s below: 0.01 a second.
        "1 zones": [(0.0, 8.0, "od"), (600.0, 2.0, "spot")],
        # 40 points for 400 s: 0.1 a second, taken first.
        "2 zones": [(0.0, 50.0, "od"), (400.0, 10.0, "spot")],
        # Free: spot there keeps every replica Ready.
        "3 zones": [(0.0, 9.0, "od"), (0.0, 1.0, "spot")],
    }
    cost, below, words = cheapest_mix(stretches, allowed=700.0)
    # Stretch 2 all on spot (400 s), then half of stretch 1's (300 of its 600 s).
    assert below == pytest.approx(700.0)
    assert cost == pytest.approx(8.0 - 3.0 + 10.0 + 1.0)
    assert words == ["1 zones: 50% spot, rest od", "2 zones: spot", "3 zones: spot"]


def test_with_no_allowance_every_stretch_keeps_its_fewest_seconds_below() -> None:
    cost, below, _ = cheapest_mix(
        {"1 zones": [(0.0, 8.0, "od"), (600.0, 2.0, "spot")]}, allowed=0.0
    )
    assert (cost, below) == (8.0, 0.0)


def test_capacity_age_buckets_name_their_edges() -> None:
    edges = [1.0, 4.0]
    assert [age_bucket(h, edges) for h in (0.5, 1.0, 3.9, 4.0, 30.0)] == [
        "< 1 h", "1-4 h", "1-4 h", ">= 4 h", ">= 4 h",
    ]  # fmt: skip


def test_a_zones_capacity_age_counts_the_ticks_it_has_been_up_without_a_break() -> None:
    a = Trace("us-east-1a_gpu_1", "a.csv", 300.0, (1, 1, 0, 1, 1, 1))
    # Two traces of one zone: the zone is up while either has a slot.
    b1 = Trace("us-east-1b_gpu_1", "b1.csv", 300.0, (0, 0, 1, 0, 0, 0))
    b2 = Trace("us-east-1b_gpu_2", "b2.csv", 300.0, (0, 1, 0, 0, 0, 1))
    assert capacity_ages([a, b1, b2]) == {
        "us-east-1a": [300.0, 600.0, 0.0, 300.0, 600.0, 900.0],
        "us-east-1b": [0.0, 300.0, 600.0, 0.0, 0.0, 300.0],
    }
