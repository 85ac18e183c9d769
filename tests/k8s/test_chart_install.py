"""The chart installed for real: `helm install` (the real helm 4 binary) into the real control
plane, into a namespace that enforces the restricted Pod Security Standard, with the AKS spot
values (values-aks-spot.yaml).

What is checked, and what cannot be here:
- the API server's own PodSecurity admission admits every pod the DaemonSet and ReplicaSet
  controllers create (a refused pod would show as a FailedCreate event and a missing pod), and
  helm reports no PodSecurity warning for the workloads;
- the agent's DaemonSet pods are bound to exactly the spot kwok nodes, the controller's pods to
  none of them (scheduling by the real kube-scheduler and DaemonSet controller);
- the ValidatingAdmissionPolicy the chart installs is in force for a token bound to a real agent
  pod of the release: its own Node allowed, another spot node refused;
- kwok runs no containers: the image is never pulled, the processes never start. That the
  processes work under the chart's identity is what the other tests in tests/k8s show.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from rebalancer import names
from tests.chart.generated import CHART, helm_environment
from tests.controlplane import ControlPlane
from tests.helpers import KUBECTL

pytestmark = pytest.mark.k8s

RELEASE = "installed"
NAMESPACE = "installed-system"
AKS_SPOT = CHART / "values-aks-spot.yaml"
# The prometheus-operator kinds the AKS values turn on, as their CRDs declare them (schema-less:
# the operator is not what is tested here).
OPERATOR_CRDS = [
    ("servicemonitors", "ServiceMonitor"),
    ("prometheusrules", "PrometheusRule"),
]


def operator_crd(plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def json_of(plane: ControlPlane, *args: str) -> dict[str, Any]:
    return json.loads(plane.kubectl(*args, "-o", "json"))  # type: ignore[no-any-return]


def wait_until(predicate: Any, *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    plane = control_plane
    tools = {**helm_environment(), "KUBECONFIG": str(plane.admin_kubeconfig)}
    crds = [operator_crd(plural, kind) for plural, kind in OPERATOR_CRDS]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crds))
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=30s",
        *(f"crd/{crd['metadata']['name']}" for crd in crds),
    )  # fmt: skip
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl(
        "label", "namespace", NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
        "pod-security.kubernetes.io/warn=restricted",
    )  # fmt: skip
    try:
        result = subprocess.run(
            [tools["HELM4"], "install", RELEASE, str(CHART), "-n", NAMESPACE,
             "-f", str(AKS_SPOT), "--set", "image.repository=spot-rebalancer.invalid/never-pulled"],
            capture_output=True, text=True, timeout=180, check=False, env=tools,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        yield {"stdout": result.stdout, "stderr": result.stderr}
    finally:
        subprocess.run(
            [tools["HELM4"], "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "60s"],
            capture_output=True, text=True, timeout=120, check=False, env=tools,
        )  # fmt: skip
        plane.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
        plane.kubectl(
            "delete", "--ignore-not-found", *(f"crd/{c['metadata']['name']}" for c in crds)
        )


def nodes_by_priority(plane: ControlPlane) -> tuple[set[str], set[str]]:
    nodes = json_of(plane, "get", "nodes")["items"]
    spot = {
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"]["labels"].get(names.AKS_SPOT_LABEL) == "spot"
    }
    return spot, {n["metadata"]["name"] for n in nodes} - spot


def pods(plane: ControlPlane, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    return list(json_of(plane, "get", "pods", "-n", NAMESPACE, "-l", selector)["items"])


def test_pod_security_admits_every_pod(
    control_plane: ControlPlane, installed: dict[str, str]
) -> None:
    plane = control_plane
    spot, _ = nodes_by_priority(plane)
    assert "PodSecurity" not in installed["stderr"], installed["stderr"]
    daemonset = wait_until(
        lambda: next(
            (
                d
                for d in json_of(plane, "get", "daemonsets", "-n", NAMESPACE)["items"]
                if d.get("status", {}).get("currentNumberScheduled") == len(spot)
            ),
            None,
        ),
        timeout=60,
        what="the agent DaemonSet's pods",
    )
    assert daemonset["status"]["desiredNumberScheduled"] == len(spot)
    assert daemonset["status"].get("numberMisscheduled", 0) == 0
    (deployment,) = json_of(plane, "get", "deployments", "-n", NAMESPACE)["items"]
    wanted = deployment["spec"]["replicas"]
    assert wanted == 2  # values-aks-spot.yaml
    wait_until(
        lambda: len(pods(plane, "controller")) == wanted, timeout=60, what="the controller's pods"
    )
    events = json_of(plane, "get", "events", "-n", NAMESPACE)["items"]
    refused = [e["message"] for e in events if e.get("reason") == "FailedCreate"]
    assert refused == []
    # every pod of the release was admitted into a namespace that enforces "restricted"
    labels = json_of(plane, "get", "namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert len(pods(plane, "agent")) == len(spot)


def test_agents_on_spot_nodes_only_and_controllers_off_them(
    control_plane: ControlPlane, installed: dict[str, str]
) -> None:
    plane = control_plane
    spot, regular = nodes_by_priority(plane)
    assert spot and regular

    def bound(component: str, count: int) -> list[str] | None:
        names_ = [p["spec"].get("nodeName") for p in pods(plane, component)]
        return names_ if len(names_) == count and all(names_) else None  # type: ignore[return-value]

    agents = wait_until(lambda: bound("agent", len(spot)), timeout=60, what="agents bound")
    assert sorted(agents) == sorted(spot)  # one per spot node, none elsewhere
    controllers = wait_until(lambda: bound("controller", 2), timeout=60, what="controllers bound")
    assert set(controllers) <= regular


def test_the_installed_admission_policy_is_in_force(
    control_plane: ControlPlane, installed: dict[str, str]
) -> None:
    plane = control_plane
    policies = json_of(plane, "get", "validatingadmissionpolicies")["items"]
    (policy,) = [
        p for p in policies if p["metadata"]["labels"].get("app.kubernetes.io/instance") == RELEASE
    ]
    agent = sorted(pods(plane, "agent"), key=lambda p: p["spec"]["nodeName"])[0]
    own = agent["spec"]["nodeName"]
    spot, _ = nodes_by_priority(plane)
    other = sorted(spot - {own})[0]
    token = plane.kubectl(
        "create", "token", agent["spec"]["serviceAccountName"], "-n", NAMESPACE,
        "--bound-object-kind", "Pod", "--bound-object-name", agent["metadata"]["name"],
    ).strip()  # fmt: skip
    patch = json.dumps({"metadata": {"annotations": {names.EVENTS_ANNOTATION: "{}"}}})

    def as_agent(node: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL, "--server", plane.server,
             "--certificate-authority", str(plane.ca), "--token", token,
             "patch", "node", node, "--type", "merge", "-p", patch, "--dry-run=server"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    refused = wait_until(
        lambda: (r := as_agent(other)).returncode != 0 and r, timeout=30, what="the policy"
    )
    assert f"ValidatingAdmissionPolicy '{policy['metadata']['name']}'" in refused.stderr
    allowed = as_agent(own)
    assert allowed.returncode == 0, allowed.stderr
