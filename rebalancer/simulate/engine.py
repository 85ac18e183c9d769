"""Run policies over traces and measure what a user would see: availability and cost.

All figures come from the world's step function of (Ready replicas, cost rate) between t=0 (the
traces' first tick) and the horizon; the warm-up before t=0 is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from rebalancer.simulate import InputError
from rebalancer.simulate.oracle import oracle_samples
from rebalancer.simulate.policies import ORACLE, POLICIES, REFERENCE, build, check_scenario
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import Prices, Scenario, check_fit
from rebalancer.simulate.world import Counters, Sample


@dataclass(frozen=True)
class RunResult:
    policy: str
    label: str
    horizon: float
    needed: int
    samples: tuple[Sample, ...]
    counters: Counters
    all_on_demand_cost: float  # USD: the needed replicas' nodes on demand for the horizon
    wall_seconds: float

    def intervals(self) -> list[tuple[float, float, Sample]]:
        out = []
        for index, sample in enumerate(self.samples):
            end = self.samples[index + 1].at if index + 1 < len(self.samples) else self.horizon
            end = min(end, self.horizon)
            if end > sample.at:
                out.append((sample.at, end, sample))
        return out

    @property
    def availability(self) -> float:
        full = sum(end - start for start, end, s in self.intervals() if s.ready >= self.needed)
        return full / self.horizon

    @property
    def any_ready(self) -> float:
        some = sum(end - start for start, end, s in self.intervals() if s.ready >= 1)
        return some / self.horizon

    @property
    def deficit_replica_hours(self) -> float:
        return (
            sum(max(0, self.needed - s.ready) * (end - start) for start, end, s in self.intervals())
            / 3600.0
        )

    @property
    def outages(self) -> list[float]:
        """Lengths in seconds of the periods with fewer than the needed Ready replicas."""
        lengths: list[float] = []
        current: float | None = None
        for start, end, sample in self.intervals():
            if sample.ready < self.needed:
                current = (current or 0.0) + (end - start)
            elif current is not None:
                lengths.append(current)
                current = None
        if current is not None:
            lengths.append(current)
        return lengths

    @property
    def cost(self) -> float:
        return sum(s.cost_rate * (end - start) for start, end, s in self.intervals()) / 3600.0

    def cumulative_cost(self) -> list[tuple[float, float]]:
        total = 0.0
        points = [(0.0, 0.0)]
        for start, end, sample in self.intervals():
            total += sample.cost_rate * (end - start) / 3600.0
            points.append((end, total))
        return points

    def summary(self) -> dict[str, object]:
        outages = self.outages
        return {
            "policy": self.policy,
            "label": self.label,
            "reference": self.policy in REFERENCE,
            "availability": self.availability,
            "anyReady": self.any_ready,
            "deficitReplicaHours": self.deficit_replica_hours,
            "outages": len(outages),
            "outageMeanSeconds": sum(outages) / len(outages) if outages else 0.0,
            "outageMaxSeconds": max(outages, default=0.0),
            "costUsd": self.cost,
            "costFractionOfOnDemand": self.cost / self.all_on_demand_cost,
            "notices": self.counters.notices,
            "failovers": self.counters.failovers,
            "returns": self.counters.returns,
            "moves": self.counters.moves,
            "placedElsewhere": self.counters.placed_elsewhere,
            "plannerCalls": self.counters.planner_calls,
            "wallSeconds": self.wall_seconds,
        }


def common_horizon(traces: Sequence[Trace]) -> float:
    """The span every trace covers: a pool whose record ended has no known capacity."""
    return min(trace.seconds for trace in traces)


def check_one_region(traces: Sequence[Trace]) -> None:
    """An AKS cluster is in one region: pools of several (from the traces' names) are not one
    cluster unless the scenario says so (`--multi-region`)."""
    regions = sorted({trace.region for trace in traces} - {""})
    if len(regions) > 1:
        raise InputError(
            f"traces of {len(regions)} regions ({', '.join(regions)}): a cluster is in one "
            "region; give the traces of one region, or --multi-region to treat them as one "
            "cluster across regions"
        )


def check_traces(traces: Sequence[Trace]) -> None:
    seen: dict[str, str] = {}
    for trace in traces:
        if trace.name in seen:
            raise InputError(
                f"{trace.source}: same pool name {trace.name!r} as {seen[trace.name]}; "
                "rename one file"
            )
        seen[trace.name] = trace.source


def run_policy(
    policy: str,
    *,
    traces: Sequence[Trace],
    scenario: Scenario,
    prices: Prices,
    horizon: float,
) -> RunResult:
    started = time.perf_counter()
    world, controller = build(
        policy, traces=traces, scenario=scenario, prices=prices, horizon=horizon
    )
    replicas_per_node = max(1, scenario.node_gpus() // scenario.gpus_per_replica)
    nodes = -(-scenario.replicas // replicas_per_node)
    if policy == ORACLE:
        spot_pools = [pool for pool in world.pools.values() if pool.timeline is not None]
        world.samples = oracle_samples(
            timelines=[pool.timeline for pool in spot_pools if pool.timeline is not None],
            scenario=scenario,
            horizon=horizon,
            per_node=replicas_per_node,
            on_demand_price=prices.on_demand,
            cheapest_spot_price=min(pool.price for pool in spot_pools),
        )
    else:
        world.run(controller)
    return RunResult(
        policy=policy,
        label=POLICIES[policy],
        horizon=horizon,
        needed=scenario.replicas,
        samples=tuple(world.samples),
        counters=world.counters,
        all_on_demand_cost=nodes * prices.on_demand * horizon / 3600.0,
        wall_seconds=time.perf_counter() - started,
    )


def simulate(
    policies: Sequence[str],
    *,
    traces: Sequence[Trace],
    scenario: Scenario,
    prices: Prices,
    horizon: float | None = None,
) -> list[RunResult]:
    check_fit(scenario)
    check_scenario(scenario)
    if not traces:
        raise InputError("no trace given: --trace FILE (repeatable) or a folder of traces")
    check_traces(traces)
    if not scenario.multi_region:
        check_one_region(traces)
    span = common_horizon(traces) if horizon is None else horizon
    for policy in policies:  # every bad name before any work
        build(policy, traces=traces, scenario=scenario, prices=prices, horizon=span)
    return [
        run_policy(policy, traces=traces, scenario=scenario, prices=prices, horizon=span)
        for policy in policies
    ]
