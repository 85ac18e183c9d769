"""How long `rebalancer simulate` takes: a 45-day trace of three spot pools, every policy.

The public traces are 11 to 27 days long, so each pool's 45 days are the real 16-node traces
(availability/16-node/aws-08-27-2023) repeated end to end; capacity changes as often as in the
real record. Prints the wall time per policy and in total, on this process's one core.

    .venv/bin/python -m bench.bench_simulate [TRACES_DIR]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rebalancer.simulate.engine import simulate
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.policies import DEFAULT_POLICIES, UNAVAILABLE
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import Scenario, prices_for

DAYS = 45
# The shared data sits beside the repository (`../shared/data/spot-traces/`).
DEFAULT_TRACES = (
    Path(__file__).resolve().parents[2]
    / "shared/data/spot-traces/availability/16-node/aws-08-27-2023"
)


def stretched(trace: Trace, days: float) -> Trace:
    ticks = int(days * 86400 / trace.gap_seconds)
    data = (trace.data * (ticks // len(trace.data) + 1))[:ticks]
    return Trace(trace.name, trace.source, trace.gap_seconds, data)


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TRACES
    traces = [stretched(t, DAYS) for t in load_traces([folder])[:3]]
    scenario = Scenario(multi_region=True)  # the three 16-node traces span two regions
    started = time.perf_counter()
    results = simulate(
        DEFAULT_POLICIES, traces=traces, scenario=scenario, prices=prices_for(scenario)
    )
    total = time.perf_counter() - started
    changes = sum(
        sum(1 for a, b in zip(t.data, t.data[1:], strict=False) if a != b) for t in traces
    )
    print(
        f"{len(traces)} pools x {DAYS} days ({changes} capacity changes), {len(results)} policies:"
    )
    for result in results:
        print(
            f"  {result.policy:<14} {result.wall_seconds:6.2f} s  "
            f"({result.counters.planner_calls} planner calls, {len(result.samples)} samples)"
        )
    print(f"total {total:.2f} s (budget: 60 s for five policies)")
    if UNAVAILABLE:
        print(f"not run (not built yet): {', '.join(UNAVAILABLE)}")


if __name__ == "__main__":
    main()
