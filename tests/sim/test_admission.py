"""Mutating admission webhooks: the emulator calls a real HTTPS webhook on 127.0.0.1 as
kube-apiserver would, for pods created through the API and by its own controllers.

The webhook here does what the controller's placement webhook will do: it adds a required node
affinity for a node pool (and a label), so where the emulator's scheduler puts a pod shows
whether the patch was applied. Expected messages are upstream's, built from the scenario (the
webhook's name, its Service, the port nothing listens on), not read back from the emulator.
Emulator only: a webhook configuration on the shared real cluster would intercept every other
test's pods.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import parse_scenario
from tests.e2e.rig import register_placement_webhook
from tests.helpers import free_port, serve
from tests.tls import ThrowawayCA

from .backend import Backend

Obj = dict[str, Any]

WEBHOOK = "placement.spot-rebalancer.io"
SERVICE = "spot-rebalancer/placement:443"
SERVICE_HOST = "placement.spot-rebalancer.svc"  # what its certificate must be valid for
POOL_LABEL = "kubernetes.azure.com/agentpool"
CHOSEN_POOL = "gpuondemand"
SPOT = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
GPU = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}


def _scenario() -> Any:
    """Spot and on-demand GPU pools with room, and `llm` (1 replica) preferring spot: a pod lands
    on on-demand only if a webhook requires it."""
    gpu = {"vmSize": "Standard_NC24ads_A100_v4", "cpu": 24, "memory": "220Gi", "gpus": 1}
    return parse_scenario(
        {
            "name": "admission",
            "settings": {"nodeAutoDrain": False, "shutdownSeconds": 0.1},
            "pools": [
                {"name": "system", "mode": "system", "cpu": 4, "memory": "16Gi", "count": 1},
                {"name": "gpuspot", "priority": "spot", "count": 3, **gpu},
                {"name": CHOSEN_POOL, "count": 3, **gpu},
            ],
            "workloads": [
                {
                    "name": "llm",
                    "namespace": "inference",
                    "replicas": 1,
                    "requests": {"cpu": "4", "nvidia.com/gpu": 1},
                    "tolerations": [
                        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
                        "sku=gpu:NoSchedule",
                    ],
                    "preferSpot": 100,
                }
            ],
        }
    )


def placement_patch(pod: Obj, pool: str) -> list[Obj]:
    """JSON patch operations that require `pool` and add the label `placed-by: webhook`."""
    required = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [pool]}]}
        ]
    }
    affinity = pod["spec"].get("affinity")
    if affinity is None:
        operations = [
            {
                "op": "add",
                "path": "/spec/affinity",
                "value": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
                },
            }
        ]
    elif "nodeAffinity" not in affinity:
        operations = [
            {
                "op": "add",
                "path": "/spec/affinity/nodeAffinity",
                "value": {"requiredDuringSchedulingIgnoredDuringExecution": required},
            }
        ]
    else:
        operations = [
            {
                "op": "add",
                "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
                "value": required,
            }
        ]
    if pod["metadata"].get("labels"):
        operations.append({"op": "add", "path": "/metadata/labels/placed-by", "value": "webhook"})
    else:
        operations.append(
            {"op": "add", "path": "/metadata/labels", "value": {"placed-by": "webhook"}}
        )
    return operations


def _encoded(document: Any) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


def place(request: Obj) -> Obj:
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": _encoded(placement_patch(request["object"], CHOSEN_POOL)),
        "warnings": [f"placed on {CHOSEN_POOL}"],
    }


@dataclass
class Seen:
    path: str  # with the query
    host: str  # the Host header
    review: Obj


@dataclass
class PlacementWebhook:
    """The webhook server's behaviour: `answer` maps an AdmissionReview's request to its
    response (without uid); `delay` holds each answer that long (or until released)."""

    answer: Callable[[Obj], Obj] = place
    delay: float = 0.0
    seen: list[Seen] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.seen.append(Seen(request.path_qs, request.headers.get("Host", ""), review))
        if self.delay:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), self.delay)
        response = {"uid": review["request"]["uid"], **self.answer(review["request"])}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


@asynccontextmanager
async def serving(
    webhook: PlacementWebhook,
    ca: ThrowawayCA,
    *,
    port: int = 0,
    dns_names: tuple[str, ...] = (SERVICE_HOST,),
    ip_addresses: tuple[str, ...] = (),
) -> AsyncIterator[str]:
    """The webhook over HTTPS on 127.0.0.1 with a certificate `ca` issued for these names;
    yields its address (host:port)."""
    app = web.Application()
    app.router.add_post("/{path:.*}", webhook.handle)
    context = ca.server_context(list(dns_names), list(ip_addresses))
    async with serve(app, ssl_context=context, port=port) as url:
        try:
            yield url.removeprefix("https://")
        finally:
            webhook.released.set()


@pytest.fixture
def ca() -> ThrowawayCA:
    return ThrowawayCA()


@pytest.fixture
async def cluster() -> AsyncIterator[ClusterEmulator]:
    async with ClusterEmulator(_scenario(), tick_seconds=0.02) as cluster:
        yield cluster


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer any"}) as session:
        yield session


def probe(*, labels: dict[str, str] | None = None) -> Obj:
    """A pod with a generated name that tolerates the GPU pools' taints."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "probe-", "labels": labels or {"app": "llm"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "tolerations": [{"operator": "Equal", **SPOT}, {"operator": "Equal", **GPU}],
        },
    }


async def create_pod(
    session: aiohttp.ClientSession,
    cluster: ClusterEmulator,
    pod: Obj,
    *,
    namespace: str = "inference",
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Obj, list[str]]:
    """POST a pod through the API: status, body, Warning headers."""
    assert cluster.urls is not None
    async with session.post(
        f"{cluster.urls.api}/api/v1/namespaces/{namespace}/pods",
        json=pod,
        params=params,
        headers=headers,
    ) as response:
        return response.status, await response.json(), response.headers.getall("Warning", [])


def pool_of(cluster: ClusterEmulator, pod: Obj) -> str:
    node = cluster.store.get(R.NODES, "", pod["spec"]["nodeName"])
    assert node is not None
    return str(node["metadata"]["labels"][POOL_LABEL])


async def bound(cluster: ClusterEmulator, namespace: str, name: str) -> Obj:
    def found() -> Obj | None:
        pod = cluster.store.get(R.PODS, namespace, name)
        return pod if pod is not None and pod["spec"].get("nodeName") else None

    result: Obj = await cluster.wait_for(found, timeout=5, message=f"{name} scheduled")
    return result


def llm_pods(cluster: ClusterEmulator) -> list[Obj]:
    return [p for p in cluster.pods("inference") if p["metadata"]["name"].startswith("llm-")]


def refused_message(reason: str, *, timeout_seconds: int = 10, service: str = SERVICE_HOST) -> str:
    return (
        f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call webhook: '
        f'Post "https://{service}:443/mutate?timeout={timeout_seconds}s": {reason}'
    )


@asynccontextmanager
async def registered(
    cluster: ClusterEmulator, webhook: PlacementWebhook, *, ca: ThrowawayCA, **changes: Any
) -> AsyncIterator[str]:
    """`webhook` served (as `serving` does) and registered as the configuration `placement`,
    reached through the Service SERVICE; `changes` to `Admission.register`'s arguments."""
    async with serving(webhook, ca) as address:
        arguments = {"ca_bundle": ca.pem, "service": SERVICE, **changes}
        cluster.admission.register("placement", webhook=WEBHOOK, address=address, **arguments)
        yield address


# ---- placement: both ways pods are created -----------------------------------------------------


async def test_api_and_replicaset_pods_arrive_mutated_and_are_placed_accordingly(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    (before,) = llm_pods(cluster)
    assert pool_of(cluster, before) == "gpuspot"  # created before the webhook: spot preferred
    webhook = PlacementWebhook()
    async with registered(cluster, webhook, ca=ca):
        status, created, warnings = await create_pod(
            session, cluster, probe(), headers={"Impersonate-User": "alice@example.com"}
        )
        assert status == 201, created
        assert created["metadata"]["labels"] == {"app": "llm", "placed-by": "webhook"}
        assert warnings == [f'299 - "placed on {CHOSEN_POOL}"']
        pod = await bound(cluster, "inference", created["metadata"]["name"])
        assert pool_of(cluster, pod) == CHOSEN_POOL

        cluster.scale("llm", 3)
        await cluster.wait_for(
            lambda: sum(1 for p in llm_pods(cluster) if p["spec"].get("nodeName")) == 3,
            timeout=5,
            message="3 llm replicas scheduled",
        )

    new = [p for p in llm_pods(cluster) if p["metadata"]["uid"] != before["metadata"]["uid"]]
    assert len(new) == 2
    for pod in new:
        assert pod["metadata"]["labels"]["placed-by"] == "webhook"
        assert pool_of(cluster, pod) == CHOSEN_POOL
    unchanged = cluster.store.get(R.PODS, "inference", before["metadata"]["name"])
    assert unchanged is not None
    assert "placed-by" not in unchanged["metadata"]["labels"]

    # What the webhook received, as kube-apiserver sends it.
    assert [s.path for s in webhook.seen] == ["/mutate?timeout=10s"] * 3
    assert {s.host for s in webhook.seen} == {f"{SERVICE_HOST}:443"}
    api_review, *replicaset_reviews = [s.review for s in webhook.seen]
    assert (api_review["apiVersion"], api_review["kind"]) == (
        "admission.k8s.io/v1",
        "AdmissionReview",
    )
    request = api_review["request"]
    uuid.UUID(request["uid"])
    pod_kind = {"group": "", "version": "v1", "kind": "Pod"}
    pods = {"group": "", "version": "v1", "resource": "pods"}
    assert (request["kind"], request["requestKind"]) == (pod_kind, pod_kind)
    assert (request["resource"], request["requestResource"]) == (pods, pods)
    assert "subResource" not in request
    assert "name" not in request  # a generateName: no name yet
    assert (request["namespace"], request["operation"]) == ("inference", "CREATE")
    assert request["userInfo"] == {
        "username": "alice@example.com",
        "groups": ["system:authenticated"],
    }
    obj = request["object"]
    assert (obj["apiVersion"], obj["kind"]) == ("v1", "Pod")
    assert obj["metadata"]["generateName"] == "probe-"
    assert obj["metadata"]["namespace"] == "inference"
    assert "name" not in obj["metadata"] and "uid" not in obj["metadata"]
    assert obj["spec"]["schedulerName"] == "default-scheduler"  # decoded with defaults
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}

    replicaset = new[0]["metadata"]["ownerReferences"][0]["name"]
    for review in replicaset_reviews:
        request = review["request"]
        assert request["userInfo"] == {
            "username": "system:serviceaccount:kube-system:replicaset-controller",
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated",
            ],
        }
        assert request["object"]["metadata"]["generateName"] == f"{replicaset}-"
        assert request["object"]["metadata"]["ownerReferences"][0]["name"] == replicaset
    assert cluster.admission.outcomes() == {"patched": 3}
    assert all(call.latency_seconds > 0 for call in cluster.admission.calls)


async def test_statefulset_and_daemonset_pods_are_admitted_as_their_controllers(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    assert cluster.urls is not None
    labelled = {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": _encoded(
            [{"op": "add", "path": "/metadata/labels/placed-by", "value": "webhook"}]
        ),
    }
    webhook = PlacementWebhook(answer=lambda _: labelled)
    template = probe(labels={"tier": "db"})
    template["spec"]["nodeSelector"] = {POOL_LABEL: "system"}
    selector = {"matchLabels": {"tier": "db"}}
    workloads = {
        "statefulsets": {"replicas": 2, "serviceName": "db", "selector": selector},
        "daemonsets": {"selector": selector},
    }
    async with registered(cluster, webhook, ca=ca, object_selector=selector):
        for plural, spec in workloads.items():
            body = {
                "metadata": {"name": f"db-{plural}"},
                "spec": {
                    **spec,
                    "template": {"metadata": template["metadata"], "spec": template["spec"]},
                },
            }
            async with session.post(
                f"{cluster.urls.api}/apis/apps/v1/namespaces/inference/{plural}", json=body
            ) as response:
                assert response.status == 201, await response.text()
        await cluster.wait_for(
            lambda: (
                len(
                    [
                        p
                        for p in cluster.pods("inference")
                        if p["metadata"]["name"].startswith("db-")
                    ]
                )
                == 3
            ),
            timeout=5,
            message="2 StatefulSet pods and 1 DaemonSet pod",
        )
    for pod in cluster.pods("inference"):
        if pod["metadata"]["name"].startswith("db-"):
            assert pod["metadata"]["labels"]["placed-by"] == "webhook"
    seen = [
        (
            s.review["request"]["userInfo"]["username"].rsplit(":", 1)[1],
            s.review["request"].get("name"),
        )
        for s in webhook.seen
    ]
    assert sorted(seen, key=str) == sorted(
        [
            ("statefulset-controller", "db-statefulsets-0"),
            ("statefulset-controller", "db-statefulsets-1"),
            ("daemon-set-controller", None),  # a generateName
        ],
        key=str,
    )


async def test_dry_run_calls_the_webhook_and_stores_nothing(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    webhook = PlacementWebhook()
    async with registered(cluster, webhook, ca=ca):
        pods_before = len(cluster.pods("inference"))
        status, created, _ = await create_pod(session, cluster, probe(), params={"dryRun": "All"})
    assert status == 201, created
    assert created["metadata"]["labels"]["placed-by"] == "webhook"
    assert len(cluster.pods("inference")) == pods_before
    (seen,) = webhook.seen
    assert seen.review["request"]["dryRun"] is True
    assert seen.review["request"]["options"] == {
        "kind": "CreateOptions",
        "apiVersion": "meta.k8s.io/v1",
        "dryRun": ["All"],
    }


# ---- which requests ---------------------------------------------------------------------------


async def test_namespace_and_object_selectors_exclude_what_they_do_not_select(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    assert cluster.urls is not None
    async with session.patch(
        f"{cluster.urls.api}/api/v1/namespaces/inference",
        json={"metadata": {"labels": {"placement": "managed"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:
        assert response.status == 200
    async with session.post(
        f"{cluster.urls.api}/api/v1/namespaces", json={"metadata": {"name": "unmanaged"}}
    ) as response:
        assert response.status == 201
    webhook = PlacementWebhook()
    async with registered(
        cluster,
        webhook,
        namespace_selector={"matchLabels": {"placement": "managed"}},
        object_selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["llm"]}]},
        ca=ca,
    ):
        results = [
            await create_pod(session, cluster, probe(labels={"app": "llm"})),
            await create_pod(session, cluster, probe(labels={"app": "web"})),
            await create_pod(session, cluster, probe(labels={"app": "llm"}), namespace="unmanaged"),
        ]
        status, missing, _ = await create_pod(session, cluster, probe(), namespace="absent")
    assert (status, missing["message"]) == (404, 'namespaces "absent" not found')
    assert [status for status, _, _ in results] == [201, 201, 201]
    labels = [created["metadata"]["labels"] for _, created, _ in results]
    assert labels == [{"app": "llm", "placed-by": "webhook"}, {"app": "web"}, {"app": "llm"}]
    assert len(webhook.seen) == 1
    assert [(c.namespace, c.outcome) for c in cluster.admission.calls] == [("inference", "patched")]


# ---- failures, per failurePolicy --------------------------------------------------------------


async def test_ignore_with_the_webhook_down_creates_unmutated_at_once(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    port = free_port()  # nothing listens there
    cluster.admission.register(
        "placement",
        webhook=WEBHOOK,
        address=f"127.0.0.1:{port}",
        ca_bundle=ca.pem,
        service=SERVICE,
        failure_policy="Ignore",
    )
    started = time.monotonic()
    status, created, _ = await create_pod(session, cluster, probe())
    assert time.monotonic() - started < 1.0
    assert status == 201, created
    assert created["metadata"]["labels"] == {"app": "llm"}
    cluster.scale("llm", 2)
    await cluster.wait_for(lambda: len(llm_pods(cluster)) == 2, timeout=5, message="2 llm pods")
    assert all("placed-by" not in p["metadata"]["labels"] for p in llm_pods(cluster))
    reason = f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    failed = refused_message(reason).removeprefix("Internal error occurred: ")
    assert [(c.outcome, c.message) for c in cluster.admission.calls] == [
        ("failed-open", failed)
    ] * 2


async def test_fail_with_the_webhook_down_refuses_creates_until_it_is_back(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    port = free_port()
    cluster.admission.register(
        "placement", webhook=WEBHOOK, address=f"127.0.0.1:{port}", ca_bundle=ca.pem, service=SERVICE
    )
    status, refused, _ = await create_pod(session, cluster, probe())
    expected = refused_message(f"dial tcp 127.0.0.1:{port}: connect: connection refused")
    assert status == 500
    assert refused == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": expected,
        "reason": "InternalError",
        "details": {"causes": [{"message": expected.removeprefix("Internal error occurred: ")}]},
        "code": 500,
    }

    cluster.scale("llm", 2)

    def replica_failure() -> Obj | None:
        (replicaset,) = cluster.store.items(R.REPLICASETS, "inference")
        conditions = (replicaset.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "ReplicaFailure"), None)

    condition = await cluster.wait_for(replica_failure, timeout=5, message="ReplicaFailure")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "FailedCreate",
        expected,
    )
    assert len(llm_pods(cluster)) == 1
    await cluster.wait_for(
        lambda: len(cluster.pod_creations.failures) >= 3, timeout=5, message="retries"
    )  # it keeps trying, backing off, and keeps failing
    assert len(llm_pods(cluster)) == 1
    assert {why for _, _, why in cluster.pod_creations.failures} == {expected}

    async with serving(PlacementWebhook(), ca, port=port):
        await cluster.wait_for(
            lambda: len(llm_pods(cluster)) == 2 and replica_failure() is None,
            timeout=10,
            message="the second replica once the webhook is back",
        )
        new = next(p for p in llm_pods(cluster) if "placed-by" in p["metadata"]["labels"])
        pod = await bound(cluster, "inference", new["metadata"]["name"])
        assert pool_of(cluster, pod) == CHOSEN_POOL
    outcomes = cluster.admission.outcomes()
    assert outcomes["patched"] == 1
    assert outcomes["failed-closed"] >= 3  # the API's create, then the ReplicaSet's retries


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_the_timeout_is_honoured(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA, policy: str
) -> None:
    # 3 s: the request reaches the webhook well within it even on a loaded machine; the webhook
    # answers after 60 s, so an answer before that is the timeout's.
    webhook = PlacementWebhook(delay=60.0)
    async with registered(cluster, webhook, failure_policy=policy, timeout_seconds=3, ca=ca):
        started = time.monotonic()
        status, body, _ = await create_pod(session, cluster, probe())
        elapsed = time.monotonic() - started
    assert 2.9 <= elapsed < 30
    assert [s.path for s in webhook.seen] == ["/mutate?timeout=3s"]
    if policy == "Fail":
        assert status == 500
        assert body["message"] == refused_message("context deadline exceeded", timeout_seconds=3)
    else:
        assert status == 201, body
        assert body["metadata"]["labels"] == {"app": "llm"}


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_wrong_ca_bundle_is_a_tls_failure(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA, policy: str
) -> None:
    webhook = PlacementWebhook()
    async with registered(
        cluster, webhook, ca_bundle=ThrowawayCA("another CA").pem, failure_policy=policy, ca=ca
    ):
        status, body, _ = await create_pod(session, cluster, probe())
    assert webhook.seen == []
    reason = "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if policy == "Fail":
        assert (status, body["message"]) == (500, refused_message(reason))
    else:
        assert status == 201, body
        assert body["metadata"]["labels"] == {"app": "llm"}
        (call,) = cluster.admission.calls
        assert (call.outcome, call.message) == (
            "failed-open",
            refused_message(reason).removeprefix("Internal error occurred: "),
        )


async def test_the_certificate_is_verified_against_the_service_name_or_the_url_host(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    webhook = PlacementWebhook()
    async with serving(webhook, ca) as address:  # valid for placement.spot-rebalancer.svc only
        port = address.rsplit(":", 1)[1]
        cluster.admission.register(
            "placement",
            webhook=WEBHOOK,
            address=address,
            ca_bundle=ca.pem,
            service="spot-rebalancer/impostor:443",
        )
        status, body, _ = await create_pod(session, cluster, probe())
        assert status == 500
        assert body["message"] == refused_message(
            "tls: failed to verify certificate: x509: certificate is not valid for "
            "impostor.spot-rebalancer.svc",
            service="impostor.spot-rebalancer.svc",
        )
        cluster.admission.register(
            "placement", webhook=WEBHOOK, address=address, ca_bundle=ca.pem, service=None
        )
        status, body, _ = await create_pod(session, cluster, probe())
        assert status == 500
        assert body["message"] == (
            f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call '
            f'webhook: Post "https://127.0.0.1:{port}/mutate?timeout=10s": tls: failed to '
            "verify certificate: x509: certificate is not valid for 127.0.0.1"
        )
    assert webhook.seen == []
    async with serving(webhook, ca, ip_addresses=("127.0.0.1",), dns_names=()) as address:
        cluster.admission.register(
            "placement", webhook=WEBHOOK, address=address, ca_bundle=ca.pem, service=None
        )
        status, body, _ = await create_pod(session, cluster, probe())
    assert status == 201, body
    assert body["metadata"]["labels"]["placed-by"] == "webhook"
    assert [s.host for s in webhook.seen] == [address]


# ---- what the webhook answers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "reason", "message"),
    [
        (
            {"code": 403, "reason": "Forbidden", "message": "llm pods must run on a GPU pool"},
            403,
            "Forbidden",
            f'admission webhook "{WEBHOOK}" denied the request: llm pods must run on a GPU pool',
        ),
        (None, 400, None, f'admission webhook "{WEBHOOK}" denied the request without explanation'),
    ],
    ids=["with-status", "bare"],
)
async def test_a_denial_refuses_the_create_with_its_status_whatever_the_policy(
    cluster: ClusterEmulator,
    session: aiohttp.ClientSession,
    ca: ThrowawayCA,
    status: Obj | None,
    code: int,
    reason: str | None,
    message: str,
) -> None:
    answer: Obj = {"allowed": False} | ({"status": status} if status else {})
    async with registered(
        cluster, PlacementWebhook(answer=lambda _: answer), failure_policy="Ignore", ca=ca
    ):
        got, body, _ = await create_pod(session, cluster, probe())
    assert (got, body["code"], body.get("reason"), body["message"]) == (code, code, reason, message)
    assert body["status"] == "Failure"
    assert [c.outcome for c in cluster.admission.calls] == ["denied"]


UNDECODABLE = (
    f'failed calling webhook "{WEBHOOK}": received undecodable patch in webhook response: '
    "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
)


@pytest.mark.parametrize(
    ("policy", "patch", "expected"),
    [
        ("Ignore", {"op": "add", "path": "/metadata/labels/x", "value": "y"}, 201),
        (
            "Fail",
            {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            f"Internal error occurred: {UNDECODABLE}",
        ),
        # Decodes, does not apply: upstream refuses whatever the policy.
        (
            "Ignore",
            [{"op": "replace", "path": "/spec/nodeName", "value": "aks-gpuondemand-0"}],
            "Internal error occurred: replace operation does not apply: doc is missing key: "
            "/spec/nodeName: missing value",
        ),
    ],
    ids=["undecodable-ignore", "undecodable-fail", "not-applying-ignore"],
)
async def test_a_malformed_patch(
    cluster: ClusterEmulator,
    session: aiohttp.ClientSession,
    ca: ThrowawayCA,
    policy: str,
    patch: Any,
    expected: int | str,
) -> None:
    answer = {"allowed": True, "patchType": "JSONPatch", "patch": _encoded(patch)}
    async with registered(
        cluster, PlacementWebhook(answer=lambda _: answer), failure_policy=policy, ca=ca
    ):
        status, body, _ = await create_pod(session, cluster, probe())
    if expected == 201:
        assert status == 201, body
        assert body["metadata"]["labels"] == {"app": "llm"}
        (call,) = cluster.admission.calls
        assert (call.outcome, call.message) == ("failed-open", UNDECODABLE)
    else:
        assert (status, body["reason"], body["message"]) == (500, "InternalError", expected)


# ---- the configurations themselves ------------------------------------------------------------


async def test_the_e2e_rig_registers_a_controller_webhook_as_the_chart_does(
    cluster: ClusterEmulator, session: aiohttp.ClientSession, ca: ThrowawayCA
) -> None:
    """Without a caBundle until the controller's TLS keeper puts its CA in (here by hand,
    through the API, as the keeper does: a Secret, then an update of the configuration)."""
    assert cluster.urls is not None
    api = cluster.urls.api
    webhook = PlacementWebhook()
    enabled = {"app": "llm", "spot-rebalancer.io/placement": "enabled"}
    async with serving(webhook, ca, dns_names=("spot-rebalancer-webhook.default.svc",)) as address:
        register_placement_webhook(cluster, port=int(address.rsplit(":", 1)[1]))
        status, created, _ = await create_pod(session, cluster, probe(labels=enabled))
        assert status == 201, created
        assert "placed-by" not in created["metadata"]["labels"]  # no CA yet: Ignore
        (call,) = cluster.admission.calls
        assert call.outcome == "failed-open"
        assert "x509: certificate signed by unknown authority" in call.message

        secret = {
            "metadata": {"name": "spot-rebalancer-webhook-tls"},
            "data": {"ca.crt": base64.b64encode(ca.pem).decode()},
        }
        async with session.post(
            f"{api}/api/v1/namespaces/default/secrets", json=secret
        ) as response:
            assert response.status == 201
        path = f"{api}/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/spot-rebalancer"
        async with session.get(path) as response:
            configuration = await response.json()
        for hook in configuration["webhooks"]:
            hook["clientConfig"]["caBundle"] = base64.b64encode(ca.pem).decode()
        async with session.put(path, json=configuration) as response:
            assert response.status == 200

        placed = await create_pod(session, cluster, probe(labels=enabled))
        unlabelled = await create_pod(session, cluster, probe())
        system = await create_pod(session, cluster, probe(labels=enabled), namespace="kube-system")
    assert placed[1]["metadata"]["labels"]["placed-by"] == "webhook"
    assert "placed-by" not in unlabelled[1]["metadata"]["labels"]
    assert "placed-by" not in system[1]["metadata"]["labels"]
    (seen,) = webhook.seen
    assert (seen.path, seen.host) == (
        "/mutate-pods?timeout=2s",
        "spot-rebalancer-webhook.default.svc:443",
    )


@pytest.mark.parametrize("backend", ["emulator"], indirect=True)
async def test_kubectl_applies_a_configuration_and_the_server_defaults_and_validates_it(
    backend: Backend, tmp_path: Any
) -> None:
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"placement-{backend.namespace}"},
        "webhooks": [
            {
                "name": WEBHOOK,
                "clientConfig": {
                    "service": {
                        "namespace": "spot-rebalancer",
                        "name": "placement",
                        "path": "/mutate",
                    }
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "objectSelector": {"matchLabels": {"app": "never"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        ],
    }
    manifest = tmp_path / "webhook.yaml"
    manifest.write_text(yaml.safe_dump(configuration))
    code, out = await backend.kubectl("apply", "-f", str(manifest))
    name = configuration["metadata"]["name"]
    assert (code, out.strip()) == (
        0,
        f"mutatingwebhookconfiguration.admissionregistration.k8s.io/{name} created",
    )
    code, out = await backend.kubectl("get", "mutatingwebhookconfigurations", name)
    assert code == 0, out
    header, row = out.splitlines()
    assert header.split() == ["NAME", "WEBHOOKS", "AGE"]
    assert row.split()[:2] == [name, "1"]
    stored = await backend.ok(
        "GET", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
    )
    (webhook,) = stored["webhooks"]
    assert stored["metadata"]["generation"] == 1
    assert (webhook["failurePolicy"], webhook["matchPolicy"], webhook["timeoutSeconds"]) == (
        "Fail",
        "Equivalent",
        10,
    )
    assert (webhook["namespaceSelector"], webhook["reinvocationPolicy"]) == ({}, "Never")
    assert webhook["rules"][0]["scope"] == "*"
    assert webhook["clientConfig"]["service"]["port"] == 443

    invalid = json.loads(json.dumps(configuration))
    invalid["metadata"]["name"] += "-invalid"
    del invalid["webhooks"][0]["sideEffects"]
    invalid["webhooks"][0]["admissionReviewVersions"] = []
    status, body, _ = await backend.http(
        "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body=invalid
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        f'MutatingWebhookConfiguration.admissionregistration.k8s.io "{invalid["metadata"]["name"]}" '
        "is invalid: [webhooks[0].sideEffects: Required value: must specify one of None, "
        "NoneOnDryRun, webhooks[0].admissionReviewVersions: Required value: must specify one of "
        "v1, v1beta1]"
    )
