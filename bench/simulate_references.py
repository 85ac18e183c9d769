"""The yardstick of issue 22: every shared trace set, every policy, beside the references.

A set's traces are split into clusters by region (an AKS cluster is in one region), each priced
in the Azure region this script maps the AWS one to (`AZURE_REGION`: the nearest Azure region,
an assumption); a set of several regions also runs once as one cluster across them
(`--multi-region`, spot priced per region, on-demand in the first). The workload is simulate's
default (3 replicas of one A100 GPU, 90 s load, 30 s notices, 300 s provisioning, pools without a
minimum count, spot capacity found by asking); `failover` and `eviction-aware` run a second time
with a minimum of one node in every spot pool (`PRODUCT_KEPT`). Prints Markdown: availability (all Ready, at least
one), cost as a share of on-demand, and for the product's policies the share of the cost gap
between the `dynamic-fallback` baseline and the `oracle` it closes ((baseline - policy) /
(baseline - oracle): 100% = as cheap as the oracle, negative = dearer than the baseline; in
parentheses when the policy is less available than the baseline, where a saving is not like for
like).

    .venv/bin/python -m bench.simulate_references [SPOT_TRACES_DIR] [SET_SUBSTRING]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from rebalancer.simulate.engine import RunResult, simulate
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.policies import DEFAULT_POLICIES, REFERENCE
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import Prices, Scenario, prices_for

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared/data/spot-traces"
AZURE_REGION = {"us-east-1": "eastus", "us-east-2": "eastus2", "us-west-2": "westus2"}
BASELINE, ORACLE = "dynamic-fallback", "oracle"
# The product's policies that return to spot only onto a Ready spot node: run again with one
# node kept in every spot pool (the simulator's default minimum is 0, which leaves them none).
PRODUCT_KEPT = ("failover", "eviction-aware")


def gap_closed(result: RunResult, baseline: RunResult, oracle: RunResult) -> str:
    if result.policy in REFERENCE:
        return ""
    gap = baseline.cost - oracle.cost
    if gap <= 0:
        return "n/a"
    closed = f"{(baseline.cost - result.cost) / gap * 100:.0f}%"
    # Below the baseline's availability a saving is not like for like: in parentheses.
    return closed if result.availability >= baseline.availability else f"({closed})"


def rows(name: str, results: Sequence[RunResult], kept: Sequence[RunResult] = ()) -> list[str]:
    """`kept`: the product's policies again with one node kept in every spot pool."""
    by_policy = {r.policy: r for r in results}
    baseline, oracle = by_policy[BASELINE], by_policy[ORACLE]
    out = []
    for result in [*results, *kept]:
        mark = " (ref)" if result.policy in REFERENCE else ""
        if result in kept:
            mark = ", spot pools min 1"
        out.append(
            f"| {name} | {result.policy}{mark} | {result.availability * 100:.3f}% | "
            f"{result.any_ready * 100:.3f}% | "
            f"{result.cost / result.all_on_demand_cost * 100:.1f}% | "
            f"{gap_closed(result, baseline, oracle)} |"
        )
    return out


def clusters(traces: Sequence[Trace]) -> list[tuple[str, list[Trace], bool]]:
    regions = sorted({t.region for t in traces})
    out = [(region, [t for t in traces if t.region == region], False) for region in regions]
    if len(regions) > 1:
        out.append(("all regions as one", list(traces), True))
    return out


def each_cluster(argv: Sequence[str]) -> Iterator[tuple[Path, str, list[Trace], Scenario, Prices]]:
    """Every cluster of every shared trace set under `argv[1]` (default: the shared traces)
    whose folder contains `argv[2]`: its folder, region, traces, scenario and prices."""
    root = Path(argv[1]) if len(argv) > 1 else DEFAULT_ROOT
    only = argv[2] if len(argv) > 2 else ""
    folders = sorted({p.parent for p in root.rglob("*.json") if only in str(p.parent)})
    if not folders:
        sys.exit(f"no trace set (*.json) under {root} matching {only!r}")
    for folder in folders:
        traces = load_traces([folder])
        for region, members, joined in clusters(traces):
            home = AZURE_REGION.get(members[0].region, "eastus")
            scenario = replace(Scenario(), region=home, multi_region=joined)
            price_regions = {t.region: AZURE_REGION[t.region] for t in members if t.region}
            yield folder, region, members, scenario, prices_for(scenario, regions=price_regions)


def main() -> None:
    print("| cluster | policy | avail (all) | avail (>=1) | of on-demand | gap closed |")
    print("|---|---|---|---|---|---|")
    started = time.perf_counter()
    for folder, region, members, scenario, prices in each_cluster(sys.argv):
        results = simulate(DEFAULT_POLICIES, traces=members, scenario=scenario, prices=prices)
        kept = simulate(
            PRODUCT_KEPT,
            traces=members,
            scenario=replace(scenario, spot_pool_min_nodes=1),
            prices=prices,
        )
        days = results[0].horizon / 86400
        name = (
            f"{folder.parent.name} {region} ({len(members)} pools, {days:.1f} d, "
            f"{scenario.region if not scenario.multi_region else 'spot per region'})"
        )
        print("\n".join(rows(name, results, kept)), flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s on one core", file=sys.stderr)


if __name__ == "__main__":
    main()
