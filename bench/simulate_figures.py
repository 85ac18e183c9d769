"""The figures of docs/simulate.md: every trace folder as one cluster (its traces are its spot
pools), then every trace alone as a cluster's only spot pool, with the default workload (3
replicas of one A100 GPU, 90 s model load, eastus prices). Prints Markdown.

    .venv/bin/python -m bench.simulate_figures [SPOT_TRACES_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from rebalancer.simulate.engine import RunResult, simulate
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.policies import DEFAULT_POLICIES
from rebalancer.simulate.report import table
from rebalancer.simulate.workload import Scenario, prices_for

# The shared data sits beside the repository (`../shared/data/spot-traces/`).
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared/data/spot-traces"


def cell(result: RunResult) -> str:
    share = result.cost / result.all_on_demand_cost * 100
    return f"{result.availability * 100:.2f}% / {share:.0f}%"


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROOT
    # A folder as one cluster, as these figures were first measured (its traces span regions).
    scenario = Scenario(multi_region=True)
    prices = prices_for(scenario)
    folders = sorted({path.parent for path in root.rglob("*.json")})
    for folder in folders:
        traces = load_traces([folder])
        results = simulate(DEFAULT_POLICIES, traces=traces, scenario=scenario, prices=prices)
        days = results[0].horizon / 86400
        print(f"#### {folder.relative_to(root)} ({len(traces)} pools, {days:.1f} days)\n")
        print(table(results, markdown=True))
        print()
    print("#### Each trace alone (availability of all 3 replicas / cost as a share of on-demand)\n")
    print("| trace | days | " + " | ".join(DEFAULT_POLICIES[1:]) + " |")
    print("|---|---|" + "---|" * (len(DEFAULT_POLICIES) - 1))
    for path in sorted(root.rglob("*.json")):
        traces = load_traces([path])
        results = simulate(DEFAULT_POLICIES[1:], traces=traces, scenario=scenario, prices=prices)
        name = path.relative_to(root).as_posix()
        days = results[0].horizon / 86400
        print(f"| {name} | {days:.1f} | " + " | ".join(cell(r) for r in results) + " |")


if __name__ == "__main__":
    main()
