"""The figures of docs/simulate.md, "Eviction-aware placement against today's behaviour".

Three spot pools in three zones with correlated waves (availability/16-node/aws-08-27-2023:
16 V100 slots each in us-east-2b, us-west-2a and us-west-2c, 11.3 days in common), 3 replicas of
one A100 GPU, 90 s model load, 30 s notices, eastus prices: `failover` (today's reactive
behaviour), `spothedge` and `eviction-aware` from one run, the same as

    rebalancer simulate --trace ../shared/data/spot-traces/availability/16-node/aws-08-27-2023 \\
        --policy failover --policy spothedge --policy eviction-aware \\
        --load-seconds 90 --notice-seconds 30 --vm-size Standard_NC24ads_A100_v4 --region eastus \\
        --markdown

then eviction-aware's knobs one at a time, the same three policies on the other three-zone set
and over seeds 1-5, and the controller's risk model on a pool that keeps losing its node (why
`max-risk` does little here). Prints Markdown; about a minute on one core.

    .venv/bin/python -m bench.simulate_aware [SPOT_TRACES_DIR]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rebalancer import names
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.simulate.engine import RunResult, simulate
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.report import table
from rebalancer.simulate.workload import Scenario, parse_distribution, prices_for, scenario_from

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared/data/spot-traces"
WAVES = "availability/16-node/aws-08-27-2023"
OTHER = "preemption/4-node/aws-08-03-2023"
COMPARED = ("failover", "spothedge", "eviction-aware")
VARIANTS = (
    ("defaults (max-risk low, min-on-demand 0, spread zone, failover-to on-demand)", {}),
    ("--max-risk medium", {"maxRisk": "medium"}),
    ("--spare-replicas 1 --max-risk medium", {"spareReplicas": 1, "maxRisk": "medium"}),
    (
        "--spare-replicas 1 --max-risk high --failover-to spot",
        {"spareReplicas": 1, "maxRisk": "high", "failoverTo": "spot"},
    ),
    ("--failover-to spot", {"failoverTo": "spot"}),
    ("--min-on-demand 1", {"minOnDemand": 1}),
    ("--min-on-demand 1 --failover-to spot", {"minOnDemand": 1, "failoverTo": "spot"}),
)


def scenario(**changes: object) -> Scenario:
    base = Scenario(
        load_seconds=parse_distribution(90, what="load"),
        notice_seconds=parse_distribution(30, what="notice"),
        vm_size="Standard_NC24ads_A100_v4",
        region="eastus",
        multi_region=True,  # the folder as one cluster across its regions, as first measured
    )
    return scenario_from(changes, source="bench", base=base)


def run(folder: Path, policies: tuple[str, ...], sc: Scenario) -> list[RunResult]:
    return simulate(policies, traces=load_traces([folder]), scenario=sc, prices=prices_for(sc))


def cells(result: RunResult) -> str:
    share = result.cost / result.all_on_demand_cost * 100
    c = result.counters
    return (
        f"{result.availability * 100:.2f}% | {result.any_ready * 100:.2f}% | "
        f"{result.deficit_replica_hours:.2f} | {share:.1f}% | {c.notices} | {c.failovers} | "
        f"{c.returns} | {c.moves} | {c.placed_elsewhere}"
    )


def node_hours(result: RunResult) -> tuple[float, float]:
    """(on-demand, spot) node-hours between t=0 and the horizon."""
    ends = [*(s.at for s in result.samples[1:]), result.horizon]
    on_demand = sum(
        s.on_demand_nodes * (end - s.at) for s, end in zip(result.samples, ends, strict=True)
    )
    spot = sum(s.spot_nodes * (end - s.at) for s, end in zip(result.samples, ends, strict=True))
    return on_demand / 3600, spot / 3600


def churning_pool_estimates() -> list[tuple[float, float, str]]:
    """A pool that holds one node and loses it every `hours` (a new one takes its place): the
    controller's estimate and level from its own history of the last day, on a record two days
    old, with its default settings and no Azure data (as in the simulator)."""
    now = datetime(2024, 1, 3, tzinfo=UTC)
    sku = "Standard_NC24ads_A100_v4"
    labels = {
        names.AKS_AGENTPOOL_LABEL: "spotgpu",
        names.AKS_SPOT_LABEL: "spot",
        names.ZONE_LABEL: "eastus-1",
        names.INSTANCE_TYPE_LABEL: sku,
    }
    held = NodeInfo("held", labels, {}, (), unschedulable=False, ready=True, allocatable_gpus=1)
    rows = []
    for hours in (24.0, 12.0, 6.0, 4.0, 2.0, 1.0):
        entries = tuple(
            Entry(f"E{i}", "Preempt", f"n{i}", "spotgpu", "eastus-1", sku, True, when)
            for i in range(int(24 / hours))
            if (when := now - timedelta(hours=hours * i + 0.5)) >= now - timedelta(hours=24)
        )
        history = History(since=now - timedelta(days=2), entries=entries)
        (risk,) = assess(nodes=[held], history=history, now=now, settings=RiskSettings()).values()
        rows.append((1 / hours, risk.rate_per_hour, risk.level))
    return rows


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROOT
    base = scenario()
    results = run(root / WAVES, COMPARED, base)
    days = results[0].horizon / 86400
    print(f"#### {WAVES} (3 pools in 3 zones, {days:.1f} days), seed 1\n")
    print(table(results, markdown=True))
    print()
    for result in results:
        on_demand, spot = node_hours(result)
        print(f"- {result.policy}: {on_demand:.0f} node-hours on demand, {spot:.0f} on spot")
    aware = results[2].counters
    print(
        f"- eviction-aware: {aware.moves} moves off risk, {aware.placed_elsewhere} pods that "
        "started elsewhere than the spot pool the webhook chose\n"
    )

    header = (
        "| eviction-aware | avail (all) | avail (>=1) | deficit r*h | of on-demand | notices "
        "| fail-overs | returns | moves | placed elsewhere |"
    )
    print(f"#### eviction-aware's knobs, {WAVES}\n")
    print(header)
    print("|---" * 10 + "|")
    for label, changes in VARIANTS:
        (result,) = run(root / WAVES, ("eviction-aware",), scenario(**changes))
        print(f"| {label} | {cells(result)} |")

    other = run(root / OTHER, COMPARED, base)
    days = other[0].horizon / 86400
    print(f"\n#### {OTHER} (3 pools in 3 zones, {days:.1f} days), seed 1\n")
    print(table(other, markdown=True))

    print(f"\n#### Seeds 1-5, {WAVES} (availability of all / of at least one / cost share)\n")
    print("| seed | " + " | ".join(COMPARED) + " |")
    print("|---" * (len(COMPARED) + 1) + "|")
    for seed in range(1, 6):
        row = run(root / WAVES, COMPARED, replace(base, seed=seed))
        print(
            f"| {seed} | "
            + " | ".join(
                f"{r.availability * 100:.2f}% / {r.any_ready * 100:.2f}% / "
                f"{r.cost / r.all_on_demand_cost * 100:.0f}%"
                for r in row
            )
            + " |"
        )

    print(
        "\n#### The controller's risk estimate for a pool that holds one node and keeps losing it\n"
    )
    print("| evictions per node-hour (true) | estimate | level |")
    print("|---|---|---|")
    for true, estimate, level in churning_pool_estimates():
        print(f"| {true:.3f} | {estimate:.3f} | {level} |")


if __name__ == "__main__":
    main()
