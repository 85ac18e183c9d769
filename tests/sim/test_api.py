"""The API server through real clients: kubernetes_asyncio (typed and raw) and plain HTTP.

Each test asserts what a real kube-apiserver answers: codes, reasons, Status bodies, watch
event sequences, resourceVersion behaviour.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from rebalancer.sim import resources as R
from rebalancer.sim.cluster import ClusterEmulator
from rebalancer.sim.objects import condition_true

from .conftest import eventually


async def _http(
    cluster: ClusterEmulator,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> tuple[int, Any, dict[str, str]]:
    assert cluster.urls is not None
    data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            cluster.urls.api + path,
            data=data,
            params=params,
            headers={"Content-Type": content_type, "Authorization": "Bearer x"},
        ) as response,
    ):
        text = await response.text()
        try:
            payload = json.loads(text)
        except ValueError:
            payload = text
        return response.status, payload, dict(response.headers)


async def _ready_inference(cluster: ClusterEmulator) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]]:
        return [
            p
            for p in cluster.pods("default")
            if condition_true(p, "Ready") and not p["metadata"].get("deletionTimestamp")
        ]

    pods: list[dict[str, Any]] = await eventually(
        lambda: len(ready()) == 3 and ready(), message="3 ready replicas"
    )
    await eventually(
        lambda: (
            (cluster.store.must_get(R.PDBS, "default", "inference")["status"]).get(
                "disruptionsAllowed"
            )
            == 1
        ),
        message="PDB allows one disruption",
    )
    return pods


def _events(body: Any) -> list[dict[str, Any]]:
    """Watch stream lines (one line alone parses as a single JSON document)."""
    if isinstance(body, dict):
        return [body]
    return [json.loads(line) for line in body.splitlines() if line]


# ---- reads -----------------------------------------------------------------------------------


async def test_list_nodes_and_pods(served: ClusterEmulator, api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    nodes = await core.list_node()
    assert len(nodes.items) == 4
    assert int(nodes.metadata.resource_version) == served.store.resource_version
    spot = await core.list_node(label_selector="kubernetes.azure.com/scalesetpriority=spot")
    assert len(spot.items) == 3
    not_spot = await core.list_node(
        label_selector="kubernetes.azure.com/scalesetpriority notin (spot),"
        "kubernetes.azure.com/mode=system"
    )
    assert [n.metadata.labels["kubernetes.azure.com/agentpool"] for n in not_spot.items] == [
        "system"
    ]
    await _ready_inference(served)
    node_name = spot.items[0].metadata.name
    on_node = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}")
    assert sorted((p.metadata.namespace, p.spec.node_name) for p in on_node.items) == [
        ("default", node_name),
        ("kube-system", node_name),  # the node-agent DaemonSet's pod
    ]
    running = await core.list_namespaced_pod(
        "default", field_selector="status.phase=Running,metadata.namespace=default"
    )
    assert len(running.items) == 3


async def test_list_chunking_with_limit_and_continue(served: ClusterEmulator) -> None:
    status, first, _ = await _http(served, "GET", "/api/v1/nodes", params={"limit": "3"})
    assert status == 200
    assert len(first["items"]) == 3
    assert first["metadata"]["remainingItemCount"] == 1
    token = first["metadata"]["continue"]
    _, rest, _ = await _http(
        served, "GET", "/api/v1/nodes", params={"limit": "3", "continue": token}
    )
    assert "continue" not in rest["metadata"]
    _, everything, _ = await _http(served, "GET", "/api/v1/nodes")
    names = [n["metadata"]["name"] for n in first["items"] + rest["items"]]
    assert names == [n["metadata"]["name"] for n in everything["items"]]
    assert names == sorted(names)
    assert "kind" not in first["items"][0]  # as upstream: only the List carries kind


async def test_get_object_wire_format(served: ClusterEmulator) -> None:
    status, deployment, _ = await _http(
        served, "GET", "/apis/apps/v1/namespaces/default/deployments/inference"
    )
    assert status == 200
    assert deployment["apiVersion"] == "apps/v1" and deployment["kind"] == "Deployment"
    meta = deployment["metadata"]
    assert isinstance(meta["resourceVersion"], str) and int(meta["resourceVersion"]) > 0
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"].endswith("Z")


# ---- watch -----------------------------------------------------------------------------------


async def test_watch_from_list_version_sees_graceful_delete(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(api)
    pods = await _ready_inference(served)
    listed = await core.list_namespaced_pod("default")
    victim = pods[0]["metadata"]["name"]
    seen: list[tuple[str, bool]] = []

    async def consume() -> None:
        watch = Watch()
        async with watch.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        ) as stream:
            async for event in stream:
                obj = event["object"]
                if obj.metadata.name == victim:
                    seen.append((event["type"], obj.metadata.deletion_timestamp is not None))
                    if event["type"] == "DELETED":
                        return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    await core.delete_namespaced_pod(victim, "default")
    await asyncio.wait_for(task, 10)
    assert seen[0] == ("MODIFIED", True)  # graceful: deletionTimestamp first
    assert seen[-1][0] == "DELETED"


async def test_watch_from_compacted_version_is_410_expired(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    old = served.store.resource_version
    served.store.create(R.CONFIGMAPS, {"metadata": {"name": "bump", "namespace": "default"}})
    served.store.compact()
    status, body, _ = await _http(
        served,
        "GET",
        "/api/v1/namespaces/default/pods",
        params={"watch": "true", "resourceVersion": str(old), "timeoutSeconds": "1"},
    )
    assert status == 200  # like the watch cache: an ERROR event in a 200 stream
    event = _events(body)[0]
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    core = k8s.CoreV1Api(api)
    with pytest.raises(ApiException) as caught:
        async with Watch().stream(
            core.list_namespaced_pod, "default", resource_version=str(old), timeout_seconds=1
        ) as stream:
            async for _ in stream:
                pass
    assert caught.value.status == 410


async def test_watch_reconnects_after_server_timeout_without_losing_events(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    """kubernetes_asyncio resumes from the last resourceVersion after a server-side end."""
    core = k8s.CoreV1Api(api)
    listed = await core.list_namespaced_config_map("default")
    names: list[str] = []

    async def consume() -> None:
        version = listed.metadata.resource_version
        while len(names) < 2:
            async with Watch().stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=version,
                timeout_seconds=1,
            ) as stream:
                async for event in stream:
                    names.append(event["object"].metadata.name)
                    version = event["object"].metadata.resource_version

    task = asyncio.create_task(consume())
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="one"))
    await core.create_namespaced_config_map("default", body)
    await asyncio.sleep(1.3)  # the first watch has ended by now: the second one must resume
    await core.create_namespaced_config_map(
        "default", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="two"))
    )
    await asyncio.wait_for(task, 10)
    assert names == ["one", "two"]


async def test_watch_bookmarks_and_true_spellings(served: ClusterEmulator) -> None:
    for spelling in ("true", "True", "1"):
        status, body, _ = await _http(
            served,
            "GET",
            "/api/v1/nodes",
            params={
                "watch": spelling,
                "allowWatchBookmarks": "true",
                "resourceVersion": str(served.store.resource_version),
                "timeoutSeconds": "1",
            },
        )
        assert status == 200
        events = _events(body)
        assert events and all(e["type"] == "BOOKMARK" for e in events)
        assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= 1


async def test_watch_list_sends_initial_events_then_end_bookmark(served: ClusterEmulator) -> None:
    status, body, _ = await _http(
        served,
        "GET",
        "/api/v1/nodes",
        params={
            "watch": "true",
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
            "timeoutSeconds": "1",
        },
    )
    assert status == 200
    events = _events(body)
    assert [e["type"] for e in events[:4]] == ["ADDED"] * 4
    end = events[4]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_with_label_selector_reports_objects_leaving_it(
    served: ClusterEmulator,
) -> None:
    store = served.store
    store.create(
        R.CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default", "labels": {"a": "1"}}}
    )
    since = store.resource_version
    cm = json.loads(json.dumps(store.must_get(R.CONFIGMAPS, "default", "c")))
    cm["metadata"]["labels"] = {"a": "2"}
    store.update(R.CONFIGMAPS, cm)
    status, body, _ = await _http(
        served,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        params={
            "watch": "1",
            "labelSelector": "a=1",
            "resourceVersion": str(since),
            "timeoutSeconds": "1",
        },
    )
    assert status == 200
    events = _events(body)
    assert [e["type"] for e in events] == ["DELETED"]


# ---- writes, patches -------------------------------------------------------------------------


async def test_patch_types_on_nodes(served: ClusterEmulator, api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    name = served.nodes("gpuspot")[0]["metadata"]["name"]
    before = served.store.must_get(R.NODES, "", name)
    # strategic merge (the client's default for dict bodies): node taints have no merge key
    await core.patch_node(name, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})
    assert served.store.must_get(R.NODES, "", name)["spec"]["taints"] == [
        {"key": "x", "effect": "NoSchedule"}
    ]
    # merge patch: null deletes a key
    status, _, _ = await _http(
        served,
        "PATCH",
        f"/api/v1/nodes/{name}",
        body={"metadata": {"labels": {"agentpool": None, "new": "1"}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200
    labels = served.store.must_get(R.NODES, "", name)["metadata"]["labels"]
    assert "agentpool" not in labels and labels["new"] == "1"
    # JSON patch, with a failing test op
    status, body, _ = await _http(
        served,
        "PATCH",
        f"/api/v1/nodes/{name}",
        body=[{"op": "test", "path": "/spec/unschedulable", "value": True}],
        content_type="application/json-patch+json",
    )
    assert status == 422 and body["reason"] == "Invalid"
    status, body, _ = await _http(
        served,
        "PATCH",
        f"/api/v1/nodes/{name}",
        body=[{"op": "add", "path": "/spec/unschedulable", "value": True}],
        content_type="application/json-patch+json",
    )
    assert status == 200 and body["spec"]["unschedulable"] is True
    # status subresource: conditions merge by type; the main resource ignores status
    await core.patch_node_status(
        name,
        {"status": {"conditions": [{"type": "example.com/Foo", "status": "True"}]}},
    )
    conditions = served.store.must_get(R.NODES, "", name)["status"]["conditions"]
    assert [c["type"] for c in conditions][-1] == "example.com/Foo"
    assert len(conditions) == len(before["status"]["conditions"]) + 1
    await core.patch_node(name, {"status": {"conditions": []}})
    assert served.store.must_get(R.NODES, "", name)["status"]["conditions"] == conditions
    # $patch: delete removes one condition by its merge key
    await core.patch_node_status(
        name, {"status": {"conditions": [{"type": "example.com/Foo", "$patch": "delete"}]}}
    )
    types = [c["type"] for c in served.store.must_get(R.NODES, "", name)["status"]["conditions"]]
    assert "example.com/Foo" not in types and "Ready" in types


async def test_strategic_merge_of_containers_bumps_generation_and_rolls(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.patch_namespaced_deployment(
        "inference",
        "default",
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "inference", "image": "example/v2"}]}}
            }
        },
    )
    deployment = served.store.must_get(R.DEPLOYMENTS, "default", "inference")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("inference", "example/v2")]
    assert containers[0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}  # merged, not replaced
    assert deployment["metadata"]["generation"] == 2
    await eventually(
        lambda: len(list(served.store.items(R.REPLICASETS, "default"))) == 2,
        message="a second ReplicaSet",
    )
    await eventually(
        lambda: (
            served.store.must_get(R.DEPLOYMENTS, "default", "inference")["status"].get(
                "observedGeneration"
            )
            == 2
        ),
        message="observedGeneration 2",
    )


async def test_scale_subresource(served: ClusterEmulator, api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    scale = await apps.read_namespaced_deployment_scale("inference", "default")
    assert scale.spec.replicas == 3 and scale.status.selector == "app=inference"
    await apps.patch_namespaced_deployment_scale("inference", "default", {"spec": {"replicas": 1}})
    await eventually(
        lambda: (
            len([p for p in served.pods("default") if not p["metadata"].get("deletionTimestamp")])
            == 1
        ),
        message="scaled to one pod",
    )


async def test_lease_put_race_is_409_conflict(api: k8s.ApiClient) -> None:
    coordination = k8s.CoordinationV1Api(api)
    lease = k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="leader", namespace="default"),
        spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await coordination.create_namespaced_lease("default", lease)
    first = await coordination.read_namespaced_lease("leader", "default")
    second = await coordination.read_namespaced_lease("leader", "default")
    first.spec.holder_identity = "b"
    won = await coordination.replace_namespaced_lease("leader", "default", first)
    assert won.spec.holder_identity == "b"
    assert int(won.metadata.resource_version) > int(created.metadata.resource_version)
    second.spec.holder_identity = "c"
    with pytest.raises(ApiException) as caught:
        await coordination.replace_namespaced_lease("leader", "default", second)
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "leader": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    with pytest.raises(ApiException) as again:
        await coordination.create_namespaced_lease("default", lease)
    assert again.value.status == 409
    assert json.loads(again.value.body)["reason"] == "AlreadyExists"


async def test_noop_patch_keeps_resource_version(served: ClusterEmulator) -> None:
    name = served.nodes("system")[0]["metadata"]["name"]
    before = served.store.must_get(R.NODES, "", name)["metadata"]["resourceVersion"]
    status, body, _ = await _http(
        served,
        "PATCH",
        f"/api/v1/nodes/{name}",
        body={
            "spec": {"providerID": served.store.must_get(R.NODES, "", name)["spec"]["providerID"]}
        },
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 200 and body["metadata"]["resourceVersion"] == before


# ---- eviction --------------------------------------------------------------------------------


def _eviction(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "default"},
    }


async def test_eviction_allowed_then_blocked_by_pdb(served: ClusterEmulator) -> None:
    pods = await _ready_inference(served)
    first, second = pods[0]["metadata"]["name"], pods[1]["metadata"]["name"]
    status, body, _ = await _http(
        served, "POST", f"/api/v1/namespaces/default/pods/{first}/eviction", body=_eviction(first)
    )
    assert (status, body["status"], body["kind"]) == (201, "Success", "Status")
    evicted = served.store.get(R.PODS, "default", first)
    assert evicted is not None and evicted["metadata"]["deletionTimestamp"]
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 30
    await eventually(
        lambda: (
            served.store.must_get(R.PDBS, "default", "inference")["status"]["currentHealthy"] == 2
        ),
        message="the disruption controller has seen the eviction",
    )
    status, body, headers = await _http(
        served,
        "POST",
        f"/api/v1/namespaces/default/pods/{second}/eviction",
        body=_eviction(second),
    )
    assert status == 429
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget inference needs 2 healthy pods and has 2 currently",
        }
    ]
    assert "Retry-After" not in headers
    assert served.store.get(R.PODS, "default", second)["metadata"].get("deletionTimestamp") is None  # type: ignore[index]


async def test_eviction_with_two_pdbs_is_500(served: ClusterEmulator) -> None:
    pods = await _ready_inference(served)
    served.store.create(
        R.PDBS,
        {
            "metadata": {"name": "second", "namespace": "default"},
            "spec": {"maxUnavailable": 3, "selector": {"matchLabels": {"app": "inference"}}},
        },
    )
    name = pods[0]["metadata"]["name"]
    status, body, _ = await _http(
        served, "POST", f"/api/v1/namespaces/default/pods/{name}/eviction", body=_eviction(name)
    )
    assert status == 500
    assert body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )


async def test_eviction_of_pending_pod_skips_budget_and_name_mismatch_is_400(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    await _ready_inference(served)
    apps = k8s.AppsV1Api(api)
    await apps.patch_namespaced_deployment_scale("inference", "default", {"spec": {"replicas": 4}})
    pending = await eventually(
        lambda: [p for p in served.pods("default") if p["status"]["phase"] == "Pending"],
        message="a pending replica",
    )
    name = pending[0]["metadata"]["name"]
    status, body, _ = await _http(
        served, "POST", f"/api/v1/namespaces/default/pods/{name}/eviction", body=_eviction("x")
    )
    assert (status, body["reason"]) == (400, "BadRequest")
    status, _, _ = await _http(
        served, "POST", f"/api/v1/namespaces/default/pods/{name}/eviction", body=_eviction(name)
    )
    assert status == 201
    assert served.store.get(R.PODS, "default", name) is None  # unbound: deleted at once


async def test_eviction_through_kubernetes_asyncio(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    pods = await _ready_inference(served)
    core = k8s.CoreV1Api(api)
    name = pods[2]["metadata"]["name"]
    body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace="default"))
    await core.create_namespaced_pod_eviction(name, "default", body)
    await eventually(
        lambda: served.store.get(R.PODS, "default", name) is None,
        message="evicted pod gone after its shutdown",
    )


# ---- errors ----------------------------------------------------------------------------------


async def test_error_bodies_match_upstream(served: ClusterEmulator) -> None:
    status, body, _ = await _http(served, "GET", "/api/v1/namespaces/default/pods/nope")
    assert status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    status, body, _ = await _http(served, "GET", "/apis/apps/v1/namespaces/default/deployments/x")
    assert (status, body["message"]) == (404, 'deployments.apps "x" not found')
    assert body["details"] == {"name": "x", "group": "apps", "kind": "deployments"}
    status, body, _ = await _http(served, "GET", "/api/v1/nothing")
    assert (status, body["message"]) == (404, "the server could not find the requested resource")
    status, body, _ = await _http(
        served,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        body={"metadata": {"name": "Bad_Name"}},
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid')
    status, body, _ = await _http(served, "GET", "/api/v1/pods", params={"labelSelector": "a in b"})
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body, _ = await _http(
        served, "GET", "/api/v1/pods", params={"fieldSelector": "spec.colour=red"}
    )
    assert (status, body["message"]) == (400, "field label not supported: spec.colour")
    status, body, _ = await _http(served, "PUT", "/api/v1/namespaces/default/pods", body={})
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    status, body, _ = await _http(
        served,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        body="{}",
        content_type="text/plain",
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    status, body, _ = await _http(
        served,
        "POST",
        "/api/v1/namespaces/nowhere/configmaps",
        body={"metadata": {"name": "a"}},
    )
    assert (status, body["message"]) == (404, 'namespaces "nowhere" not found')
    status, body, _ = await _http(
        served,
        "PUT",
        "/api/v1/namespaces/default/configmaps/a",
        body={"metadata": {"name": "b"}},
    )
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_delete_with_uid_precondition(served: ClusterEmulator) -> None:
    pods = await _ready_inference(served)
    name = pods[0]["metadata"]["name"]
    status, body, _ = await _http(
        served,
        "DELETE",
        f"/api/v1/namespaces/default/pods/{name}",
        body={"preconditions": {"uid": "not-the-uid"}},
    )
    assert (status, body["reason"]) == (409, "Conflict")
    assert "Precondition failed: UID in precondition: not-the-uid" in body["message"]
    status, body, _ = await _http(
        served,
        "DELETE",
        f"/api/v1/namespaces/default/pods/{name}",
        body={"gracePeriodSeconds": 0},
    )
    assert status == 200 and body["kind"] == "Pod"
    assert served.store.get(R.PODS, "default", name) is None


async def test_finalizers_hold_deletion(served: ClusterEmulator) -> None:
    store = served.store
    store.create(
        R.CONFIGMAPS,
        {"metadata": {"name": "held", "namespace": "default", "finalizers": ["example.com/keep"]}},
    )
    status, body, _ = await _http(served, "DELETE", "/api/v1/namespaces/default/configmaps/held")
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    assert store.get(R.CONFIGMAPS, "default", "held") is not None
    status, _, _ = await _http(
        served,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/held",
        body={"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert status == 200
    assert store.get(R.CONFIGMAPS, "default", "held") is None


async def test_discovery_lists_eviction_and_scale(served: ClusterEmulator) -> None:
    _, core, _ = await _http(served, "GET", "/api/v1")
    eviction = next(r for r in core["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    _, groups, _ = await _http(served, "GET", "/apis")
    assert {g["name"] for g in groups["groups"]} >= {"apps", "policy", "coordination.k8s.io"}
    _, apps, _ = await _http(served, "GET", "/apis/apps/v1")
    assert "deployments/scale" in {r["name"] for r in apps["resources"]}
    _, version, _ = await _http(served, "GET", "/version")
    assert version["major"] == "1"
