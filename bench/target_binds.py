"""What binds the availability target's plan, and what that costs: each cluster's run split by
the plan in force (how many zones its groups span, spot and on-demand planned) and by the loss
that kept it from being one step cheaper (`TargetPlan.binds`: a group, a pair lost together, a
wave of the record, a zone's prior; "-" when nothing cheaper was tried), each with its share of
the time, seconds below the owner's count and cost in points of the all-on-demand cost
(docs/targets-measured.md, "What binds the plan").

The plans are read as the product makes them: `rebalancer.controller.target_plan.decide` is
wrapped for the run to note each pass's plan at the simulator's clock; the last plan of a
pass is the one in force until the next pass.

Beside each part, the dynamic-fallback baseline (N + 2 on spot, on-demand covering losses) in
the same stretches of its own run: what spot would have lost and cost there, which says what
the plan's caution bought.

    .venv/bin/python -m bench.target_binds [SET_SUBSTRING] [REGION] [TARGET] [ROWS]

SET_SUBSTRING and REGION (as `bench.simulate_targets` names clusters, "all regions as one")
default to every cluster, TARGET to 99.9, ROWS (the costliest kinds of stretch shown) to 8.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from bench.simulate_references import BASELINE, DEFAULT_ROOT, each_cluster
from bench.target_cost_by_zones import Stretch, split_by
from rebalancer.controller import target_plan
from rebalancer.controller.planning import spares  # calls plan_target by its own name
from rebalancer.controller.target import TargetPlan
from rebalancer.simulate.adapter import seconds
from rebalancer.simulate.engine import simulate

State = tuple[int, str, str]  # zones of the plan's groups, the plan, what binds it


def state_of(plan: TargetPlan, groups: list[str]) -> State:
    zones = len({group.rpartition("/")[2] for group in groups})
    shape = "all on-demand" if plan.spot == 0 else f"{plan.spot} spot + {plan.standing_on_demand}"
    return zones, shape, plan.binds.kind if plan.binds is not None else "-"


@contextmanager
def plans_noted() -> Iterator[list[tuple[float, State]]]:
    """The plans `target_plan.decide` makes while inside, each at its pass's simulated second."""
    noted: list[tuple[float, State]] = []
    decide, plan_target = target_plan.decide, target_plan.plan_target
    clock = {"at": 0.0}

    def noting_plan_target(snapshot: Any, *args: Any, **kwargs: Any) -> Any:
        clock["at"] = seconds(snapshot.now)
        return plan_target(snapshot, *args, **kwargs)

    def noting_decide(*args: Any, **kwargs: Any) -> TargetPlan:
        plan = decide(*args, **kwargs)
        noted.append((clock["at"], state_of(plan, list(kwargs["groups"]))))
        return plan

    target_plan.decide = noting_decide  # type: ignore[assignment]
    spares.plan_target = noting_plan_target  # type: ignore[assignment]
    try:
        yield noted
    finally:
        target_plan.decide, spares.plan_target = decide, plan_target  # type: ignore[assignment]


def in_force(noted: list[tuple[float, State]]) -> tuple[list[float], Callable[[float], State]]:
    """The moments a pass planned, and the plan in force at any moment: its pass's last."""
    last: dict[float, State] = {}
    for at, state in noted:
        last[at] = state
    times = sorted(last)
    states = [last[at] for at in times]

    def state_at(at: float) -> State:
        index = bisect.bisect_right(times, at) - 1
        return states[index] if index >= 0 else (0, "no plan yet", "-")

    return times, state_at


def main() -> None:
    args = sys.argv[1:]
    only = args[0] if args else ""
    region = args[1] if len(args) > 1 else ""
    target = args[2] if len(args) > 2 else "99.9"
    rows = int(args[3]) if len(args) > 3 else 8
    for folder, name, members, scenario, prices in each_cluster(
        [sys.argv[0], str(DEFAULT_ROOT), only]
    ):
        if region and name != region:
            continue
        chosen = replace(scenario, availability_target=target)
        with plans_noted() as noted:
            (result,) = simulate(["target"], traces=members, scenario=chosen, prices=prices)
        (baseline,) = simulate([BASELINE], traces=members, scenario=chosen, prices=prices)
        times, state_at = in_force(noted)
        whole = result.all_on_demand_cost
        print(
            f"{folder.parent.name} {name}: target {target}: all Ready "
            f"{result.availability * 100:.3f} %, cost {result.cost / whole * 100:.1f} % of "
            f"on-demand (the target allows {(1 - float(target) / 100) * result.horizon:.0f} s "
            f"below in {result.horizon / 86400:.1f} d); baseline {baseline.availability * 100:.3f} "
            f"%, {baseline.cost / whole * 100:.1f} %"
        )
        print(
            "| zones | plan (spot + on-demand) | binds | time | below | cost "
            "| baseline below | baseline cost |"
        )
        print("|---|---|---|---|---|---|---|---|")
        parts = split_by(result, members, state_at, times)
        beside = split_by(baseline, members, state_at, times)
        for state, part in sorted(parts.items(), key=lambda kv: -kv[1].cost)[:rows]:
            other = beside.get(state, Stretch())
            zones, shape, kind = state
            print(
                f"| {zones} | {shape} | {kind} | {part.seconds / result.horizon * 100:.1f} % | "
                f"{part.below:.0f} s | {part.cost / whole * 100:.1f} pts | {other.below:.0f} s "
                f"| {other.cost / whole * 100:.1f} pts |"
            )
        print()


if __name__ == "__main__":
    main()
