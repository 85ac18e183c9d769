"""Availability targets (issue 22): the estimator, the plan, the planner's actions and the
webhook's placement. Expected values are derived in the comments from the formulas of
`rebalancer/controller/target.py` with its default settings (T = 0.1 h, spot at 0.2 of
on-demand, a prior of 0.05 waves an hour each hitting a group with share 0.3)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rebalancer import names
from rebalancer.azure.prices import Price, PriceTable
from rebalancer.azure.risk_data import EvictionRates, PlacementScores
from rebalancer.clock import ManualClock
from rebalancer.controller.actions import Evict, SetDeletionCost, SetSpare
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.placement import Group, Where, affinity_patch, choose
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.policy import PolicyError, parse
from rebalancer.controller.pools import Pool
from rebalancer.controller.records import MAX_BELOW_SECONDS, Spare
from rebalancer.controller.returns import LOWEST
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.controller.target import (
    Account,
    Loss,
    TargetSettings,
    aged,
    decide,
    evidence_of,
    losses,
    parse_target,
    rates,
    waves,
)
from rebalancer.controller.target_plan import spot_share, waiting_zones
from rebalancer.timefmt import iso
from tests.unit.test_planner import NOW, deployment, node_json, of_type, pod, snapshot
from tests.unit.test_risk_metrics import controller, samples

GROUPS = ["spotgpu/eastus-1", "spotgpu/eastus-2", "spotgpu/eastus-3"]
FRESH = History(since=NOW)  # a record that starts now: the priors alone
TARGET = {names.AVAILABILITY_TARGET: "99.9"}
# An error budget watched from now on, nothing spent: the target's own share is allowed.
WATCHED = iso(NOW)


def preempt(zone: str, minutes_ago: float, node: str) -> Entry:
    at = NOW - timedelta(minutes=minutes_ago)
    return Entry(f"E-{node}", "Preempt", node, "spotgpu", zone, "x", True, at)


@pytest.mark.parametrize("text", ["99.9", " 99.99 ", "50", "99.999"])
def test_a_target_is_a_percentage_from_50_to_99_999(text: str) -> None:
    assert parse_target(text) == float(text)


@pytest.mark.parametrize(
    "text", ["100", "49.9", "99.9999", "99,9", "1e2", "\uff19\uff19", "99.", "", "-99"]
)
def test_anything_else_is_refused_with_the_value_named(text: str) -> None:
    with pytest.raises(ValueError, match="is not"):
        parse_target(text)
    with pytest.raises(PolicyError, match=names.AVAILABILITY_TARGET):
        parse({names.AVAILABILITY_TARGET: text})


def test_the_target_decides_spares_so_spare_replicas_with_it_is_refused() -> None:
    with pytest.raises(PolicyError, match="the target decides spares"):
        parse({**TARGET, names.SPARE_REPLICAS: "2"})
    assert parse(TARGET).target == "99.9"


def test_notices_within_the_wave_window_are_one_wave() -> None:
    found = waves(
        [preempt("eastus-1", 30, "a"), preempt("eastus-2", 25, "b"), preempt("eastus-1", 5, "c")],
        wave_seconds=600,
    )
    assert [sorted(w.groups) for w in found] == [
        ["spotgpu/eastus-1", "spotgpu/eastus-2"],
        ["spotgpu/eastus-1"],
    ]


def test_with_no_record_the_priors_alone_give_the_rates() -> None:
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings())
    # W = 24 * 0.05 / 24; lambda_g = W * 0.3; lambda_gh = W * 0.3^2
    assert seen.wave_rate == pytest.approx(0.05)
    assert seen.of(GROUPS[0]) == pytest.approx(0.015)
    assert seen.of_pair(GROUPS[0], GROUPS[1]) == pytest.approx(0.0045)


def test_no_record_yet_is_no_time_watched_not_a_quiet_day() -> None:
    # The first pass runs before the controller has written its history (since None). With
    # nothing watched, the priors alone: W = 24 * 0.05 / (24 + 0) = 0.05, as with since = now.
    # Counting 24 quiet hours instead would give 1.2 / (24 + 8.115) = 0.037: safer than the
    # prior on no evidence at all.
    seen = rates([], GROUPS, now=NOW, since=None, settings=TargetSettings())
    assert seen.wave_rate == pytest.approx(0.05)
    assert seen.window_hours == 0.0


def test_three_zones_and_no_record_keep_seven_on_spot_and_cover_what_is_not_ready() -> None:
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings())
    ready = dict.fromkeys(GROUPS, 1)
    plan_now = decide(3, 99.9, groups=GROUPS, ready_spot=ready, rates=seen,
                      settings=TargetSettings())  # fmt: skip
    # Budget 0.001. Six on spot (2,2,2): every pair's loss leaves 2 < 3, U = 3 * (0.0045 * 0.1 +
    # 0.015^2 * 0.01) = 0.00136. Seven (3,2,2): only the two pairs with the 3 count, U =
    # 0.000905: cost 7 * 0.2 = 1.4. With on-demand, the cheapest within budget is 4 spot + 1
    # (1.8). So 7 on spot; with 1 Ready in each group now, 2 on-demand make every pair's loss
    # leave 3.
    assert (plan_now.spot, plan_now.standing_on_demand, plan_now.on_demand) == (7, 0, 2)
    assert plan_now.unavailability == pytest.approx(0.0009045)
    assert "2 more on on-demand while 3 of 7 spot are Ready" in plan_now.why


def test_a_wave_across_two_zones_starts_on_demand_before_any_notice() -> None:
    record = [preempt("eastus-1", 10, "a"), preempt("eastus-2", 9, "b")]
    seen = rates(record, GROUPS, now=NOW, since=NOW - timedelta(hours=1),
                 settings=TargetSettings())  # fmt: skip
    calm = rates([], GROUPS, now=NOW, since=NOW - timedelta(hours=1), settings=TargetSettings())
    # The pair that went together is now far likelier to go together again than the others.
    assert seen.of_pair(GROUPS[0], GROUPS[1]) > 5 * seen.of_pair(GROUPS[0], GROUPS[2])
    assert seen.of(GROUPS[0]) > calm.of(GROUPS[0]) > 0
    ready = {GROUPS[0]: 3, GROUPS[1]: 2, GROUPS[2]: 2}  # the calm plan, all Ready
    after = decide(3, 99.9, groups=GROUPS, ready_spot=ready, rates=seen, settings=TargetSettings())
    # The 3-2 pair lost together (0.034/h, U = 0.0034 alone) must be survived: one on-demand
    # replica and 6 on spot (2,2,2) leave 3 after any pair.
    assert (after.spot, after.standing_on_demand, after.on_demand) == (6, 1, 1)
    assert "1 waves of Preempts" in after.why


def test_all_on_on_demand_says_what_the_most_spot_would_lose() -> None:
    # One zone, no record: lambda = W0 * q0 = 0.05 * 0.3 = 0.015/h; any plan with spot loses
    # them all with the group, U = 0.015 * 0.1 h = 0.0015 > 99.9's 0.001.
    one = [GROUPS[0]]
    seen = rates([], one, now=NOW, since=NOW, settings=TargetSettings())
    decided = decide(3, 99.9, groups=one, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (decided.spot, decided.on_demand) == (0, 3)
    assert decided.why.endswith(
        "; 7 on spot + 0 on-demand (the most on spot tried) would expect 99.850 %, 100 % of its "
        "time below from spotgpu/eastus-1 lost (0.015/h: the prior alone: no wave yet)"
    ), decided.why
    # With an on-demand floor of 1, the most tried is 6 + 1: the same loss leaves 1.
    floored = decide(3, 99.9, groups=one, ready_spot={}, rates=seen, settings=TargetSettings(),
                     min_on_demand=1)  # fmt: skip
    assert "; 6 on spot + 1 on-demand (the most on spot tried) would expect 99.850 %" in floored.why
    # At 99 (0.01) the plan keeps 3 on spot, no spare and no on-demand: nothing cheaper was
    # tried, and nothing is said of it.
    loose = decide(3, 99, groups=one, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (loose.spot, loose.standing_on_demand) == (3, 0) and "would expect" not in loose.why
    assert loose.binds is None
    assert decided.binds == Loss("group", (GROUPS[0],), pytest.approx(0.015), pytest.approx(0.0015))


def test_a_plan_with_on_demand_and_no_spare_says_what_one_more_on_spot_would_lose() -> None:
    # Spot at 0.7 of on-demand, 99.5 (budget 0.005), the priors alone: lambda_g = 0.015/h,
    # lambda_gh = 0.0045/h, T = 0.1 h. 2 on spot (1,1,0) + 1 on-demand: either group lost
    # leaves 2 (0.0015 each), the pair too (0.00045 + 0.015^2 * 0.01): U = 0.0034525
    # (99.655 %), cost 2.4. 3 on spot (1,1,1) alone, cost 2.1: 3 * 0.0015 + 3 * 0.0004525 =
    # 0.0058575 (99.414 %), over; each group's 0.0015 is 26 % of it.
    settings = TargetSettings(spot_price_share=0.7)
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=settings)
    decided = decide(3, 99.5, groups=GROUPS, ready_spot={}, rates=seen, settings=settings)
    assert (decided.spot, decided.standing_on_demand) == (2, 1)
    assert (
        "; 3 on spot + 0 on-demand (one on-demand fewer) would expect 99.414 %, 26 % of its "
        "time below from each of 3 alike, such as spotgpu/eastus-1 lost (0.015/h: the prior "
        "alone: no wave yet)" in decided.why
    ), decided.why


def test_a_wave_that_took_three_zones_at_once_is_planned_for_not_only_pairs() -> None:
    record = [preempt(zone, 10, f"n{i}") for i, zone in enumerate(("eastus-1", "eastus-2",
                                                                      "eastus-3"))]  # fmt: skip
    hour = NOW - timedelta(hours=1)
    seen = rates(record, GROUPS, now=NOW, since=hour, settings=TargetSettings())
    # Watched 1 h: exposure 8.656 * (1 - e^(-1/8.656)) = 0.9444 h; the wave 10 min old weighs
    # 2^(-1/36) = 0.98093. W = (1.2 + 0.98093) / (24 + 0.9444) = 0.087432; the three-group
    # wave's own rate W * 0.98093 / (2 + 0.98093) = 0.028771/h: U = 0.0028771 for a plan it
    # takes below 3.
    (wave,) = [w for w in seen.wide if w.kind == "wave"]
    assert wave.groups == frozenset(GROUPS)
    assert wave.rate == pytest.approx(0.028771, rel=1e-4)
    # Beside it, the prior of those three zones at once: W * a / (a + 0.98093) * q0^3 =
    # 0.087432 * 0.67093 * 0.027 = 0.0015838/h.
    (prior,) = [w for w in seen.wide if w.kind == "zones"]
    assert prior.groups == frozenset(GROUPS)
    assert prior.rate == pytest.approx(0.0015838, rel=1e-4)
    # Pairs alone (as before): 6 on spot (2,2,2) + 1 on-demand survive any two zones lost. The
    # three at once leave 1; so does every plan with fewer than 3 on on-demand: at 99.9
    # (budget 0.001) only all on-demand is left; at 99 (0.01) the wave's 0.0029 fits.
    strict = decide(3, 99.9, groups=GROUPS, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (strict.spot, strict.on_demand) == (0, 3)
    # The words say what the most spot tried, 7 (3,2,2), would lose: each pair holding the 3
    # leaves 2, at W * (a * q0^2 + 0.98093) / (2 + 0.98093) = 0.034052/h each (+ one after the
    # other: 0.046383^2 * 0.01): U = 2 * 0.0034267 = 0.0068534, half from each pair. The wave
    # is counted in them (its two fullest groups alone leave 2).
    assert (
        "; 7 on spot + 0 on-demand (the most on spot tried) would expect 99.315 %, 50 % of its "
        "time below from each of 2 alike, such as spotgpu/eastus-1 and spotgpu/eastus-2 lost together (0.0341/h: hit by "
        "1 of 1 waves)" in strict.why
    ), strict.why
    # Two needed: 6 on spot (2,2,2) survive any pair, and the wave alone takes them below, at
    # its rate times the recovery, with the three zones' prior: 0.0028771 + 0.00015838 =
    # 0.0030355 (99.696 %), 95 % of it from the wave; the words name it.
    two = decide(2, 99.9, groups=GROUPS, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (two.spot, two.on_demand) == (0, 2) and two.binds is not None
    assert two.binds.kind == "wave"
    assert two.why.endswith(
        "; 6 on spot + 0 on-demand (the most on spot tried) would expect 99.696 %, 95 % of its "
        "time below from a wave like the one that took spotgpu/eastus-1, spotgpu/eastus-2, "
        "spotgpu/eastus-3 again (0.0288/h)"
    ), two.why
    pairs_only = replace(seen, wide=())
    before = decide(3, 99.9, groups=GROUPS, ready_spot={}, rates=pairs_only,
                    settings=TargetSettings())  # fmt: skip
    assert (before.spot, before.standing_on_demand) == (6, 1)
    loose = decide(3, 99, groups=GROUPS, ready_spot={}, rates=seen, settings=TargetSettings())
    assert loose.spot > 0 and loose.standing_on_demand < 3


def test_three_zones_lost_whole_at_once_are_priced_before_the_record_shows_it() -> None:
    # Three zones, no record: W = 0.05/h, and the three at once at W * a / (a + 0) * q0^3 =
    # 0.05 * 0.027 = 0.00135/h, as the pairs start from q0^2.
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings())
    ((groups, rate, kind),) = seen.wide
    assert (groups, kind) == (frozenset(GROUPS), "zones")
    assert rate == pytest.approx(0.00135)
    # 2 on spot in each zone and 1 on-demand survive any pair; the three at once leave 1:
    # U = 0.00135 * 0.1 h = 0.000135, within 99.9's budget, over 99.99's (0.0001).
    spread = dict.fromkeys(GROUPS, 2)
    (loss,) = losses(spread, 1, 3, seen, 0.1)
    assert (loss.kind, loss.share) == ("zones", pytest.approx(0.000135))
    assert loss.words(seen) == (
        f"eastus-1, eastus-2 and eastus-3 lost whole together ({0.00135:.4f}/h: the prior of "
        "three zones at once)"
    )
    # At 99.9 the plan is cheaper still: 7 (3, 2, 2) lose 3 with either pair holding the 3
    # (counted there, not again as the three): U = 2 * (0.0045 * 0.1 + 0.015^2 * 0.01) =
    # 0.0009045.
    loose = decide(3, 99.9, groups=GROUPS, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (loose.spot, loose.standing_on_demand) == (7, 0)
    assert loose.unavailability == pytest.approx(0.0009045)
    # At 99.99 no plan with spot is left that a loss of all three zones keeps at 3 but 3 on
    # on-demand alone: 3 spot + 3 on-demand cost more than those 3 (spot at 0.2 of on-demand).
    strict = decide(3, 99.99, groups=GROUPS, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (strict.spot, strict.on_demand) == (0, 3)
    # Two zones have no such wave: their pair's prior already covers them. A hostile count of
    # zones is bounded: 16 zones give the triples of the first 8 only (56).
    assert rates([], GROUPS[:2], now=NOW, since=NOW, settings=TargetSettings()).wide == ()
    sixteen = [f"spotgpu/z{i:02}" for i in range(16)]
    assert len(rates([], sixteen, now=NOW, since=NOW, settings=TargetSettings()).wide) == 56


def test_a_zone_of_several_pools_lost_whole_is_planned_for_before_the_record_shows_it() -> None:
    # Eight pools of one node each over two zones (the shared two-zone set's layout), no record.
    eight = [f"{pool}/z1" for pool in "abcd"] + [f"{pool}/z2" for pool in "efgh"]
    seen = rates([], eight, now=NOW, since=NOW, settings=TargetSettings())
    # Each zone of three pools or more, lost whole in one wave, at its least likely pair's
    # prior: W * a * q0 * q0 / (a + 0 waves) = 0.05 * 0.09 = 0.0045/h.
    assert sorted((sorted(w.groups), w.rate, w.kind) for w in seen.wide) == [
        (eight[:4], pytest.approx(0.0045), "zone"), (eight[4:], pytest.approx(0.0045), "zone"),
    ]  # fmt: skip
    # 5 on spot spread 3 + 2: no pair leaves fewer than 3, but z1 lost whole leaves 2:
    # U = 0.0045 * 0.1 = 0.00045, over 99.99's budget (0.0001). Counting pairs alone, the plan
    # expected 100 % there and kept 5; now 6 (3 + 3), which any one zone's loss leaves at 3.
    strict = decide(3, 99.99, groups=eight, ready_spot={}, rates=seen, settings=TargetSettings())
    pairs_only = decide(3, 99.99, groups=eight, ready_spot={}, rates=replace(seen, wide=()),
                        settings=TargetSettings())  # fmt: skip
    assert (pairs_only.spot, pairs_only.standing_on_demand, pairs_only.unavailability) == (5, 0, 0)
    assert (strict.spot, strict.standing_on_demand, strict.unavailability) == (6, 0, 0)
    # The words name the zone's prior as what binds: one spare fewer loses 3 only with z1 whole.
    assert strict.binds is not None and strict.binds.kind == "zone"
    assert strict.binds.groups == tuple(eight[:4])
    assert (
        "; 5 on spot + 0 on-demand (one spare fewer) would expect 99.955 %, 100 % of its time "
        "below from all 4 groups of z1 lost together (0.0045/h: the prior of its least likely "
        "pair)" in strict.why
    ), strict.why
    # At 99.9 (0.001) the 0.00045 fits: still 5.
    loose = decide(3, 99.9, groups=eight, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (loose.spot, loose.unavailability) == (5, pytest.approx(0.00045))
    # A zone of two pools has its pair's prior already: no zone-wide wave for it.
    assert rates([], [*eight[:2], "e/z2"], now=NOW, since=NOW, settings=TargetSettings()).wide == ()


def test_a_target_missed_so_far_holds_the_plan_to_a_tenth_of_its_budget_until_it_is_met() -> None:
    # 99 over 2 days watched: 0.01 * 2 d = 1728 s allowed below, a tenth in reserve: 1555.2 s.
    within = Account(99, watched_seconds=2 * 86400, below_seconds=1555)
    assert (within.missed, within.held_target()) == (False, 99)
    over = Account(99, watched_seconds=2 * 86400, below_seconds=1556)
    assert over.missed and over.held_target() == pytest.approx(99.9)
    assert "more than allowed: planned for 99.9 % until it is met" in over.words()
    # A day more without a second below: 2592 s allowed (2332.8 s less the reserve): met again.
    assert not Account(99, watched_seconds=3 * 86400, below_seconds=1729).missed


def test_the_planner_holds_a_missed_target_stricter() -> None:
    # One zone at 99: U = 0.015 * 0.1 = 0.0015 fits 0.01, so 3 on spot. Watched a day: 0.01 *
    # 1 d = 864 s allowed, 777.6 s less the reserve. 700 s below: within, 3 on spot; 800 s:
    # missed, planned for 99.9 (budget 0.001): all on on-demand.
    nodes = [node_json(f"spot-{i}", zone="eastus-1") for i in range(3)]
    nodes += [node_json(f"od-{i}", pool="odgpu", spot=False) for i in range(3)]
    ready = [pod(f"p{i}", f"spot-{i}") for i in range(3)]
    day = iso(NOW - timedelta(days=1))

    def planned(below: int) -> tuple[int | None, str]:
        kept = Spare(3, 0, watched_since=day, below_seconds=below)  # no plan recorded yet
        record = {names.AVAILABILITY_TARGET: "99", names.SPARE_RECORD: kept.to_json()}
        state = snapshot(nodes, ready, [deployment(3, annotations=record)], history=FRESH)
        (action,) = of_type(plan(state, Settings()).actions, SetSpare)
        assert action.record is not None and action.why is not None
        return action.record.spot, action.why

    assert planned(700)[0] == 3
    spot, why = planned(800)
    assert spot == 0
    assert "more than allowed: planned for 99.9 % until it is met" in why


def test_an_account_back_within_keeps_the_plan_stricter_until_one_recovery_is_in_hand() -> None:
    # 99.9 over 6 days: 518.4 s allowed, 466.56 s less the reserve. 400 s spent: within, 66.56 s
    # in hand, less than one recovery (360 s): held to 99.99 only if it was over before.
    fresh = Account(99.9, 6 * 86400, 400, recovery_seconds=360)
    assert (fresh.missed, fresh.held_target()) == (False, 99.9)
    after = Account(99.9, 6 * 86400, 400, overdrawn=True, recovery_seconds=360)
    assert (after.over, after.missed) == (False, True)
    assert after.held_target() == pytest.approx(99.99)
    assert after.pace(TargetSettings()) == 0.0
    assert after.words() == (
        "so far 99.923 % of 6.0 d all Ready: 6.7 of 8.6 min below used, back within what was "
        "allowed: planned for 99.99 % until one recovery (6.0 min) is in hand"
    )
    # 10 days: 777.6 s less the reserve, 377.6 s in hand: the stated target again.
    assert not Account(99.9, 10 * 86400, 400, overdrawn=True, recovery_seconds=360).missed


def test_the_planner_keeps_an_overdrawn_account_stricter_and_writes_when_it_ends() -> None:
    # As above, one zone at 99 watched a day: 777.6 s allowed less the reserve; a recovery is
    # 360 s. Over (800 s): overdrawn is written. Back within at 500 s (277.6 s in hand) after
    # being over: still all on on-demand. At 400 s (377.6 s in hand): 3 on spot, cleared.
    nodes = [node_json(f"spot-{i}", zone="eastus-1") for i in range(3)]
    nodes += [node_json(f"od-{i}", pool="odgpu", spot=False) for i in range(3)]
    ready = [pod(f"p{i}", f"spot-{i}") for i in range(3)]
    day = iso(NOW - timedelta(days=1))

    def planned(below: int, overdrawn: bool) -> Spare:
        kept = Spare(3, 0, spot=3, watched_since=day, below_seconds=below, overdrawn=overdrawn)
        record = {names.AVAILABILITY_TARGET: "99", names.SPARE_RECORD: kept.to_json()}
        state = snapshot(nodes, ready, [deployment(3, annotations=record)], history=FRESH)
        (action,) = of_type(plan(state, Settings()).actions, SetSpare)
        assert action.record is not None
        return action.record

    over = planned(800, overdrawn=False)
    assert (over.spot, over.overdrawn) == (0, True)
    held = planned(500, overdrawn=True)
    assert (held.spot, held.overdrawn) == (0, True)
    back = planned(400, overdrawn=True)
    assert (back.spot, back.overdrawn) == (3, False)
    assert Spare.from_json(held.to_json()) == held


def test_the_account_opens_when_the_count_is_first_all_ready() -> None:
    # A new target on a Deployment whose replicas still load: nothing counted below yet.
    nodes = [node_json(f"spot-{i}", zone=f"eastus-{i + 1}") for i in range(3)]
    loading = [replace(pod(f"p{i}", f"spot-{i}"), ready=False) for i in range(3)]
    state = snapshot(nodes, loading, [deployment(3, annotations=TARGET)], history=FRESH)
    (first,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert first.record is not None
    assert (first.record.watched_since, first.record.below_since) == (None, None)
    # Ready: the account opens now.
    ready = [pod(f"p{i}", f"spot-{i}") for i in range(3)]
    record = {**TARGET, names.SPARE_RECORD: first.record.to_json()}
    state = snapshot(nodes, ready, [deployment(first.record.base + first.record.added,
                                               annotations=record)], history=FRESH)  # fmt: skip
    (opened,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert opened.record is not None and opened.record.watched_since == iso(NOW)


def test_one_zone_cannot_meet_99_9_on_spot_but_meets_99() -> None:
    one = GROUPS[:1]
    seen = rates([], one, now=NOW, since=NOW, settings=TargetSettings())
    # Its one loss takes everything: U = 0.015 * 0.1 = 0.0015, over 0.001, under 0.01.
    strict = decide(3, 99.9, groups=one, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (strict.spot, strict.on_demand) == (0, 3)
    assert "no plan with spot meets 99.9 %" in strict.why
    loose = decide(3, 99, groups=one, ready_spot={one[0]: 3}, rates=seen,
                   settings=TargetSettings())  # fmt: skip
    assert (loose.spot, loose.on_demand) == (3, 0)


def test_capacity_held_under_an_hour_counts_riskier_in_proportion_up_to_four_times() -> None:
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings())
    held = {GROUPS[0]: 0.1, GROUPS[1]: 0.5}  # hours; eastus-3 has no Ready node
    fresh = aged(seen, held, TargetSettings())
    # 1 h / 0.1 h = 10, capped at 4; 1 h / 0.5 h = 2; no node: the record's rate.
    assert fresh.of(GROUPS[0]) == pytest.approx(4 * 0.015)
    assert fresh.of(GROUPS[1]) == pytest.approx(2 * 0.015)
    assert fresh.of(GROUPS[2]) == pytest.approx(0.015)
    assert fresh.of_pair(GROUPS[0], GROUPS[1]) == pytest.approx(0.0045 * 8**0.5)
    held_long = aged(seen, dict.fromkeys(GROUPS, 3.0), TargetSettings())
    assert held_long.group == seen.group and held_long.pair == seen.pair
    off = aged(seen, held, TargetSettings(fresh_seconds=0))
    assert off.group == seen.group


def test_fresh_capacity_keeps_on_demand_cover_but_not_a_different_plan() -> None:
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings())
    ready = {GROUPS[0]: 3, GROUPS[1]: 2, GROUPS[2]: 2}  # the plan's seven, all Ready
    settled = decide(3, 99.9, groups=GROUPS, ready_spot=ready, rates=seen,
                     settings=TargetSettings())  # fmt: skip
    assert (settled.spot, settled.on_demand) == (7, 0)
    # Every group's capacity came back 15 minutes ago: rates x4 (0.06/h, pairs 0.018/h). With
    # no on-demand, each pair with the 3 leaves 2: U = 2 * (0.018 * 0.1 + 0.06^2 * 0.01) =
    # 0.00367, over 0.001; one on-demand replica leaves 3 after any pair.
    fresh = aged(seen, dict.fromkeys(GROUPS, 0.25), TargetSettings())
    covered = decide(3, 99.9, groups=GROUPS, ready_spot=ready, rates=seen,
                     settings=TargetSettings(), cover_rates=fresh)  # fmt: skip
    assert (covered.spot, covered.standing_on_demand, covered.on_demand) == (7, 0, 1)
    assert (
        "1 more on on-demand while 7 of 7 spot are Ready (1 of them while spot capacity is fresh)"
        in covered.why
    )


def test_the_planner_reads_how_long_each_groups_capacity_has_held_from_its_nodes() -> None:
    nodes = three_zone_nodes((3, 2, 2), 2)
    for node in nodes:
        if node["metadata"]["name"].startswith("spot-"):  # up for 15 minutes
            node["metadata"]["creationTimestamp"] = iso(NOW - timedelta(minutes=15))
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    state = snapshot(nodes, pods, [deployment(9, annotations=record)], history=FRESH)
    # As in the test above: one of the two on-demand replicas stays while the capacity is fresh
    # (the other gets the lowest deletion cost); with nodes up for a day both go.
    lowered = of_type(plan(state, Settings()).actions, SetDeletionCost)
    assert len(lowered) == 1
    for node in nodes:
        if node["metadata"]["name"].startswith("spot-"):
            node["metadata"]["creationTimestamp"] = iso(NOW - timedelta(days=1))
    state = snapshot(nodes, pods, [deployment(9, annotations=record)], history=FRESH)
    assert len(of_type(plan(state, Settings()).actions, SetDeletionCost)) == 2


def test_a_quiet_account_pays_for_fewer_spares_and_less_cover_and_the_words_say_so() -> None:
    nodes = three_zone_nodes((3, 2, 2), 2)
    for node in nodes:
        if node["metadata"]["name"].startswith("spot-"):  # up for 15 minutes
            node["metadata"]["creationTimestamp"] = iso(NOW - timedelta(minutes=15))
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]

    def state(days: float, marked: tuple[str, ...] = ()) -> Any:
        since = iso(NOW - timedelta(days=days))
        record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7,
                                                      watched_since=since).to_json()}  # fmt: skip
        kept = [
            pod(p.name, p.node_name, annotations={names.DELETION_COST: LOWEST})
            if p.name in marked else p
            for p in pods
        ]  # fmt: skip
        return snapshot(nodes, kept, [deployment(9, annotations=record)], history=FRESH)

    # Priors only (0.015/h a group, 0.0045/h a pair; recovery 0.1 h). The plan for 99.9 alone
    # is 7 on spot (3, 2, 2). 6 quiet days pace 0.00223: 5 on spot (2, 2, 1) is enough (every
    # pair's loss leaves fewer than 3: U = 3 * (0.0045 * 0.1 + 0.015^2 * 0.01) = 0.00136), so
    # the fullest zones give one each (p0, p5). The cover, held to fresh capacity (x4): no
    # on-demand leaves U = 0.00367 (the fresh-capacity test above), over 0.00223: one of the
    # two on-demand replicas stays (p8 goes). 10 quiet days: 777.6 s in hand, 417.6 s beyond a
    # recovery, paced 0.0048, held to 0.004 (4 budgets): 4 on spot (2, 1, 1): zone 1's loss
    # alone leaves 2, U = 0.0015 + 0.00136 = 0.00286; 3 on spot would be 0.0059. The cover's
    # 0.00367 is within 0.004: both on-demand replicas go, and one spot from each zone.
    def lowered(state: Any) -> list[str]:
        return [a.pod[1] for a in of_type(plan(state, Settings()).actions, SetDeletionCost)]

    assert lowered(state(6)) == ["p0", "p5", "p8"]
    assert sorted(lowered(state(10))) == ["p0", "p3", "p5", "p7", "p8"]
    (scaled,) = of_type(plan(state(6, ("p0", "p5", "p8")), Settings()).actions, SetSpare)
    assert scaled.replicas == 6 and scaled.why is not None
    assert scaled.why.startswith("5 on spot over 3 groups in 3 zone(s) + 0 on-demand (2 spare)")
    assert (
        "1 more on on-demand while 7 (5 planned) spot are Ready (1 of them while spot capacity "
        "is fresh), spending the account's 467 s in hand; so far 100.000 % of 6.0 d" in scaled.why
    )
    marked = ("p0", "p3", "p5", "p7", "p8")
    (scaled,) = of_type(plan(state(10, marked), Settings()).actions, SetSpare)
    assert scaled.replicas == 4 and scaled.why is not None
    assert scaled.why.startswith("4 on spot over 3 groups in 3 zone(s) + 0 on-demand (1 spare)")
    # Fewer on spot than the record's 7: planned with room to spare (DOWN_BAND), which the words
    # say beside the target the workload states.
    assert "expected 99.714 % for a target of 99.9 % (held to 99.92 %)" in scaled.why
    assert (
        "0 more on on-demand while 7 (4 planned) spot are Ready, spending the account's 778 s "
        "in hand; so far 100.000 % of 10.0 d all Ready" in scaled.why
    )


def test_the_account_says_what_the_target_allowed_and_what_was_spent() -> None:
    # 99.9 over 10 days: 864 s (14.4 min) allowed below; 120 s spent: 99.986 % all Ready.
    quiet = Account(99.9, watched_seconds=10 * 86400, below_seconds=120)
    assert quiet.words() == "so far 99.986 % of 10.0 d all Ready: 2.0 of 14.4 min below used"
    assert Account(99.9, 0, 0).words().startswith("so far 100.000 % of 0.0 d")


def test_the_cover_paces_the_allowance_in_hand_beyond_one_recovery_over_a_day() -> None:
    # 99.9 watched 6 days, nothing spent: 518.4 s allowed, 466.56 s in hand (a tenth in
    # reserve); one loss spends a recovery (360 s) at once, so 106.56 s are paced over a day:
    # 106.56 / 86400 = 0.00123 more than the budget's 0.001.
    six_days = Account(99.9, watched_seconds=6 * 86400, below_seconds=0)
    assert six_days.in_hand_seconds == pytest.approx(466.56)
    assert six_days.pace(TargetSettings()) == pytest.approx(106.56 / 86400)
    # 5 days: 388.8 s in hand, 28.8 s beyond a recovery. 300 s spent of 6 days: 166.56 in hand,
    # less than a recovery: nothing paced. 30 days: 2332.8 s in hand, paced 0.0228, held to 3
    # more budgets (4 in all). Missed: nothing, and `pace_seconds` 0 turns it off.
    assert Account(99.9, 5 * 86400, 0).pace(TargetSettings()) == pytest.approx(28.8 / 86400)
    assert Account(99.9, 6 * 86400, 300).pace(TargetSettings()) == 0.0
    assert Account(99.9, 30 * 86400, 0).pace(TargetSettings()) == pytest.approx(0.003)
    assert Account(99.9, 6 * 86400, 500).pace(TargetSettings()) == 0.0  # 500 > 466.56: missed
    assert six_days.pace(TargetSettings(pace_seconds=0)) == 0.0


def test_a_quiet_account_lets_the_cover_spend_what_it_saved() -> None:
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings())
    ready = dict.fromkeys(GROUPS, 1)

    def cover(days: float) -> Any:
        account = Account(99.9, watched_seconds=days * 86400, below_seconds=0)
        return decide(3, 99.9, groups=GROUPS, ready_spot=ready, rates=seen,
                      settings=TargetSettings(), account=account)  # fmt: skip

    # 1 Ready in each zone: with 1 on-demand each pair's loss leaves 2, U = 3 * (0.0045 * 0.1 +
    # 0.015^2 * 0.01) = 0.00135675, over the budget 0.001 (so 2, as without an account). 5
    # quiet days pace 0.001 + 28.8 / 86400 = 0.00133: still 2, and the plan stays 7 on spot
    # (5 or 6 leave fewer than 3 after any pair's loss: 0.00135675 too). 6 pace 0.00223: 1
    # on-demand is enough, and the plan itself is 5 on spot (2, 2, 1) for that same U.
    assert cover(5).on_demand == 2
    assert cover(5).spot == 7
    assert cover(5).why.endswith("2 more on on-demand while 3 of 7 spot are Ready")
    paced = cover(6)
    assert (paced.spot, paced.standing_on_demand, paced.on_demand) == (5, 0, 1)
    assert paced.unavailability == pytest.approx(0.00135675)
    spending = "1 more on on-demand while 3 of 5 spot are Ready, spending the account's 467 s"
    assert f"{spending} in hand" in paced.why
    # Never more than 4 budgets: none on on-demand leaves 2 after any one loss, U = 3 * 0.015 *
    # 0.1 + 0.00135675 = 0.00586, over 0.004 however quiet the account.
    assert cover(300).on_demand == 1


def test_one_zone_goes_on_spot_only_with_the_allowance_in_hand() -> None:
    # One group: its loss takes every spot replica, U = 0.015/h * 0.1 h = 0.0015 for any plan
    # with spot, over 99.9's 0.001: all on on-demand with the budget alone (or a young
    # account: 5 days pace 0.00133). 6 quiet days pace 0.00223: 3 on spot, no spare (a spare in
    # the same zone goes with the rest). A missed account paces nothing.
    one = ["spotgpu/eastus-1"]
    seen = rates([], one, now=NOW, since=NOW, settings=TargetSettings())

    def decided(account: Account | None) -> Any:
        return decide(3, 99.9, groups=one, ready_spot={}, rates=seen,
                      settings=TargetSettings(), account=account)  # fmt: skip

    assert (decided(None).spot, decided(None).on_demand) == (0, 3)
    assert decided(Account(99.9, 5 * 86400, 0)).spot == 0
    quiet = decided(Account(99.9, 6 * 86400, 0))
    assert (quiet.spot, quiet.standing_on_demand) == (3, 0)
    assert quiet.unavailability == pytest.approx(0.0015)
    assert quiet.why.startswith("3 on spot over 1 groups in 1 zone(s) + 0 on-demand (0 spare)")
    assert "spending the account's 467 s in hand" in quiet.why
    assert decided(Account(99.9, 6 * 86400, 500)).spot == 0  # missed: planned for 99.99


# ---- the planner -------------------------------------------------------------------------


def three_zone_nodes(spot_per_zone: tuple[int, ...], on_demand: int) -> list[dict[str, Any]]:
    nodes = []
    for zone_index, count in enumerate(spot_per_zone, start=1):
        for i in range(count):
            nodes.append(node_json(f"spot-{zone_index}-{i}", zone=f"eastus-{zone_index}"))
    nodes += [node_json(f"od-{i}", pool="odgpu", spot=False) for i in range(on_demand)]
    return nodes


def test_a_new_target_scales_to_the_plan_and_records_it() -> None:
    nodes = three_zone_nodes((1, 1, 1), 0)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    state = snapshot(nodes, pods, [deployment(3, annotations=TARGET)], history=FRESH)
    (action,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert (action.replicas, action.record) == (
        9,
        Spare(base=3, added=6, spot=7, watched_since=WATCHED),
    )
    assert action.why is not None and action.why.startswith("7 on spot over 3 groups")
    assert action.patch()["metadata"]["annotations"][names.TARGET_WHY] == action.why


def test_on_demand_goes_once_spot_is_ready_marked_first_then_scaled() -> None:
    nodes = three_zone_nodes((3, 2, 2), 2)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    state = snapshot(nodes, pods, [deployment(9, annotations=record)], history=FRESH)
    actions = plan(state, Settings()).actions
    # Seven Ready on spot (3,2,2) are the plan: the two on-demand replicas are not needed. They
    # get the lowest deletion cost first; nothing is scaled in the same pass.
    lowered = of_type(actions, SetDeletionCost)
    assert sorted(a.pod[1] for a in lowered) == ["p7", "p8"]  # the pods on od-0 and od-1
    assert {a.cost for a in lowered} == {LOWEST}
    assert of_type(actions, SetSpare) == []
    marked = [
        pod(p.name, p.node_name, annotations={names.DELETION_COST: LOWEST}) if p.name in
        ("p7", "p8") else p
        for p in pods
    ]  # fmt: skip
    state = snapshot(nodes, marked, [deployment(9, annotations=record)], history=FRESH)
    (scaled,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert (scaled.replicas, scaled.record) == (7, Spare(3, 4, spot=7, watched_since=WATCHED))


def test_nothing_is_scaled_down_while_a_replica_loads() -> None:
    nodes = three_zone_nodes((3, 2, 2), 2)
    pods = [pod(f"p{i}", node["metadata"]["name"], ready=i != 0) for i, node in enumerate(nodes)]
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    state = snapshot(nodes, pods, [deployment(9, annotations=record)], history=FRESH)
    actions = plan(state, Settings()).actions
    assert of_type(actions, SetDeletionCost) == []
    # Six Ready on spot (2,2,2) need one on on-demand: 8 replicas. But p0, a spot replica the
    # plan keeps, loads on its node: a ReplicaSet scaling down would remove it, not Ready, before
    # any on-demand one (the real control plane showed it: tests/k8s/test_target.py). Wait.
    assert of_type(actions, SetSpare) == []
    ready = [replace(p, ready=True) if p.name == "p0" else p for p in pods]
    state = snapshot(nodes, ready, [deployment(9, annotations=record)], history=FRESH)
    assert len(of_type(plan(state, Settings()).actions, SetDeletionCost)) == 2


def test_unscheduled_replicas_do_not_hold_the_scale_down() -> None:
    # The two on-demand replicas were never scheduled (no on-demand room): with the seven on
    # spot Ready they are the ones to go, and a ReplicaSet removes unscheduled pods first.
    nodes = three_zone_nodes((3, 2, 2), 0)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    pods += [pod(f"od{i}", "", ready=False, annotations={names.PLACED: "odgpu/"}) for i in range(2)]
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    state = snapshot(nodes, pods, [deployment(9, annotations=record)], history=FRESH)
    (scaled,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert scaled.replicas == 7


# ---- placement -----------------------------------------------------------------------------

SPOT_POOL = Pool("spotgpu", True, (), {}, ())
OD_POOL = Pool("odgpu", False, (), {}, ())
SPOT_GROUPS = [Group("spotgpu", f"eastus-{i}", "unknown", -1.0) for i in (1, 2, 3)]


def place(counts: dict[tuple[str, str], int], on_demand: int, target_spot: int) -> Any:
    return choose(
        parse(TARGET),
        fits=[SPOT_POOL, OD_POOL],
        groups=SPOT_GROUPS,
        where=Where(counts, on_demand),
        failing_over=False,
        evicting=set(),
        target_spot=target_spot,
    )


def test_a_targets_spot_replica_requires_its_zone_and_spreads() -> None:
    decision = place({("spotgpu", "eastus-1"): 2, ("spotgpu", "eastus-2"): 1}, 0, 7)
    assert (decision.spot, decision.zone, decision.required_pools) == (
        True,
        "eastus-3",
        ("spotgpu",),
    )
    ops = affinity_patch({"spec": {}}, decision)
    required = ops[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": names.AKS_AGENTPOOL_LABEL, "operator": "In", "values": ["spotgpu"]},
        {"key": names.ZONE_LABEL, "operator": "In", "values": ["eastus-3"]},
    ]


def test_a_zone_with_its_share_takes_no_more_while_others_wait() -> None:
    # 7 on spot over 3 zones: a share of 3. Zone 1 has 3, the others none (no capacity yet):
    # the next goes to zone 2 even though only zone 1 has nodes.
    decision = place({("spotgpu", "eastus-1"): 3}, 0, 7)
    assert decision.zone == "eastus-2"


def test_beyond_the_plans_spot_replicas_new_ones_go_on_demand() -> None:
    counts = {("spotgpu", "eastus-1"): 3, ("spotgpu", "eastus-2"): 2, ("spotgpu", "eastus-3"): 2}
    decision = place(counts, 0, 7)
    assert (decision.spot, decision.pool) == (False, "odgpu")


def _mixed(placed: bool) -> list[object]:
    """Three spot replicas Ready, three on-demand Ready (one more than the plan's two), three
    spot replicas not scheduled yet (the newest pods), sent to spot by the webhook or not."""
    nodes = three_zone_nodes((1, 1, 1), 3)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    for i in range(3):
        notes = {names.PLACED: f"spotgpu/eastus-{i + 1}"} if placed else {}
        pods.append(pod(f"z{i}", "", ready=False, annotations=notes))
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    state = snapshot(nodes, pods, [deployment(9, annotations=record)], history=FRESH)
    return list(plan(state, Settings()).actions)


def test_an_on_demand_replica_beyond_the_plan_is_evicted_for_spot_only_where_the_webhook_places() -> (
    None
):
    # The plan (7 on spot, 2 on-demand while 3 spot are Ready) has the right count, 9, and one
    # on-demand replica too many: evicted, its replacement goes to spot. Without the webhook's
    # placement on the newest pods (webhook off or failing), the replacement would land on
    # on-demand again and be evicted again every pass: nothing is evicted.
    (evicted,) = [a for a in _mixed(placed=True) if type(a).__name__ == "Evict"]
    assert evicted.pod[1] in ("p3", "p4", "p5")  # on od-0..2
    assert [a for a in _mixed(placed=False) if type(a).__name__ == "Evict"] == []


def test_a_replica_waiting_for_spot_the_plan_gave_up_makes_way_for_on_demand() -> None:
    # One zone at 99.9: no plan with spot meets it, so all 3 on on-demand. Two replicas were
    # sent to spot while spot was still planned and wait for capacity; two run on on-demand.
    # The count (4, the swap's make-before-break) is right for that mix, but nothing new will
    # be made: one of the waiting ones is evicted, and its replacement goes to on-demand.
    # (Found by `rebalancer simulate`: 16-node us-east-2 at 99 stayed at 2 Ready for 87 min.)
    nodes = [node_json(f"od-{i}", pool="odgpu", spot=False) for i in range(3)]
    nodes.append(node_json("spot-0", zone="eastus-1"))
    pods = [pod(f"od{i}", f"od-{i}") for i in range(2)]
    pods += [
        pod(f"w{i}", "", ready=False, annotations={names.PLACED: "spotgpu/eastus-1"})
        for i in range(2)
    ]
    kept = Spare(3, 1, spot=0, watched_since=WATCHED, below_since=WATCHED)  # below since
    record = {**TARGET, names.SPARE_RECORD: kept.to_json()}
    state = snapshot(nodes, pods, [deployment(4, annotations=record)], history=FRESH)
    actions = plan(state, Settings()).actions
    (evicted,) = [a for a in actions if isinstance(a, Evict)]
    assert evicted.pod[1] == "w0"


def test_a_target_on_more_replicas_than_it_plans_for_is_left_alone() -> None:
    # One tenant's 5000-replica Deployment must not hold up the pass for everyone: the search
    # grows with the square of the replicas, so above MAX_TARGET_REPLICAS nothing is planned.
    from rebalancer.controller.target import MAX_TARGET_REPLICAS

    nodes = three_zone_nodes((1, 1, 1), 0)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    big = deployment(MAX_TARGET_REPLICAS + 1, annotations=TARGET)
    state = snapshot(nodes, pods, [big], history=FRESH)
    assert of_type(plan(state, Settings()).actions, SetSpare) == []
    fits = deployment(MAX_TARGET_REPLICAS, annotations=TARGET)
    state = snapshot(nodes, pods, [fits], history=FRESH)
    assert len(of_type(plan(state, Settings()).actions, SetSpare)) == 1


def test_a_stretch_below_the_count_is_counted_on_the_record_when_it_begins_and_ends() -> None:
    nodes = three_zone_nodes((3, 2, 2), 0)
    ready = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    week = iso(NOW - timedelta(days=7))
    kept = Spare(3, 4, spot=7, watched_since=week, below_seconds=60)
    # Two of the seven lost (their pods not Ready yet): 5 Ready, the owner's 3 are there.
    # Then only 2 Ready: below 3 from now on, written on the record.
    two = [replace(p, ready=i < 2) for i, p in enumerate(ready)]
    record = {**TARGET, names.SPARE_RECORD: kept.to_json()}
    state = snapshot(nodes, two, [deployment(7, annotations=record)], history=FRESH)
    (began,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert began.record is not None
    assert (began.record.below_seconds, began.record.below_since) == (60, iso(NOW))
    assert began.record.watched_since == week
    # Five minutes on, all Ready again: 300 s more below, the stretch closed.
    below = replace(kept, below_since=iso(NOW - timedelta(minutes=5)))
    record = {**TARGET, names.SPARE_RECORD: below.to_json()}
    state = snapshot(nodes, ready, [deployment(7, annotations=record)], history=FRESH)
    (ended,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert ended.record is not None
    assert (ended.record.below_seconds, ended.record.below_since) == (360, None)
    # All Ready and nothing to change: nothing written.
    record = {**TARGET, names.SPARE_RECORD: kept.to_json()}
    state = snapshot(nodes, ready, [deployment(7, annotations=record)], history=FRESH)
    assert of_type(plan(state, Settings()).actions, SetSpare) == []


def test_an_account_we_would_not_have_written_is_refused() -> None:
    for bad in ('"belowSeconds":-1', '"belowSeconds":1.5', '"watchedSince":"yesterday"',
                '"belowSince":"0001-01-01T00:00:00Z"', '"overdrawn":"yes"', '"overdrawn":true',
                '"overdrawn":1'):  # fmt: skip
        with pytest.raises(ValueError):
            Spare.from_json('{"base":3,"added":0,' + bad + "}")
    record = Spare(3, 1, spot=4, watched_since=WATCHED, below_seconds=5, below_since=WATCHED)
    assert Spare.from_json(record.to_json()) == record


def test_a_zone_holding_more_than_its_share_gives_one_up_to_a_zone_short_of_it() -> None:
    # Plan with no record, 3 zones: 7 on spot, share ceil(7/3) = 3 a zone. Spot capacity was in
    # eastus-1 when they were placed: 4 Ready there, 1 in each other zone, 1 on-demand. Now
    # (4,1,1) needs 1 on-demand: a loss of eastus-1 leaves 2 + 1; the pairs with eastus-1 leave
    # 1 + 1 < 3, U = 2 * (0.0045 * 0.1 + 0.015^2 * 0.01) = 0.000905 <= 0.001. Without one of
    # eastus-1's, (3,1,1): the same two pairs, the same U, still 1 on-demand. So one of
    # eastus-1's is evicted (the last by name); the webhook sends its replacement to a zone
    # short of its share, where it waits for capacity if there is none.
    nodes = three_zone_nodes((4, 1, 1), 1)
    placed = {names.PLACED: "spotgpu/eastus-1"}
    pods = [pod(f"p{i}", n["metadata"]["name"], annotations=placed) for i, n in enumerate(nodes)]
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 5, spot=7, watched_since=WATCHED).to_json()}
    state = snapshot(nodes, pods, [deployment(8, annotations=record)], history=FRESH)
    (evicted,) = of_type(plan(state, Settings()).actions, Evict)
    assert evicted.pod == ("ml", "p3")  # on spot-1-3
    # Its share or less everywhere, (3,2,1) with the replacement waiting in eastus-2: nothing.
    waiting = pod("p9", "", ready=False, annotations={names.PLACED: "spotgpu/eastus-2"})
    kept = [p for p in pods if p.name != "p3"] + [waiting]
    state = snapshot(nodes, kept, [deployment(8, annotations=record)], history=FRESH)
    assert of_type(plan(state, Settings()).actions, Evict) == []
    # Without the webhook's placement on the pods (webhook off), nothing is evicted either.
    bare = [pod(f"p{i}", n["metadata"]["name"]) for i, n in enumerate(nodes)]
    state = snapshot(nodes, bare, [deployment(8, annotations=record)], history=FRESH)
    assert of_type(plan(state, Settings()).actions, Evict) == []


def test_the_seconds_below_stay_within_what_the_record_reads_back() -> None:
    # A record at the bound (a century below) and a stretch of 5 min ending now: the sum is held
    # at the bound, so the record written stays one the next pass reads (not a refused workload).
    nodes = three_zone_nodes((3, 2, 2), 0)
    ready = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    full = Spare(3, 4, spot=7, watched_since=WATCHED, below_seconds=MAX_BELOW_SECONDS - 60,
                 below_since=iso(NOW - timedelta(minutes=5)))  # fmt: skip
    record = {**TARGET, names.SPARE_RECORD: full.to_json()}
    state = snapshot(nodes, ready, [deployment(7, annotations=record)], history=FRESH)
    (ended,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert ended.record is not None and ended.record.below_seconds == MAX_BELOW_SECONDS
    assert Spare.from_json(ended.record.to_json()) == ended.record


def test_the_controllers_settings_reach_the_targets_model() -> None:
    from rebalancer.controller.settings import ControllerSettings

    default = ControllerSettings().planner.target
    assert (default.recovery_seconds, default.fresh_hours, default.spot_price_share) == (
        360.0,
        1.0,
        0.0,  # from the price table
    )
    chosen = ControllerSettings(
        target_recovery_seconds=120, target_fresh_seconds=0, target_spot_price_share=0.15
    )
    mapped = chosen.planner.target
    assert (mapped.recovery_seconds, mapped.fresh_hours, mapped.spot_price_share) == (
        120.0,
        0.0,
        0.15,
    )
    with pytest.raises(ValueError, match="target_fresh_seconds"):
        ControllerSettings(target_fresh_seconds=-1)
    assert default.azure_prior_max_factor == 4.0
    assert ControllerSettings(target_azure_prior_max_factor=2).planner.target == replace(
        default, azure_prior_max_factor=2.0
    )
    with pytest.raises(ValueError, match="target_azure_prior_max_factor"):
        ControllerSettings(target_azure_prior_max_factor=0.5)  # below 1: the bounds cross


def priced(spot_share: float) -> PriceTable:
    """A table with the test nodes' VM size in eastus, spot at `spot_share` of on-demand."""
    key = ("standard_nc24ads_a100_v4", "eastus")
    return PriceTable({key: Price(on_demand=4.0, spot=4.0 * spot_share)}, "file")


def test_spots_price_share_comes_from_the_price_table_for_the_spot_nodes_size() -> None:
    nodes = three_zone_nodes((1, 1, 1), 0)
    zones = {"eastus-1": ("spotgpu",), "eastus-2": ("spotgpu",), "eastus-3": ("spotgpu",)}
    state = snapshot(nodes, [], [deployment(3, annotations=TARGET)], history=FRESH)
    assert spot_share(replace(state, prices=priced(0.15)), zones) == pytest.approx(0.15)
    assert spot_share(replace(state, prices=priced(0.15)), {"eastus-9": ("spotgpu",)}) is None
    assert spot_share(state, zones) is None  # no table
    unknown = PriceTable({}, "file")
    assert spot_share(replace(state, prices=unknown), zones) is None
    key = ("standard_nc24ads_a100_v4", "eastus")
    for spot, on_demand in ((math.nan, 4.0), (-1.0, 4.0), (1.0, -4.0), (math.inf, 4.0)):
        odd = PriceTable({key: Price(on_demand=on_demand, spot=spot)}, "file")
        assert spot_share(replace(state, prices=odd), zones) is None, (spot, on_demand)
    dearer = PriceTable({key: Price(on_demand=4.0, spot=9.0)}, "file")
    assert spot_share(replace(state, prices=dearer), zones) == 1.0


def test_dear_spot_makes_the_plan_keep_on_demand_instead_of_spares() -> None:
    """Priors alone, three zones (as in the tests above), in on-demand replicas' cost at spot's
    share s: 7 on spot (7s) and 4 on spot with 1 on-demand (4s + 1) both keep 99.910 %, all 3
    on on-demand cost 3. At s = 0.15: 1.05 < 1.6 < 3, 7 on spot; at 0.5: 3 < 3.5 (and the 3
    on-demand only tie), 4 on spot and 1 on-demand; at 0.8: 3 < 4.2 < 5.6, all on-demand."""
    nodes = three_zone_nodes((1, 1, 1), 1)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes[:3])]
    state = snapshot(nodes, pods, [deployment(3, annotations=TARGET)], history=FRESH)

    def planned(share: float, settings: Settings | None = None) -> tuple[int | None, str]:
        (action,) = of_type(
            plan(replace(state, prices=priced(share)), settings or Settings()).actions, SetSpare
        )
        assert action.record is not None and action.why is not None
        return action.record.spot, action.why.split(":")[0]

    assert planned(0.15) == (7, "7 on spot over 3 groups in 3 zone(s) + 0 on-demand (4 spare)")
    assert planned(0.5) == (4, "4 on spot over 3 groups in 3 zone(s) + 1 on-demand (2 spare)")
    assert planned(0.8) == (0, "3 on on-demand")
    # A share the operator sets wins over the table.
    own = replace(Settings(), target=replace(Settings().target, spot_price_share=0.15))
    assert planned(0.8, own)[0] == 7


# Azure's evidence (issue 22, item 3): the risk model's prior for the test nodes' size, A100 in
# eastus, is its default 0.05 evictions per node-hour where Azure says nothing fresh.
A100 = "standard_nc24ads_a100_v4"


def azure_risks(
    buckets: dict[str, str] | None = None,
    scores: dict[str, str] | None = None,
    *,
    hours_old: float = 0.5,
    settings: RiskSettings | None = None,
) -> Any:
    """The snapshot's risks of the three test zones, with Azure's bucket for A100 in eastus
    (`buckets`: region -> bucket) and its placement score by zone number, fetched `hours_old`
    ago; None: that API is off."""
    fetched = NOW - timedelta(hours=hours_old)
    rates_data = (
        EvictionRates({(A100, region): b for region, b in buckets.items()}, fetched)
        if buckets is not None
        else None
    )
    scores_data = (
        PlacementScores({(A100, "eastus", zone): s for zone, s in scores.items()}, fetched)
        if scores is not None
        else None
    )
    nodes = [NodeInfo.from_json(n) for n in three_zone_nodes((1, 1, 1), 0)]
    return assess(
        nodes=nodes, history=FRESH, now=NOW, settings=settings or RiskSettings(),
        eviction_rates=rates_data, placement_scores=scores_data,
    )  # fmt: skip


def test_azures_bucket_and_scores_scale_each_groups_prior_hit_share() -> None:
    risks = azure_risks({"eastus": "5-10"}, {"1": "Low", "2": "High"})
    found = evidence_of(risks.values())
    # Bucket 5-10: 0.075 per node-hour, against the settings' 0.05: x1.5; Low x2, High x0.5.
    # eastus-1: x3, eastus-2: x0.75, eastus-3 (no score): x1.5.
    assert {g: round(e.factor, 9) for g, e in found.items()} == {
        GROUPS[0]: 3.0, GROUPS[1]: 0.75, GROUPS[2]: 1.5,
    }  # fmt: skip
    assert found[GROUPS[0]].said == "Azure's eviction rate 5-10 %, placement score Low"
    assert found[GROUPS[2]].said == "Azure's eviction rate 5-10 %"
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings(), evidence=found)
    # No record: W = 0.05; q0 = 0.3 x the factor: 0.9, 0.225, 0.45.
    assert seen.of(GROUPS[0]) == pytest.approx(0.05 * 0.9)
    assert seen.of(GROUPS[1]) == pytest.approx(0.05 * 0.225)
    assert seen.of(GROUPS[2]) == pytest.approx(0.05 * 0.45)
    # Pairs start independent: W * q0_g * q0_h.
    assert seen.of_pair(GROUPS[0], GROUPS[1]) == pytest.approx(0.05 * 0.9 * 0.225)
    assert seen.of_pair(GROUPS[1], GROUPS[2]) == pytest.approx(0.05 * 0.225 * 0.45)
    # A record moves it as before: one wave that hit eastus-2 an instant ago, watched 1 h
    # (exposure 0.9444 h): W = 1.2 + 1 over 24.9444; q_2 = (2 * 0.225 + 1) / (2 + 1).
    record = [preempt("eastus-2", 0, "a")]
    hour = NOW - timedelta(hours=1)
    later = rates(record, GROUPS, now=NOW, since=hour, settings=TargetSettings(), evidence=found)
    wave_rate = 2.2 / (24 + 8.6562 * (1 - math.exp(-1 / 8.6562)))
    assert later.of(GROUPS[1]) == pytest.approx(wave_rate * 1.45 / 3, rel=1e-4)
    assert later.of(GROUPS[0]) == pytest.approx(wave_rate * 1.8 / 3, rel=1e-4)


def test_azures_evidence_moves_a_prior_at_most_four_times_and_a_share_to_at_most_one() -> None:
    # 20+ (0.25) with Low (x2): x10, held to x4; 0.3 x 4 = 1.2, held to 1 (every wave).
    worst = evidence_of(azure_risks({"eastus": "20+"}, {"1": "Low"}).values())
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings(), evidence=worst)
    assert worst[GROUPS[0]].factor == pytest.approx(10)
    assert seen.of(GROUPS[0]) == pytest.approx(0.05 * 1.0)
    # 0-5 (0.025) with High (x0.5) against an operator's prior of 0.2 for the size: 0.0125 /
    # 0.2 = x0.0625, held to x0.25: q0 = 0.075.
    own = RiskSettings(prior_rates={"Standard_NC24ads_A100_v4": 0.2})
    best = evidence_of(azure_risks({"eastus": "0-5"}, {"2": "High"}, settings=own).values())
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings(), evidence=best)
    assert best[GROUPS[1]].factor == pytest.approx(0.0625)
    assert seen.of(GROUPS[1]) == pytest.approx(0.05 * 0.075)
    # A bound of 1 turns the evidence off.
    off = TargetSettings(azure_prior_max_factor=1)
    assert rates([], GROUPS, now=NOW, since=NOW, settings=off, evidence=worst) == rates(
        [], GROUPS, now=NOW, since=NOW, settings=off
    )


def test_without_fresh_azure_data_the_target_plans_exactly_as_from_the_record_alone() -> None:
    record = [preempt("eastus-1", 10, "a"), preempt("eastus-2", 9, "b")]
    hour = NOW - timedelta(hours=1)
    alone = rates(record, GROUPS, now=NOW, since=hour, settings=TargetSettings())
    # APIs off; data older than their max age (2 d for buckets, 1 h for scores); a score that
    # is no score. The risk model drops each: nothing reaches the target.
    for risks in (
        azure_risks(),
        azure_risks({"eastus": "20+"}, {"1": "Low"}, hours_old=49),
        azure_risks({"westus2": "20+"}, {"1": "DataNotFoundOrStale"}),
    ):
        found = evidence_of(risks.values())
        assert found == {}
        assert rates(record, GROUPS, now=NOW, since=hour, settings=TargetSettings(),
                     evidence=found) == alone  # fmt: skip
    # The whole planner: risks assessed without Azure, or no risks at all, the same actions.
    nodes = three_zone_nodes((1, 1, 1), 0)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    state = snapshot(nodes, pods, [deployment(3, annotations=TARGET)], history=FRESH)
    assessed = replace(state, risks=azure_risks())
    assert plan(assessed, Settings()).actions == plan(state, Settings()).actions


def test_a_riskier_bucket_changes_the_plan_and_the_words_say_so() -> None:
    nodes = three_zone_nodes((1, 1, 1), 0)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    state = snapshot(nodes, pods, [deployment(3, annotations=TARGET)], history=FRESH)
    state = replace(state, risks=azure_risks({"eastus": "5-10"}))
    (action,) = of_type(plan(state, Settings()).actions, SetSpare)
    # Bucket 5-10: x1.5, q0 = 0.45 in every zone; lambda_g = 0.0225, lambda_gh = 0.010125.
    # A pair lost costs 0.010125 * 0.1 + 0.0225^2 * 0.01 = 0.0010176, over the 0.001 budget
    # alone: no plan may lose 3 with a pair. On spot alone, 9 (3,3,3) would do, above the 3 + 4
    # spares searched; 8 (3,3,2) still loses 3 with the pair of the 3s. One on-demand and 6 on
    # spot (2,2,2) leave 3 after any pair, and lose 3 only with the three zones at once, at
    # their prior W * q0^3 = 0.05 * 0.45^3 = 0.0045563/h: U = 0.00045563 (99.954 %), cost 2.2;
    # 5 (2,2,1) with one on-demand lose
    # 3 with the pair of the 2s; two on-demand need 3 on spot (cost 2.6). Today's plan (7 on
    # spot, 0 on-demand) loses 3 with two of the pairs. Now, with 1 Ready in each zone: one
    # on-demand leaves 2 after any pair, two leave 3: 6 + 2 = 8 replicas.
    assert action.replicas == 8
    assert action.record is not None and action.record.spot == 6
    assert action.why is not None
    assert action.why.startswith(
        "6 on spot over 3 groups in 3 zone(s) + 1 on-demand (4 spare): expected 99.954 %"
    ), action.why
    # The words say what binds: one spare fewer, 5 (2,2,1) + 1, loses 3 with the pair of the
    # 2s, at 0.0010176 (99.898 %), all of it from that pair.
    assert (
        "hit by 0; prior x1.5 for spotgpu/eastus-1, spotgpu/eastus-2, spotgpu/eastus-3: "
        "Azure's eviction rate 5-10 %); 5 on spot + 1 on-demand (one spare fewer) would expect "
        "99.898 %, 100 % of its time below from spotgpu/eastus-1 and spotgpu/eastus-2 lost "
        "together (0.0101/h: the prior alone: no wave yet); 1 more on on-demand while 3 of 6 "
        "spot are Ready" in action.why
    ), action.why


def test_the_words_say_each_groups_evidence_riskiest_first() -> None:
    found = evidence_of(azure_risks({"eastus": "5-10"}, {"1": "Low", "2": "High"}).values())
    seen = rates([], GROUPS, now=NOW, since=NOW, settings=TargetSettings(), evidence=found)
    decided = decide(3, 99.9, groups=GROUPS, ready_spot={}, rates=seen, settings=TargetSettings())
    assert (
        "; prior x3 for spotgpu/eastus-1: Azure's eviction rate 5-10 %, placement score Low"
        "; prior x1.5 for spotgpu/eastus-3: Azure's eviction rate 5-10 %"
        "; prior x0.75 for spotgpu/eastus-2: Azure's eviction rate 5-10 %, placement score High)"
        in decided.why
    ), decided.why


# ---- zones waiting for spot capacity -------------------------------------------------------


def _waiting_in_zone_3(minutes: float) -> tuple[list[dict[str, Any]], list[Any]]:
    """(3,3) spot nodes in eastus-1 and -2 and one in eastus-3 that is not Ready (the zone's
    capacity is gone); 3 replicas Ready in eastus-1, 2 in eastus-2, 1 on on-demand, and the 2
    the plan sent to eastus-3 unscheduled for `minutes`."""
    nodes = three_zone_nodes((3, 3, 1), 1)
    gone = next(n for n in nodes if n["metadata"]["name"] == "spot-3-0")
    gone["status"]["conditions"][0]["status"] = "False"
    on = ["spot-1-0", "spot-1-1", "spot-1-2", "spot-2-0", "spot-2-1", "od-0"]
    pods = [pod(f"p{i}", name) for i, name in enumerate(on)]
    sent = {names.PLACED: "spotgpu/eastus-3"}
    pods += [
        replace(
            pod(f"w{i}", "", ready=False, annotations=sent),
            created=NOW - timedelta(minutes=minutes),
        )
        for i in range(2)
    ]
    return nodes, pods


def test_a_zone_whose_replica_waited_for_capacity_is_planned_without_it() -> None:
    # The standing plan over three zones is 7 on spot (ceil(7/3) = 3 a zone), as above; with 5
    # Ready (3,2,0), the cover is 1 on-demand: 8 replicas, the two of eastus-3 waiting. After
    # 10 minutes (REBALANCER_TARGET_CAPACITY_WAIT_SECONDS) with no Ready node in eastus-3, the
    # plan is over eastus-1 and -2 alone: on spot alone, (3,3) leaves 3 after either loss and
    # the pair costs U = 0.0045 * 0.1 + 0.015^2 * 0.01 = 0.00045 <= 0.001 (cost 1.2); fewer
    # spot leave 2 after a single loss (U >= 0.0015), one on-demand with (2,2) costs 1.8. So 6
    # on spot and 1 more waiting in eastus-3: 7, and the cover still 1 (3,2 Ready): 8 replicas.
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 5, spot=7, watched_since=WATCHED).to_json()}
    nodes, pods = _waiting_in_zone_3(minutes=9)
    state = snapshot(nodes, pods, [deployment(8, annotations=record)], history=FRESH)
    assert of_type(plan(state, Settings()).actions, SetSpare) == []  # not waited long enough
    nodes, pods = _waiting_in_zone_3(minutes=10)
    state = snapshot(nodes, pods, [deployment(8, annotations=record)], history=FRESH)
    (written,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert (written.replicas, written.record) == (
        8,
        Spare(3, 5, spot=7, watched_since=WATCHED, waiting=("eastus-3",)),
    )
    assert written.why is not None
    assert written.why.startswith("6 on spot over 2 groups in 2 zone(s) + 0 on-demand")
    assert "; 1 more on spot waiting for capacity in eastus-3" in written.why
    # Next pass, the record in force: one of the two waiting in eastus-3 goes (the last by
    # name); the webhook sends its replacement to eastus-2, below its share of 3.
    waits = Spare(3, 5, spot=7, watched_since=WATCHED, waiting=("eastus-3",))
    record = {**TARGET, names.SPARE_RECORD: waits.to_json()}
    state = snapshot(nodes, pods, [deployment(8, annotations=record)], history=FRESH)
    (evicted,) = of_type(plan(state, Settings()).actions, Evict)
    assert evicted.pod == ("ml", "w1")
    counts = {
        ("spotgpu", "eastus-1"): 3, ("spotgpu", "eastus-2"): 2, ("spotgpu", "eastus-3"): 1,
        ("odgpu", ""): 1,
    }  # fmt: skip
    decision = choose(
        parse(TARGET), fits=[SPOT_POOL, OD_POOL], groups=SPOT_GROUPS,
        where=Where(counts, 1), failing_over=False, evicting=set(), target_spot=7,
        target_waiting=("eastus-3",),
    )  # fmt: skip
    assert (decision.spot, decision.zone) == (True, "eastus-2")
    # Once eastus-2 holds its 3 as well, nothing more goes to eastus-3: on-demand.
    counts[("spotgpu", "eastus-2")] = 3
    decision = choose(
        parse(TARGET), fits=[SPOT_POOL, OD_POOL], groups=SPOT_GROUPS,
        where=Where(counts, 1), failing_over=False, evicting=set(), target_spot=8,
        target_waiting=("eastus-3",),
    )  # fmt: skip
    assert (decision.spot, decision.zone) == (True, "eastus-1")  # the emptiest with capacity
    decision = choose(
        parse(TARGET), fits=[SPOT_POOL, OD_POOL], groups=SPOT_GROUPS,
        where=Where(counts, 1), failing_over=False, evicting=set(), target_spot=7,
        target_waiting=("eastus-3",),
    )  # fmt: skip
    assert decision.spot is False


def test_a_zone_stays_waiting_until_a_node_there_is_ready_and_no_zone_waits_alone() -> None:
    nodes, pods = _waiting_in_zone_3(minutes=1)  # a probe made again: the record remembers
    waits = Spare(3, 5, spot=7, watched_since=WATCHED, waiting=("eastus-3",))
    zones = {"eastus-1": ("spotgpu",), "eastus-2": ("spotgpu",), "eastus-3": ("spotgpu",)}
    state = snapshot(nodes, pods, history=FRESH)
    assert waiting_zones(state, pods, zones, waits, 600) == ("eastus-3",)
    assert waiting_zones(state, pods, zones, None, 600) == ()
    assert waiting_zones(state, pods, zones, waits, 0) == ()  # turned off
    back = [n for n in nodes if n["metadata"]["name"] != "spot-3-0"]
    back.append(node_json("spot-3-0", zone="eastus-3"))
    state = snapshot(back, pods, history=FRESH)
    assert waiting_zones(state, pods, zones, waits, 600) == ()  # capacity is back
    # Every zone waiting: nothing to send the spares to, they wait where the plan puts them.
    alone = {"eastus-3": ("spotgpu",)}
    state = snapshot(nodes, pods, history=FRESH)
    assert waiting_zones(state, pods, alone, waits, 600) == ()


def test_a_record_with_more_zones_waiting_than_spot_replicas_is_refused() -> None:
    waits = Spare(3, 5, spot=7, waiting=("eastus-3",))
    assert Spare.from_json(waits.to_json()) == waits
    with pytest.raises(ValueError, match="waiting"):
        Spare.from_json('{"base": 3, "added": 0, "spot": 0, "waiting": ["eastus-3"]}')
    with pytest.raises(ValueError, match="waiting"):
        Spare.from_json('{"base": 3, "added": 0, "waiting": "eastus-3"}')


def test_a_targets_account_and_plan_are_gauges_while_it_has_a_target() -> None:
    ctl, metrics = controller(ManualClock())
    # Watched for 10 days, 600 s below before a stretch that began a minute ago; 7 of 8 on
    # spot, one of them waiting for capacity in eastus-3.
    kept = Spare(3, 5, spot=7, watched_since=iso(NOW - timedelta(days=10)), below_seconds=600,
                 below_since=iso(NOW - timedelta(seconds=60)), waiting=("eastus-3",))  # fmt: skip
    workload = deployment(8, annotations={**TARGET, names.SPARE_RECORD: kept.to_json()})
    state = snapshot(three_zone_nodes((3, 3, 0), 1), [], [workload], history=FRESH)
    ctl.recorder.observe(state, plan(state, ctl.planner_settings), 1.0)

    def of(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (name, dict(labels).get("kind", "")): value
            for (name, labels), value in samples(registry).items()
            if name.startswith("rebalancer_target_") and dict(labels)["workload"] == "infer"
        }

    # Allowed so far: 0.001 * 864000 s = 864 s; spent 600 + 60 = 660 s.
    assert of(metrics.registry) == pytest.approx({
        ("rebalancer_target_percent", ""): 99.9,
        ("rebalancer_target_all_ready_ratio", ""): 1 - 660 / 864000,
        ("rebalancer_target_budget_spent_ratio", ""): 660 / 864,
        ("rebalancer_target_replicas", "owner"): 3,
        ("rebalancer_target_replicas", "spot"): 7,
        ("rebalancer_target_replicas", "on_demand"): 1,
        ("rebalancer_target_replicas", "waiting"): 1,
    })  # fmt: skip
    # The target removed: its series go.
    gone = snapshot(three_zone_nodes((3, 3, 0), 1), [], [deployment(3)], history=FRESH)
    ctl.recorder.observe(gone, plan(gone, ctl.planner_settings), 1.0)
    assert of(metrics.registry) == {}
