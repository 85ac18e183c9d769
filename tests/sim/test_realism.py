"""The realistic parts of the emulated world: AKS node auto-drain, the HPA controller, owners that
reset replicas, Reboot/Redeploy, model loads drawn from a range, grace periods. Virtual time;
each expected value is derived from the scenario's numbers, as the comments say."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rebalancer.clock import ManualClock
from rebalancer_sim import resources as R
from rebalancer_sim.autodrain import AUTO_DRAIN_TAINT
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.objects import condition_true
from rebalancer_sim.scenario import Scenario

from .conftest import small_scenario

LOAD = 90.0  # model load of the inference replicas, seconds
NOTICE = 30.0


def _realistic(**hpa: object) -> Scenario:
    scenario = small_scenario(startup_seconds=LOAD)
    scenario.settings.node_auto_drain = True
    if hpa:
        scenario.workloads[0].hpa = dict(hpa)
    return scenario


def _live(cluster: ClusterEmulator) -> list[dict[str, Any]]:
    return [p for p in cluster.pods("default") if not p["metadata"].get("deletionTimestamp")]


def _ready(cluster: ClusterEmulator) -> int:
    return sum(1 for p in _live(cluster) if condition_true(p, "Ready"))


def _spot_nodes(cluster: ClusterEmulator) -> list[str]:
    return sorted(n["metadata"]["name"] for n in cluster.nodes("gpuspot"))


async def _loaded(cluster: ClusterEmulator) -> None:
    await cluster.advance(LOAD + 1, step_seconds=1.0)
    assert _ready(cluster) == 3


# ---- AKS node auto-drain --------------------------------------------------------------------


async def test_auto_drain_cordons_and_evicts_at_notice_time_within_the_pdb(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    cluster = make_cluster(_realistic())
    await _loaded(cluster)
    first, second, _ = _spot_nodes(cluster)
    cluster.preempt(first, notice_seconds=NOTICE)
    cluster.preempt(second, notice_seconds=NOTICE)
    delay = cluster.scenario.settings.node_auto_drain_delay_seconds
    await cluster.advance(delay + 0.5, step_seconds=0.5)
    for node_name in (first, second):
        node = cluster.store.must_get(R.NODES, "", node_name)
        assert node["spec"]["unschedulable"] is True
        assert AUTO_DRAIN_TAINT in {t["key"] for t in node["spec"]["taints"]}
    # maxUnavailable 1 of 3: one eviction is allowed; the other waits for a replacement to be
    # Ready, which takes the 90 s load, longer than the 30 s notice: it never comes in time.
    assert cluster.auto_drain.evictions == 1
    await cluster.advance(NOTICE, step_seconds=0.5)
    assert cluster.auto_drain.evictions == 1
    retries = cluster.scenario.settings.node_auto_drain_retry_seconds
    # Refused at notice time and every retry until the VM went (at NOTICE).
    assert cluster.auto_drain.blocked >= int((NOTICE - delay) // retries)


async def test_auto_drain_off_does_nothing(make_cluster: Callable[..., ClusterEmulator]) -> None:
    scenario = _realistic()
    scenario.settings.node_auto_drain = False
    cluster = make_cluster(scenario)
    await _loaded(cluster)
    doomed = _spot_nodes(cluster)[0]
    cluster.preempt(doomed, notice_seconds=NOTICE)
    await cluster.advance(NOTICE - 1, step_seconds=0.5)
    assert not cluster.store.must_get(R.NODES, "", doomed)["spec"].get("unschedulable")
    assert cluster.auto_drain.evictions == 0 and _ready(cluster) == 3


async def test_auto_drain_ignores_freeze_and_reboot(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    cluster = make_cluster(_realistic())
    await _loaded(cluster)
    first, second, _ = _spot_nodes(cluster)
    cluster.schedule_event("Freeze", [first], notice_seconds=15)
    cluster.schedule_event("Reboot", [second], notice_seconds=60)
    await cluster.advance(10, step_seconds=0.5)
    assert cluster.auto_drain.evictions == 0
    for node_name in (first, second):
        assert not cluster.store.must_get(R.NODES, "", node_name)["spec"].get("unschedulable")


async def test_auto_drain_uncordons_after_a_redeploy(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    scenario = _realistic()
    scenario.settings.reboot_seconds = 20
    cluster = make_cluster(scenario)
    await _loaded(cluster)
    node_name = _spot_nodes(cluster)[0]
    event = cluster.schedule_event("Redeploy", [node_name], notice_seconds=10)
    await cluster.advance(5, step_seconds=0.5)
    assert cluster.store.must_get(R.NODES, "", node_name)["spec"]["unschedulable"] is True
    await cluster.advance(6, step_seconds=0.5)  # started: the VM is down
    assert not condition_true(cluster.store.must_get(R.NODES, "", node_name), "Ready")
    assert event.state(cluster.clock.now()) == "started"
    await cluster.advance(20, step_seconds=0.5)  # back after rebootSeconds; the event is over
    node = cluster.store.must_get(R.NODES, "", node_name)
    assert condition_true(node, "Ready")
    assert event.state(cluster.clock.now()) == "finished"
    assert not node["spec"].get("unschedulable")
    assert AUTO_DRAIN_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}


# ---- Reboot ---------------------------------------------------------------------------------


async def test_a_reboot_takes_the_node_down_and_its_pods_load_again(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    scenario = _realistic()
    scenario.settings.reboot_seconds = 30
    cluster = make_cluster(scenario)
    await _loaded(cluster)
    node_name = _spot_nodes(cluster)[0]
    cluster.schedule_event("Reboot", [node_name], notice_seconds=5)
    await cluster.advance(6, step_seconds=0.5)
    assert not condition_true(cluster.store.must_get(R.NODES, "", node_name), "Ready")
    assert _ready(cluster) == 2
    await cluster.advance(30, step_seconds=0.5)
    assert condition_true(cluster.store.must_get(R.NODES, "", node_name), "Ready")
    assert _ready(cluster) == 2  # back, but its replica loads its model again
    await cluster.advance(LOAD, step_seconds=1.0)
    assert _ready(cluster) == 3
    assert cluster.store.must_get(R.NODES, "", node_name) is not None


# ---- model loads and grace periods ----------------------------------------------------------


async def test_startup_seconds_drawn_from_a_range_with_the_seed() -> None:
    times: dict[int, list[float]] = {}
    for seed in (1, 1, 2):
        scenario = small_scenario()
        scenario.workloads[0].startup_seconds = (60.0, 120.0)
        scenario.settings.seed = seed
        cluster = ClusterEmulator(scenario, clock=ManualClock())
        became_ready: dict[str, float] = {}
        for second in range(125):
            for pod in _live(cluster):
                if condition_true(pod, "Ready"):
                    became_ready.setdefault(str(pod["metadata"]["name"]), float(second))
            await cluster.advance(1.0, step_seconds=1.0)
        drawn = sorted(became_ready.values())
        assert len(drawn) == 3 and all(60 <= t <= 121 for t in drawn), drawn
        if seed in times:
            assert drawn == times[seed]  # the same seed draws the same loads
        times[seed] = drawn
    assert times[1] != times[2]


async def test_a_slow_shutdown_is_cut_by_the_grace_period_and_by_a_second_delete(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    scenario = small_scenario()
    scenario.workloads[0].shutdown_seconds = 45  # what the server needs to finish its requests
    scenario.workloads[0].termination_grace_period_seconds = 60
    cluster = make_cluster(scenario)
    await cluster.advance(3, step_seconds=1.0)
    first, second = (p["metadata"]["name"] for p in _live(cluster)[:2])
    cluster.store.delete(R.PODS, "default", first)
    cluster.store.delete(R.PODS, "default", second)
    await cluster.advance(10, step_seconds=1.0)
    cluster.store.delete(R.PODS, "default", second, grace_seconds=5)  # less time is left
    await cluster.advance(5.5, step_seconds=0.5)
    assert cluster.store.get(R.PODS, "default", second) is None  # 10 s + 5 s, not 45 s
    assert cluster.store.get(R.PODS, "default", first) is not None
    await cluster.advance(45 - 15.5 + 0.5, step_seconds=0.5)
    assert cluster.store.get(R.PODS, "default", first) is None  # its own 45 s, within 60


# ---- the HPA controller ---------------------------------------------------------------------

# 3 Ready replicas at 50 % of their CPU request against a 60 % target: ratio 0.83, outside the
# 0.1 tolerance, recommendation ceil(0.83 * 3) = 3, so 3 is steady.
STEADY = {"minReplicas": 2, "maxReplicas": 6, "targetCPUUtilization": 60, "load": 150}


def _replicas(cluster: ClusterEmulator) -> int:
    return int(cluster.store.must_get(R.DEPLOYMENTS, "default", "inference")["spec"]["replicas"])


async def test_the_hpa_is_served_and_steady_at_its_recommendation(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    cluster = make_cluster(_realistic(**STEADY))
    await _loaded(cluster)
    hpa = cluster.store.must_get(R.HPAS, "default", "inference")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] == 50
    assert _replicas(cluster) == 3 and cluster.hpas.rescales == []


async def _surge_is_undone(cluster: ClusterEmulator) -> None:
    """A make-before-break surge 3 -> 4 whose replacement loads for 90 s: the HPA's
    recommendation stays 3 (the loading pod has no sample; the Ready ones are unchanged), so
    within one sync period it scales back to 3 and the ReplicaSet removes the pod not Ready."""
    await _loaded(cluster)
    cluster.scale("inference", 4)
    cluster.step()
    (loading,) = [p["metadata"]["name"] for p in _live(cluster) if not condition_true(p, "Ready")]
    sync = cluster.scenario.settings.hpa_sync_seconds
    await cluster.advance(sync + 1, step_seconds=0.5)
    assert _replicas(cluster) == 3
    (rescale,) = cluster.hpas.rescales
    assert (rescale.old, rescale.new) == (4, 3)
    assert cluster.store.get(R.PODS, "default", str(loading)) is None or (
        cluster.store.must_get(R.PODS, "default", str(loading))["metadata"].get("deletionTimestamp")
    )


async def test_an_hpa_undoes_a_surge_with_no_stabilization_window(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    await _surge_is_undone(make_cluster(_realistic(**STEADY, scaleDownStabilizationSeconds=0)))


async def test_an_hpa_undoes_a_surge_with_the_default_window_too(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    # Every recommendation in the last 300 s was 3: the window caps nothing above 3.
    await _surge_is_undone(make_cluster(_realistic(**STEADY)))


async def test_raising_min_replicas_holds_the_surge(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    cluster = make_cluster(_realistic(**STEADY, scaleDownStabilizationSeconds=0))
    await _loaded(cluster)
    hpa = json.loads(json.dumps(cluster.store.must_get(R.HPAS, "default", "inference")))
    hpa["spec"]["minReplicas"] = 4
    cluster.store.update(R.HPAS, hpa)
    cluster.scale("inference", 4)
    await cluster.advance(3 * cluster.scenario.settings.hpa_sync_seconds, step_seconds=0.5)
    assert _replicas(cluster) == 4 and cluster.hpas.rescales == []


async def test_the_stabilization_window_holds_a_scale_down(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    window = 120
    cluster = make_cluster(_realistic(**STEADY, scaleDownStabilizationSeconds=window))
    await _loaded(cluster)
    # 300 % over 3 Ready pods: 100 % each, ratio 1.67, recommendation ceil(1.67 * 3) = 5; the
    # scale-up limit (max(4 pods, 100 %) per 15 s) allows it at once.
    cluster.set_load("inference", 300)
    sync = cluster.scenario.settings.hpa_sync_seconds
    await cluster.advance(sync + 1, step_seconds=0.5)
    assert _replicas(cluster) == 5
    await cluster.advance(LOAD + 1, step_seconds=1.0)  # the new replicas load
    # Back to 150 % over 5 Ready: 30 % each, ratio 0.5, recommendation ceil(0.5 * 5) = 3; the
    # window keeps the highest recommendation (5) of the last 120 s.
    cluster.set_load("inference", 150)
    lowered_at = cluster.clock.now().timestamp()
    # The last recommendation of 5 came at the last sync before now, at most one period ago.
    await cluster.advance(window - sync - 1, step_seconds=1.0)
    assert _replicas(cluster) == 5
    await cluster.advance(2 * sync + 2, step_seconds=1.0)
    assert _replicas(cluster) == 3
    down = cluster.hpas.rescales[-1]
    assert (down.old, down.new) == (5, 3)
    assert window - sync <= down.at - lowered_at <= window + sync


# ---- owners ----------------------------------------------------------------------------------


async def test_an_owner_puts_its_replicas_back_every_period(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    scenario = small_scenario()
    scenario.workloads[0].owner_reset_seconds = 10
    cluster = make_cluster(scenario)
    await cluster.advance(10.5, step_seconds=0.5)
    store_deployment = json.loads(
        json.dumps(cluster.store.must_get(R.DEPLOYMENTS, "default", "inference"))
    )
    store_deployment["spec"]["replicas"] = 4  # someone else (our controller) surges
    cluster.store.update(R.DEPLOYMENTS, store_deployment)
    await cluster.advance(9, step_seconds=0.5)
    assert _replicas(cluster) == 4  # the owner's next pass is at 20 s
    await cluster.advance(1, step_seconds=0.5)
    assert _replicas(cluster) == 3
    assert [(found, put) for _, _, _, found, put in cluster.owners.resets] == [(4, 3)]
    cluster.scale("inference", 5)  # the user changes the owner's own resource
    await cluster.advance(20, step_seconds=0.5)
    assert _replicas(cluster) == 5


async def test_auto_drain_keeps_trying_a_pod_under_two_pdbs(
    make_cluster: Callable[..., ClusterEmulator],
) -> None:
    """A second PDB over the same pods (a hold of the rebalancer's, beside the user's): the
    Eviction API answers 500 for such a pod, as upstream does; AKS's drain retries, and the
    emulator's loops go on."""
    cluster = make_cluster(_realistic())
    await _loaded(cluster)
    hold = json.loads(json.dumps(cluster.store.must_get(R.PDBS, "default", "inference")))
    hold["metadata"] = {"name": "hold", "namespace": "default"}
    hold["spec"] = {"selector": hold["spec"]["selector"], "maxUnavailable": 1}
    hold.pop("status", None)
    cluster.store.create(R.PDBS, hold)
    doomed = _spot_nodes(cluster)[0]
    cluster.preempt(doomed, notice_seconds=NOTICE)
    retries = cluster.scenario.settings.node_auto_drain_retry_seconds
    await cluster.advance(2 + 2 * retries + 0.5, step_seconds=0.5)
    assert cluster.auto_drain.evictions == 0
    assert cluster.auto_drain.blocked == 3  # at 2 s, then every retry
    assert _ready(cluster) == 3
