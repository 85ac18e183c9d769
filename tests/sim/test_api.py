"""The API server through real clients: kubernetes_asyncio (typed and raw) and plain HTTP.

Each test asserts what a real kube-apiserver answers: codes, reasons, Status bodies, watch
event sequences, resourceVersion behaviour. They run against both backends (`emulator` and
`real`, see backend.py), each in a namespace of its own; the few that test the emulator's own
machinery use the `served` emulator only and say so.
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

from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator

from .backend import Backend
from .conftest import eventually

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
POLICY = "policy/v1"


def _container(image: str = "example/inference:v1") -> dict[str, Any]:
    # No GPU: the real cluster's GPU nodes belong to the end-to-end tests.
    return {
        "name": "inference",
        "image": image,
        "resources": {"requests": {"cpu": "10m"}, "limits": {"memory": "64Mi"}},
    }


def _deployment(replicas: int = 3) -> dict[str, Any]:
    labels = {"app": "inference"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inference", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [_container()]}},
        },
    }


def _pdb(name: str = "inference", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": POLICY,
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "inference"}}, **spec},
    }


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "inference"}},
        "spec": {"containers": [_container()], **spec},
    }


async def _pdb_allows(backend: Backend, name: str, allowed: int) -> None:
    path = backend.ns_path("poddisruptionbudgets", name, group=POLICY)

    async def allows() -> bool:
        status = (await backend.ok("GET", path)).get("status") or {}
        return bool(status.get("disruptionsAllowed") == allowed)

    await eventually(allows, within=10, message=f"PDB {name} allows {allowed}")


async def _ready_inference(backend: Backend) -> list[dict[str, Any]]:
    """The `inference` Deployment, 3 ready replicas, a PDB maxUnavailable 1 that allows one."""
    await backend.create("deployments", _deployment(), group="apps/v1")
    await backend.create("poddisruptionbudgets", _pdb(maxUnavailable=1), group=POLICY)
    pods = await backend.wait_ready("app=inference", 3)
    await _pdb_allows(backend, "inference", 1)
    return pods


async def _guarded_pods(backend: Backend) -> list[str]:
    """Three ready bare pods under a PDB minAvailable 2 that allows one disruption: unlike a
    Deployment's, an evicted one is not replaced, so the budget stays spent."""
    for index in range(3):
        await backend.create("pods", _pod(f"inference-{index}"))
    await backend.create("poddisruptionbudgets", _pdb(minAvailable=2), group=POLICY)
    await backend.wait_ready("app=inference", 3)
    await _pdb_allows(backend, "inference", 1)
    return [f"inference-{index}" for index in range(3)]


def _events(body: Any) -> list[dict[str, Any]]:
    """Watch stream lines (one line alone parses as a single JSON document)."""
    if isinstance(body, dict):
        return [body]
    return [json.loads(line) for line in body.splitlines() if line]


async def _watch(backend: Backend, path: str, **params: str) -> list[dict[str, Any]]:
    """The events of a watch that the server ends after `timeoutSeconds` (1 by default)."""
    status, body, _ = await backend.http(
        "GET", path, params={"watch": "true", "timeoutSeconds": "1", **params}
    )
    assert status == 200, body
    return _events(body)


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


# ---- reads -----------------------------------------------------------------------------------


async def test_list_nodes_and_pods(backend: Backend) -> None:
    core = k8s.CoreV1Api(backend.api)
    spot = await core.list_node(label_selector="kubernetes.azure.com/scalesetpriority=spot")
    assert len(spot.items) == 3
    not_spot = await core.list_node(
        label_selector="kubernetes.azure.com/scalesetpriority notin (spot),"
        "kubernetes.azure.com/mode=system"
    )
    assert [n.metadata.labels["kubernetes.azure.com/agentpool"] for n in not_spot.items] == [
        "system"
    ]
    pods = await _ready_inference(backend)
    system = not_spot.items[0].metadata.name
    on_node = await core.list_namespaced_pod(
        backend.namespace, field_selector=f"spec.nodeName={system}"
    )
    assert sorted(p.metadata.name for p in on_node.items) == _names(pods)
    everywhere = await core.list_pod_for_all_namespaces(
        field_selector=f"metadata.namespace={backend.namespace},status.phase=Running"
    )
    assert sorted(p.metadata.name for p in everywhere.items) == _names(pods)
    elsewhere = await core.list_namespaced_pod(
        backend.namespace, field_selector=f"spec.nodeName!={system}"
    )
    assert elsewhere.items == []  # the GPU nodes' taints keep them off


async def test_list_chunking_with_limit_and_continue(backend: Backend) -> None:
    everything = await backend.ok("GET", "/api/v1/nodes")
    total = len(everything["items"])
    assert total > 4
    status, first, _ = await backend.http("GET", "/api/v1/nodes", params={"limit": "4"})
    assert status == 200
    assert len(first["items"]) == 4
    assert first["metadata"]["remainingItemCount"] == total - 4
    token = first["metadata"]["continue"]
    rest = await backend.ok("GET", "/api/v1/nodes", params={"limit": "4", "continue": token})
    assert "continue" not in rest["metadata"]
    names = [n["metadata"]["name"] for n in first["items"] + rest["items"]]
    assert names == [n["metadata"]["name"] for n in everything["items"]]
    assert names == sorted(names)
    assert "kind" not in first["items"][0]  # only the List carries kind


async def test_get_object_wire_format(backend: Backend) -> None:
    await backend.create("deployments", _deployment(replicas=0), group="apps/v1")
    status, deployment, _ = await backend.http(
        "GET", backend.ns_path("deployments", "inference", group="apps/v1")
    )
    assert status == 200
    assert deployment["apiVersion"] == "apps/v1" and deployment["kind"] == "Deployment"
    meta = deployment["metadata"]
    assert isinstance(meta["resourceVersion"], str) and int(meta["resourceVersion"]) > 0
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"].endswith("Z")


# ---- watch -----------------------------------------------------------------------------------


async def test_watch_from_list_version_sees_graceful_delete(backend: Backend) -> None:
    core = k8s.CoreV1Api(backend.api)
    pods = await _ready_inference(backend)
    listed = await core.list_namespaced_pod(backend.namespace)
    victim = pods[0]["metadata"]["name"]
    seen: list[tuple[str, bool]] = []

    async def consume() -> None:
        watch = Watch()
        async with watch.stream(
            core.list_namespaced_pod,
            backend.namespace,
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
    await core.delete_namespaced_pod(victim, backend.namespace)
    await asyncio.wait_for(task, 10)
    assert seen[0] == ("MODIFIED", True)  # graceful: deletionTimestamp first
    assert seen[-1][0] == "DELETED"


async def test_watch_from_compacted_version_is_410_expired(
    served: ClusterEmulator, api: k8s.ApiClient
) -> None:
    """Emulator only: the real server compacts etcd every 5 minutes, no client can force it."""
    old = served.store.resource_version
    served.store.create(R.CONFIGMAPS, {"metadata": {"name": "bump", "namespace": "default"}})
    served.store.compact()
    assert served.urls is not None
    core = k8s.CoreV1Api(api)
    with pytest.raises(ApiException) as caught:
        async with Watch().stream(
            core.list_namespaced_pod, "default", resource_version=str(old), timeout_seconds=1
        ) as stream:
            async for _ in stream:
                pass
    assert caught.value.status == 410
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            served.urls.api + "/api/v1/namespaces/default/pods",
            params={"watch": "true", "resourceVersion": str(old), "timeoutSeconds": "1"},
        ) as response,
    ):
        assert response.status == 200  # like the watch cache: an ERROR event in a 200 stream
        event = _events(await response.text())[0]
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


async def test_watch_reconnects_after_server_timeout_without_losing_events(
    backend: Backend,
) -> None:
    """kubernetes_asyncio resumes from the last resourceVersion after a server-side end."""
    core = k8s.CoreV1Api(backend.api)
    namespace = backend.namespace
    listed = await core.list_namespaced_config_map(namespace)
    names: list[str] = []
    watches = 0
    first_ended = asyncio.Event()

    async def consume() -> None:
        nonlocal watches
        version = listed.metadata.resource_version
        while len(names) < 2:
            watches += 1
            if watches == 2:
                first_ended.set()
            async with Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=version,
                timeout_seconds=1,
            ) as stream:
                async for event in stream:
                    names.append(event["object"].metadata.name)
                    version = event["object"].metadata.resource_version

    task = asyncio.create_task(consume())
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="one"))
    await core.create_namespaced_config_map(namespace, body)
    await asyncio.wait_for(first_ended.wait(), 10)  # the server ended it: the next one resumes
    await core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="two"))
    )
    await asyncio.wait_for(task, 10)
    assert names == ["one", "two"]
    assert watches >= 2


@pytest.mark.parametrize("spelling", ["true", "True", "1", "t", "TRUE"])
async def test_watch_true_spellings_and_no_early_bookmark(backend: Backend, spelling: str) -> None:
    """Go's ParseBool spellings all start a watch. Bookmarks come about once a minute (and 2 s
    before the end of a longer watch), never in a 1-second watch."""
    since = (await backend.ok("GET", backend.ns_path("configmaps")))["metadata"]["resourceVersion"]
    await backend.create("configmaps", {"metadata": {"name": "seen"}})
    events = await _watch(
        backend,
        backend.ns_path("configmaps"),
        watch=spelling,
        allowWatchBookmarks="true",
        resourceVersion=since,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "seen")]


async def test_watch_list_sends_initial_events_then_end_bookmark(backend: Backend) -> None:
    nodes = (await backend.ok("GET", "/api/v1/nodes"))["items"]
    events = await _watch(
        backend,
        "/api/v1/nodes",
        sendInitialEvents="true",
        allowWatchBookmarks="true",
        resourceVersionMatch="NotOlderThan",
    )
    initial = events[: len(nodes)]
    assert [e["type"] for e in initial] == ["ADDED"] * len(nodes)
    assert {e["object"]["metadata"]["name"] for e in initial} == {
        n["metadata"]["name"] for n in nodes
    }
    end = events[len(nodes)]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["kind"] == "Node"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_with_label_selector_reports_objects_leaving_it(backend: Backend) -> None:
    created = await backend.create("configmaps", {"metadata": {"name": "c", "labels": {"a": "1"}}})
    patched = await backend.ok(
        "PATCH",
        backend.ns_path("configmaps", "c"),
        body={"metadata": {"labels": {"a": "2"}}},
        content_type=MERGE,
    )
    events = await _watch(
        backend,
        backend.ns_path("configmaps"),
        watch="1",
        labelSelector="a=1",
        resourceVersion=created["metadata"]["resourceVersion"],
    )
    # The object as the watcher last saw it, at the version of the change that took it out.
    assert [(e["type"], e["object"]["metadata"]["labels"]) for e in events] == [
        ("DELETED", {"a": "1"})
    ]
    version = events[0]["object"]["metadata"]["resourceVersion"]
    assert version == patched["metadata"]["resourceVersion"]


# ---- writes, patches -------------------------------------------------------------------------


async def _settled_node(backend: Backend) -> dict[str, Any]:
    """A Node of the test's own once the node lifecycle controller has lifted the not-ready
    taint that admission puts on every new Node."""
    name = (await backend.create_node("patch", labels={"agentpool": "own"}))["metadata"]["name"]

    async def settled() -> dict[str, Any] | None:
        node: dict[str, Any] = await backend.ok("GET", f"/api/v1/nodes/{name}")
        keys = [t["key"] for t in node["spec"].get("taints") or []]
        return node if "node.kubernetes.io/not-ready" not in keys else None

    result: dict[str, Any] = await eventually(settled, within=10, message="not-ready lifted")
    return result


async def test_new_node_is_tainted_not_ready_until_ready(backend: Backend) -> None:
    created = await backend.create_node("new")
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in created["spec"][
        "taints"
    ]
    node = await _settled_node(backend)
    assert [t["key"] for t in node["spec"]["taints"]] == ["conformance.spot-rebalancer.io/owner"]


async def test_patch_types_on_nodes(backend: Backend) -> None:
    core = k8s.CoreV1Api(backend.api)
    before = await _settled_node(backend)
    name = before["metadata"]["name"]
    path = f"/api/v1/nodes/{name}"
    # strategic merge (the client's default for dict bodies): node taints have no merge key
    await core.patch_node(name, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})
    assert (await backend.ok("GET", path))["spec"]["taints"] == [
        {"key": "x", "effect": "NoSchedule"}
    ]
    # merge patch: null deletes a key
    status, body, _ = await backend.http(
        "PATCH",
        path,
        body={"metadata": {"labels": {"agentpool": None, "new": "1"}}},
        content_type=MERGE,
    )
    assert status == 200
    labels = body["metadata"]["labels"]
    assert "agentpool" not in labels and labels["new"] == "1"
    # JSON patch, with a failing test op
    status, body, _ = await backend.http(
        "PATCH",
        path,
        body=[{"op": "test", "path": "/spec/unschedulable", "value": True}],
        content_type=JSON_PATCH,
    )
    assert status == 422 and body["reason"] == "Invalid"
    status, body, _ = await backend.http(
        "PATCH",
        path,
        body=[{"op": "add", "path": "/spec/unschedulable", "value": True}],
        content_type=JSON_PATCH,
    )
    assert status == 200 and body["spec"]["unschedulable"] is True
    # status subresource: conditions merge by type; the main resource ignores status
    await core.patch_node_status(
        name,
        {"status": {"conditions": [{"type": "example.com/Foo", "status": "True"}]}},
    )
    conditions = (await backend.ok("GET", path))["status"]["conditions"]
    # Strategic merge puts items new to a list before the ones only the server had.
    assert [c["type"] for c in conditions] == ["example.com/Foo", "Ready"]
    await core.patch_node(name, {"status": {"conditions": []}})
    assert (await backend.ok("GET", path))["status"]["conditions"] == conditions
    # $patch: delete removes one condition by its merge key
    await core.patch_node_status(
        name, {"status": {"conditions": [{"type": "example.com/Foo", "$patch": "delete"}]}}
    )
    types = [c["type"] for c in (await backend.ok("GET", path))["status"]["conditions"]]
    assert types == ["Ready"]


async def test_strategic_merge_of_containers_bumps_generation_and_rolls(
    backend: Backend,
) -> None:
    apps = k8s.AppsV1Api(backend.api)
    await _ready_inference(backend)
    await apps.patch_namespaced_deployment(
        "inference",
        backend.namespace,
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "inference", "image": "example/v2"}]}}
            }
        },
    )
    path = backend.ns_path("deployments", "inference", group="apps/v1")
    deployment = await backend.ok("GET", path)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("inference", "example/v2")]
    assert containers[0]["resources"]["limits"] == {"memory": "64Mi"}  # merged, not replaced
    assert deployment["metadata"]["generation"] == 2

    async def two_replica_sets() -> bool:
        listed = await backend.ok("GET", backend.ns_path("replicasets", group="apps/v1"))
        return len(listed["items"]) == 2

    await eventually(two_replica_sets, message="a second ReplicaSet")

    async def observed() -> bool:
        status = (await backend.ok("GET", path)).get("status") or {}
        return bool(status.get("observedGeneration") == 2)

    await eventually(observed, message="observedGeneration 2")


async def test_scale_subresource(backend: Backend) -> None:
    apps = k8s.AppsV1Api(backend.api)
    await _ready_inference(backend)
    scale = await apps.read_namespaced_deployment_scale("inference", backend.namespace)
    assert scale.spec.replicas == 3 and scale.status.selector == "app=inference"
    await apps.patch_namespaced_deployment_scale(
        "inference", backend.namespace, {"spec": {"replicas": 1}}
    )

    async def one_left() -> bool:
        pods = await backend.pods(labelSelector="app=inference")
        return len([p for p in pods if not p["metadata"].get("deletionTimestamp")]) == 1

    await eventually(one_left, within=10, message="scaled to one pod")


async def test_lease_put_race_is_409_conflict(backend: Backend) -> None:
    coordination = k8s.CoordinationV1Api(backend.api)
    namespace = backend.namespace
    lease = k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="leader", namespace=namespace),
        spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await coordination.create_namespaced_lease(namespace, lease)
    first = await coordination.read_namespaced_lease("leader", namespace)
    second = await coordination.read_namespaced_lease("leader", namespace)
    first.spec.holder_identity = "b"
    won = await coordination.replace_namespaced_lease("leader", namespace, first)
    assert won.spec.holder_identity == "b"
    assert int(won.metadata.resource_version) > int(created.metadata.resource_version)
    second.spec.holder_identity = "c"
    with pytest.raises(ApiException) as caught:
        await coordination.replace_namespaced_lease("leader", namespace, second)
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "leader": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    with pytest.raises(ApiException) as again:
        await coordination.create_namespaced_lease(namespace, lease)
    assert again.value.status == 409
    assert json.loads(again.value.body)["reason"] == "AlreadyExists"


async def test_noop_patch_keeps_resource_version(backend: Backend) -> None:
    created = await backend.create("configmaps", {"metadata": {"name": "same"}, "data": {"a": "1"}})
    for content_type in (STRATEGIC, MERGE):
        status, body, _ = await backend.http(
            "PATCH",
            backend.ns_path("configmaps", "same"),
            body={"data": {"a": "1"}},
            content_type=content_type,
        )
        assert status == 200
        assert body["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


# ---- eviction --------------------------------------------------------------------------------


def _eviction(name: str) -> dict[str, Any]:
    return {"apiVersion": POLICY, "kind": "Eviction", "metadata": {"name": name}}


async def _evict(backend: Backend, pod: str, *, name: str | None = None) -> tuple[int, Any, Any]:
    return await backend.http(
        "POST",
        backend.ns_path("pods", f"{pod}/eviction"),
        body=_eviction(pod if name is None else name),
    )


async def test_eviction_allowed_then_blocked_by_pdb(backend: Backend) -> None:
    first, second, _ = await _guarded_pods(backend)
    since = (await backend.ok("GET", backend.ns_path("pods")))["metadata"]["resourceVersion"]
    status, body, _ = await _evict(backend, first)
    assert (status, body["status"], body["kind"]) == (201, "Success", "Status")
    # The eviction's writes: a DisruptionTarget condition, then a graceful delete with the pod's
    # grace period.
    marked, deleted, *_ = await _watch(
        backend,
        backend.ns_path("pods"),
        resourceVersion=since,
        fieldSelector=f"metadata.name={first}",
    )
    assert (marked["type"], deleted["type"]) == ("MODIFIED", "MODIFIED")
    assert "deletionTimestamp" not in marked["object"]["metadata"]
    condition = marked["object"]["status"]["conditions"][-1]
    assert {k: condition[k] for k in ("type", "status", "reason", "message")} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    evicted = deleted["object"]["metadata"]
    assert evicted["deletionTimestamp"] and evicted["deletionGracePeriodSeconds"] == 30
    await _pdb_allows(backend, "inference", 0)
    status, body, headers = await _evict(backend, second)
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
    pod = await backend.ok("GET", backend.ns_path("pods", second))
    assert pod["metadata"].get("deletionTimestamp") is None


async def test_eviction_with_two_pdbs_is_500(backend: Backend) -> None:
    first, _, _ = await _guarded_pods(backend)
    await backend.create("poddisruptionbudgets", _pdb("second", maxUnavailable=3), group=POLICY)
    status, body, _ = await _evict(backend, first)
    assert status == 500
    assert body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )


async def test_eviction_of_pending_pod_skips_budget_and_name_mismatch_is_400(
    backend: Backend,
) -> None:
    await _guarded_pods(backend)
    await _pdb_allows(backend, "inference", 1)
    # No node has this label: the pod stays Pending, unbound.
    await backend.create("pods", _pod("pending", nodeSelector={"example.com/nowhere": "1"}))
    status, body, _ = await _evict(backend, "pending", name="x")
    assert (status, body["reason"]) == (400, "BadRequest")
    status, _, _ = await _evict(backend, "pending")
    assert status == 201
    status, _, _ = await backend.http("GET", backend.ns_path("pods", "pending"))
    assert status == 404  # unbound: deleted at once


async def test_eviction_through_kubernetes_asyncio(backend: Backend) -> None:
    name = (await _guarded_pods(backend))[2]
    core = k8s.CoreV1Api(backend.api)
    body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace=backend.namespace))
    await core.create_namespaced_pod_eviction(name, backend.namespace, body)

    async def gone() -> bool:
        status, _, _ = await backend.http("GET", backend.ns_path("pods", name))
        return status == 404

    await eventually(gone, within=10, message="evicted pod gone after its shutdown")


# ---- errors ----------------------------------------------------------------------------------


async def test_error_bodies_match_upstream(backend: Backend) -> None:
    http, ns_path = backend.http, backend.ns_path
    status, body, _ = await http("GET", ns_path("pods", "nope"))
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
    status, body, _ = await http("GET", ns_path("deployments", "x", group="apps/v1"))
    assert (status, body["message"]) == (404, 'deployments.apps "x" not found')
    assert body["details"] == {"name": "x", "group": "apps", "kind": "deployments"}
    status, body, _ = await http("GET", "/api/v1/nothing")
    assert (status, body["message"]) == (404, "the server could not find the requested resource")
    status, body, _ = await http(
        "POST", ns_path("configmaps"), body={"metadata": {"name": "Bad_Name"}}
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid')
    status, body, _ = await http("GET", "/api/v1/pods", params={"labelSelector": "a in b"})
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body, _ = await http("GET", "/api/v1/pods", params={"fieldSelector": "spec.colour=red"})
    assert (status, body["message"]) == (400, "field label not supported: spec.colour")
    status, body, _ = await http("PUT", ns_path("pods"), body={})
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    status, body, _ = await http(
        "PATCH", ns_path("configmaps", "x"), body="{}", content_type="text/plain"
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    status, body, _ = await http(
        "POST", "/api/v1/namespaces/nowhere/configmaps", body={"metadata": {"name": "a"}}
    )
    assert (status, body["message"]) == (404, 'namespaces "nowhere" not found')
    status, body, _ = await http(
        "PUT", ns_path("configmaps", "a"), body={"metadata": {"name": "b"}}
    )
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_delete_with_uid_precondition(backend: Backend) -> None:
    name = (await _guarded_pods(backend))[0]
    status, body, _ = await backend.http(
        "DELETE",
        backend.ns_path("pods", name),
        body={"preconditions": {"uid": "not-the-uid"}},
    )
    uid = (await backend.ok("GET", backend.ns_path("pods", name)))["metadata"]["uid"]
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition '
        f"(not-the-uid) does not match the UID in record ({uid}). The object might have been "
        "deleted and then recreated"
    )
    assert body["details"] == {"name": name, "kind": "Pod"}
    status, body, _ = await backend.http(
        "DELETE", backend.ns_path("pods", name), body={"gracePeriodSeconds": 0}
    )
    assert status == 200 and body["kind"] == "Pod"
    status, _, _ = await backend.http("GET", backend.ns_path("pods", name))
    assert status == 404


async def test_finalizers_hold_deletion(backend: Backend) -> None:
    path = backend.ns_path("configmaps", "held")
    await backend.create(
        "configmaps", {"metadata": {"name": "held", "finalizers": ["example.com/keep"]}}
    )
    status, body, _ = await backend.http("DELETE", path)
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    assert (await backend.http("GET", path))[0] == 200
    status, _, _ = await backend.http(
        "PATCH", path, body={"metadata": {"finalizers": None}}, content_type=MERGE
    )
    assert status == 200
    assert (await backend.http("GET", path))[0] == 404


async def test_discovery_lists_eviction_and_scale(backend: Backend) -> None:
    core = await backend.ok("GET", "/api/v1")
    eviction = next(r for r in core["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    groups = await backend.ok("GET", "/apis")
    assert {g["name"] for g in groups["groups"]} >= {"apps", "policy", "coordination.k8s.io"}
    apps = await backend.ok("GET", "/apis/apps/v1")
    assert "deployments/scale" in {r["name"] for r in apps["resources"]}
    version = await backend.ok("GET", "/version")
    assert version["major"] == "1"
