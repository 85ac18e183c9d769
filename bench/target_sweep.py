"""The availability-target policy beyond `rebalancer simulate`'s defaults: every shared cluster
at targets 99, 99.9 and 99.99, with 2 or 5 replicas, 30 or 180 s model loads, spot capacity
known to the autoscaler or found by asking, and the traces as they are or each rotated by a
random offset (seeded): whether every run converges (a controller and its webhook that
disagree never settle: the simulator raises) and where a target is missed
(docs/targets-measured.md, "The sweep beyond simulate's defaults"). About 25 minutes on one
core; `WORKER`/`WORKERS` split it between processes.

    .venv/bin/python -m bench.target_sweep [SPOT_TRACES_DIR] [WORKER WORKERS]
"""

from __future__ import annotations

import itertools
import random
import sys
from dataclasses import replace

from bench.simulate_references import DEFAULT_ROOT, each_cluster
from rebalancer.simulate.engine import simulate
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import parse_distribution

TARGETS = ("99", "99.9", "99.99")
REPLICAS = (2, 5)
LOADS = (30, 180)


def rotated(traces: list[Trace], seed: int) -> list[Trace]:
    """Each trace started at a random tick (wrapping round): the zones' stretches meet anew."""
    rng = random.Random(seed)
    shifted = []
    for trace in traces:
        start = rng.randrange(len(trace.data))
        shifted.append(replace(trace, data=trace.data[start:] + trace.data[:start]))
    return shifted


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT_ROOT)
    worker, workers = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 1)
    clusters = list(each_cluster([sys.argv[0], root]))
    cases = list(
        itertools.product(
            range(len(clusters)), TARGETS, REPLICAS, LOADS, (False, True), (False, True)
        )
    )
    random.Random(7).shuffle(cases)  # workers get a fair share of the long runs
    missed = failed = 0
    for index, (which, target, replicas, load, known, rotate) in enumerate(cases):
        if index % workers != worker:
            continue
        folder, region, members, scenario, prices = clusters[which]
        traces = rotated(members, index) if rotate else members
        aimed = replace(
            scenario,
            replicas=replicas,
            load_seconds=parse_distribution(load, what=""),
            spot_capacity_known=known,
            availability_target=target,
        )
        label = (
            f"{folder.parent.name} {region}: target {target}, {replicas} replicas, {load} s load, "
            f"capacity {'known' if known else 'asked'}, traces {'rotated' if rotate else 'as is'}"
        )
        try:
            (result,) = simulate(["target"], traces=traces, scenario=aimed, prices=prices)
        except Exception as error:  # a run that fails is the finding: say it, go on
            failed += 1
            print(f"{label}: FAILED {type(error).__name__}: {error}", flush=True)
            continue
        met = result.availability * 100 >= float(target)
        missed += not met
        print(
            f"{label}: {result.availability * 100:.3f} % all Ready, "
            f"{result.cost / result.all_on_demand_cost * 100:.1f} % of on-demand"
            + ("" if met else "  MISSED"),
            flush=True,
        )
    print(f"{missed} missed, {failed} failed")


if __name__ == "__main__":
    main()
