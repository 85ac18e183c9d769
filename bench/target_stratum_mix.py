"""How cheap 99.9 could be on a three-zone cluster for a policy that knows, from the whole run,
what each kind of stretch costs, but not when the next loss comes: the run's time split by how
many zones have spot capacity (`bench.target_cost_by_zones`), and in each kind of stretch a
share of the time run as the dynamic-fallback baseline with some k (N + k on spot, on-demand
covering losses) and the rest all on on-demand, the shares chosen in hindsight so that the
seconds below fit what the target allows at the least cost (a linear programme: each kind of
stretch on the lower hull of its (seconds below, cost) points, the allowance spent where a
second below saves the most). A loss is as likely in the share run on spot as anywhere else in
that kind of stretch: that is what "not knowing when it comes" means here. Each kind of
stretch's seconds below and cost are the baseline's within a run that keeps one k throughout:
what a stretch inherits from the one before (where the replicas are, on-demand still up) is
that k's, not the mix's, an approximation.

With `--ages=1,4`, each kind of stretch is split again by how long the youngest of its zones'
capacity has been up (< 1 h, 1-4 h, >= 4 h): the mix then also knows how much riskier fresh
capacity was in that run, the signal the target's cover reads (docs/targets.md, step 3).

It is not a bound on every online policy (one that sees a loss coming from some other state
can do better, and one that mixes spot and on-demand in other ways too); it is what the run's
own loss counts allow a policy that spends its allowance perfectly, beside the target policy,
the baseline at its default k = 2, and the oracle (docs/targets.md, "What it costs and what it
keeps"; docs/targets-measured.md). The finer the split, the more the hindsight flatters it.

    .venv/bin/python -m bench.target_stratum_mix [SET_SUBSTRING] [TARGET] [SEED ...] [--ages=1,4]

SET_SUBSTRING defaults to every set ("4-node", "16-node"), TARGET to 99.9; SEED: the traces
rotated as `bench.target_rotations` rotates them (0: as they are, the default).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from bench.simulate_references import BASELINE, DEFAULT_ROOT, ORACLE, each_cluster
from bench.target_cost_by_zones import Stretch, split_by, zones_with_capacity
from bench.target_sweep import rotated
from rebalancer.simulate.engine import simulate
from rebalancer.simulate.trace import Trace

MAX_K = 4

Point = tuple[float, float, str]  # (seconds below, cost in points, what)


def hull(points: Sequence[Point]) -> list[Point]:
    """The lower convex hull of (seconds below, cost) from the fewest seconds below: the mixes
    worth having (a point above the hull is beaten by a mix of its neighbours)."""
    best: dict[float, Point] = {}
    for point in points:
        if point[0] not in best or point[1] < best[point[0]][1]:
            best[point[0]] = point
    ordered = sorted(best.values())
    out: list[Point] = []
    for point in ordered:
        if out and point[1] >= out[-1][1]:
            continue  # more seconds below and no cheaper
        while len(out) >= 2:
            (x1, y1, _), (x2, y2, _) = out[-2], out[-1]
            # out[-1] is above the line from out[-2] to point: not on the hull
            if (y2 - y1) * (point[0] - x1) >= (point[1] - y1) * (x2 - x1):
                out.pop()
            else:
                break
        out.append(point)
    return out


def cheapest_mix(
    stretches: Mapping[str, Sequence[Point]], allowed: float
) -> tuple[float, float, list[str]]:
    """The least cost with at most `allowed` seconds below, each kind of stretch on its hull:
    start every one at its fewest seconds below, then take the steps that save the most points
    per second below first (the linear programme's greedy solution)."""
    hulls = {zones: hull(points) for zones, points in stretches.items()}
    cost = sum(h[0][1] for h in hulls.values())
    below = sum(h[0][0] for h in hulls.values())
    steps = []
    for zones, h in hulls.items():
        for before, after in itertools.pairwise(h):
            steps.append(((before[1] - after[1]) / (after[0] - before[0]), zones, before, after))
    chosen = {zones: f"{h[0][2]}" for zones, h in hulls.items()}
    for _, zones, before, after in sorted(steps, key=lambda s: -s[0]):
        room = allowed - below
        if room <= 0:
            break
        length = after[0] - before[0]
        part = min(1.0, room / length)
        below += part * length
        cost -= part * (before[1] - after[1])
        chosen[zones] = after[2] if part == 1.0 else f"{part:.0%} {after[2]}, rest {before[2]}"
    return cost, below, [f"{kind}: {chosen[kind]}" for kind in sorted(chosen)]


def points(parts: Mapping[str, Stretch], whole: float, what: str) -> dict[str, Point]:
    """Each kind of stretch's (seconds below, cost in points of `whole`, `what`)."""
    return {kind: (p.below, p.cost / whole * 100, what) for kind, p in parts.items()}


def capacity_ages(traces: Sequence[Trace]) -> dict[str, list[float]]:
    """For each zone and tick, how long (seconds) the zone has had spot capacity without a
    break up to that tick (0: none at that tick)."""
    step = min(t.gap_seconds for t in traces)
    ticks = max(int(len(t.data) * t.gap_seconds // step) for t in traces)
    ages: dict[str, list[float]] = {}
    for zone in sorted({t.zone for t in traces}):
        mine = [t for t in traces if t.zone == zone]
        run, out = 0.0, []
        for tick in range(ticks):
            at = tick * step
            up = any(
                int(at // t.gap_seconds) < len(t.data) and t.data[int(at // t.gap_seconds)] > 0
                for t in mine
            )
            run = run + step if up else 0.0
            out.append(run)
        ages[zone] = out
    return ages


def age_bucket(hours: float, edges: Sequence[float]) -> str:
    """The bucket of `edges` (hours, ascending) that `hours` falls in: "< 1 h", "1-4 h",
    ">= 4 h"."""
    above = [edge for edge in edges if hours >= edge]
    if not above:
        return f"< {edges[0]:g} h"
    if len(above) == len(edges):
        return f">= {edges[-1]:g} h"
    return f"{above[-1]:g}-{edges[len(above)]:g} h"


def state_of(traces: Sequence[Trace], edges: Sequence[float]) -> Callable[[float], str]:
    """The kind of stretch at each moment (seconds into the run): the zones with spot capacity
    and, with `edges` (hours), how long the youngest of them has had it."""
    step = min(t.gap_seconds for t in traces)
    ages = capacity_ages(traces) if edges else {}

    def kind(at: float) -> str:
        zones = zones_with_capacity(traces, at)
        if not edges or not zones:
            return f"{zones} zones"
        tick = int(at // step)
        youngest = min(a[tick] for a in ages.values() if tick < len(a) and a[tick] > 0)
        return f"{zones} zones, capacity {age_bucket(youngest / 3600, edges)}"

    return kind


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--ages=")]
    edges = [float(a) for o in sys.argv[1:] if o.startswith("--ages=") for a in o[7:].split(",")]
    only = args[0] if args else ""
    target = args[1] if len(args) > 1 else "99.9"
    seeds = [int(a) for a in args[2:]] or [0]
    for seed in seeds:
        for folder, name, members, scenario, prices in each_cluster(
            [sys.argv[0], str(DEFAULT_ROOT), only]
        ):
            if len({t.zone for t in members}) < 3:
                continue
            traces = rotated(members, seed) if seed else members
            chosen = replace(scenario, availability_target=target)
            runs = {
                r.policy: r
                for r in simulate(
                    ["target", "on-demand", ORACLE], traces=traces, scenario=chosen, prices=prices
                )
            }
            baselines = {
                k: simulate([BASELINE], traces=traces, scenario=replace(chosen, fallback_spare=k),
                            prices=prices)[0]
                for k in range(MAX_K + 1)
            }  # fmt: skip
            whole = runs["on-demand"].all_on_demand_cost
            horizon = runs["on-demand"].horizon
            allowed = (1 - float(target) / 100) * horizon

            stretches: dict[str, list[Point]] = {}
            kind = state_of(traces, edges)
            split = [points(split_by(runs["on-demand"], traces, kind), whole, "on-demand")]
            split += [
                points(split_by(r, traces, kind), whole, f"k = {k}") for k, r in baselines.items()
            ]
            for parts in split:
                for zones, point in parts.items():
                    stretches.setdefault(zones, []).append(point)
            cost, below, words = cheapest_mix(stretches, allowed)
            default = baselines[2]
            oracle = runs[ORACLE].cost / whole * 100
            base = default.cost / whole * 100
            quarter = base - (base - oracle) / 4
            print(f"{folder.parent.name} {name}, {'as is' if not seed else f'seed {seed}'} "
                  f"(allows {allowed:.0f} s below)")  # fmt: skip
            for label, result in (("target", runs["target"]), ("k = 2", default)):
                print(
                    f"  {label}: {result.availability * 100:.3f} %, "
                    f"{result.cost / whole * 100:.1f} % of on-demand"
                )
            print(f"  oracle: {oracle:.1f} %; a quarter of the gap from k = 2: {quarter:.1f} %")
            print(f"  the mix: {below:.0f} s below, {cost:.1f} % ({'; '.join(words)})")


if __name__ == "__main__":
    main()
