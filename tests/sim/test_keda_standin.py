"""The emulator's KEDA stand-in (sim/rebalancer_sim/keda.py) in virtual time (ManualClock): the
HPA KEDA's operator makes for a ScaledObject, how it keeps that HPA, and the Deployment the HPA
controller then scales. Expected values are derived from the inputs, as the comments say."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from aiohttp import ClientSession

from rebalancer.clock import ManualClock
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.keda import FINALIZER, HPA_NAME_PREFIX, KEDA_VERSION, SCALE_TARGET_ERROR
from rebalancer_sim.objects import Obj, condition_true, get_condition
from rebalancer_sim.scenario import LOAD_ANNOTATION, ScenarioError, WorkloadSpec, parse_scenario

REPLICAS = 3
SYNC = 15.0  # the HPA controller's default sync period (settings.hpaSyncSeconds)
HPA = HPA_NAME_PREFIX + "web"  # KEDA's name for the ScaledObject "web"'s HPA


def scenario_data(keda: dict[str, Any] | None = None) -> dict[str, Any]:
    """Two 16-CPU nodes (room for every replica the tests ask for) and a Deployment `web` of 3
    one-CPU replicas, Ready as soon as they run; with `keda`, its ScaledObject."""
    data: dict[str, Any] = {
        "name": "keda",
        "settings": {"nodeAutoDrain": False, "shutdownSeconds": 0.5},
        "pools": [{"name": "system", "mode": "system", "cpu": 16, "memory": "64Gi", "count": 2}],
        "workloads": [
            {"name": "web", "replicas": REPLICAS, "requests": {"cpu": "1", "memory": "1Gi"}}
        ],
    }
    if keda is not None:
        data["workloads"][0]["keda"] = keda
    return data


def make(keda: dict[str, Any] | None = None) -> ClusterEmulator:
    return ClusterEmulator(parse_scenario(scenario_data(keda)), clock=ManualClock())


def scaled_object(cluster: ClusterEmulator, name: str = "web") -> Obj:
    return cluster.store.must_get(R.SCALEDOBJECTS, "default", name)


def hpa(cluster: ClusterEmulator, name: str = HPA) -> Obj:
    return cluster.store.must_get(R.HPAS, "default", name)


def replicas(cluster: ClusterEmulator) -> int:
    return int(cluster.store.must_get(R.DEPLOYMENTS, "default", "web")["spec"]["replicas"])


def edit(cluster: ClusterEmulator, resource: R.ResourceType, name: str, change: Any) -> None:
    """What a client's read-modify-write does: `change` edits a private copy."""
    copy = cluster.store.copy_of(resource, "default", name)
    assert copy is not None
    change(copy)
    cluster.store.update(resource, copy)
    cluster.step()


def ready(cluster: ClusterEmulator) -> int:
    return sum(1 for p in cluster.pods("default") if condition_true(p, "Ready"))


# ---- the HPA KEDA makes ------------------------------------------------------------------------


async def test_a_scaledobject_gets_an_hpa_named_owned_and_bounded_as_kedas() -> None:
    cluster = make({"minReplicaCount": 0, "maxReplicaCount": 5, "cpu": 60, "load": 150})
    so = scaled_object(cluster)
    made = hpa(cluster)
    assert made["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "name": "web",
            "uid": so["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    # An HPA cannot have 0: GetHPAMinReplicas gives 1 for a minReplicaCount of 0.
    assert (made["spec"]["minReplicas"], made["spec"]["maxReplicas"]) == (1, 5)
    assert made["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
    }
    assert made["spec"]["metrics"] == [
        {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 60},
            },
        }
    ]
    assert "behavior" not in made["spec"]  # none asked for: none written
    assert (
        made["metadata"]["annotations"] == so["metadata"]["annotations"] == {LOAD_ANNOTATION: "150"}
    )
    assert made["metadata"]["labels"] == {
        "app.kubernetes.io/name": HPA,
        "app.kubernetes.io/version": KEDA_VERSION,
        "app.kubernetes.io/part-of": "web",
        "app.kubernetes.io/managed-by": "keda-operator",
        "scaledobject.keda.sh/name": "web",  # KEDA labels the ScaledObject, then copies its labels
    }
    assert so["metadata"]["finalizers"] == [FINALIZER]
    status = so["status"]
    assert (status["hpaName"], status["scaleTargetKind"]) == (HPA, "apps/v1.Deployment")
    assert status["originalReplicaCount"] == REPLICAS
    assert condition_true(so, "Ready") and condition_true(so, "Active")
    assert [h["metadata"]["name"] for h in cluster.store.items(R.HPAS)] == [HPA]


async def test_kedas_defaults_a_named_hpa_its_behavior_excluded_labels_and_a_rename() -> None:
    cluster = make()
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    cluster.store.create(
        R.SCALEDOBJECTS,
        {
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"team": "ml", "build": "1234"},
                "annotations": {"scaledobject.keda.sh/hpa-excluded-labels": "build"},
            },
            "spec": {
                "scaleTargetRef": {"name": "web"},  # kind and apiVersion default
                "advanced": {
                    "horizontalPodAutoscalerConfig": {"name": "web-hpa", "behavior": behavior}
                },
                "triggers": [
                    {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "70"}},
                    {"type": "prometheus", "metadata": {"query": "sum(rate(x[1m]))"}},
                ],
            },
        },
    )
    cluster.step()
    made = hpa(cluster, "web-hpa")
    # No minReplicaCount or maxReplicaCount: KEDA's defaults 1 and 100.
    assert (made["spec"]["minReplicas"], made["spec"]["maxReplicas"]) == (1, 100)
    assert made["spec"]["behavior"] == behavior
    assert len(made["spec"]["metrics"]) == 1  # the prometheus trigger makes no metric here
    assert made["metadata"]["labels"]["team"] == "ml"
    assert "build" not in made["metadata"]["labels"]
    so = scaled_object(cluster)
    assert so["status"]["triggersTypes"] == "cpu,prometheus"
    # A prometheus trigger's activity is not modelled: Active stays as initialised.
    assert get_condition(so, "Active") == {"type": "Active", "status": "Unknown"}

    def rename(obj: Obj) -> None:
        obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["name"] = "web-hpa-2"

    edit(cluster, R.SCALEDOBJECTS, "web", rename)
    assert [h["metadata"]["name"] for h in cluster.store.items(R.HPAS)] == ["web-hpa-2"]
    assert scaled_object(cluster)["status"]["hpaName"] == "web-hpa-2"
    assert [c.action for c in cluster.keda.hpa_changes] == ["created", "deleted", "created"]


# ---- what KEDA keeps in step -------------------------------------------------------------------


async def test_bounds_patched_on_the_scaledobject_reach_the_hpa_then_the_deployment() -> None:
    # No load: the HPA has no metric and only keeps the Deployment within its bounds.
    cluster = make({"minReplicaCount": 2, "maxReplicaCount": 6, "cpu": 60})
    await cluster.advance(SYNC + 1, step_seconds=0.5)
    assert replicas(cluster) == REPLICAS  # within [2, 6]
    raised_min = REPLICAS + 1

    def raise_min(obj: Obj) -> None:
        obj["spec"]["minReplicaCount"] = raised_min

    edit(cluster, R.SCALEDOBJECTS, "web", raise_min)
    assert hpa(cluster)["spec"]["minReplicas"] == raised_min  # KEDA, at once
    await cluster.advance(SYNC + 1, step_seconds=0.5)
    assert replicas(cluster) == raised_min  # the HPA controller, at its next sync
    lowered_max = 2

    def lower_both(obj: Obj) -> None:
        obj["spec"]["minReplicaCount"] = 1
        obj["spec"]["maxReplicaCount"] = lowered_max

    edit(cluster, R.SCALEDOBJECTS, "web", lower_both)
    assert (hpa(cluster)["spec"]["minReplicas"], hpa(cluster)["spec"]["maxReplicas"]) == (
        1,
        lowered_max,
    )
    await cluster.advance(SYNC + 1, step_seconds=0.5)
    assert replicas(cluster) == lowered_max
    assert [(r.old, r.new) for r in cluster.hpas.rescales] == [
        (REPLICAS, raised_min),
        (raised_min, lowered_max),
    ]


async def test_an_edit_to_the_hpa_is_set_back_from_the_scaledobject() -> None:
    cluster = make({"minReplicaCount": 2, "maxReplicaCount": 6, "cpu": 60})
    before = hpa(cluster)

    def hold_spares(obj: Obj) -> None:  # what a controller holding spares would write
        obj["spec"]["minReplicas"] = REPLICAS + 2
        obj["metadata"].setdefault("annotations", {})["example.com/held"] = "true"

    edit(cluster, R.HPAS, HPA, hold_spares)
    after = hpa(cluster)
    assert after["spec"] == before["spec"]  # minReplicas 2 again, from minReplicaCount
    # KEDA's update writes its whole object: the annotation written with the edit goes too.
    assert "annotations" not in after["metadata"]
    assert cluster.keda.hpa_changes[-1].action == "updated"
    await cluster.advance(2 * SYNC, step_seconds=0.5)
    assert replicas(cluster) == REPLICAS and cluster.hpas.rescales == []


async def test_hpa_annotations_follow_the_scaledobject_as_kedas_comparison_sees_them() -> None:
    cluster = make({"minReplicaCount": 2, "maxReplicaCount": 6, "cpu": 60, "load": 150})

    def annotate(key: str, value: str) -> Any:
        def change(obj: Obj) -> None:
            obj["metadata"].setdefault("annotations", {})[key] = value

        return change

    # One of the ScaledObject's annotations changed on the HPA: set back.
    edit(cluster, R.HPAS, HPA, annotate(LOAD_ANNOTATION, "900"))
    assert hpa(cluster)["metadata"]["annotations"] == {LOAD_ANNOTATION: "150"}
    # One added to the HPA alone: the ScaledObject's are all still there (DeepDerivative), so it
    # stays...
    edit(cluster, R.HPAS, HPA, annotate("example.com/note", "kept"))
    assert hpa(cluster)["metadata"]["annotations"]["example.com/note"] == "kept"
    # ...until KEDA next updates the HPA, here for a spec change of the ScaledObject.
    edit(cluster, R.SCALEDOBJECTS, "web", lambda obj: obj["spec"].update(maxReplicaCount=7))
    assert hpa(cluster)["metadata"]["annotations"] == {LOAD_ANNOTATION: "150"}
    # An annotation added to the ScaledObject alone starts no reconcile (KEDA's predicates)...
    edit(cluster, R.SCALEDOBJECTS, "web", annotate("example.com/team", "ml"))
    assert "example.com/team" not in hpa(cluster)["metadata"]["annotations"]
    # ...and reaches the HPA with the next one.
    edit(cluster, R.SCALEDOBJECTS, "web", lambda obj: obj["spec"].update(maxReplicaCount=8))
    assert (
        hpa(cluster)["metadata"]["annotations"] == scaled_object(cluster)["metadata"]["annotations"]
    )


async def test_deleting_the_scaledobject_takes_its_hpa_and_a_deleted_hpa_comes_back() -> None:
    cluster = make({"minReplicaCount": 2, "maxReplicaCount": 6, "cpu": 60})
    first_uid = hpa(cluster)["metadata"]["uid"]
    cluster.store.delete(R.HPAS, "default", HPA)
    cluster.step()
    assert hpa(cluster)["metadata"]["uid"] != first_uid  # KEDA made it again
    _, removed_now = cluster.store.delete(R.SCALEDOBJECTS, "default", "web")
    assert not removed_now  # KEDA's finalizer holds it until KEDA has reconciled the deletion
    cluster.step()
    assert cluster.store.get(R.SCALEDOBJECTS, "default", "web") is None
    assert list(cluster.store.items(R.HPAS)) == []  # the garbage collector, by its owner
    assert replicas(cluster) == REPLICAS  # without restoreToOriginalReplicaCount, left as is


async def test_the_load_set_on_the_scaledobject_moves_the_deployment_through_the_hpa() -> None:
    target, load = 60, 150
    cluster = make({"minReplicaCount": 2, "maxReplicaCount": 6, "cpu": target, "load": load})
    await cluster.advance(SYNC + 1, step_seconds=0.5)
    # 150 % over 3 Ready pods: 50 % each against 60 %, ratio 0.83, recommendation
    # ceil(0.83 * 3) = 3: steady.
    assert ready(cluster) == REPLICAS and replicas(cluster) == REPLICAS
    assert math.ceil(load / REPLICAS / target * REPLICAS) == REPLICAS
    higher = 300
    cluster.set_load("web", higher)  # on the ScaledObject: the workload has no HPA of its own
    assert scaled_object(cluster)["metadata"]["annotations"][LOAD_ANNOTATION] == str(higher)
    cluster.step()
    assert hpa(cluster)["metadata"]["annotations"][LOAD_ANNOTATION] == str(higher)
    await cluster.advance(SYNC + 1, step_seconds=0.5)
    # 300 % over 3: 100 % each, ratio 1.67, recommendation ceil(1.67 * 3) = 5, within the scale-up
    # limit (max(4 pods, 100 %) per 15 s) and the maximum 6.
    expected = min(6, math.ceil(higher / REPLICAS / target * REPLICAS))
    assert replicas(cluster) == expected == 5
    (rescale,) = cluster.hpas.rescales
    assert (rescale.name, rescale.old, rescale.new) == (HPA, REPLICAS, expected)


# ---- what KEDA refuses ---------------------------------------------------------------------------


async def test_a_cpu_trigger_without_metric_type_is_refused_as_kedas_scaler_refuses_it() -> None:
    cluster = make()
    cluster.store.create(
        R.SCALEDOBJECTS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "scaleTargetRef": {"name": "web"},
                "triggers": [{"type": "cpu", "metadata": {"value": "60"}}],
            },
        },
    )
    cluster.step()
    ready_condition = get_condition(scaled_object(cluster), "Ready")
    assert ready_condition is not None and ready_condition["status"] == "False"
    assert "unknown metric type" in ready_condition["message"]
    assert list(cluster.store.items(R.HPAS)) == []


async def test_a_scaledobject_before_its_target_waits_for_kedas_retry() -> None:
    cluster = make()
    cluster.store.create(
        R.SCALEDOBJECTS,
        {
            "metadata": {"name": "late", "namespace": "default"},
            "spec": {
                "scaleTargetRef": {"name": "late"},
                "triggers": [
                    {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}
                ],
            },
        },
    )
    await cluster.advance(10, step_seconds=0.5)
    ready_condition = get_condition(scaled_object(cluster, "late"), "Ready")
    assert ready_condition is not None and ready_condition["status"] == "False"
    assert ready_condition["message"].startswith(SCALE_TARGET_ERROR)
    late = WorkloadSpec(name="late", replicas=1, requests={"cpu": "1", "memory": "1Gi"})
    cluster.store.create(R.DEPLOYMENTS, late.manifest())
    cluster.step()
    assert cluster.store.get(R.HPAS, "default", "keda-hpa-late") is None  # KEDA watches no target
    # The backoff doubles from 5 ms: after 10 s of failures the next retry is within 10 s more.
    await cluster.wait_for(
        lambda: cluster.store.get(R.HPAS, "default", "keda-hpa-late"),
        timeout=11,
        virtual_step=0.5,
        message="the HPA after KEDA's retry",
    )
    assert condition_true(scaled_object(cluster, "late"), "Ready")


def test_a_keda_workloads_scenario_errors_are_named() -> None:
    both = scenario_data({"cpu": 60})
    both["workloads"][0]["hpa"] = {"maxReplicas": 6}
    with pytest.raises(ScenarioError, match="hpa or keda"):
        parse_scenario(both)
    with pytest.raises(ScenarioError, match=r"keda: needs cpu"):
        parse_scenario(scenario_data({"minReplicaCount": 1}))
    with pytest.raises(ScenarioError, match=r"unknown \['minReplicas'\]"):
        parse_scenario(scenario_data({"cpu": 60, "minReplicas": 1}))


# ---- served --------------------------------------------------------------------------------------


async def test_scaledobjects_are_served_and_a_merge_patch_reaches_the_hpa() -> None:
    cluster = make()
    async with cluster:
        assert cluster.urls is not None
        group = f"{cluster.urls.api}/apis/keda.sh/v1alpha1"
        base = f"{group}/namespaces/default/scaledobjects"
        body = {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "web"},
            "spec": {
                "scaleTargetRef": {"name": "web"},
                "minReplicaCount": 2,
                "triggers": [
                    {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}
                ],
            },
        }
        async with ClientSession(headers={"Authorization": "Bearer x"}) as session:
            async with session.get(group) as response:
                discovery = await response.json()
            async with session.post(base, json=body) as response:
                assert response.status == 201
            await cluster.wait_for(lambda: cluster.store.get(R.HPAS, "default", HPA))
            headers = {"Content-Type": "application/merge-patch+json"}
            patch = json.dumps({"spec": {"minReplicaCount": REPLICAS + 1}})
            async with session.patch(f"{base}/web", data=patch, headers=headers) as response:
                assert response.status == 200
                assert (await response.json())["metadata"]["generation"] == 2
            await cluster.wait_for(lambda: hpa(cluster)["spec"]["minReplicas"] == REPLICAS + 1)
            # The load stand-in, as a client annotates the ScaledObject: KEDA copies it.
            patch = json.dumps({"metadata": {"annotations": {LOAD_ANNOTATION: "240"}}})
            async with session.patch(f"{base}/web", data=patch, headers=headers) as response:
                assert response.status == 200
            await cluster.wait_for(
                lambda: hpa(cluster)["metadata"].get("annotations") == {LOAD_ANNOTATION: "240"}
            )
            hpas = f"{cluster.urls.api}/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"
            async with session.get(f"{hpas}/{HPA}") as response:
                served_hpa = await response.json()
    (entry,) = [r for r in discovery["resources"] if r["name"] == "scaledobjects"]
    assert (entry["kind"], entry["namespaced"], entry["shortNames"]) == (
        "ScaledObject",
        True,
        ["so"],
    )
    assert served_hpa["spec"]["minReplicas"] == REPLICAS + 1
