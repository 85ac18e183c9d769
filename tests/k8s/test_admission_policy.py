"""The chart's ValidatingAdmissionPolicy on a real API server: the agent's ServiceAccount may write
its own condition and annotation on its own Node, and nothing else on any Node.

Set up as a cluster would: the chart's agent ServiceAccount, ClusterRole, binding and policy
(`helm template` of a release of its own, so the other k8s tests' release is untouched); a pod of
that ServiceAccount bound to a spot kwok node; a token bound to that pod (what the kubelet mounts
into it), which carries the node's name in `authentication.kubernetes.io/node-name`. Every check
is a real PATCH with that token, and a refusal must come from the policy (its name and the
validation's message), not from RBAC.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer import names
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from tests.chart.generated import CHART, helm_environment
from tests.controlplane import ControlPlane
from tests.helpers import KUBECTL

pytestmark = pytest.mark.k8s

RELEASE = "guard"
NAMESPACE = "guard-system"
OWN = "aks-gpuspot-12345678-vmss000000"  # the spot node the agent's pod runs on
OTHER_SPOT = "aks-gpuspot-12345678-vmss000001"
ON_DEMAND = "aks-gpuondemand-12345678-vmss000000"
KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Guarded:
    plane: ControlPlane
    policy: str
    service_account: str
    pod_token: str  # bound to a pod on OWN
    plain_token: str  # bound to nothing: carries no node name

    def pod_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig with the pod-bound token: what the agent's pod on OWN authenticates as."""
        cluster = {"server": self.plane.server, "certificate-authority": str(self.plane.ca)}
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "t", "cluster": cluster}],
                    "users": [{"name": "agent", "user": {"token": self.pod_token}}],
                    "contexts": [{"name": "t", "context": {"cluster": "t", "user": "agent"}}],
                    "current-context": "t",
                }
            )
        )
        return path

    def patch(
        self,
        token: str,
        node: str,
        body: dict[str, Any],
        *,
        status: bool = False,
        content_type: str = MERGE,
        dry_run: bool = False,
    ) -> tuple[int, str]:
        path = f"/api/v1/nodes/{node}" + ("/status" if status else "")
        query = "?dryRun=All" if dry_run else ""
        request = urllib.request.Request(
            self.plane.server + path + query,
            data=json.dumps(body).encode(),
            method="PATCH",
            headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
        )
        context = ssl.create_default_context(cafile=str(self.plane.ca))
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def node(self, name: str) -> dict[str, Any]:
        return json.loads(self.plane.kubectl("get", "node", name, "-o", "json"))  # type: ignore[no-any-return]


def render(server_version: str) -> list[dict[str, Any]]:
    """As `helm install` would render it there: the server's policy kinds and its version (which
    decides the Node status fields the policy names)."""
    tools = helm_environment()
    out = subprocess.run(
        [
            tools["HELM4"], "template", RELEASE, str(CHART), "-n", NAMESPACE,
            "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
            "--kube-version", server_version,
            "--set", "controller.enabled=false",
        ],
        capture_output=True, text=True, check=True, env=tools,
    ).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc and doc["kind"] in KINDS]


def pod_of(service_account: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent-probe", "namespace": NAMESPACE},
        "spec": {
            "serviceAccountName": service_account,
            "nodeName": node,  # bound as the DaemonSet controller binds its pods
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "spot-rebalancer:not-pulled-by-kwok"}],
        },
    }


def denial_probe(guarded: Guarded) -> bool:
    """True once the API server enforces the policy (a dry run, so nothing is written)."""
    code, text = guarded.patch(
        guarded.pod_token,
        OTHER_SPOT,
        {"metadata": {"annotations": {names.EVENTS_ANNOTATION: "{}"}}},
        dry_run=True,
    )
    return code == 403 and guarded.policy in text


@pytest.fixture(scope="module")
def guarded(control_plane: ControlPlane) -> Iterator[Guarded]:
    plane = control_plane
    objects = render(
        json.loads(plane.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
    )
    assert {obj["kind"] for obj in objects} == KINDS
    (account,) = [obj for obj in objects if obj["kind"] == "ServiceAccount"]
    (policy,) = [obj for obj in objects if obj["kind"] == "ValidatingAdmissionPolicy"]
    service_account = account["metadata"]["name"]
    plane.kubectl("create", "namespace", NAMESPACE)
    try:
        plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump_all(objects))
        plane.kubectl("create", "-f", "-", stdin=json.dumps(pod_of(service_account, OWN)))
        pod_token = plane.kubectl(
            "create", "token", service_account, "-n", NAMESPACE, "--duration", "1h",
            "--bound-object-kind", "Pod", "--bound-object-name", "agent-probe",
        ).strip()  # fmt: skip
        plain_token = plane.kubectl(
            "create", "token", service_account, "-n", NAMESPACE, "--duration", "1h"
        ).strip()
        result = Guarded(plane, policy["metadata"]["name"], service_account, pod_token, plain_token)
        deadline = time.monotonic() + 30
        while not denial_probe(result):  # the admission plugin loads policies asynchronously
            assert time.monotonic() < deadline, "the policy was never enforced"
            time.sleep(0.2)
        yield result
    finally:
        for obj in objects:
            if obj["kind"] != "ServiceAccount":  # namespaced: goes with the namespace
                plane.kubectl(
                    "delete", "--ignore-not-found", obj["kind"].lower(), obj["metadata"]["name"]
                )
        # The probe pod without grace first: the namespace controller waits for pods still
        # terminating (10 s here) before it lets the namespace go.
        plane.kubectl("delete", "pod", "agent-probe", "-n", NAMESPACE, "--ignore-not-found",
                      "--grace-period=0", "--force")  # fmt: skip
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=true")
        for node in (OWN, OTHER_SPOT, ON_DEMAND):  # what an allowed check wrote
            plane.kubectl("annotate", "node", node, f"{names.EVENTS_ANNOTATION}-")


def test_the_policy_type_checks_against_the_node_schema(guarded: Guarded) -> None:
    """A policy whose CEL does not type-check refuses every request of the agent (failurePolicy
    Fail): the API server's own type checker must find nothing to say."""
    deadline = time.monotonic() + 30
    while True:
        policy = json.loads(
            guarded.plane.kubectl("get", "validatingadmissionpolicy", guarded.policy, "-o", "json")
        )
        status = policy.get("status", {})
        if status.get("observedGeneration") == policy["metadata"]["generation"]:
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status.get("typeChecking", {}).get("expressionWarnings", []) == []


# Compared apart (conditions) or not at all (capacity, allocatable: CEL cannot type-check maps of
# quantities; the README says so).
NOT_COMPARED_ALONE = {"capacity", "allocatable", "conditions"}


def test_every_node_status_field_the_server_knows_is_held(guarded: Guarded) -> None:
    """The Node status fields of this API server's own schema (its OpenAPI, not the client's
    model), each held equal by a validation of the policy: `runtimeHandlers` and `features`
    (1.34) were writable by the agent."""
    schema = json.loads(guarded.plane.kubectl("get", "--raw", "/openapi/v3/api/v1"))
    fields = set(schema["components"]["schemas"]["io.k8s.api.core.v1.NodeStatus"]["properties"])
    assert {"runtimeHandlers", "features"} <= fields
    policy = json.loads(
        guarded.plane.kubectl("get", "validatingadmissionpolicy", guarded.policy, "-o", "json")
    )
    held = {
        field
        for validation in policy["spec"]["validations"]
        for field in fields
        if f"object.status.{field} == oldObject.status.{field}"
        in " ".join(validation["expression"].split())
    }
    assert held == fields - NOT_COMPARED_ALONE


def refusable_parts(node: dict[str, Any]) -> dict[str, Any]:
    """What the refused patches try to change (kwok's heartbeats change other parts meanwhile)."""
    status = node["status"]
    return {
        "labels": node["metadata"].get("labels"),
        "annotations": node["metadata"].get("annotations"),
        "finalizers": node["metadata"].get("finalizers"),
        "spec": node["spec"],
        "condition types": sorted(c["type"] for c in status.get("conditions", [])),
        "addresses": status.get("addresses"),
        "nodeInfo": status.get("nodeInfo"),
        "daemonEndpoints": status.get("daemonEndpoints"),
        **{
            field: status.get(field)
            for field in ("phase", "images", "volumesInUse", "volumesAttached", "config",
                          "runtimeHandlers", "features")
        },
    }  # fmt: skip


def condition(status: str = "True") -> dict[str, Any]:
    return {
        "status": {
            "conditions": [
                {
                    "type": names.CONDITION_TYPE,
                    "status": status,
                    "reason": "EventScheduled",
                    "message": "EventType=Preempt EventId=X EventStatus=Scheduled NotBefore=now Pending=1",
                    "lastHeartbeatTime": "2026-11-30T12:00:00Z",
                    "lastTransitionTime": "2026-11-30T12:00:00Z",
                }
            ]
        }
    }


def annotations(**values: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": values}}


OURS = names.EVENTS_ANNOTATION

# (what, node, body, status subresource, patch type, expected message of the refusal)
ALLOWED = [
    ("our annotation", OWN, annotations(**{OURS: '{"version":1,"events":[]}'}), False, MERGE),
    ("our condition", OWN, condition(), True, STRATEGIC),
    ("our condition again, changed", OWN, condition("False"), True, STRATEGIC),
    ("our annotation removed", OWN, annotations(**{OURS: None}), False, MERGE),
]
REFUSED = [
    ("our annotation on another spot node", OTHER_SPOT, annotations(**{OURS: "{}"}), False, MERGE, "only its own Node"),
    ("our condition on another spot node", OTHER_SPOT, condition(), True, STRATEGIC, "only its own Node"),
    ("our annotation on an on-demand node", ON_DEMAND, annotations(**{OURS: "{}"}), False, MERGE, "only its own Node"),
    ("the drained mark (the controller's)", OWN, annotations(**{names.DRAINED_FOR_ANNOTATION: "X"}), False, MERGE, "no annotation but"),
    ("a manual drain request", OWN, annotations(**{names.DRAIN_REQUEST_ANNOTATION: "true"}), False, MERGE, "no annotation but"),
    ("ours and another annotation at once", OWN, annotations(**{OURS: "{}", "example.com/x": "1"}), False, MERGE, "no annotation but"),
    ("a label", OWN, {"metadata": {"labels": {"example.com/owned": "yes"}}}, False, MERGE, "labels"),
    ("a label removed", OWN, {"metadata": {"labels": {"agentpool": None}}}, False, MERGE, "labels"),
    ("a taint", OWN, {"spec": {"taints": [{"key": "example.com/evil", "effect": "NoExecute"}]}}, False, MERGE, "spec"),
    ("cordon", OWN, {"spec": {"unschedulable": True}}, False, MERGE, "spec"),
    ("a finalizer", OWN, {"metadata": {"finalizers": ["example.com/hold"]}}, False, MERGE, "finalizers"),
    ("another condition (AKS's NPD)", OWN, {"status": {"conditions": [{"type": "PreemptionScheduled", "status": "True"}]}}, True, STRATEGIC, "no condition but"),
    ("the node's addresses", OWN, {"status": {"addresses": [{"type": "InternalIP", "address": "10.9.9.9"}]}}, True, STRATEGIC, "status.addresses"),
    ("the kubelet version", OWN, {"status": {"nodeInfo": {"kubeletVersion": "v0.0.1"}}}, True, STRATEGIC, "status.nodeInfo"),
    ("the kubelet endpoint", OWN, {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 1}}}}, True, STRATEGIC, "status.daemonEndpoints"),
    ("the runtime handlers", OWN, {"status": {"runtimeHandlers": [{"name": "evil", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}]}}, True, STRATEGIC, "status.runtimeHandlers"),
    ("the runtime handlers (merge patch)", OWN, {"status": {"runtimeHandlers": [{"name": "runc"}]}}, True, MERGE, "status.runtimeHandlers"),
    ("the node's features", OWN, {"status": {"features": {"supplementalGroupsPolicy": True}}}, True, STRATEGIC, "status.features"),
    ("the phase", OWN, {"status": {"phase": "Terminated"}}, True, STRATEGIC, "status.phase"),
    ("the images", OWN, {"status": {"images": [{"names": ["example.com/evil:1"], "sizeBytes": 1}]}}, True, MERGE, "status.images"),
    ("the volumes in use", OWN, {"status": {"volumesInUse": ["kubernetes.io/csi/x^y"]}}, True, MERGE, "status.volumesInUse"),
    ("the volumes attached", OWN, {"status": {"volumesAttached": [{"name": "kubernetes.io/csi/x^y", "devicePath": "/dev/x"}]}}, True, MERGE, "status.volumesAttached"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "node", "body", "status", "content_type"), ALLOWED, ids=[c[0] for c in ALLOWED]
)
def test_allowed_on_its_own_node(
    guarded: Guarded,
    what: str,
    node: str,
    body: dict[str, Any],
    status: bool,
    content_type: str,
) -> None:
    code, text = guarded.patch(
        guarded.pod_token, node, body, status=status, content_type=content_type
    )
    assert code == 200, text
    written = guarded.node(node)
    if status:
        (ours,) = [c for c in written["status"]["conditions"] if c["type"] == names.CONDITION_TYPE]
        assert ours["status"] == body["status"]["conditions"][0]["status"]
    else:
        assert (
            written["metadata"].get("annotations", {}).get(OURS)
            == body["metadata"]["annotations"][OURS]
        )


@pytest.mark.parametrize(
    ("what", "node", "body", "status", "content_type", "message"),
    REFUSED,
    ids=[c[0] for c in REFUSED],
)
def test_refused(
    guarded: Guarded,
    what: str,
    node: str,
    body: dict[str, Any],
    status: bool,
    content_type: str,
    message: str,
) -> None:
    before = guarded.node(node)
    code, text = guarded.patch(
        guarded.pod_token, node, body, status=status, content_type=content_type
    )
    assert code == 403, text
    assert f"ValidatingAdmissionPolicy '{guarded.policy}'" in text and message in text, text
    assert refusable_parts(guarded.node(node)) == refusable_parts(before)


def test_status_config_is_not_kept(guarded: Guarded) -> None:
    """status.config (the removed dynamic kubelet config) the API server drops before admission:
    the policy holds it too (for servers that keep it), here the write changes nothing."""
    code, text = guarded.patch(
        guarded.pod_token, OWN, {"status": {"config": {"error": "evil"}}}, status=True
    )
    assert code in (200, 403), text
    assert "config" not in guarded.node(OWN)["status"]


def test_a_token_not_bound_to_a_pod_may_change_no_node(guarded: Guarded) -> None:
    code, text = guarded.patch(guarded.plain_token, OWN, annotations(**{OURS: "{}"}))
    assert code == 403 and "not bound to a pod on a Node" in text, text


def test_others_are_not_confined(guarded: Guarded) -> None:
    """The policy binds the agent only: the admin (and so the controller, kwok, ...) may still
    label a Node."""
    guarded.plane.kubectl("label", "node", OWN, "example.com/admin-was-here=yes")
    guarded.plane.kubectl("label", "node", OWN, "example.com/admin-was-here-")


async def test_the_agents_own_writes_pass(guarded: Guarded, tmp_path: Path) -> None:
    """The exact requests rebalancer.kube.nodes sends (merge patch, strategic merge patch of
    status), with the pod-bound token."""
    kubeconfig = guarded.pod_kubeconfig(tmp_path / "agent.kubeconfig")
    client = await KubeClient.connect(str(kubeconfig))
    try:
        nodes = NodeApi(client)
        await nodes.set_annotations(OWN, {OURS: '{"version":1,"vmName":"x","events":[]}'})
        await nodes.set_condition(OWN, condition()["status"]["conditions"][0])
        node = await nodes.get(OWN)
    finally:
        await client.close()
    assert node.annotations[OURS].startswith('{"version":1')
    assert node.conditions[names.CONDITION_TYPE]["status"] == "True"


# ---- docs/permissions.md's example: who may request a drain -------------------------------------


def readme_drain_policy() -> list[dict[str, Any]]:
    """The example policy of docs/permissions.md, exactly as a reader would copy it."""
    text = (Path(__file__).parents[2] / "docs" / "permissions.md").read_text()
    section = text[text.index("**Who can drain a Node with `spot-rebalancer.io/drain`.**") :]
    start = section.index("```yaml\n") + len("```yaml\n")
    block = section[start : section.index("\n```", start)]
    return [doc for doc in yaml.safe_load_all(block) if doc]


def test_the_readme_example_limits_drain_requests_to_a_group(control_plane: ControlPlane) -> None:
    plane = control_plane
    objects = readme_drain_policy()
    assert {obj["kind"] for obj in objects} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    drain = names.DRAIN_REQUEST_ANNOTATION
    # Both may patch Nodes (system:masters); only alice is in the operators' group.
    alice = ("--as", "alice", "--as-group", "system:masters", "--as-group", "node-drainers")
    bob = ("--as", "bob", "--as-group", "system:masters")

    def annotate(who: tuple[str, ...], value: str, *extra: str) -> subprocess.CompletedProcess[str]:
        change = f"{drain}-" if value == "-" else f"{drain}={value}"
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(plane.admin_kubeconfig), *who, "annotate", "node",
             OTHER_SPOT, change, "--overwrite", *extra],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    try:
        deadline = time.monotonic() + 30
        while annotate(bob, "now", "--dry-run=server").returncode == 0:
            assert time.monotonic() < deadline, "the example policy was never enforced"
            time.sleep(0.2)
        refused = annotate(bob, "now")
        assert refused.returncode != 0
        assert "only the group node-drainers may set or change" in refused.stderr
        assert drain not in guarded_annotations(plane, OTHER_SPOT)
        assert annotate(alice, "now").returncode == 0
        assert guarded_annotations(plane, OTHER_SPOT)[drain] == "now"
        # once set, nobody else may change or remove it either
        assert annotate(bob, "-").returncode != 0
        assert annotate(alice, "-").returncode == 0
        assert drain not in guarded_annotations(plane, OTHER_SPOT)
        # other annotations are not its business
        plane.kubectl("annotate", "node", OTHER_SPOT, "example.com/note=x", *bob)
        plane.kubectl("annotate", "node", OTHER_SPOT, "example.com/note-")
    finally:
        for obj in objects:
            plane.kubectl(
                "delete", "--ignore-not-found", obj["kind"].lower(), obj["metadata"]["name"]
            )
        annotate((), "-")


def guarded_annotations(plane: ControlPlane, node: str) -> dict[str, str]:
    metadata = json.loads(plane.kubectl("get", "node", node, "-o", "json"))["metadata"]
    return dict(metadata.get("annotations", {}))
