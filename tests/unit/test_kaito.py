"""KAITO's inference workload under NAP, with KAITO's object shapes: the StatefulSet its workspace
controller creates for a Workspace (kaito-project/kaito at 056b8280,
pkg/workspace/manifests/manifests.go GenerateStatefulSetManifest and
pkg/workspace/inference/preset_inferences.go defaultTolerations) and its pods, on Karpenter
nodes. A policy on the Workspace does not reach the StatefulSet (KAITO copies none of its
annotations); one added on the StatefulSet does (docs/karpenter.md)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import pytest
import structlog
import yaml

from rebalancer import names
from rebalancer.clock import ManualClock
from rebalancer.controller.actions import Evict, ScaleUp
from rebalancer.controller.admission import View, review
from rebalancer.controller.checkup import Finding, Setup, diagnose, setup_of
from rebalancer.controller.doctor import DAEMONSETS, NODEPOOLS, Doctor
from rebalancer.controller.kaito import WORKSPACES, WorkspaceInfo
from rebalancer.controller.karpenter import NodePoolInfo
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.kube.errors import Forbidden, NotFound
from rebalancer.metrics import ControllerMetrics
from rebalancer.plugin import doctor as plugin_doctor
from rebalancer.plugin.gather import _workspaces as gather_workspaces
from rebalancer.plugin.view import build_view
from rebalancer.vocabulary import Check
from tests.unit.kube_objects import node
from tests.unit.test_checkup import D4, GPU, SPOT
from tests.unit.test_checkup_nap import nodepool
from tests.unit.test_placement import apply_adds, patch_of
from tests.unit.test_planner import NOW, WATCHED
from tests.unit.test_plugin import raw

WORKSPACE = "workspace-phi-3"
NAMESPACE = "kaito"
KAITO_LABEL = "kaito.sh/workspace"
# defaultTolerations on Azure: nvidia.com/gpu (Exists), sku=gpu and the AKS spot taint.
KAITO_TOLERATIONS = [
    {"effect": "NoSchedule", "operator": "Exists", "key": "nvidia.com/gpu"},
    {"effect": "NoSchedule", "value": "gpu", "key": "sku", "operator": "Equal"},
    {"effect": "NoSchedule", "key": names.AKS_SPOT_LABEL, "operator": "Equal", "value": "spot"},
]
WORKSPACE_OWNER = {
    "apiVersion": "kaito.sh/v1beta1",
    "kind": "Workspace",
    "name": WORKSPACE,
    "uid": "uid-ws",
    "controller": True,
    "blockOwnerDeletion": True,
}


def kaito_statefulset(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    selector = {KAITO_LABEL: WORKSPACE}
    return {
        "metadata": {
            "name": WORKSPACE,
            "namespace": NAMESPACE,
            "uid": "uid-sts",
            # KAITO writes its revision; what a user adds stays across KAITO's updates.
            "annotations": {"workspace.kaito.io/revision": "1", **(annotations or {})},
            "ownerReferences": [WORKSPACE_OWNER],
        },
        "spec": {
            "replicas": 2,
            "podManagementPolicy": "Parallel",
            "serviceName": f"{WORKSPACE}-headless",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "tolerations": KAITO_TOLERATIONS,
                    "containers": [
                        {
                            "name": WORKSPACE,
                            "image": "mcr.microsoft.com/aks/kaito/kaito-base:0.0.8",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            },
        },
        "status": {"readyReplicas": 2},
    }


def nap_node(
    name: str, capacity: str, zone: str, *, notice_seconds: float | None = None
) -> NodeInfo:
    conditions = [{"type": "Ready", "status": "True"}]
    if notice_seconds is not None:
        not_before = (NOW + timedelta(seconds=notice_seconds)).strftime("%a, %d %b %Y %H:%M:%S GMT")
        conditions.append(
            {
                "type": names.NPD_PREEMPTION_CONDITION,
                "status": "True",
                "message": f"Preempt Scheduled: {not_before}. EventId: e-1",
                "lastTransitionTime": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    return NodeInfo.from_json(
        {
            "metadata": {
                "name": name,
                "labels": {
                    names.KARPENTER_NODEPOOL_LABEL: "gpu",
                    names.KARPENTER_CAPACITY_TYPE_LABEL: capacity,
                    names.AKS_SPOT_LABEL: "spot" if capacity == "spot" else "regular",
                    names.ZONE_LABEL: zone,
                    names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
                },
            },
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
            "status": {"conditions": conditions, "allocatable": {"nvidia.com/gpu": "1"}},
        }
    )


def kaito_pod(index: int, node: str) -> dict[str, Any]:
    template = kaito_statefulset()["spec"]["template"]
    return {
        "metadata": {
            "name": f"{WORKSPACE}-{index}",
            "namespace": NAMESPACE,
            "uid": f"uid-pod-{index}",
            "labels": copy.deepcopy(template["metadata"]["labels"]),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": WORKSPACE,
                 "uid": "uid-sts", "controller": True}
            ],
        },
        "spec": {**copy.deepcopy(template["spec"]), "nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def cluster(statefulset: dict[str, Any], *, notice_seconds: float | None = None) -> Snapshot:
    nodes = [
        nap_node("nap-spot-0", "spot", "eastus-1", notice_seconds=notice_seconds),
        nap_node("nap-spot-1", "spot", "eastus-2"),
    ]
    pods = [PodInfo.from_json(kaito_pod(0, "nap-spot-0"))]
    workload = WorkloadInfo.from_json("StatefulSet", statefulset)
    return Snapshot(
        now=NOW,
        nodes={n.name: n for n in nodes},
        pods={p.key: p for p in pods},
        workloads={workload.key: workload},
        replicaset_owners={},
        history=WATCHED,
    )


def admission(pod_json: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(pod_json)
    del new["spec"]["nodeName"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": NAMESPACE,
            "object": new,
        },
    }


def view_of(state: Snapshot) -> View:
    risks = assess(nodes=state.nodes.values(), history=WATCHED, now=NOW, settings=RiskSettings())
    return View(state, risks)


def test_a_policy_on_the_workspace_never_reaches_the_statefulset_kaito_creates() -> None:
    # KAITO copies no Workspace annotation onto its StatefulSet: nothing to place by.
    result = review(admission(kaito_pod(1, "")), view_of(cluster(kaito_statefulset())), [])
    assert result.outcome == "no_policy"


def test_a_policy_added_on_kaitos_statefulset_places_its_pods_on_a_nodepool() -> None:
    sts = kaito_statefulset({names.SPREAD: "zone"})
    body = admission(kaito_pod(1, ""))
    result = review(body, view_of(cluster(sts)), [])
    assert result.outcome == "placed"
    assert result.decision is not None
    # Zone spread: the other zone of the NodePool's spot part, by the labels Karpenter knows.
    assert result.decision.placed == "gpu:spot/eastus-2"
    patched = apply_adds(body["request"]["object"], patch_of(result.response))
    (term,) = patched["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    keys = [e["key"] for e in term["preference"]["matchExpressions"]]
    assert keys == [
        names.KARPENTER_NODEPOOL_LABEL,
        names.KARPENTER_CAPACITY_TYPE_LABEL,
        names.ZONE_LABEL,
    ]
    assert json.dumps(patched["spec"]["tolerations"]) == json.dumps(KAITO_TOLERATIONS)  # kept


def test_kaitos_replica_on_a_preempted_nap_node_is_evicted_at_once() -> None:
    # A StatefulSet cannot be surged (a replacement has the same name): its pod is evicted at
    # once so that the replacement starts loading as early as possible.
    state = cluster(kaito_statefulset({names.SPREAD: "zone"}), notice_seconds=30)
    assert state.nodes["nap-spot-0"].notices, "the NPD condition was not read as a notice"
    result = plan(state, Settings())
    assert [a for a in result.actions if isinstance(a, ScaleUp)] == []
    assert [a.pod for a in result.actions if isinstance(a, Evict)] == [
        (NAMESPACE, f"{WORKSPACE}-0")
    ]


# ---- the doctor: a Workspace whose pods cannot tolerate spot ------------------------------------

PRESET = "phi-3-mini-4k-instruct"
# KAITO before v0.10.0, or with its chart's cloudProviderName other than azure: no spot toleration.
OLD_KAITO_TOLERATIONS = KAITO_TOLERATIONS[:2]
CUSTOM_SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
SKU_GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
AKS_SPOT_TAINT = {"key": names.AKS_SPOT_LABEL, "value": "spot", "effect": "NoSchedule"}


def workspace(*, template_tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Workspace as a user writes one (kaito.sh/v1beta1: `resource` and `inference` are
    top-level fields); a preset one unless `template_tolerations` is given."""
    inference: dict[str, Any] = {"preset": {"name": PRESET}}
    if template_tolerations is not None:
        inference = {
            "template": {
                "spec": {
                    "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.0"}],
                    "tolerations": template_tolerations,
                }
            }
        }
    return {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": WORKSPACE, "namespace": NAMESPACE, "uid": "uid-ws",
                     "annotations": {"workspace.kaito.io/revision": "1"}},
        "resource": {"instanceType": "Standard_NC24ads_A100_v4",
                     "labelSelector": {"matchLabels": {"apps": "phi-3"}}},
        "inference": inference,
    }  # fmt: skip


def kaito_makes(ws: dict[str, Any], defaults: list[dict[str, str]]) -> dict[str, Any]:
    """The StatefulSet KAITO creates for the Workspace: a preset's pods get KAITO's tolerations
    (`spec.Tolerations = defaultTolerations`), a template's get the template's followed by them
    (GenerateManifestWithPodTemplate)."""
    sts = kaito_statefulset()
    template = ws["inference"].get("template")
    own = copy.deepcopy(template["spec"]["tolerations"]) if template else []
    sts["spec"]["template"]["spec"]["tolerations"] = own + copy.deepcopy(defaults)
    return sts


def vmss_nodes(spot_taints: list[str]) -> list[dict[str, Any]]:
    return [
        node("spot-0", "gpuspot", spot=True, gpus=1, taints=spot_taints),
        node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]),
    ]


NAP_NODES = [node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4),
             node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU])]  # fmt: skip


def doctor_setup(parts: dict[str, Any], *, workspaces: list[dict[str, Any]] | None = None) -> Setup:
    """The controller's doctor input: the nodes, KAITO's StatefulSets, the NodePools and the
    Workspaces (None: not readable)."""
    workloads = [WorkloadInfo.from_json("StatefulSet", s) for s in parts["statefulsets"]]
    state = Snapshot(
        now=NOW,
        nodes={n.name: n for n in map(NodeInfo.from_json, parts["nodes"])},
        pods={},
        workloads={w.key: w for w in workloads},
        replicaset_owners={},
        history=WATCHED,
    )
    listed = parts["workspaces"] if workspaces is None else workspaces
    return setup_of(
        state,
        settings=Settings(),
        daemonsets=None,
        nodepools=[NodePoolInfo.from_json(p) for p in parts.get("nodepools", [])],
        workspaces=None if listed is None else [WorkspaceInfo.from_json(w) for w in listed],
    )


def kaito_world(
    ws: dict[str, Any], defaults: list[dict[str, str]], **changes: Any
) -> dict[str, Any]:
    parts: dict[str, Any] = {
        "nodes": vmss_nodes([SPOT, GPU]),
        "workspaces": [ws],
        "statefulsets": [kaito_makes(ws, defaults)],
    }
    parts.update(changes)
    return parts


SPOT_NODEPOOL_CUSTOM_TAINT = nodepool("gpu", ["spot", "on-demand"], taints=[CUSTOM_SPOT_TAINT, SKU_GPU_TAINT])  # fmt: skip
SPOT_NODEPOOL_AKS_TAINT = nodepool("gpu", ["spot", "on-demand"], taints=[AKS_SPOT_TAINT, SKU_GPU_TAINT])  # fmt: skip
ON_THE_WORKSPACE = [("kaito-workspace-cannot-use-spot", "warning", f"Workspace {NAMESPACE}/{WORKSPACE}")]  # fmt: skip
DOCTOR_CASES: dict[str, tuple[dict[str, Any], list[tuple[str, str, str]]]] = {
    "KAITO v0.10+ on Azure, a VMSS spot pool: its pods tolerate spot": (
        kaito_world(workspace(), KAITO_TOLERATIONS),
        [],
    ),
    "an older KAITO (or not set to azure), a VMSS spot pool": (
        kaito_world(workspace(), OLD_KAITO_TOLERATIONS),
        ON_THE_WORKSPACE,
    ),
    "KAITO v0.10+, a spot NodePool tainted otherwise, no node of it yet": (
        kaito_world(workspace(), KAITO_TOLERATIONS, nodes=NAP_NODES,
                    nodepools=[SPOT_NODEPOOL_CUSTOM_TAINT]),
        ON_THE_WORKSPACE,
    ),
    "KAITO v0.10+, a spot NodePool with AKS's spot taint": (
        kaito_world(workspace(), KAITO_TOLERATIONS, nodes=NAP_NODES,
                    nodepools=[SPOT_NODEPOOL_AKS_TAINT]),
        [],
    ),
    "an older KAITO, a template Workspace without the spot toleration": (
        kaito_world(workspace(template_tolerations=[]), OLD_KAITO_TOLERATIONS),
        ON_THE_WORKSPACE,
    ),
    "an older KAITO, a template Workspace that tolerates spot itself": (
        kaito_world(workspace(template_tolerations=[KAITO_TOLERATIONS[2]]),
                    OLD_KAITO_TOLERATIONS),
        [],
    ),
    "an older KAITO, no spot GPU capacity at all: nothing to tolerate": (
        kaito_world(workspace(), OLD_KAITO_TOLERATIONS, nodes=vmss_nodes([GPU])[1:]),
        [],
    ),
    "a Workspace KAITO has not made a StatefulSet for yet: not judged": (
        kaito_world(workspace(), OLD_KAITO_TOLERATIONS, statefulsets=[]),
        [],
    ),
    "Workspaces not readable: the check skipped (the StatefulSet's own check stays)": (
        kaito_world(workspace(), OLD_KAITO_TOLERATIONS, workspaces=None),
        [("workload-cannot-use-spot", "warning", f"StatefulSet {NAMESPACE}/{WORKSPACE}")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(DOCTOR_CASES))
def test_the_doctor_on_kaito_workspaces(case: str) -> None:
    parts, expected = DOCTOR_CASES[case]
    findings = diagnose(doctor_setup(parts))
    assert [(str(f.check), f.severity, str(f.object)) for f in findings] == expected


def kaito_applies(parts: dict[str, Any], finding: Finding) -> dict[str, Any]:
    """The finding's fix applied as its command does: a merge patch of the Workspace (the whole
    template tolerations list) and of the StatefulSet given inline, or a strategic merge patch of
    the StatefulSet from fix.yaml (tolerations have no merge key: the list is replaced)."""
    changed = copy.deepcopy(parts)
    (sts,) = changed["statefulsets"]
    document = yaml.safe_load(finding.yaml)
    if " patch workspace " in finding.command:
        (ws,) = changed["workspaces"]
        ws["inference"]["template"]["spec"]["tolerations"] = document["inference"]["template"][
            "spec"
        ]["tolerations"]
        inline = json.loads(finding.command.split(" -p ", 1)[1].strip("'"))
        tolerations = inline["spec"]["template"]["spec"]["tolerations"]
    else:
        assert finding.command == f"kubectl -n {NAMESPACE} patch statefulset {WORKSPACE} --patch-file fix.yaml"  # fmt: skip
        tolerations = document["spec"]["template"]["spec"]["tolerations"]
    sts["spec"]["template"]["spec"]["tolerations"] = tolerations
    return changed


@pytest.mark.parametrize("case", [c for c, (_, e) in DOCTOR_CASES.items() if e == ON_THE_WORKSPACE])
def test_each_workspace_fix_makes_its_finding_go_away(case: str) -> None:
    parts, _ = DOCTOR_CASES[case]
    (finding,) = diagnose(doctor_setup(parts))
    fixed = kaito_applies(parts, finding)
    assert diagnose(doctor_setup(fixed)) == []


def test_a_template_workspaces_fix_reaches_the_statefulset_kaito_makes_again() -> None:
    # KAITO does not carry a changed template to its StatefulSet, but one it makes again (after a
    # deletion) comes from the patched Workspace: no finding then either.
    parts, _ = DOCTOR_CASES["an older KAITO, a template Workspace without the spot toleration"]
    (finding,) = diagnose(doctor_setup(parts))
    assert "inference" in yaml.safe_load(finding.yaml)  # the Workspace's field, not `spec`
    patched = kaito_applies(parts, finding)["workspaces"][0]
    remade = {**parts, "workspaces": [patched],
              "statefulsets": [kaito_makes(patched, OLD_KAITO_TOLERATIONS)]}  # fmt: skip
    assert diagnose(doctor_setup(remade)) == []


def test_a_preset_workspaces_fix_says_why_kaito_and_what_to_upgrade() -> None:
    older, _ = DOCTOR_CASES["an older KAITO (or not set to azure), a VMSS spot pool"]
    (finding,) = diagnose(doctor_setup(older))
    assert "upgrade KAITO" in finding.fix and "v0.10.0" in finding.fix
    assert finding.object.api_version == "kaito.sh/v1beta1" and finding.object.uid == "uid-ws"
    # A taint KAITO never tolerates: upgrading would not help, the capacity's taint would.
    other, _ = DOCTOR_CASES["KAITO v0.10+, a spot NodePool tainted otherwise, no node of it yet"]
    (finding,) = diagnose(doctor_setup(other))
    assert "upgrade KAITO" not in finding.fix
    assert "Taint the spot capacity with kubernetes.azure.com/scalesetpriority=spot" in finding.fix
    assert "gpu:spot: spot=true:NoSchedule" in finding.what


def test_a_broken_workspace_is_read_as_empty_not_a_failed_run() -> None:
    broken = WorkspaceInfo.from_json({"metadata": "x", "inference": {"template": {"spec": 3}}})
    assert (broken.name, broken.template, broken.template_tolerations) == ("", True, ())


class ByPath:
    """A Requester answering each path from a table (an exception is raised)."""

    def __init__(self, answers: dict[str, dict[str, Any] | Exception]) -> None:
        self.answers = answers

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        return answer


def controller_doctor(answers: dict[str, dict[str, Any] | Exception]) -> Doctor:
    return Doctor(
        client=cast(Any, ByPath(answers)),
        settings=ControllerSettings(),
        metrics=ControllerMetrics(),
        events=None,
        leading=lambda: True,
        clock=ManualClock(NOW),
        log=structlog.get_logger(),
    )


async def test_the_controllers_doctor_lists_workspaces_and_skips_them_without_kaito() -> None:
    parts, _ = DOCTOR_CASES["an older KAITO (or not set to azure), a VMSS spot pool"]
    state = doctor_setup(parts)
    snapshot = Snapshot(
        now=NOW,
        nodes={n.name: n for n in state.nodes},
        pods={},
        workloads={w.key: w for w in state.kaito_workloads},
        replicaset_owners={},
        history=WATCHED,
    )
    base: dict[str, dict[str, Any] | Exception] = {DAEMONSETS: {"items": []}, NODEPOOLS: {"items": []}}  # fmt: skip

    async def checks(answer: dict[str, Any] | Exception) -> list[str]:
        found = await controller_doctor({**base, WORKSPACES: answer}).check(snapshot)
        assert found is not None
        return sorted(str(f.check) for f in found)

    assert await checks({"items": parts["workspaces"]}) == ["kaito-workspace-cannot-use-spot"]
    # Without KAITO (404) and when forbidden: no Workspace finding; the StatefulSet's own check.
    for answer in (NotFound("no CRD", status=404), Forbidden("no", status=403)):
        assert await checks(answer) == ["workload-cannot-use-spot"]


class Pages:
    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert path == WORKSPACES
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "listed", "said"),
    [
        ({"items": [workspace()]}, 1, False),
        (NotFound("no CRD", status=404), 0, False),  # no KAITO: nothing to say
        (Forbidden("forbidden", status=403), None, True),
    ],
)
async def test_the_plugin_reads_workspaces_and_says_when_it_may_not(
    answer: dict[str, Any] | Exception, listed: int | None, said: bool
) -> None:
    problems: list[str] = []
    got = await gather_workspaces(cast(Any, Pages(answer)), problems)
    assert (None if got is None else len(got)) == listed
    assert problems == (
        ["cannot list KAITO Workspaces (forbidden): the Workspace check is skipped"] if said else []
    )


def test_the_plugins_doctor_reports_the_workspace() -> None:
    parts, _ = DOCTOR_CASES["an older KAITO (or not set to azure), a VMSS spot pool"]
    gathered = raw(nodes=parts["nodes"], statefulsets=parts["statefulsets"],
                   workspaces=parts["workspaces"])  # fmt: skip
    view = build_view(gathered, now=NOW, namespace=None)
    assert Check.WORKSPACE_NOT_ON_SPOT in {f.check for f in plugin_doctor.findings_of(view)}
    unread = build_view(replace(gathered, workspaces=None), now=NOW, namespace=None)
    assert Check.WORKSPACE_NOT_ON_SPOT not in {f.check for f in plugin_doctor.findings_of(unread)}
