"""Where a policy's cost goes on a multi-zone cluster: the run's time split by how many zones
had spot capacity (a zone has capacity when one of its traces offers a slot), and for each
share of time the policy's mean on-demand and spot nodes, seconds below the owner's count, and
cost in points of the all-on-demand cost (docs/targets-measured.md).

    .venv/bin/python -m bench.target_cost_by_zones SET_SUBSTRING REGION [TARGET] [POLICIES]

REGION as `bench.simulate_targets` names clusters ("us-west-2", "all regions as one");
TARGET defaults to 99.9, POLICIES to target,dynamic-fallback,oracle.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from bench.simulate_references import DEFAULT_ROOT, each_cluster
from rebalancer.simulate.engine import RunResult, simulate
from rebalancer.simulate.trace import Trace

K = TypeVar("K", bound=Hashable)


@dataclass
class Stretch:
    seconds: float = 0.0
    cost: float = 0.0  # USD
    on_demand: float = 0.0  # node-seconds
    spot: float = 0.0  # node-seconds
    below: float = 0.0  # seconds under the owner's count


def zones_with_capacity(traces: Sequence[Trace], at: float) -> int:
    up = set()
    for trace in traces:
        index = int(at // trace.gap_seconds)
        if index < len(trace.data) and trace.data[index] > 0:
            up.add(trace.zone)
    return len(up)


def by_zones(result: RunResult, traces: Sequence[Trace]) -> dict[int, Stretch]:
    return split_by(result, traces, lambda at: zones_with_capacity(traces, at))


def split_by(
    result: RunResult,
    traces: Sequence[Trace],
    kind: Callable[[float], K],
    changes: Sequence[float] = (),
) -> dict[K, Stretch]:
    """`result`'s time split by `kind` of each moment (seconds into the run), a trace tick at
    a time, and at each of `changes` (sorted: moments `kind` may change between ticks)."""
    step = min(t.gap_seconds for t in traces)
    out: dict[K, Stretch] = {}
    for start, end, sample in result.intervals():
        at = start
        while at < end:
            until = min(end, (at // step + 1) * step)
            following = bisect.bisect_right(changes, at)
            if following < len(changes):
                until = min(until, changes[following])
            part = out.setdefault(kind(at), Stretch())
            length = until - at
            part.seconds += length
            part.cost += sample.cost_rate * length / 3600.0
            part.on_demand += sample.on_demand_nodes * length
            part.spot += sample.spot_nodes * length
            part.below += length if sample.ready < result.needed else 0.0
            at = until
    return out


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    only, region = sys.argv[1], sys.argv[2]
    target = sys.argv[3] if len(sys.argv) > 3 else "99.9"
    policies = (
        sys.argv[4].split(",") if len(sys.argv) > 4 else ["target", "dynamic-fallback", "oracle"]
    )
    for folder, name, members, scenario, prices in each_cluster(
        [sys.argv[0], str(DEFAULT_ROOT), only]
    ):
        if name != region:
            continue
        print(f"{folder.parent.name} {name}: target {target}")
        chosen = replace(scenario, availability_target=target)
        for result in simulate(policies, traces=members, scenario=chosen, prices=prices):
            whole = result.all_on_demand_cost
            budget = (1 - float(target) / 100) * result.horizon
            print(
                f"{result.policy}: all Ready {result.availability * 100:.3f} %, "
                f"cost {result.cost / whole * 100:.1f} % of on-demand "
                f"(the target allows {budget:.0f} s below in {result.horizon / 86400:.1f} d)"
            )
            for zones, part in sorted(by_zones(result, members).items()):
                print(
                    f"  {zones} zones with capacity: {part.seconds / result.horizon * 100:5.1f} % "
                    f"of the time, on-demand {part.on_demand / part.seconds:.2f}, "
                    f"spot {part.spot / part.seconds:.2f}, below {part.below:.0f} s, "
                    f"cost {part.cost / whole * 100:.1f} pts"
                )


if __name__ == "__main__":
    main()
