"""Faithfulness of `rebalancer simulate`: one short trace through the simulator and through the
emulator with the product's agents and controller on virtual time (tests/virtual/rig.py),
availability, deficit and cost compared.

The trace (`tests/data/faithful-spot-pool.json`, one spot pool of 3, 5 s ticks, 105 s) loses one
VM at 10 s, gets it back at 30 s, loses two at 55 s and gets them back at 75 s. The workload is
3 replicas of one A100 GPU; the failover policy (the product's fail-over and return) with a
compressed clock: 6 s notices, 8 s model load, on-demand nodes in 10 s, spot nodes in 3 s, the
autoscaler removes an empty node after 6 s, and the controller's deadline margin, cool-down,
return quiet time and return timeout at 2, 4, 12 and 30 s. What stays unavoidable is what a
real cluster has: the notice is shorter than a load, so a replica that must fail over to a new
on-demand node is missing from the drain (deadline - margin) until the node is up and the model
loaded; a return waits for a quiet pool and moves one replica at a time.

What the simulator computes from that, by hand: outages of (10 + 1) + 8 - (6 - 2) = 15 s (one
replica) and 15 s (two), so availability (105 - 30) / 105 = 71.4% and a deficit of 15 + 2 x 15
= 45 replica-seconds; cost is node-seconds x price from each node's request until it is gone.

On the emulator the same steps happen through the API, each a little later than the instant
the simulator assumes: the agent polls IMDS every second (AKS's node-problem-detector stand-in
too), the controller plans on every watch event and at least every second, the emulator's
loops tick every 50 ms, and the autoscaler scans for empty nodes every 0.1 s (10 s of a real
cluster's 600 s scale-down, in proportion). The autoscaler asks for a node for a pod that has
been unschedulable for 1 s (`--new-pod-scale-up-delay`), and the simulator is told on-demand
nodes take 1 s longer: at the deadline the controller deletes the doomed pods, then scales the
Deployment back; between the two the ReplicaSet makes two pods that the scale-back removes. A
real autoscaler scanning every 10 s sees them once in hundreds of fail-overs; run with the
processes in real time, on a clock compressed 30 times, this one asked for two needless
on-demand nodes in most runs on a busy machine (on virtual time the gap is nil; the delay stays
so that the comparison holds however the two writes interleave). Tolerance: LATENCY = 1.5 s for each moment the
simulator puts at an instant. An outage's start (the drain at deadline - margin) and end (the
replacement Ready, which starts with the surge) can each move by LATENCY: availability within
2 x 2 outages x 1.5 s / 105 s = 5.7 percentage points, the deficit within 2 x 3 replicas x
1.5 s = 9 replica-seconds. Cost: each of the 3 on-demand nodes can start LATENCY late (the
surge) and end up to 3 x LATENCY late (the return's start, its scale-back, the scale-down
scan); each of the 3 spot nodes that come back starts LATENCY late, and each of the 3 evicted
ones can go LATENCY early (the agent acknowledges a drained node's event, so Azure takes it
before the deadline, which the simulator leaves out): 3 x 4 x 1.5 s at $3.673/h plus
6 x 1.5 s at $0.444/h, $0.0195, about 12% of the run's $0.157.

A deliberately wrong simulator setting moves the figures by more than that, which the test
checks against the same emulator run: twice the model load makes the outages 23 s (availability
56.2%, 15 points less), twice the notice makes them 9 s (82.9%, 11 points more).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rebalancer.azure.prices import BUNDLED
from rebalancer.simulate.engine import RunResult, run_policy
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import Scenario, prices_for, scenario_from
from rebalancer.simulate.world import Counters, Sample
from rebalancer_sim.cluster import ClusterEmulator
from tests.e2e.rig import Rig, scenario
from tests.virtual.rig import running

pytestmark = pytest.mark.looptime

TRACE = Path(__file__).resolve().parents[1] / "data" / "faithful-spot-pool.json"
SPOT_POOL = "gpuspot"
ON_DEMAND_POOL = "gpuondemand"
VM_SIZE = "Standard_NC24ads_A100_v4"
REGION = "eastus"

REPLICAS = 3
LOAD = 8.0
NOTICE = 6.0
ON_DEMAND_PROVISION = 10.0
SPOT_PROVISION = 3.0
SCALE_DOWN = 6.0
SCALE_DOWN_SCAN = 0.1
SCALE_UP_DELAY = 1.0  # the emulator's autoscaler: a pod is unschedulable this long before it counts
SHUTDOWN = 0.5
GRACE = 10
MARGIN = 2.0
COOLDOWN = 4.0
QUIET = 12.0
PENDING_TIMEOUT = 30.0

LATENCY = 1.5  # seconds: how late one step can be on the emulator (see the docstring)
HORIZON = load_traces([TRACE])[0].seconds  # 105 s
AVAILABILITY_TOLERANCE = 2 * 2 * LATENCY / HORIZON  # two outages, start and end
DEFICIT_TOLERANCE = 2 * 3 * LATENCY  # replica-seconds: three replicas missed, start and end
PRICES = prices_for(scenario_from({"vmSize": VM_SIZE, "region": REGION}, source="test"))
COST_TOLERANCE = (3 * 4 * LATENCY * PRICES.on_demand + 6 * LATENCY * PRICES.spot) / 3600  # USD
SAMPLE_SECONDS = 0.05


def simulated(**changes: object) -> tuple[RunResult, Trace]:
    """The simulator's `failover` on the trace with this test's workload and cluster."""
    (trace,) = load_traces([TRACE])
    values: dict[str, object] = {
        "replicas": REPLICAS,
        "loadSeconds": LOAD,
        "shutdownSeconds": SHUTDOWN,
        "graceSeconds": GRACE,
        "noticeSeconds": NOTICE,
        # The emulator's autoscaler asks for the node SCALE_UP_DELAY after the pod is pending.
        "onDemandProvisionSeconds": ON_DEMAND_PROVISION + SCALE_UP_DELAY,
        "spotProvisionSeconds": SPOT_PROVISION,
        "scaleDownSeconds": SCALE_DOWN,
        "vmSize": VM_SIZE,
        "region": REGION,
        "warmupSeconds": 60.0,
        "deadlineMarginSeconds": MARGIN,
        "cooldownSeconds": COOLDOWN,
        "returnQuietSeconds": QUIET,
        "returnPendingTimeoutSeconds": PENDING_TIMEOUT,
        # The emulator's spot pool is the trace's: its VMs come back with the capacity.
        "spotPoolMinNodes": REPLICAS,
        "spotCapacityKnown": True,
    }
    values.update(changes)
    workload: Scenario = scenario_from(values, source="test")
    result = run_policy(
        "failover",
        traces=[trace],
        scenario=workload,
        prices=prices_for(workload),
        horizon=trace.seconds,
    )
    return result, trace


def emulated_cluster() -> dict[str, Any]:
    """The rig's cluster with this test's timings: the spot pool is the trace's (not
    autoscaled: the trace alone adds and takes its VMs), the on-demand pool autoscaled from 0."""
    data = scenario()
    data["settings"] = {
        **data["settings"],
        "shutdownSeconds": SHUTDOWN,
        "scaleDownUnneededSeconds": SCALE_DOWN,
        "nodeProblemDetectorSeconds": 1,  # AKS's NPD: new spot nodes report before their agent
    }
    data["pools"][1].update({"name": SPOT_POOL, "count": REPLICAS})
    data["pools"][2].update(
        {
            "name": ON_DEMAND_POOL,
            "count": 0,
            "minCount": 0,
            "maxCount": 6,
            "provisioningSeconds": ON_DEMAND_PROVISION,
        }
    )
    workload = data["workloads"][0]
    workload.update(
        {"replicas": REPLICAS, "startupSeconds": LOAD, "terminationGracePeriodSeconds": GRACE}
    )
    del workload["pdb"]  # the simulator has no PodDisruptionBudgets
    return data


# The on-demand pool is at 0 nodes until a fail-over: declared, as the README asks.
DECLARED_ON_DEMAND_POOL = {
    "name": ON_DEMAND_POOL,
    "spot": False,
    "gpus": 1,
    "labels": {"kubernetes.azure.com/agentpool": ON_DEMAND_POOL},
    "taints": ["sku=gpu:NoSchedule"],
}
CONTROLLER_ENV = {
    "REBALANCER_POOLS": json.dumps([DECLARED_ON_DEMAND_POOL]),
    "REBALANCER_DEADLINE_MARGIN_SECONDS": str(MARGIN),
    "REBALANCER_COOLDOWN_SECONDS": str(COOLDOWN),
    "REBALANCER_RETURN_QUIET_SECONDS": str(QUIET),
    "REBALANCER_RETURN_PENDING_TIMEOUT_SECONDS": str(PENDING_TIMEOUT),
}


def billed_rate(cluster: ClusterEmulator) -> float:
    """USD per hour of the GPU VMs Azure bills now: from the request (provisioning) until the
    VM is gone, at the bundled prices, as the simulator counts a node."""
    region = cluster.cloud.cluster.region
    rate = 0.0
    for vm in cluster.cloud.vms.values():
        if vm.state not in ("provisioning", "running"):
            continue
        price = BUNDLED.price(vm.pool.vm_size, region, spot=vm.pool.is_spot)
        if price is not None and vm.pool.gpus:
            rate += price
    return rate


class TraceDriver:
    """Spot capacity of the emulator's spot pool from the trace: a drop Preempts VMs with the
    notice; a rise gives the pool VMs back up to its size (the simulator keeps `failover`'s
    spot pools at their minimum, which is the replicas over the pools), Ready after the spot
    provisioning time. Each new spot node gets an agent, as the DaemonSet would."""

    def __init__(self, rig: Rig, trace: Trace, home: int) -> None:
        self.rig = rig
        self.trace = trace
        self.home = home
        self.doomed: set[str] = set()  # VM names with a Preempt

    def tick(self, index: int) -> None:
        cloud = self.rig.cluster.cloud
        count, previous = self.trace.data[index], self.trace.data[index - 1]
        if count < previous:
            for event in cloud.set_spot_capacity(SPOT_POOL, count, notice_seconds=NOTICE):
                self.doomed.update(event.resources)
        elif count > previous:
            cloud.set_spot_capacity(SPOT_POOL, count)
            serving = [vm for vm in cloud.pool_vms(SPOT_POOL) if vm.name not in self.doomed]
            for _ in range(min(count, self.home) - len(serving)):
                cloud.create_vm(SPOT_POOL, delay_seconds=SPOT_PROVISION)

    def start_new_agents(self) -> None:
        for node_name in self.rig.spot_nodes():
            if f"agent-{node_name}" not in self.rig.running_names():
                self.rig.start_agent(node_name)


async def emulated(tmp_path: Path, trace: Trace) -> RunResult:
    """Replay the trace on the emulator; Ready replicas and billing sampled every 50 ms, into
    the simulator's own RunResult so that both are measured by the same code."""
    tmp_path.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  (before anything runs)

    def prepare(cluster: ClusterEmulator) -> None:
        # The real cluster autoscaler scans every 10 s against a 600 s scale-down: in proportion.
        cluster.autoscaler.check_interval_seconds = SCALE_DOWN_SCAN
        cluster.autoscaler.new_pod_scale_up_delay_seconds = SCALE_UP_DELAY

    async with running(tmp_path, emulated_cluster(), prepare=prepare) as rig:
        rig.start_agents(SPOT_POOL)
        rig.start_controller(**CONTROLLER_ENV)
        await rig.until_ready(REPLICAS)
        driver = TraceDriver(rig, trace, home=REPLICAS)
        samples: list[Sample] = []
        started = rig.now()
        next_tick = 1
        while True:
            elapsed = rig.now() - started
            if elapsed >= trace.seconds:
                break
            while next_tick < len(trace.data) and elapsed >= next_tick * trace.gap_seconds:
                driver.tick(next_tick)
                next_tick += 1
            driver.start_new_agents()
            samples.append(sample(rig, at=elapsed))
            rig.check_running()
            await asyncio.sleep(SAMPLE_SECONDS)  # the sampling period, not a synchronisation
        samples.append(sample(rig, at=trace.seconds))
    return RunResult(
        policy="failover",
        label="emulator",
        horizon=trace.seconds,
        needed=REPLICAS,
        samples=tuple(samples),
        counters=Counters(),
        all_on_demand_cost=REPLICAS * PRICES.on_demand * trace.seconds / 3600.0,
        wall_seconds=trace.seconds,
    )


def sample(rig: Rig, *, at: float) -> Sample:
    cloud = rig.cluster.cloud
    return Sample(
        at=at,
        ready=rig.ready_count(),
        cost_rate=billed_rate(rig.cluster),
        on_demand_nodes=len(cloud.pool_vms(ON_DEMAND_POOL)),
        spot_nodes=len(cloud.pool_vms(SPOT_POOL)),
    )


def figures(result: RunResult) -> dict[str, float]:
    return {
        "availability": result.availability,
        "deficit_replica_seconds": result.deficit_replica_hours * 3600,
        "cost": result.cost,
    }


def differences(simulator: RunResult, emulator: RunResult) -> list[str]:
    """What is outside the tolerance (empty: faithful)."""
    sim, emu = figures(simulator), figures(emulator)
    out = []
    if abs(sim["availability"] - emu["availability"]) > AVAILABILITY_TOLERANCE:
        out.append("availability")
    if abs(sim["deficit_replica_seconds"] - emu["deficit_replica_seconds"]) > DEFICIT_TOLERANCE:
        out.append("deficit")
    if abs(sim["cost"] - emu["cost"]) > COST_TOLERANCE:
        out.append("cost")
    return out


def report(simulator: RunResult, emulator: RunResult) -> str:
    """The figures of both, and each one's changes of Ready replicas and nodes over time."""
    lines = []
    for name, result in (("simulator", simulator), ("emulator", emulator)):
        f = figures(result)
        lines.append(
            f"{name}: availability {f['availability']:.2%}, deficit "
            f"{f['deficit_replica_seconds']:.1f} replica-s, cost ${f['cost']:.5f}, "
            f"outages {[round(o, 1) for o in result.outages]}"
        )
    for name, result in (("simulator", simulator), ("emulator", emulator)):
        changes = []
        last: tuple[int, int, int] | None = None
        for s in result.samples:
            state = (s.ready, s.on_demand_nodes, s.spot_nodes)
            if state != last:
                changes.append(f"{s.at:.1f}s {s.ready}r/{s.on_demand_nodes}od/{s.spot_nodes}spot")
                last = state
        lines.append(f"{name} (Ready replicas/on-demand/spot nodes): " + ", ".join(changes))
    return "\n".join(lines)


def test_the_simulator_figures_follow_from_the_scenario() -> None:
    """The simulator's side, derived by hand from the trace and the timings."""
    result, trace = simulated()
    horizon = trace.seconds
    # Spot capacity: one VM lost at 10 s, back at 30 s; two lost at 55 s, back at 75 s.
    lost_1, back_1, lost_2, back_2 = 10.0, 30.0, 55.0, 75.0
    assert [trace.capacity_at(t) for t in (0, lost_1, back_1, lost_2, back_2)] == [3, 2, 3, 1, 3]
    # A notice: the surge's replacement waits for an on-demand node and its load; the doomed
    # replica serves until the drain at the deadline minus the margin.
    outage = ON_DEMAND_PROVISION + SCALE_UP_DELAY + LOAD - (NOTICE - MARGIN)  # 15 s
    assert result.outages == pytest.approx([outage, outage])
    assert result.availability == pytest.approx((horizon - 2 * outage) / horizon)
    assert result.deficit_replica_hours * 3600 == pytest.approx(1 * outage + 2 * outage)
    # Spot nodes: 3 all along, less each lost one from its deadline until the pool is given it
    # back (the autoscaler keeps the pool at 3, from the request: paid while provisioning).
    spot_seconds = 3 * horizon - 1 * (back_1 - lost_1 - NOTICE) - 2 * (back_2 - lost_2 - NOTICE)
    # On-demand nodes, each from the surge's request until the autoscaler removes it empty. A
    # return needs a Ready spot node, a pool quiet for QUIET and its cool-down over (4 s per
    # notice in the last hour: 4 s, then 12 s); all hold when the spot nodes are Ready. The
    # return's replica loads, the on-demand one is scaled away and gone after its shutdown, its
    # node after the scale-down delay; the next return starts when that replica is gone.
    assert lost_1 + QUIET <= back_1 + SPOT_PROVISION
    assert lost_2 + max(QUIET, 3 * COOLDOWN) <= back_2 + SPOT_PROVISION
    moved = LOAD + SHUTDOWN  # a return, from its start until the on-demand replica is gone
    first = (back_1 + SPOT_PROVISION + moved + SCALE_DOWN) - lost_1
    second = (back_2 + SPOT_PROVISION + moved + SCALE_DOWN) - lost_2
    third = second + moved
    on_demand_seconds = first + second + third
    expected = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    assert result.cost == pytest.approx(expected)


def most_on_demand_nodes(result: RunResult) -> int:
    return max(s.on_demand_nodes for s in result.samples)


async def test_simulator_and_emulator_agree_within_the_tolerance(tmp_path: Path) -> None:
    simulator, trace = simulated()
    emulator = await emulated(tmp_path, trace)
    print(report(simulator, emulator))
    assert differences(simulator, emulator) == [], report(simulator, emulator)
    # No node the simulator did not need: pods the ReplicaSet creates between the controller's
    # deletion of the doomed pods and its scale-back are gone before the autoscaler counts them.
    assert most_on_demand_nodes(emulator) == most_on_demand_nodes(simulator), report(
        simulator, emulator
    )
    # The emulator saw the same story: two outages, every replica back on spot at the end.
    assert len(emulator.outages) == 2, report(simulator, emulator)
    assert emulator.samples[-1].ready == REPLICAS
    assert emulator.samples[-1].on_demand_nodes == 0
    # The comparison can fail: the simulator told another model load or notice length than
    # the emulator runs misses by more than the tolerance.
    for setting, value in (("loadSeconds", 2 * LOAD), ("noticeSeconds", 2 * NOTICE)):
        wrong, _ = simulated(**{setting: value})
        assert "availability" in differences(wrong, emulator), (setting, report(wrong, emulator))
