"""Return to spot: the product's agents and controller on the emulator, on virtual time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rebalancer import names
from tests.e2e.rig import Rig, sampling, scenario
from tests.virtual.rig import REACTION, running

pytestmark = pytest.mark.looptime


FAST = {
    "REBALANCER_RETURN_QUIET_SECONDS": "4",
    "REBALANCER_COOLDOWN_SECONDS": "2",
    "REBALANCER_RETURN_PENDING_TIMEOUT_SECONDS": "20",
}


def with_npd(data: dict[str, object] | None = None) -> dict[str, object]:
    """AKS's node-problem-detector on: new spot VMs have no agent of ours, NPD still reports."""
    data = data or scenario()
    data["settings"] = {**data["settings"], "nodeProblemDetectorSeconds": 1}  # type: ignore[dict-item]
    return data


def on_demand_replicas(rig: Rig) -> int:
    return sum(
        1
        for p in rig.pods()
        if p["metadata"]["name"].startswith("llm")
        and rig.pool_of(p["spec"].get("nodeName", "")) == "gpuondemand"
    )


async def fail_one_over(rig: Rig) -> str:
    doomed = rig.spot_nodes()[0]
    rig.cluster.preempt(doomed, notice_seconds=15)
    await rig.wait_for(lambda: rig.node(doomed) is None, timeout=30, what="the VM gone")
    await rig.wait_for(
        lambda: on_demand_replicas(rig) == 1 and rig.ready_count() == 3,
        timeout=15,
        what="the failover",
    )
    return doomed


async def test_replicas_move_back_one_at_a_time_when_spot_capacity_returns(tmp_path: Path) -> None:
    async with running(tmp_path, with_npd()) as rig:
        rig.start_agents()
        rig.start_controller(**FAST)
        await rig.until_ready()
        async with sampling(rig):
            for doomed in rig.spot_nodes()[:2]:  # two replicas fail over to on-demand
                rig.cluster.preempt(doomed, notice_seconds=15)
            await rig.wait_for(
                lambda: (
                    on_demand_replicas(rig) == 2
                    and rig.ready_count() == 3
                    and len(rig.spot_nodes()) == 1
                ),
                timeout=40,
                what="the failover of two replicas",
            )
            most = 0

            async def watch_replicas() -> None:
                nonlocal most
                while True:
                    most = max(most, int(rig.deployment()["spec"]["replicas"]))
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch_replicas())
            try:
                for _ in range(2):  # spot capacity is back
                    rig.cluster.cloud.create_vm("gpuspot", delay_seconds=1)
                await rig.wait_for(
                    lambda: on_demand_replicas(rig) == 0 and rig.ready_count() == 3,
                    timeout=40,
                    what="the returns",
                )
                await rig.more_passes("controller-0", 3)  # and they stay there
            finally:
                watcher.cancel()
            assert on_demand_replicas(rig) == 0
        assert most == 4, f"replicas reached {most}: more than one move at a time"
        assert rig.min_ready[("inference", "llm")] == 3, "a Ready replica was lost on the way"
        assert rig.deployment()["spec"]["replicas"] == 3
        assert len(rig.events("SpotRebalancerReturnStarted")) == 2
        assert (
            await rig.metric(
                "controller-0", 'rebalancer_controller_returns_total{outcome="ReturnedToSpot"}'
            )
            == 2
        )


async def test_an_eviction_during_the_return_stops_it(tmp_path: Path) -> None:
    data = scenario()
    data["workloads"][0]["startupSeconds"] = 6  # the spot replica is still loading
    async with running(tmp_path, with_npd(data)) as rig:
        rig.start_agents()
        rig.start_controller(**FAST)
        await rig.until_ready()
        async with sampling(rig):
            await fail_one_over(rig)
            vm = rig.cluster.cloud.create_vm("gpuspot", delay_seconds=1)
            await rig.wait_for(
                lambda: rig.events("SpotRebalancerReturnStarted"), timeout=20, what="the return"
            )
            rig.cluster.preempt(vm.node_name, notice_seconds=20)  # the pool is evicted again
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


async def test_a_spot_replica_that_never_gets_ready_is_given_up(tmp_path: Path) -> None:
    data = scenario()
    del data["workloads"][0]["startupSeconds"]  # the kubelets' default applies, set below
    async with running(tmp_path, with_npd(data)) as rig:
        rig.start_agents()
        rig.start_controller(**{**FAST, "REBALANCER_RETURN_PENDING_TIMEOUT_SECONDS": "3"})
        await rig.until_ready()
        await fail_one_over(rig)
        # From now on a new replica takes a minute to load: longer than the return waits.
        rig.cluster.kubelets.startup_seconds = 60.0
        rig.cluster.cloud.create_vm("gpuspot", delay_seconds=1)
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_controller_returns_total{outcome="SpotReplicaNotReady"}',
            1,
            timeout=30,
        )
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=10, what="scaled back"
        )
        assert on_demand_replicas(rig) == 1


async def test_no_flapping_while_spot_capacity_comes_and_goes(tmp_path: Path) -> None:
    """An hour compressed about 60x: the pool loses and regains a VM every few seconds (minutes)."""
    data = scenario()
    data["pools"][1]["count"] = 4
    async with running(tmp_path, with_npd(data)) as rig:
        rig.start_agents()
        rig.start_controller(**{**FAST, "REBALANCER_RETURN_QUIET_SECONDS": "10"})
        await rig.until_ready()
        moves_back = 0
        async with sampling(rig):
            started = rig.now()
            while rig.now() - started < 40:
                spot = rig.spot_nodes()
                busy = {p["spec"].get("nodeName") for p in rig.pods()}
                victim = next((n for n in spot if n in busy), spot[0])
                rig.cluster.preempt(victim, notice_seconds=5)
                await asyncio.sleep(3)
                rig.cluster.cloud.create_vm("gpuspot", delay_seconds=1)
                await asyncio.sleep(4)
            moves_back = len(rig.events("SpotRebalancerReturnStarted"))
            assert moves_back == 0, "a replica moved back while the pool was still being evicted"
            # Quiet at last: what failed over comes back, once, and stays.
            await rig.wait_for(lambda: on_demand_replicas(rig) == 0, timeout=60, what="the returns")
            settled = len(rig.events("SpotRebalancerReturnStarted"))
            await asyncio.sleep(12)
        assert len(rig.events("SpotRebalancerReturnStarted")) == settled
        # Each Preempt (5 s notice, no more than the controller's 5 s drain margin) costs its
        # replica at once, for its 3 s load plus reaction, less than the 7 s between two: one
        # replica missing at a time, never two.
        load = float(data["workloads"][0]["startupSeconds"])
        assert load + REACTION < 3 + 4
        assert rig.min_ready[("inference", "llm")] == 2
        assert rig.deployment()["spec"]["replicas"] == 3


async def test_a_new_leader_keeps_the_quiet_time_and_the_count_of_a_preempt_it_did_not_see(
    tmp_path: Path,
) -> None:
    """The leader that saw the Preempt is gone; the next one takes over 30 s later. The quiet
    time before a return counts from the Preempt (in the eviction history on the cluster), so
    the return starts about `quiet` after it, not `quiet` after the takeover."""
    quiet = 45
    env = {
        **FAST,
        "REBALANCER_RETURN_QUIET_SECONDS": str(quiet),
        "REBALANCER_COOLDOWN_SECONDS": "5",
    }
    async with running(tmp_path, with_npd()) as rig:
        rig.start_agents()
        rig.start_controller("controller-a", **env)
        await rig.until_ready()
        async with sampling(rig):
            preempted = rig.wall()
            await fail_one_over(rig)
            rig.stop("controller-a")
            rig.cluster.cloud.create_vm("gpuspot", delay_seconds=1)  # spot capacity is back
            await asyncio.sleep(max(0.0, preempted + 30 - rig.wall()))
            rig.start_controller("controller-b", **env)
            await rig.wait_for_metric("controller-b", "rebalancer_controller_leader", 1, timeout=20)
            # It never saw the Preempt, yet counts it: the history on the cluster told it.
            evictions = (
                'rebalancer_evictions{pool="gpuspot",sku="Standard_NC24ads_A100_v4",'
                'window="1h",zone="eastus-1"}'
            )
            assert await rig.metric("controller-b", evictions) == 1
            await rig.wait_for(
                lambda: (
                    names.RETURN_ANNOTATION in rig.deployment()["metadata"].get("annotations", {})
                ),
                timeout=60,
                what="a return to spot",
            )
            started = rig.wall() - preempted
            await rig.wait_for(
                lambda: on_demand_replicas(rig) == 0 and rig.ready_count() == 3,
                timeout=30,
                what="the replica back on spot",
            )
        # Counted from the Preempt, the return may start at `quiet` (plus a pass or two); counted
        # from the takeover it could not start before 30 + `quiet`.
        assert quiet - 1 <= started < quiet + 15, (
            f"return started {started:.0f} s after the Preempt"
        )
        assert rig.min_ready[("inference", "llm")] == 3
