"""The shipped scenarios load, and the small ones play out as described, in virtual time."""

from __future__ import annotations

import pytest

from rebalancer.clock import ManualClock
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.objects import condition_true
from rebalancer_sim.scenario import ScenarioError, load_scenario, shipped_scenarios


def test_shipped_scenarios_parse() -> None:
    assert {"aks-gpu-small", "wave", "big-fleet"} <= set(shipped_scenarios())
    big = load_scenario("big-fleet")
    assert sum(pool.count for pool in big.pools) == 5000
    assert sum(w.replicas for w in big.workloads) == 50_000


def test_unknown_scenario_names_the_shipped_ones() -> None:
    with pytest.raises(ScenarioError, match="shipped: aks-gpu-small"):
        load_scenario("no-such-scenario")


def _ready(cluster: ClusterEmulator, namespace: str) -> list[str]:
    return [
        str(p["spec"]["nodeName"])
        for p in cluster.pods(namespace)
        if condition_true(p, "Ready") and not p["metadata"].get("deletionTimestamp")
    ]


async def test_aks_gpu_small_plays_out() -> None:
    clock = ManualClock()
    cluster = ClusterEmulator("aks-gpu-small", clock=clock)
    spot = sorted(n["metadata"]["name"] for n in cluster.nodes("gpuspot"))
    await cluster.advance(10.5)
    assert len(_ready(cluster, "inference")) == 3
    (event,) = cluster.imds.events.values()
    assert event.event_type == "Preempt" and event.resources == [cluster.vm_name_for(spot[0])]
    assert cluster.imds.document(cluster.vm_name_for(spot[0]))["Events"][0]["EventType"] == (
        "Preempt"
    )
    # AKS node auto-drain evicts the doomed replica at 10 + 2 s (its delay); no spot room, so
    # the on-demand pool grows (20 s) and the replacement loads for 90 s: Ready at 122 s.
    await cluster.advance(2.5)
    assert len(_ready(cluster, "inference")) == 2
    await cluster.advance(35)  # NotBefore at t=40, node deleted 5 s later
    assert cluster.store.get(R.NODES, "", spot[0]) is None
    await cluster.advance(122 - 47.5 - 1, step_seconds=0.5)
    assert len(_ready(cluster, "inference")) == 2
    await cluster.advance(2, step_seconds=0.5)
    assert len(_ready(cluster, "inference")) == 3
    pools = sorted(
        cluster.store.must_get(R.NODES, "", node)["metadata"]["labels"]["agentpool"]
        for node in _ready(cluster, "inference")
    )
    assert pools == ["gpuondemand", "gpuspot", "gpuspot"]


async def test_wave_preempts_every_spot_node_within_ten_seconds() -> None:
    clock = ManualClock()
    cluster = ClusterEmulator("wave", clock=clock)
    await cluster.advance(6, step_seconds=0.5)
    assert len(_ready(cluster, "web")) == 48
    await cluster.advance(10, step_seconds=0.5)
    not_befores = sorted(e.not_before for e in cluster.imds.events.values())
    assert len(not_befores) == 24
    assert (not_befores[-1] - not_befores[0]).total_seconds() <= 10
    await cluster.advance(35, step_seconds=0.5)
    assert cluster.nodes("spot") == []
    await cluster.wait_for(lambda: len(_ready(cluster, "web")) == 48, timeout=120, virtual_step=1.0)
    pools = {
        cluster.store.must_get(R.NODES, "", n)["metadata"]["labels"]["agentpool"]
        for n in _ready(cluster, "web")
    }
    assert "ondemand" in pools and "spot" not in pools
    assert cluster.autoscaler.scale_ups > 0


async def test_free_room_replacement_lands_on_spot_in_the_other_zone() -> None:
    cluster = ClusterEmulator("free-room", clock=ManualClock())
    await cluster.advance(10 + 2.5, step_seconds=0.5)  # Preempt at 10 s, auto-drain 2 s later
    pending = [p for p in cluster.pods("inference") if not p["metadata"].get("deletionTimestamp")]
    pools = sorted(
        cluster.store.must_get(R.NODES, "", p["spec"]["nodeName"])["metadata"]["labels"][
            "agentpool"
        ]
        for p in pending
    )
    # The workload prefers spot; the zone-2 spot node is free, so the warm on-demand node stays
    # empty.
    assert pools == ["gpuspot", "gpuspot", "gpuspot2"]


async def test_grace_vs_notice_without_a_handler_leaves_the_pod_running_at_not_before() -> None:
    cluster = ClusterEmulator("grace-vs-notice", clock=ManualClock())
    doomed = sorted(n["metadata"]["name"] for n in cluster.nodes("gpuspot"))[0]
    await cluster.advance(10 + 2.5, step_seconds=0.5)
    (evicted,) = [p for p in cluster.pods("inference", node=doomed)]
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 60  # its own grace
    # NotBefore is at 25 s; the pod needs 50 s from 12 s: it still runs when the VM goes.
    await cluster.advance(25 - 12.5 - 0.5, step_seconds=0.5)
    assert cluster.pods("inference", node=doomed)
