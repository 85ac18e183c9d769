"""How deep the shared traces' waves go, and what keeps the dynamic-fallback baseline above the
owner's count on the clusters of one zone (docs/targets-measured.md).

For each single-zone cluster (one trace: one spot group), two lines:

- the trace: waves per hour of capacity (drops within `WAVE_TICKS` ticks of each other are one
  wave, as the controller's 10-minute wave window joins notices), how many empty the pool, and
  the drops from a full pool in one tick by how much of it they took. A wave is what the record
  would count; a tick is what lands at one instant, before any replacement can be Ready;
- the baseline (N + 2 spot replicas, on-demand covering what is missing), run by `rebalancer
  simulate`: its stretches below the owner's count, split by length. A wave that takes the
  pool in steps a tick apart costs the tail of one recovery (the replacements asked for at the
  first step are Ready 60 s after the second); one that takes more than the spares at one
  instant costs a whole recovery (on-demand node + load - notice: 360 s).

    .venv/bin/python -m bench.target_wave_depth [SPOT_TRACES_DIR] [SET_SUBSTRING]
"""

from __future__ import annotations

import sys
from collections import Counter

from bench.simulate_references import BASELINE, each_cluster
from rebalancer.simulate.engine import RunResult, simulate
from rebalancer.simulate.trace import Trace

WAVE_TICKS = 2  # 600 s at the shared traces' 300 s ticks


def trace_waves(trace: Trace) -> str:
    data = trace.data
    hours_up = sum(1 for count in data if count > 0) * trace.gap_seconds / 3600.0
    waves: list[tuple[int, int, int]] = []  # (last drop's tick, level before, level after)
    for index in range(1, len(data)):
        if data[index] >= data[index - 1]:
            continue
        if waves and index - waves[-1][0] <= WAVE_TICKS:
            waves[-1] = (index, waves[-1][1], data[index])
        else:
            waves.append((index, data[index - 1], data[index]))
    emptied = sum(1 for _, _, after in waves if after == 0)
    full = trace.slots
    one_tick = Counter(
        data[i - 1] - data[i] for i in range(1, len(data)) if data[i - 1] == full > data[i]
    )
    taken = ", ".join(f"{lost} of {full}: {one_tick[lost]}" for lost in sorted(one_tick))
    return (
        f"{len(waves)} waves, {len(waves) / max(hours_up, 1e-9):.2f} per hour up, "
        f"{emptied} ({emptied / max(1, len(waves)) * 100:.0f} %) empty the pool; "
        f"one tick from full took {taken}"
    )


def below(result: RunResult, recovery: float) -> str:
    """The stretches below the owner's count, split by length: a whole recovery (more than the
    spares taken at one instant) or less (taken in steps: the cover had a head start)."""
    whole: list[float] = []
    steps: list[float] = []
    for length in result.outages:
        (whole if length >= recovery - 1 else steps).append(length)
    budget = (1 - 0.999) * result.horizon
    return (
        f"{len(whole) + len(steps)} stretches below, {sum(whole) + sum(steps):.0f} s (99.9 "
        f"allows {budget:.0f} s): {len(whole)} of a whole recovery ({sum(whole):.0f} s), "
        f"{len(steps)} shorter, the pool taken in steps ({sum(steps):.0f} s)"
    )


def main() -> None:
    for folder, region, members, scenario, prices in each_cluster(sys.argv):
        if len(members) != 1:
            continue
        (trace,) = members
        (result,) = simulate([BASELINE], traces=members, scenario=scenario, prices=prices)
        print(
            f"{folder.parent.name} {region} ({trace.seconds / 86400:.1f} d): {trace_waves(trace)}"
        )
        recovery = (
            scenario.on_demand_provision_seconds.mean
            + scenario.load_seconds.mean
            - scenario.notice_seconds.mean
        )
        print(
            f"  {BASELINE} k={scenario.fallback_spare}: {result.availability * 100:.3f} % all "
            f"Ready at {result.cost / result.all_on_demand_cost * 100:.1f} % of on-demand; "
            f"{below(result, recovery)}"
        )


if __name__ == "__main__":
    main()
