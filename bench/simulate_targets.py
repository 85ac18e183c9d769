"""Issue 22's proof: the availability-target policy at 99, 99.9 and 99.99 beside every reference,
on every shared trace set, with `rebalancer simulate`'s defaults and one setting for all sets.

For each cluster (a set's traces split by region, as `simulate_references.py` does, plus the
regions as one cluster where a set has several): availability (all Ready, at least one), cost
as a share of on-demand, and for the target policy the share of the cost gap between the
`dynamic-fallback` baseline and the `oracle` it closes ((baseline - target) / (baseline -
oracle); in parentheses when the target policy is less available than the baseline), and
whether it met its target; beside them, the cheapest `dynamic-fallback` N + k (k from 0 to
6, chosen in hindsight per cluster and target) that meets each target, or that none does. The
target policy is the product's code: the planner's
`target_plan.py` and the admission webhook's placement, through `rebalancer simulate`.

    .venv/bin/python -m bench.simulate_targets [SPOT_TRACES_DIR] [SET_SUBSTRING]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from bench.simulate_references import BASELINE, ORACLE, each_cluster
from rebalancer.simulate.engine import RunResult, simulate
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import Prices, Scenario

REFERENCES = ("on-demand", "spothedge", BASELINE, ORACLE)
TARGETS = ("99", "99.9", "99.99")
MAX_K = 6


def closed(result: RunResult, baseline: RunResult, oracle: RunResult) -> str:
    gap = baseline.cost - oracle.cost
    if gap <= 0:
        return "n/a"
    share = f"{(baseline.cost - result.cost) / gap * 100:.0f}%"
    return share if result.availability >= baseline.availability else f"({share})"


def row(name: str, label: str, result: RunResult, extra: str = "", met: str = "") -> str:
    return (
        f"| {name} | {label} | {result.availability * 100:.3f}% | "
        f"{result.any_ready * 100:.3f}% | {result.cost / result.all_on_demand_cost * 100:.1f}% | "
        f"{extra} | {met} |"
    )


def baseline_sweep(traces: Sequence[Trace], scenario: Scenario, prices: Prices) -> list[RunResult]:
    """The baseline with every k from 0 to MAX_K (its default is 2), index k: to pick the
    cheapest k that meets a target in hindsight, which a user could not do."""
    return [
        simulate([BASELINE], traces=traces, scenario=replace(scenario, fallback_spare=k),
                 prices=prices)[0]
        for k in range(MAX_K + 1)
    ]  # fmt: skip


def cheapest_meeting(sweep: Sequence[RunResult], target: str) -> tuple[int, RunResult] | None:
    """The cheapest k of `baseline_sweep` whose run meets `target`, and that run."""
    meeting = [(r.cost, k, r) for k, r in enumerate(sweep)
               if r.availability * 100 >= float(target)]  # fmt: skip
    if not meeting:
        return None
    _, k, best = min(meeting, key=lambda m: m[:2])
    return k, best


def main() -> None:
    print("| cluster | policy | avail (all) | avail (>=1) | of on-demand | gap closed | met |")
    print("|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for folder, region, members, scenario, prices in each_cluster(sys.argv):
        references = simulate(REFERENCES, traces=members, scenario=scenario, prices=prices)
        by_policy = {r.policy: r for r in references}
        baseline, oracle = by_policy[BASELINE], by_policy[ORACLE]
        zones = len({t.zone for t in members})
        days = references[0].horizon / 86400
        name = f"{folder.parent.name} {region} ({len(members)} pools, {zones} zones, {days:.1f} d)"
        lines = [row(name, f"{r.policy} (ref)", r) for r in references]
        sweep = baseline_sweep(members, scenario, prices)
        for target in TARGETS:
            found = cheapest_meeting(sweep, target)
            if found is not None:
                k, best = found
                lines.append(row(name, f"{BASELINE} k={k}, cheapest meeting {target} (ref)", best))
            else:
                lines.append(f"| {name} | no {BASELINE} k <= {MAX_K} meets {target} (ref) |||||")
        for target in TARGETS:
            aimed = replace(scenario, availability_target=target)
            (result,) = simulate(["target"], traces=members, scenario=aimed, prices=prices)
            met = "yes" if result.availability * 100 >= float(target) else "no"
            lines.append(
                row(name, f"target {target}", result, closed(result, baseline, oracle), met)
            )
        print("\n".join(lines), flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s on one core", file=sys.stderr)


if __name__ == "__main__":
    main()
