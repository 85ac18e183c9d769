"""Scheduler, workload controllers, kubelet, disruption controller, cloud and autoscaler, in
virtual time (ManualClock, no HTTP)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from rebalancer.clock import ManualClock
from rebalancer.names import DELETION_COST
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.disruption import evict
from rebalancer_sim.objects import condition_true, get_condition
from rebalancer_sim.pools import PoolSpec, node_name
from rebalancer_sim.scenario import ScenarioError, parse_scenario
from rebalancer_sim.status import ApiError

from .conftest import GPU_TOLERATION, SPOT_TOLERATION, small_scenario

Make = Callable[..., ClusterEmulator]


def _pods(cluster: ClusterEmulator, app: str) -> list[dict[str, Any]]:
    return [p for p in cluster.pods() if p["metadata"].get("labels", {}).get("app") == app]


def _ready(cluster: ClusterEmulator, app: str) -> list[dict[str, Any]]:
    return [
        p
        for p in _pods(cluster, app)
        if condition_true(p, "Ready") and not p["metadata"].get("deletionTimestamp")
    ]


def _pool_of(cluster: ClusterEmulator, node_name: str) -> str:
    node = cluster.store.get(R.NODES, "", node_name)
    assert node is not None
    return str(node["metadata"]["labels"]["kubernetes.azure.com/agentpool"])


async def test_gpu_replicas_land_on_spot_and_become_ready_after_startup(make_cluster: Make) -> None:
    cluster = make_cluster()
    pods = _pods(cluster, "inference")
    assert len(pods) == 3
    assert {_pool_of(cluster, p["spec"]["nodeName"]) for p in pods} == {"gpuspot"}
    assert len({p["spec"]["nodeName"] for p in pods}) == 3  # one GPU each
    assert not _ready(cluster, "inference")  # startupSeconds: 2
    await cluster.advance(2.1)
    assert len(_ready(cluster, "inference")) == 3
    deployment = cluster.store.get(R.DEPLOYMENTS, "default", "inference")
    assert deployment is not None
    status = deployment["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (3, 3, 3)
    assert status["updatedReplicas"] == 3
    assert status["observedGeneration"] == deployment["metadata"]["generation"]


async def test_pod_without_gpu_toleration_never_lands_on_a_gpu_node(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[
            {
                "name": "web",
                "replicas": 6,
                "requests": {"cpu": "500m"},
                "tolerations": [SPOT_TOLERATION],  # tolerates spot, not sku=gpu
            }
        ]
    )
    cluster = make_cluster(scenario)
    await cluster.advance(1)
    pods = _pods(cluster, "web")
    assert len(pods) == 6
    assert {_pool_of(cluster, p["spec"]["nodeName"]) for p in pods} == {"system"}
    for node in cluster.nodes("gpuspot") + cluster.nodes("gpu"):
        assert not cluster.pods(node=node["metadata"]["name"])


async def test_unschedulable_pod_gets_upstream_like_condition(make_cluster: Make) -> None:
    scenario = small_scenario(workloads=[{"name": "big", "replicas": 1, "requests": {"cpu": "64"}}])
    cluster = make_cluster(scenario)
    (pod,) = _pods(cluster, "big")
    assert "nodeName" not in pod["spec"]
    condition = get_condition(pod, "PodScheduled")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"].startswith(
        "0/4 nodes are available: 1 Insufficient cpu, "
        "3 node(s) had untolerated taint {kubernetes.azure.com/scalesetpriority: spot}."
    )


async def test_cordoned_node_gets_no_new_pod(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[{"name": "web", "replicas": 1, "requests": {"cpu": "100m"}}],
        pools=[
            {"name": "a", "count": 1, "cpu": 4},
            {"name": "b", "count": 1, "cpu": 4},
        ],
    )
    cluster = make_cluster(scenario)
    (pod,) = _pods(cluster, "web")
    first = pod["spec"]["nodeName"]
    node = json.loads(json.dumps(cluster.store.get(R.NODES, "", first)))
    node["spec"]["unschedulable"] = True
    cluster.store.update(R.NODES, node)
    cluster.scale("web", 5)
    cluster.step()
    nodes = {p["spec"].get("nodeName") for p in _pods(cluster, "web")}
    new_nodes = {p["spec"]["nodeName"] for p in _pods(cluster, "web")} - {first}
    assert len(new_nodes) == 1 and first not in new_nodes
    assert sum(1 for p in _pods(cluster, "web") if p["spec"]["nodeName"] == first) == 1
    assert len(nodes) == 2
    cordoned = cluster.store.get(R.NODES, "", first)
    assert cordoned is not None
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in cordoned["spec"][
        "taints"
    ]


async def test_daemonset_pods_tolerate_cordon_and_spot(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[
            {
                "name": "agent",
                "kind": "DaemonSet",
                "tolerations": [SPOT_TOLERATION, GPU_TOLERATION],
                "nodeSelector": {"kubernetes.azure.com/scalesetpriority": "spot"},
            }
        ]
    )
    cluster = make_cluster(scenario)
    spot_nodes = {n["metadata"]["name"] for n in cluster.nodes("gpuspot")}
    node = json.loads(json.dumps(cluster.store.get(R.NODES, "", sorted(spot_nodes)[0])))
    node["spec"]["unschedulable"] = True
    cluster.store.update(R.NODES, node)
    cluster.step()
    pods = _pods(cluster, "agent")
    assert {p["spec"]["nodeName"] for p in pods} == spot_nodes
    tolerations = pods[0]["spec"]["tolerations"]
    assert {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in tolerations
    ds = cluster.store.get(R.DAEMONSETS, "default", "agent")
    assert ds is not None and ds["status"]["desiredNumberScheduled"] == 3


async def test_scale_down_removes_the_pod_with_the_lowest_deletion_cost(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[{"name": "web", "replicas": 4, "requests": {"cpu": "100m"}}],
        pools=[{"name": "a", "count": 2, "cpu": 8}],
    )
    cluster = make_cluster(scenario)
    await cluster.advance(1)
    pods = sorted(_pods(cluster, "web"), key=lambda p: p["metadata"]["name"])
    costs = {
        pods[0]["metadata"]["name"]: "100",
        pods[1]["metadata"]["name"]: "-5",
        pods[2]["metadata"]["name"]: "7",
        pods[3]["metadata"]["name"]: "50",
    }
    for pod in pods:
        updated = json.loads(json.dumps(pod))
        updated["metadata"].setdefault("annotations", {})[DELETION_COST] = costs[
            pod["metadata"]["name"]
        ]
        cluster.store.update(R.PODS, updated)
    cluster.scale("web", 2)
    cluster.step()
    terminating = {
        p["metadata"]["name"]
        for p in _pods(cluster, "web")
        if p["metadata"].get("deletionTimestamp")
    }
    assert terminating == {pods[1]["metadata"]["name"], pods[2]["metadata"]["name"]}
    await cluster.advance(2)  # shutdownSeconds 1
    assert {p["metadata"]["name"] for p in _pods(cluster, "web")} == {
        pods[0]["metadata"]["name"],
        pods[3]["metadata"]["name"],
    }


async def test_scale_down_prefers_pending_and_unready_pods(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[
            {"name": "web", "replicas": 2, "requests": {"cpu": "100m"}, "startupSeconds": 5}
        ],
        pools=[{"name": "a", "count": 1, "cpu": 8}],
    )
    cluster = make_cluster(scenario)
    await cluster.advance(6)
    ready_before = {p["metadata"]["name"] for p in _ready(cluster, "web")}
    assert len(ready_before) == 2
    cluster.scale("web", 3)
    cluster.step()  # the new pod is Running, not Ready
    cluster.scale("web", 2)
    cluster.step()
    live = {
        p["metadata"]["name"]
        for p in _pods(cluster, "web")
        if not p["metadata"].get("deletionTimestamp")
    }
    assert live == ready_before


async def test_preempt_removes_node_and_pods_then_deployment_recreates_elsewhere(
    make_cluster: Make, manual_clock: ManualClock
) -> None:
    cluster = make_cluster()
    await cluster.advance(3)
    victim = cluster.nodes("gpuspot")[0]["metadata"]["name"]
    victim_pods = {p["metadata"]["name"] for p in cluster.pods(node=victim)}
    assert len(victim_pods) == 1
    event = cluster.preempt(victim, notice_seconds=30)
    assert event.resources == [cluster.vm_name_for(victim)]
    await cluster.advance(29)
    node = cluster.store.get(R.NODES, "", victim)
    assert node is not None and condition_true(node, "Ready")  # still running before NotBefore
    await cluster.advance(1.1)
    node = cluster.store.get(R.NODES, "", victim)
    assert node is not None
    ready = get_condition(node, "Ready")
    assert ready is not None and ready["status"] == "Unknown"
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    await cluster.advance(5)
    assert cluster.store.get(R.NODES, "", victim) is None
    names = {p["metadata"]["name"] for p in cluster.pods()}
    assert not victim_pods & names
    # The replacement cannot go to spot (no free GPU there): the on-demand pool grows.
    await cluster.wait_for(lambda: len(_ready(cluster, "inference")) == 3, timeout=30)
    pools = sorted(_pool_of(cluster, p["spec"]["nodeName"]) for p in _ready(cluster, "inference"))
    assert pools == ["gpu", "gpuspot", "gpuspot"]
    assert cluster.autoscaler.scale_ups == 1


async def test_deallocate_policy_keeps_node_notready_with_shutdown_taint(
    make_cluster: Make,
) -> None:
    scenario = small_scenario()
    scenario.pools[1].eviction_policy = "Deallocate"
    cluster = make_cluster(scenario)
    victim = cluster.nodes("gpuspot")[0]["metadata"]["name"]
    cluster.preempt(victim, notice_seconds=5)
    await cluster.advance(20)
    node = cluster.store.get(R.NODES, "", victim)
    assert node is not None
    assert {"key": "node.cloudprovider.kubernetes.io/shutdown", "effect": "NoSchedule"} in node[
        "spec"
    ]["taints"]
    assert not condition_true(node, "Ready")


async def test_acknowledged_preempt_takes_vm_away_before_not_before(make_cluster: Make) -> None:
    cluster = make_cluster()
    victim = cluster.nodes("gpuspot")[1]["metadata"]["name"]
    event = cluster.preempt(victim, notice_seconds=30)
    await cluster.advance(1)
    assert cluster.imds.acknowledge(cluster.vm_name_for(victim), [event.event_id]) == []
    await cluster.advance(0.2)
    node = cluster.store.get(R.NODES, "", victim)
    assert node is not None and not condition_true(node, "Ready")


async def test_spot_capacity_taken_away_and_returned(make_cluster: Make) -> None:
    scenario = small_scenario()
    scenario.pools[1].max_count = 3
    cluster = make_cluster(scenario)
    events = cluster.set_spot_capacity("gpuspot", 1, notice_seconds=10)
    assert len(events) == 2
    await cluster.advance(16)
    assert len(cluster.nodes("gpuspot")) == 1
    # Replacements go on demand (spot has no room now).
    await cluster.wait_for(lambda: len(_ready(cluster, "inference")) == 3, timeout=30)
    assert len(cluster.nodes("gpu")) == 2
    cluster.set_spot_capacity("gpuspot", None)
    scale = cluster.scenario.pools[1]
    assert cluster.cloud.can_grow(scale)


async def test_statefulset_recreates_deleted_pod_with_same_name(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[
            {"name": "db", "kind": "StatefulSet", "replicas": 2, "requests": {"cpu": "100m"}}
        ],
        pools=[{"name": "a", "count": 1, "cpu": 8}],
    )
    cluster = make_cluster(scenario)
    await cluster.wait_for(lambda: len(_ready(cluster, "db")) == 2, timeout=5)
    assert sorted(p["metadata"]["name"] for p in _pods(cluster, "db")) == ["db-0", "db-1"]
    old_uid = cluster.store.must_get(R.PODS, "default", "db-0")["metadata"]["uid"]
    cluster.store.delete(R.PODS, "default", "db-0")
    await cluster.wait_for(
        lambda: (
            (p := cluster.store.get(R.PODS, "default", "db-0")) is not None
            and p["metadata"]["uid"] != old_uid
            and condition_true(p, "Ready")
        ),
        timeout=5,
    )


async def test_pdb_status_tracks_health(make_cluster: Make) -> None:
    cluster = make_cluster()

    def status() -> dict[str, Any]:
        pdb = cluster.store.get(R.PDBS, "default", "inference")
        assert pdb is not None
        return dict(pdb["status"])

    assert status()["currentHealthy"] == 0
    assert status()["disruptionsAllowed"] == 0
    await cluster.advance(2.1)
    got = status()
    assert (got["expectedPods"], got["desiredHealthy"], got["currentHealthy"]) == (3, 2, 3)
    assert got["disruptionsAllowed"] == 1


async def test_pdb_percent_min_available_rounds_up(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[
            {
                "name": "web",
                "replicas": 3,
                "requests": {"cpu": "100m"},
                "pdb": {"minAvailable": "50%"},
            }
        ],
        pools=[{"name": "a", "count": 1, "cpu": 8}],
    )
    cluster = make_cluster(scenario)
    await cluster.advance(0.5)
    pdb = cluster.store.get(R.PDBS, "default", "web")
    assert pdb is not None
    assert (pdb["status"]["desiredHealthy"], pdb["status"]["disruptionsAllowed"]) == (2, 1)


async def test_timeline_preempts_and_cancels(manual_clock: ManualClock) -> None:
    scenario = small_scenario(
        timeline=[
            {
                "at": 1,
                "preempt": {"pool": "gpuspot", "index": 0, "noticeSeconds": 30},
                "id": "first",
            },
            {"at": 2, "preempt": {"pool": "gpuspot", "count": 2, "noticeSeconds": 30}},
            {"at": 5, "cancel": "first"},
        ]
    )
    cluster = ClusterEmulator(scenario, clock=manual_clock)
    await cluster.advance(3)
    assert len(cluster.imds.events) == 3
    await cluster.advance(3)
    states = sorted(e.state(manual_clock.now()) for e in cluster.imds.events.values())
    assert states == ["cancelled", "scheduled", "scheduled"]
    await cluster.advance(40)
    # The first spot node was preempted twice; the cancellation spared only one event.
    assert len(cluster.nodes("gpuspot")) == 1


async def test_names_follow_aks(make_cluster: Make) -> None:
    cluster = make_cluster()
    names = sorted(n["metadata"]["name"] for n in cluster.nodes("gpuspot"))
    digits = cluster.scenario.pools[1].scale_set_digits
    assert names == [f"aks-gpuspot-{digits}-vmss00000{i}" for i in range(3)]
    node = cluster.store.must_get(R.NODES, "", names[2])
    assert node["spec"]["providerID"].endswith(
        f"/virtualMachineScaleSets/aks-gpuspot-{digits}-vmss/virtualMachines/2"
    )
    assert cluster.vm_name_for(names[2]) == f"aks-gpuspot-{digits}-vmss_2"
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert labels["topology.kubernetes.io/zone"] == "eastus-3"
    assert labels["kubernetes.azure.com/accelerator"] == "nvidia"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert {t["key"] for t in node["spec"]["taints"]} == {
        "kubernetes.azure.com/scalesetpriority",
        "sku",
    }


def test_base36_instance_ids() -> None:
    pool = PoolSpec(name="p")
    assert node_name(pool, 10).endswith("vmss00000a")
    assert node_name(pool, 36 * 36).endswith("vmss000100")


def test_scenario_rejects_unknown_keys() -> None:
    with pytest.raises(ScenarioError, match=r"pools\[0\]: unknown keys \['colour'\]"):
        parse_scenario({"name": "x", "pools": [{"name": "a", "colour": "red"}]})


async def test_taint_manager_evicts_after_toleration_seconds(make_cluster: Make) -> None:
    """Deallocated spot node: NotReady forever; the default 300 s unreachable toleration
    runs out, the pod is deleted and the Deployment replaces it elsewhere."""
    scenario = small_scenario()
    scenario.pools[1].eviction_policy = "Deallocate"
    cluster = make_cluster(scenario)
    await cluster.advance(3)
    victim = cluster.nodes("gpuspot")[0]["metadata"]["name"]
    (pod,) = cluster.pods(node=victim)
    cluster.preempt(victim, notice_seconds=0)
    await cluster.advance(299)
    assert not cluster.store.must_get(R.PODS, "default", pod["metadata"]["name"])["metadata"].get(
        "deletionTimestamp"
    )
    await cluster.advance(2)
    evicted = cluster.store.must_get(R.PODS, "default", pod["metadata"]["name"])
    assert evicted["metadata"]["deletionTimestamp"]  # Terminating: nobody runs it any more
    await cluster.wait_for(lambda: len(_ready(cluster, "inference")) == 3, timeout=60)


async def test_autoscaler_removes_idle_nodes_down_to_min(make_cluster: Make) -> None:
    scenario = small_scenario()
    scenario.settings.scale_down_unneeded_seconds = 60
    scenario.pools[2].count = 2  # two on-demand GPU nodes, idle (the replicas prefer spot)
    scenario.pools[2].min_count = 1
    cluster = make_cluster(scenario)
    assert len(cluster.nodes("gpu")) == 2
    await cluster.advance(55, step_seconds=1)
    assert len(cluster.nodes("gpu")) == 2
    await cluster.advance(20, step_seconds=1)
    assert len(cluster.nodes("gpu")) == 1  # not below minCount
    await cluster.advance(120, step_seconds=1)
    assert len(cluster.nodes("gpu")) == 1
    assert len(cluster.nodes("gpuspot")) == 3  # busy nodes stay


async def test_a_settled_cluster_writes_nothing(make_cluster: Make) -> None:
    """Control loops must converge: an idle cluster costs no writes (and no watch events)."""
    cluster = make_cluster()
    await cluster.advance(5)
    writes = cluster.store.writes
    await cluster.advance(30, step_seconds=1)
    assert cluster.store.writes == writes


async def test_second_delete_with_shorter_grace_stops_the_pod_sooner(make_cluster: Make) -> None:
    scenario = small_scenario(
        workloads=[
            {
                "name": "web",
                "replicas": 1,
                "requests": {"cpu": "100m"},
                "shutdownSeconds": 60,
                "terminationGracePeriodSeconds": 60,
            }
        ],
        pools=[{"name": "a", "count": 1, "cpu": 8}],
    )
    cluster = make_cluster(scenario)
    await cluster.advance(1)
    (pod,) = _pods(cluster, "web")
    name = pod["metadata"]["name"]
    cluster.store.delete(R.PODS, "default", name)
    await cluster.advance(5)
    assert cluster.store.get(R.PODS, "default", name) is not None
    cluster.store.delete(R.PODS, "default", name, grace_seconds=2)
    await cluster.advance(2.5)
    assert cluster.store.get(R.PODS, "default", name) is None


async def test_eviction_before_the_budget_is_processed_is_429_retry_after_10(
    make_cluster: Make,
) -> None:
    cluster = make_cluster()
    await cluster.advance(3)
    cluster.store.create(
        R.PDBS,
        {
            "metadata": {"name": "fresh", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "inference"}}},
        },
    )
    cluster.store.delete(R.PDBS, "default", "inference")  # leave only the unprocessed one
    name = _ready(cluster, "inference")[0]["metadata"]["name"]
    with pytest.raises(ApiError) as caught:
        evict(cluster.store, "default", name, {"metadata": {"name": name}})
    error = caught.value
    assert (error.code, error.retry_after_seconds) == (429, 10)
    assert error.body()["details"]["causes"][0]["message"] == (
        "The disruption budget fresh is still being processed by the server."
    )
    cluster.step()  # the disruption controller catches up
    assert evict(cluster.store, "default", name, {"metadata": {"name": name}})["code"] == 201


async def test_node_problem_detector_conditions_follow_the_event(make_cluster: Make) -> None:
    scenario = small_scenario()
    scenario.settings.node_problem_detector_seconds = 10
    cluster = make_cluster(scenario)
    node = cluster.nodes("gpuspot")[0]["metadata"]["name"]
    other = cluster.nodes("gpuspot")[1]["metadata"]["name"]
    event = cluster.preempt(node, notice_seconds=60)
    await cluster.advance(10.5)  # NPD polls every 10 s

    def condition(name: str, kind: str) -> dict[str, Any] | None:
        return get_condition(cluster.store.must_get(R.NODES, "", name), kind)

    preemption = condition(node, "PreemptionScheduled")
    assert preemption is not None and preemption["status"] == "True"
    assert preemption["reason"] == "SpotEvictionIncoming"
    not_before = event.not_before.strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert preemption["message"] == (
        f"Preempt Scheduled: {not_before}. For more information, see "
        f"https://aka.ms/aks/scheduledevents. EventId: {event.event_id}"
    )
    for kind in ("VMEventScheduled", "PreemptScheduled"):
        found = condition(node, kind)
        assert found is not None and found["status"] == "True"
    reboot = condition(node, "RebootScheduled")
    assert reboot is not None and reboot["status"] == "False"
    assert condition(other, "VMEventScheduled") is None  # untouched nodes carry nothing
    freeze = cluster.schedule_event("Freeze", [other], notice_seconds=15)
    await cluster.advance(10)
    frozen = condition(other, "FreezeScheduled")
    assert frozen is not None and frozen["message"].startswith("Freeze Scheduled: ")
    await cluster.advance(10)  # started at NotBefore: the message loses its time
    frozen = condition(other, "FreezeScheduled")
    assert frozen is not None and frozen["status"] == "True"
    assert frozen["message"] == (
        "Freeze Started. For more information, see https://aka.ms/aks/scheduledevents. "
        f"EventId: {freeze.event_id}"
    )
    third = cluster.nodes("gpuspot")[2]["metadata"]["name"]
    cancelled = cluster.preempt(third, notice_seconds=60)
    await cluster.advance(10)
    assert cluster.imds.cancel(cancelled.event_id)
    await cluster.advance(10)
    cleared = condition(third, "PreemptionScheduled")
    assert cleared is not None and cleared["status"] == "False"
    assert cleared["reason"] == "NoPreemptionScheduled"


def _replicaset_on(node: str, replicas: int) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": "orphan"}},
        "spec": {
            "containers": [
                {"name": "app", "image": "v1", "resources": {"requests": {"cpu": "10m"}}}
            ],
            "nodeSelector": {"kubernetes.io/hostname": node},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"namespace": "default", "name": "orphan", "labels": {"app": "orphan"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "orphan"}},
            "template": template,
        },
    }


async def test_a_replicaset_without_an_owner_does_not_rank_its_pods_by_node(
    make_cluster: Make,
) -> None:
    """Upstream counts the pods on a node over the owner's ReplicaSets; a set without an owner
    has none (tests/sim/test_scale_down_order.py found it on the real controller-manager), so
    the later Ready pod goes first even though it is alone on its node."""
    scenario = small_scenario(workloads=[], pools=[{"name": "a", "count": 2, "cpu": 8}])
    cluster = make_cluster(scenario)
    crowded, alone = sorted(n["metadata"]["name"] for n in cluster.nodes("a"))
    cluster.store.create(R.REPLICASETS, _replicaset_on(crowded, 3))
    await cluster.advance(100)
    assert len(_ready(cluster, "orphan")) == 3
    replicaset = json.loads(json.dumps(cluster.store.get(R.REPLICASETS, "default", "orphan")))
    replicaset["spec"]["replicas"] = 4
    replicaset["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": alone}
    cluster.store.update(R.REPLICASETS, replicaset)
    await cluster.advance(10)
    assert len(_ready(cluster, "orphan")) == 4

    replicaset = json.loads(json.dumps(cluster.store.get(R.REPLICASETS, "default", "orphan")))
    replicaset["spec"]["replicas"] = 3
    cluster.store.update(R.REPLICASETS, replicaset)
    cluster.step()

    terminating = [p for p in _pods(cluster, "orphan") if p["metadata"].get("deletionTimestamp")]
    assert [p["spec"]["nodeName"] for p in terminating] == [alone]
