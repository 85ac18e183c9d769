"""The placement webhook called by the real kube-apiserver over TLS, with the chart's objects.

Real here: the chart's Service, MutatingWebhookConfiguration and RBAC (`helm template` with
`controller.webhook.enabled=true`); the API server resolving the Service, verifying the
certificate the controller issued for `<service>.<namespace>.svc` against the caBundle it
injected, and sending its own AdmissionReviews; the ReplicaSet controller creating the pods and
kube-scheduler placing them on kwok nodes by the affinity the webhook added.

Not real: the controller is a host process, so no pod backs the Service. The test writes the
EndpointSlice the endpoint slice controller would write for a controller pod, pointing at the
process. `tests/cluster/start.sh` runs kube-apiserver with `--enable-aggregator-routing=true`, so
it calls a Service's endpoints rather than its ClusterIP, which nothing routes here (no
kube-proxy). The API server refuses loopback addresses in an IPv4 EndpointSlice, so the slice
holds this machine's non-loopback address (the controller listens on every interface, as in a
pod); on a machine without one (or with K8S_TEST_WEBHOOK_LOOPBACK=1) it is an FQDN slice whose
address is `127.0.0.1`, which validation lets through (a deprecated address type) and the API
server dials as written; pytest's summary then shows a warning that says so.
tests/cluster/README.md has the details.

Checked: the Secret and caBundle the leader writes; two replicas of a Deployment under
`min-on-demand: 1` placed one on on-demand (required affinity) and one on spot (a preferred
term), and scheduled there; a server-side dry run answered but not counted; with the controller
stopped, a new replica created at once and unchanged (`failurePolicy: Ignore`); no call refused
under the chart's RBAC (the rig reads the process's log).
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import ipaddress
import os
import socket
import struct
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import yaml
from cryptography import x509

from rebalancer import names
from tests.helpers import free_port
from tests.k8s.rig import (
    RELEASE_NAMESPACE,
    ApiError,
    KubeRig,
    apply_chart_rbac,
    container_env,
    render_chart,
)

pytestmark = pytest.mark.k8s

SIOCGIFADDR = 0x8915  # Linux: the IPv4 address of an interface
TEST_MANAGER = "tests.spot-rebalancer.io"
POLICY = {names.MIN_ON_DEMAND: "1"}
PLACEMENT_LABEL = {"spot-rebalancer.io/placement": "enabled"}
ON_DEMAND, SPOT = "gpuondemand", "gpuspot"


def host_address() -> str | None:
    """An IPv4 address of this machine that is not loopback nor link-local (the API server
    refuses both in an endpoint) and that a local socket can connect to; None if there is none."""
    for _, interface in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                answer = fcntl.ioctl(
                    probe.fileno(), SIOCGIFADDR, struct.pack("256s", interface.encode()[:15])
                )
            except OSError:
                continue  # no IPv4 address on this interface
        address = socket.inet_ntoa(answer[20:24])
        parsed = ipaddress.ip_address(address)
        if parsed.is_loopback or parsed.is_link_local or parsed.is_unspecified:
            continue
        with socket.socket() as server, socket.socket() as client:
            try:
                server.bind((address, 0))
                server.listen(1)
                client.settimeout(1)
                client.connect(server.getsockname())
            except OSError:
                continue
        return address
    return None


@dataclass(frozen=True)
class Route:
    """How the API server reaches the controller process: an EndpointSlice and where to listen."""

    address_type: str  # IPv4 | FQDN
    address: str
    listen: str  # the controller's REBALANCER_HTTP_HOST


def route() -> Route:
    address = None if os.environ.get("K8S_TEST_WEBHOOK_LOOPBACK") else host_address()
    if address is None:
        warnings.warn(
            "no non-loopback IPv4 address here (or K8S_TEST_WEBHOOK_LOOPBACK): the API server "
            "reaches the webhook through an FQDN EndpointSlice holding 127.0.0.1",
            stacklevel=1,
        )
        return Route("FQDN", "127.0.0.1", "127.0.0.1")
    # Every interface, as in a pod (the chart's default): the API server dials the address, the
    # test reads /metrics on 127.0.0.1.
    return Route("IPv4", address, "0.0.0.0")


@dataclass(frozen=True)
class Webhook:
    """The chart's webhook objects on the cluster, and the controller settings to serve them."""

    service: str
    configuration: str
    secret: str
    controller_env: dict[str, str]  # start_controller's extra settings


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


@pytest.fixture
async def webhook(rig: KubeRig) -> AsyncIterator[Webhook]:
    objects = render_chart("controller.webhook.enabled=true")
    config = only(objects, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    service = next(
        o
        for o in objects
        if o["kind"] == "Service"
        and o["metadata"]["name"] == hook["clientConfig"]["service"]["name"]
    )
    (service_port,) = service["spec"]["ports"]
    port = free_port()
    way = route()
    print(f"the API server calls the webhook at {way.address}:{port} ({way.address_type} slice)")
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service['metadata']['name']}-host",
            "namespace": RELEASE_NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": service["metadata"]["name"],
                "endpointslice.kubernetes.io/managed-by": TEST_MANAGER,
            },
        },
        "addressType": way.address_type,
        # The Service's targetPort is the container port's name; the API server looks the port up
        # by the Service port's name.
        "ports": [{"name": service_port["name"], "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [way.address], "conditions": {"ready": True}}],
    }
    env = container_env(objects)["controller"]
    secret = env["REBALANCER_WEBHOOK_SECRET"]
    plane = rig.plane
    plane.kubectl("delete", "secret", secret, "-n", RELEASE_NAMESPACE, "--ignore-not-found")
    apply_chart_rbac(plane, objects)
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([service, endpoints, config]))
    rig.chart = replace(rig.chart, env={**rig.chart.env, "controller": env})
    try:
        yield Webhook(
            service=service["metadata"]["name"],
            configuration=config["metadata"]["name"],
            secret=secret,
            controller_env={
                "REBALANCER_HTTP_HOST": way.listen,
                "REBALANCER_WEBHOOK_PORT": str(port),
            },
        )
    finally:
        rig.stop_all()  # before the webhook's RBAC goes: a refusal then would be the test's
        plane.kubectl(
            "delete", "--ignore-not-found", "-n", RELEASE_NAMESPACE,
            f"mutatingwebhookconfiguration/{config['metadata']['name']}",
            f"service/{service['metadata']['name']}",
            f"endpointslice/{endpoints['metadata']['name']}",
            f"secret/{secret}",
        )  # fmt: skip
        apply_chart_rbac(plane, rig.chart.objects)  # the default values' RBAC again


async def eventually(fetch: Callable[[], Awaitable[Any]], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if result := await fetch():
                return result
        except ApiError as error:
            if error.status != 404:
                raise
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.1)


def node_affinity(pod: dict[str, Any]) -> dict[str, Any]:
    return ((pod["spec"].get("affinity") or {}).get("nodeAffinity")) or {}


def required_pools(pod: dict[str, Any]) -> list[list[str]]:
    """The agent pools each required term allows (terms are ORed)."""
    required = node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [
        [
            value
            for expression in term.get("matchExpressions") or []
            if expression["key"] == names.AKS_AGENTPOOL_LABEL
            for value in expression["values"]
        ]
        for term in required.get("nodeSelectorTerms") or []
    ]


def preferred_pools(pod: dict[str, Any]) -> list[str]:
    return [
        value
        for term in node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []
        for expression in term["preference"]["matchExpressions"]
        if expression["key"] == names.AKS_AGENTPOOL_LABEL
        for value in expression["values"]
    ]


async def test_the_api_server_calls_the_webhook_and_the_policy_places_the_pods(
    rig: KubeRig, webhook: Webhook
) -> None:
    api = rig.api
    rig.start_controller(**webhook.controller_env)
    # The leader issues the CA and certificate into the Secret and puts the CA in the chart's
    # configuration.
    secret = await eventually(
        lambda: api.request(
            "GET", f"/api/v1/namespaces/{RELEASE_NAMESPACE}/secrets/{webhook.secret}"
        ),
        timeout=15,
        what="the webhook's Secret",
    )
    assert secret["type"] == "kubernetes.io/tls"
    ca = secret["data"]["ca.crt"]
    configuration_path = (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
        + webhook.configuration
    )

    async def ca_injected() -> bool:
        config = await api.request("GET", configuration_path)
        return all(h["clientConfig"].get("caBundle") == ca for h in config["webhooks"])

    await eventually(ca_injected, timeout=10, what="the CA in the caBundle")
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    dns_names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert f"{webhook.service}.{RELEASE_NAMESPACE}.svc" in dns_names.value.get_values_for_type(
        x509.DNSName
    )
    await rig.wait_for(
        lambda: "admission webhook serving" in rig.log("controller-0"),
        timeout=10,
        what="the webhook serving",
    )

    # A Deployment with a policy: at least one replica on on-demand.
    await rig.deploy(replicas=2, annotations=POLICY, pod_labels=PLACEMENT_LABEL, startup_seconds=1)
    await rig.until_ready(replicas=2)
    pods = {rig.pool_of(p["spec"]["nodeName"]): p for p in rig.pods()}
    assert sorted(pods) == [ON_DEMAND, SPOT], "the scheduler did not follow the webhook"
    # On-demand: required affinity to the pool, added by the webhook (the template prefers spot).
    assert required_pools(pods[ON_DEMAND]) == [[ON_DEMAND]]
    # Spot: a preferred term for a spot pool and zone, nothing required.
    assert required_pools(pods[SPOT]) == []
    assert SPOT in preferred_pools(pods[SPOT])
    for pod in pods.values():
        annotations = pod["metadata"]["annotations"]
        assert annotations[names.PLACED].startswith(rig.pool_of(pod["spec"]["nodeName"]) + "/")
        assert annotations[names.PLACED_WHY]
    assert (
        await rig.metric("controller-0", 'rebalancer_webhook_reviews_total{outcome="placed"}') == 2
    )

    # A server-side dry run of one more replica: the API server sends dryRun and applies the
    # answer to the object it returns, but no pod follows, so it is no placement of ours.
    owner = pods[SPOT]["metadata"]["ownerReferences"][0]
    replicaset = await api.request(
        "GET", f"/apis/apps/v1/namespaces/inference/replicasets/{owner['name']}"
    )
    template = replicaset["spec"]["template"]
    dry = await api.request(
        "POST",
        "/api/v1/namespaces/inference/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "generateName": f"{owner['name']}-",
                         "ownerReferences": [owner]},
            "spec": template["spec"],
        },
        params={"dryRun": "All"},
    )  # fmt: skip
    assert dry["metadata"]["annotations"][names.PLACED].startswith(SPOT + "/")
    placements = await rig.metric("controller-0", "rebalancer_placements_total")
    assert placements == 2, "the dry run was counted as a placement"

    # failurePolicy Ignore: the controller is gone (its endpoint refuses connections); a new
    # replica is created at once, as the template says, with nothing of ours.
    rig.stop("controller-0")
    started = time.monotonic()
    await api.request(
        "PATCH",
        "/apis/apps/v1/namespaces/inference/deployments/llm/scale",
        {"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    )
    await rig.wait_for(lambda: len(rig.pods()) == 3, timeout=5, what="a third pod")
    created_after = time.monotonic() - started
    (unplaced,) = [
        p
        for p in rig.pods()
        if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in pods.values()}
    ]
    assert names.PLACED not in (unplaced["metadata"].get("annotations") or {})
    assert required_pools(unplaced) == []
    assert created_after < 2.0, f"the pod took {created_after:.1f}s: the API server waited"
    await rig.wait_for(lambda: rig.ready_count() == 3, timeout=15, what="3 Ready")
