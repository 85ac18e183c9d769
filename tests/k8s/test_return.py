"""Return to spot on a real control plane: the scenarios of tests/virtual/test_return.py that apply
here, compressed timings, spot capacity coming back as new kwok nodes with their agents."""

from __future__ import annotations

import asyncio
import time

import pytest

from rebalancer import names
from tests.e2e.rig import sampling
from tests.k8s.rig import KubeRig

pytestmark = pytest.mark.k8s

FAST = {
    "REBALANCER_RETURN_QUIET_SECONDS": "4",
    "REBALANCER_COOLDOWN_SECONDS": "2",
    "REBALANCER_RETURN_PENDING_TIMEOUT_SECONDS": "20",
}


def on_demand_replicas(rig: KubeRig) -> int:
    return sum(1 for p in rig.pods() if rig.pool_of(p["spec"].get("nodeName", "")) == "gpuondemand")


async def fail_over(rig: KubeRig, count: int) -> None:
    for doomed in sorted({p["spec"]["nodeName"] for p in rig.pods()})[:count]:
        rig.preempt(doomed, notice_seconds=15)
    await rig.wait_for(
        lambda: (
            on_demand_replicas(rig) == count
            and rig.ready_count() == 3
            and len(rig.spot_nodes()) == 3 - count
        ),
        timeout=45,
        what=f"the fail-over of {count} replicas",
    )


async def spot_capacity_back(rig: KubeRig, index: int) -> str:
    node_name = await rig.add_node("gpuspot", index)
    rig.start_agent(node_name)  # the DaemonSet would put one there
    return node_name


async def test_replicas_move_back_one_at_a_time_when_spot_capacity_returns(rig: KubeRig) -> None:
    await rig.deploy()
    rig.start_agents()
    rig.start_controller(**FAST)
    await rig.until_ready()
    async with sampling(rig):
        await fail_over(rig, 2)
        most = 0

        async def watch_replicas() -> None:
            nonlocal most
            while True:
                most = max(most, int(rig.deployment()["spec"]["replicas"]))
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch_replicas())
        try:
            for index in (3, 4):
                await spot_capacity_back(rig, index)
            await rig.wait_for(
                lambda: on_demand_replicas(rig) == 0 and rig.ready_count() == 3,
                timeout=60,
                what="the returns",
            )
        finally:
            watcher.cancel()
    assert most == 4, f"replicas reached {most}: more than one move at a time"
    assert rig.min_ready[("inference", "llm")] == 3, "a Ready replica was lost on the way"
    await rig.wait_for(
        lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=10, what="scaled back to 3"
    )
    assert len(rig.events("SpotRebalancerReturnStarted")) == 2
    await rig.wait_for_metric(
        "controller-0",
        'rebalancer_controller_returns_total{outcome="ReturnedToSpot"}',
        2,
        timeout=10,
    )


async def test_an_eviction_during_the_return_stops_it(rig: KubeRig) -> None:
    await rig.deploy(startup_seconds=6)  # the spot replica is still loading
    rig.start_agents()
    rig.start_controller(**FAST)
    await rig.until_ready()
    async with sampling(rig):
        await fail_over(rig, 1)
        node_name = await spot_capacity_back(rig, 3)
        await rig.wait_for(
            lambda: rig.events("SpotRebalancerReturnStarted"), timeout=20, what="the return"
        )
        rig.preempt(node_name, notice_seconds=20)  # the pool is evicted again
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_controller_returns_total{outcome="NoticeDuringReturn"}',
            1,
            timeout=15,
        )
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=10, what="scaled back"
        )
        await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready")
    assert on_demand_replicas(rig) >= 1  # the on-demand replica stayed
    assert rig.min_ready[("inference", "llm")] == 3


async def test_a_new_leader_keeps_the_quiet_time_and_the_count_of_a_preempt_it_did_not_see(
    rig: KubeRig,
) -> None:
    """As tests/virtual/test_return.py: the next leader takes over 30 s after the Preempt, reads it
    from the eviction history (a ConfigMap under the chart's Role) and returns the replica about
    `quiet` after the Preempt, not `quiet` after the takeover."""
    quiet = 45
    env = {
        **FAST,
        "REBALANCER_RETURN_QUIET_SECONDS": str(quiet),
        "REBALANCER_COOLDOWN_SECONDS": "5",
    }
    await rig.deploy()
    rig.start_agents()
    rig.start_controller("controller-a", **env)
    await rig.until_ready()
    async with sampling(rig):
        preempted = time.time()
        await fail_over(rig, 1)
        rig.stop("controller-a")
        await spot_capacity_back(rig, 3)
        await asyncio.sleep(max(0.0, preempted + 30 - time.time()))
        rig.start_controller("controller-b", **env)
        await rig.wait_for_metric("controller-b", "rebalancer_controller_leader", 1, timeout=30)
        evictions = 'rebalancer_evictions{pool="gpuspot",sku="Standard_NC24ads_A100_v4"'
        assert await rig.metric("controller-b", evictions) == 3  # one Preempt, in 1h, 6h, 24h
        await rig.wait_for(
            lambda: names.RETURN_ANNOTATION in rig.deployment()["metadata"].get("annotations", {}),
            timeout=60,
            what="a return to spot",
        )
        started = time.time() - preempted
        await rig.wait_for(
            lambda: on_demand_replicas(rig) == 0 and rig.ready_count() == 3,
            timeout=60,
            what="the replica back on spot",
        )
    assert quiet - 1 <= started < quiet + 15, f"return started {started:.0f} s after the Preempt"
    assert rig.min_ready[("inference", "llm")] == 3
