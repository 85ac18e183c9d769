"""Each component's RBAC grants exactly the API calls it makes: no more, no fewer.

The set of calls is not written down by hand: the real agent loop runs a whole notice against the
cluster emulator's API server (its tap, tests/tap.py, records every request) - start, Preempt seen and published,
the controller's drained mark, acknowledgement, the event starting and ending, a restart - and
each recorded (method, path) is mapped to the RBAC (apiGroup, resource, verb) it needs. A new call
in rebalancer/kube without a rule (forbidden in a real cluster), or a rule no call needs, fails.

The controller likewise: the real `Controller` (informers, leader election, planner, executor)
runs in-process against the cluster emulator, tapped to record every request, through a cancelled drain request and then a Preempt of every spot node (surge, scale
back, blocked fail-over, PDB-blocked eviction, deletion at the deadline, drained marks, cool-down
start and end, a Node patch that conflicts and is read afresh, Lease create, renewals and
release). Lease calls must equal the Role in the release namespace; every other call the
ClusterRole.
"""

from __future__ import annotations

import asyncio
import copy
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog

from rebalancer import names
from rebalancer.agent.agent import Agent
from rebalancer.azure.imds import ImdsClient
from rebalancer.clock import ManualClock, SystemClock
from rebalancer.config import AgentSettings
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from rebalancer.metrics import AgentMetrics, ControllerMetrics
from rebalancer.names import COOLDOWN_UNTIL
from rebalancer.node_signal import CONDITION_TYPE, DRAINED_FOR_ANNOTATION
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.imds import ImdsEmulator
from rebalancer_sim.scenario import parse_scenario
from tests.chart.conftest import Tools, of_component, one
from tests.e2e.rig import ready
from tests.helpers import free_port, serve, wait_for
from tests.tap import Tap, api_server, node_condition

pytestmark = pytest.mark.chart

NODE = "aks-gpuspot-12345678-vmss000003"
VM = "aks-gpuspot-12345678-vmss_3"
PROVIDER_ID = (
    "azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/aks-gpuspot-12345678-vmss/virtualMachines/3"
)

Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

_VERBS = {"GET": "get", "PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}
# /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]], and the same under /apis/<g>/<v>.
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def permission(method: str, path: str, query: dict[str, str] | None = None) -> Permission:
    """The RBAC permission one API request needs (as the API server's authorizer sees it)."""
    match = _PATH.match(path)
    assert match, f"not a Kubernetes resource path: {path}"
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = _VERBS[method]
    if method == "GET" and match["name"] is None:
        verb = "watch" if (query or {}).get("watch") in ("true", "True", "1") else "list"
    return (match["group"] or "", resource, verb)


def rule_permissions(
    cluster_role: dict[str, Any], names_of: dict[str, set[str]] | None = None
) -> set[Permission]:
    """The permissions a (Cluster)Role grants. A rule narrowed by resourceNames is allowed only
    for the resources in `names_of`, and must name only those objects."""
    granted = set()
    for rule in cluster_role["rules"]:
        assert "nonResourceURLs" not in rule
        if "resourceNames" in rule:
            assert names_of is not None, rule
            for resource in rule["resources"]:
                assert set(rule["resourceNames"]) <= names_of[resource], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    granted.add((group, resource, verb))
    return granted


async def recorded_agent_calls(
    tmp_path: Path,
) -> tuple[list[tuple[str, str, dict[str, str]]], ImdsEmulator]:
    """Run the real agent loop through one whole notice and return every API request it made
    ((method, path, query) as the server saw them)."""
    clock = ManualClock()
    imds = ImdsEmulator(clock=clock)
    closers: list[Any] = []
    node = {"metadata": {"name": NODE}, "spec": {"providerID": PROVIDER_ID}}
    async with (
        serve(imds.app()) as imds_url,
        api_server(tmp_path, (R.NODES, node)) as (kube, tap),
    ):
        kubeconfig = kube.kubeconfig_path

        async def start_agent() -> Agent:
            settings = AgentSettings(node_name=NODE, imds_url=f"{imds_url}/vms/{VM}")
            kube_client = await KubeClient.connect(str(kubeconfig))
            imds_client = ImdsClient(base_url=settings.imds_url, min_interval_seconds=0.0)
            closers.extend([kube_client, imds_client])
            agent = Agent(
                settings=settings,
                imds=imds_client,
                nodes=NodeApi(kube_client),
                metrics=AgentMetrics(),
                clock=clock,
                log=structlog.get_logger(),
            )
            assert await agent._initialize()
            return agent

        try:
            agent = await start_agent()
            await agent.tick()  # nothing scheduled: NoScheduledEvents written
            event = imds.schedule("Preempt", [VM], notice_seconds=30)
            await agent.tick()  # seen and published
            _set_node(kube, NODE, lambda n: _annotate(n, DRAINED_FOR_ANNOTATION, event.event_id))
            await agent.tick()  # drained mark read, acknowledged to Azure
            clock.advance(1)
            await agent.tick()  # Started
            clock.advance(60)
            await agent.tick()  # gone: Completed; resync due
            agent = await start_agent()  # a restart reads back what it published
            await agent.tick()
        finally:
            for closer in closers:
                await closer.close()
    # The scenario really went through every stage, or the recording would be incomplete.
    assert imds.events[event.event_id].acknowledged_by == [VM]
    assert node_condition(kube, NODE, CONDITION_TYPE)["reason"] == "EventCompleted"  # type: ignore[index]
    return [(r.method, r.path, r.query) for r in tap.requests], imds


async def test_cluster_role_is_exactly_what_the_agent_calls(tools: Tools, tmp_path: Path) -> None:
    requests, _ = await recorded_agent_calls(tmp_path)
    needed = {permission(*request) for request in requests}
    for scenario in ([], ["-f", str(Path(__file__).parent / "values-everything.yaml")]):
        granted = rule_permissions(of_component(tools.template(*scenario), "ClusterRole", "agent"))
        assert granted == needed


def test_binding_names_the_agents_service_account(tools: Tools) -> None:
    objects = tools.template()
    binding = of_component(objects, "ClusterRoleBinding", "agent")
    account = of_component(objects, "ServiceAccount", "agent")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": of_component(objects, "ClusterRole", "agent")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": "spot-rebalancer",
        }
    ]
    daemonset = one(objects, "DaemonSet")
    assert (
        daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )
    # No other Role or binding: the agent's permissions are this one ClusterRole.
    agent_only = tools.template("--set", "controller.enabled=false")
    kinds = [obj["kind"] for obj in agent_only]
    assert kinds.count("ClusterRole") == 1 and "Role" not in kinds and "RoleBinding" not in kinds


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/nodes/n1", None, ("", "nodes", "get")),
        ("GET", "/api/v1/nodes", None, ("", "nodes", "list")),
        ("GET", "/api/v1/nodes", {"watch": "True"}, ("", "nodes", "watch")),
        ("PATCH", "/api/v1/nodes/n1/status", None, ("", "nodes/status", "patch")),
        ("POST", "/api/v1/namespaces/ns/pods/p1/eviction", None, ("", "pods/eviction", "create")),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l1",
            None,
            ("coordination.k8s.io", "leases", "update"),
        ),
    ],
)
def test_request_to_permission_mapping(
    method: str, path: str, query: dict[str, str] | None, expected: Permission
) -> None:
    assert permission(method, path, query) == expected


# ---- the controller ----------------------------------------------------------------------------

RELEASE_NAMESPACE = "spot-rebalancer"
# The chart's names with values-everything.yaml (fullnameOverride: spot), so that the recorded
# calls name the same objects as the rendered rules' resourceNames.
WEBHOOK_CONFIGURATION = "spot-controller"
WEBHOOK_SECRET = "spot-controller-webhook-tls"
# The key that seals our records: `<lease>-records`, the Lease's default name (always granted).
RECORDS_SECRET = "spot-rebalancer-controller-records"
WEBHOOK_PERMISSIONS = {
    ("", "secrets", "update"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update"),
}  # fmt: skip
SPOT = ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule", "sku=gpu:NoSchedule"]
ON_SPOT = {"kubernetes.azure.com/scalesetpriority": "spot"}
# Every controller action has something to act on: `llm` is surged, its doomed pods get the
# lowest deletion cost once the replacements are Ready, then it is scaled back; `pinned` cannot
# fail over (nodeSelector spot: a Warning Event) and is deleted at the deadline; `cache` is a
# StatefulSet whose PDB refuses its eviction (429) until it is deleted at the deadline.
CONTROLLER_SCENARIO: dict[str, Any] = {
    "name": "rbac",
    "cluster": {"name": "rbac", "region": "eastus"},
    "settings": {"nodeDeleteDelaySeconds": 2, "shutdownSeconds": 0.3, "nodeAutoDrain": False},
    "pools": [
        {"name": "system", "priority": "regular", "mode": "system", "vmSize": "Standard_D4s_v5",
         "zones": ["1"], "cpu": 4, "memory": "16Gi", "gpus": 0, "count": 1},
        {"name": "gpuspot", "priority": "spot", "vmSize": "Standard_NC24ads_A100_v4",
         "zones": ["1"], "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 3},
        {"name": "gpuondemand", "priority": "regular", "vmSize": "Standard_NC24ads_A100_v4",
         "zones": ["1"], "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 3},
    ],
    "workloads": [
        {"name": "llm", "namespace": "inference", "replicas": 2,
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": SPOT, "preferSpot": 100, "startupSeconds": 1,
         "pdb": {"maxUnavailable": 1}},
        {"name": "pinned", "namespace": "inference", "replicas": 1,
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": SPOT, "nodeSelector": ON_SPOT},
        {"name": "cache", "namespace": "cache", "kind": "StatefulSet", "replicas": 1,
         "requests": {"cpu": "1"}, "tolerations": SPOT, "nodeSelector": ON_SPOT,
         "terminationGracePeriodSeconds": 30, "pdb": {"minAvailable": 1}},
    ],
}  # fmt: skip


@dataclass
class ControllerRun:
    requests: list[tuple[str, str, dict[str, str]]]  # (method, path, query) as the server saw them
    lease_namespace: str


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_node(
    cluster: ClusterEmulator, name: str, change: Callable[[dict[str, Any]], None]
) -> None:
    node = copy.deepcopy(cluster.store.get(R.NODES, "", name))
    assert node is not None
    change(node)
    cluster.store.update(R.NODES, node)


def _annotate(node: dict[str, Any], key: str, value: str) -> None:
    node["metadata"].setdefault("annotations", {})[key] = value


def _npd_preempt(node: dict[str, Any], event_id: str, not_before: datetime) -> None:
    """The condition AKS's node-problem-detector writes for a spot eviction."""
    when = not_before.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    node["status"]["conditions"].append(
        {
            "type": "PreemptionScheduled",
            "status": "True",
            "reason": "SpotEvictionIncoming",
            "message": f"Preempt Scheduled: {when}. EventId: {event_id}",
            "lastHeartbeatTime": _rfc3339(datetime.now(UTC)),
            "lastTransitionTime": _rfc3339(datetime.now(UTC)),
        }
    )


async def recorded_controller_calls(tmp_path: Path) -> ControllerRun:
    """Run the real Controller (informers, leader election, planner, executor) through every
    action on the cluster emulator, recording each request the API server receives."""
    cluster = ClusterEmulator(parse_scenario(CONTROLLER_SCENARIO), tick_seconds=0.05)
    cluster.store.create(R.NAMESPACES, {"metadata": {"name": RELEASE_NAMESPACE}})
    # An HPA on `llm` whose bounds the surge raises, and the scale-back puts back.
    cluster.store.create(
        R.BY_KEY["horizontalpodautoscalers.autoscaling"],
        {
            "metadata": {"namespace": "inference", "name": "llm"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
                "minReplicas": 2,
                "maxReplicas": 2,
            },
        },
    )
    # KEDA's ScaledObject on `pinned`, whose HPA KEDA makes and owns: the surge raises the
    # ScaledObject's bounds (KEDA copies them onto its HPA), the scale-back puts them back.
    cluster.store.create(
        R.SCALEDOBJECTS,
        {
            "metadata": {"namespace": "inference", "name": "pinned"},
            "spec": {
                "scaleTargetRef": {"name": "pinned"},
                "minReplicaCount": 1,
                "maxReplicaCount": 1,
                "triggers": [
                    {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "50"}}
                ],
            },
        },
    )
    tap = Tap().install(cluster)  # before start(), which routes every request to it
    # The controller patches Nodes from its cache and reads one only after a conflict (another
    # writer got there first): make the first patch conflict, so that path and the permission
    # it needs are in the recording too.
    tap.fail("PATCH", "/api/v1/nodes/", 409, times=1, message="the object has been modified")
    # The admission webhook's configuration, as the chart installs it (its selector matches no
    # pod here: only the certificate's calls are recorded, the emulator never calls it).
    cluster.store.create(
        R.BY_KEY["mutatingwebhookconfigurations.admissionregistration.k8s.io"],
        {
            "metadata": {"name": WEBHOOK_CONFIGURATION},
            "webhooks": [
                {
                    "name": "placement.spot-rebalancer.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "clientConfig": {
                        "service": {"namespace": RELEASE_NAMESPACE, "name": "webhook"}
                    },
                    "rules": [
                        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                         "resources": ["pods"]}
                    ],
                    "objectSelector": {"matchLabels": {"spot-rebalancer.io/placement": "enabled"}},
                }
            ],
        },
    )  # fmt: skip
    await cluster.start(kubeconfig_dir=tmp_path)
    settings = ControllerSettings(
        kubeconfig=str(cluster.kubeconfig_path),
        namespace=RELEASE_NAMESPACE,
        identity="controller-0",
        lease_duration_seconds=4,
        renew_deadline_seconds=3,
        retry_period_seconds=1,
        cooldown_seconds=3,  # short, so the cool-down also ends within the run
        webhook_enabled=True,
        webhook_port=free_port(),
        webhook_configuration=WEBHOOK_CONFIGURATION,
        webhook_secret=WEBHOOK_SECRET,
        webhook_tls_check_seconds=0.5,
    )
    client = await KubeClient.connect(settings.kubeconfig)
    metrics = ControllerMetrics()
    controller = Controller(
        settings=settings,
        client=client,
        metrics=metrics,
        clock=SystemClock(),
        log=structlog.get_logger(),
        identity=settings.identity,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))

    def deployment(name: str) -> dict[str, Any]:
        found = cluster.store.get(R.DEPLOYMENTS, "inference", name)
        assert found is not None
        return found

    def node(name: str) -> dict[str, Any]:
        found = cluster.store.get(R.NODES, "", name)
        assert found is not None
        return found

    def reasons() -> set[str]:
        return {str(e.get("reason")) for e in cluster.store.items(R.EVENTS)}

    async def until(predicate: Callable[[], Any], what: str, timeout: float = 20) -> None:
        await wait_for(lambda: bool(predicate()), timeout=timeout, what=what)
        assert not task.done(), task

    try:
        await until(lambda: controller.elector.is_leader and controller.passes > 0, "leading")
        await until(
            lambda: sum(1 for p in cluster.pods("inference") if ready(p)) == 3, "replicas Ready"
        )
        # 0. The webhook's certificate: issued into a Secret (create), its CA injected into the
        #    configuration (get, update); a Secret made unreadable is issued anew (update).
        secrets = R.BY_KEY["secrets"]
        await until(lambda: cluster.store.get(secrets, RELEASE_NAMESPACE, WEBHOOK_SECRET), "TLS")
        await until(lambda: _ca_bundle(cluster), "the CA injected")
        broken = copy.deepcopy(cluster.store.get(secrets, RELEASE_NAMESPACE, WEBHOOK_SECRET))
        assert broken is not None
        first_ca = broken["data"]["ca.crt"]
        broken["data"] = {"unreadable": "eA=="}
        cluster.store.update(secrets, broken)
        await until(
            lambda: (
                (cluster.store.get(secrets, RELEASE_NAMESPACE, WEBHOOK_SECRET) or {})
                .get("data", {})
                .get("ca.crt", first_ca)
                != first_ca
            ),
            "the certificate issued anew",
        )
        spot = sorted(n["metadata"]["name"] for n in cluster.nodes("gpuspot"))
        # 1. An operator's drain request on the node of `pinned`, cancelled after the surge:
        #    surge scaled back, node uncordoned. The rest of the pool cools down, then not.
        #    (On `pinned`, not `llm`: a cancelled surge's record keeps its pods as doomed while
        #    they live, which would change what phase 2 does with llm.)
        pinned_node = next(
            p["spec"]["nodeName"]
            for p in cluster.pods("inference")
            if p["metadata"]["name"].startswith("pinned")
        )
        deadline = _rfc3339(datetime.now(UTC) + timedelta(seconds=120))
        _set_node(
            cluster,
            pinned_node,
            lambda n: (
                n["metadata"]
                .setdefault("annotations", {})
                .update({names.DRAIN_REQUEST_ANNOTATION: deadline})
            ),
        )
        await until(lambda: deployment("pinned")["spec"]["replicas"] == 2, "the surge")
        await until(lambda: "SpotRebalancerCordoned" in reasons(), "the cordon")
        _set_node(
            cluster,
            pinned_node,
            lambda n: n["metadata"]["annotations"].pop(names.DRAIN_REQUEST_ANNOTATION),
        )
        await until(lambda: "SpotRebalancerRestored" in reasons(), "the node restored")
        await until(lambda: deployment("pinned")["spec"]["replicas"] == 1, "the scale-back")
        await until(
            lambda: (
                not any(
                    COOLDOWN_UNTIL in node(name)["metadata"].get("annotations", {}) for name in spot
                )
            ),
            "the cool-down over",
        )
        # 2. Every spot node preempted with 8 s of notice (AKS's conditions): surges, a blocked
        #    fail-over, a PDB that refuses the eviction, deletions at the deadline, drained marks.
        not_before = datetime.now(UTC) + timedelta(seconds=8)
        event_ids = {name: str(uuid.uuid4()).upper() for name in spot}
        for name in spot:
            _set_node(
                cluster, name, lambda n, name=name: _npd_preempt(n, event_ids[name], not_before)
            )
        await until(
            lambda: all(
                event_ids[name]
                in node(name)["metadata"].get("annotations", {}).get(DRAINED_FOR_ANNOTATION, "")
                for name in spot
            ),
            "every spot node drained",
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)  # the leader releases its Lease on the way out
        await client.close()
        await cluster.stop()
    # The run really went through every action, or the recording would be incomplete.
    for reason in (
        "SpotRebalancerCordoned", "SpotRebalancerRestored", "SpotRebalancerSurge",
        "SpotRebalancerScaleBack", "SpotRebalancerDrained", "SpotRebalancerFailoverBlocked",
    ):  # fmt: skip
        assert reason in reasons(), reason
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
    }
    assert samples[("rebalancer_controller_pods_total", (("action", "eviction_blocked"),))] >= 1
    assert samples[("rebalancer_controller_pods_total", (("action", "deleted"),))] >= 1
    # The cancelled drain request was not a missed deadline: the node is still there.
    missed = [
        v
        for (name, _), v in samples.items()
        if name == "rebalancer_controller_drain_missed_deadline_total"  # not _created
    ]
    assert missed and sum(missed) == 0

    for action in ("SetDeletionCost", "StartCooldown", "EndCooldown", "Restore", "Delete"):
        assert (
            samples[
                ("rebalancer_controller_actions_total", (("action", action), ("outcome", "ok")))
            ]
            >= 1
        ), action
    lease = cluster.store.get(R.LEASES, RELEASE_NAMESPACE, settings.lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"] == ""  # released
    recorded = [(r.method, r.path, r.query) for r in tap.requests]
    return ControllerRun(requests=recorded, lease_namespace=RELEASE_NAMESPACE)


def _ca_bundle(cluster: ClusterEmulator) -> str:
    config = cluster.store.get(
        R.BY_KEY["mutatingwebhookconfigurations.admissionregistration.k8s.io"],
        "",
        WEBHOOK_CONFIGURATION,
    )
    assert config is not None
    return str(config["webhooks"][0].get("clientConfig", {}).get("caBundle", ""))


def _in_namespace(path: str, namespace: str) -> bool:
    return f"/namespaces/{namespace}/" in path


async def test_controller_rbac_is_exactly_what_the_controller_calls(
    tools: Tools, tmp_path: Path
) -> None:
    run = await recorded_controller_calls(tmp_path)

    def own(path: str) -> bool:
        return "/leases" in path or "/configmaps" in path or "/secrets" in path

    lease_calls = {
        permission(method, path, query) for method, path, query in run.requests if own(path)
    }
    cluster_calls = {
        permission(method, path, query) for method, path, query in run.requests if not own(path)
    }
    # Leader election and the eviction history stay in the release namespace: a Role there
    # suffices, no ClusterRole rule.
    assert all(_in_namespace(path, run.lease_namespace) for _, path, _ in run.requests if own(path))
    assert lease_calls == {
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "configmaps", "list"),
        ("", "configmaps", "watch"),
        ("", "configmaps", "create"),
        ("", "configmaps", "update"),
        ("", "secrets", "get"),
        ("", "secrets", "create"),
        ("", "secrets", "update"),
    }
    names_of = {
        "secrets": {WEBHOOK_SECRET, RECORDS_SECRET},
        "mutatingwebhookconfigurations": {WEBHOOK_CONFIGURATION},
    }
    named = {
        path.rsplit("/", 1)[-1]
        for method, path, _ in run.requests
        if "/secrets/" in path and method != "POST"
    }
    assert named == names_of["secrets"]  # the objects the calls name are the ones granted
    # Without the webhook (the default) the chart grants none of its calls; with it (and
    # values-everything turns it on), exactly them.
    for scenario, webhook in (
        ([], False),
        (["-f", str(Path(__file__).parent / "values-everything.yaml")], True),
    ):
        objects = tools.template(*scenario, namespace=RELEASE_NAMESPACE)
        cluster_role = of_component(objects, "ClusterRole", "controller")
        role = of_component(objects, "Role", "controller")
        assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
        kept = (lambda p: True) if webhook else (lambda p: p not in WEBHOOK_PERMISSIONS)
        assert rule_permissions(cluster_role, names_of) == {p for p in cluster_calls if kept(p)}
        assert rule_permissions(role, names_of) == {p for p in lease_calls if kept(p)}
