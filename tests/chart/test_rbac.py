"""The agent's ClusterRole grants exactly the API calls the agent makes: no more, no fewer.

The set of calls is not written down by hand: the real agent loop runs a whole notice against the
fake API server (tests/fakes/kube.py records every request) - start, Preempt seen and published,
the controller's drained mark, acknowledgement, the event starting and ending, a restart - and
each recorded (method, path) is mapped to the RBAC (apiGroup, resource, verb) it needs. A new call
in rebalancer/kube without a rule (forbidden in a real cluster), or a rule no call needs, fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import structlog

from rebalancer.agent.agent import Agent
from rebalancer.azure.imds import ImdsClient
from rebalancer.clock import ManualClock
from rebalancer.config import AgentSettings
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from rebalancer.metrics import AgentMetrics
from rebalancer.node_signal import CONDITION_TYPE, DRAINED_FOR_ANNOTATION
from rebalancer.sim.imds import ImdsEmulator
from tests.chart.conftest import Tools, of_component, one
from tests.fakes.kube import FakeNodeApi, Recorded, write_kubeconfig
from tests.helpers import serve

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


def permission(request: Recorded, query: dict[str, str] | None = None) -> Permission:
    """The RBAC permission one API request needs (as the API server's authorizer sees it)."""
    match = _PATH.match(request.path)
    assert match, f"not a Kubernetes resource path: {request.path}"
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = _VERBS[request.method]
    if request.method == "GET" and match["name"] is None:
        verb = "watch" if (query or {}).get("watch") in ("true", "True", "1") else "list"
    return (match["group"] or "", resource, verb)


def rule_permissions(cluster_role: dict[str, Any]) -> set[Permission]:
    granted = set()
    for rule in cluster_role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    granted.add((group, resource, verb))
    return granted


async def recorded_agent_calls(tmp_path: Path) -> tuple[list[Recorded], ImdsEmulator]:
    """Run the real agent loop through one whole notice and return every API request it made."""
    clock = ManualClock()
    imds = ImdsEmulator(clock=clock)
    kube = FakeNodeApi()
    kube.add_node(NODE, PROVIDER_ID)
    closers: list[Any] = []
    async with serve(imds.app()) as imds_url, serve(kube.app()) as kube_url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube_url)

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
            kube.nodes[NODE]["metadata"]["annotations"][DRAINED_FOR_ANNOTATION] = event.event_id
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
    assert kube.condition(NODE, CONDITION_TYPE)["reason"] == "EventCompleted"  # type: ignore[index]
    return kube.requests, imds


async def test_cluster_role_is_exactly_what_the_agent_calls(tools: Tools, tmp_path: Path) -> None:
    requests, _ = await recorded_agent_calls(tmp_path)
    needed = {permission(request) for request in requests}
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
    assert permission(Recorded(method, path, "", None), query) == expected
