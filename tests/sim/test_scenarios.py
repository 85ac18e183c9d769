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
    await cluster.advance(35)  # NotBefore at t=40, node deleted 5 s later
    assert cluster.store.get(R.NODES, "", spot[0]) is None
    await cluster.wait_for(lambda: len(_ready(cluster, "inference")) == 3, timeout=60)
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
