"""The doctor's checks (rebalancer/controller/checkup.py) as tables: each misconfiguration gives
its finding on the object to change, a healthy setup gives none, and every YAML a finding prints
makes that finding go away when applied."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from rebalancer.config import PoolShape
from rebalancer.controller.checkup import (
    ERROR,
    WARNING,
    Finding,
    NodeGroup,
    Setup,
    diagnose,
    helm_upgrade_command,
    node_groups_from_status,
    setup_of,
)
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import DaemonSetInfo, NodeInfo, WorkloadInfo
from rebalancer.controller.planner import Settings
from rebalancer.controller.pools import Pool, declared_pools
from rebalancer.controller.snapshot import Snapshot
from rebalancer.vocabulary import Check
from tests.unit.kube_objects import daemonset, deployment, node

SPOT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
GPU = "sku=gpu:NoSchedule"
BOTH = [SPOT, GPU]
AGENT_LABELS = {
    "app.kubernetes.io/part-of": "spot-rebalancer",
    "app.kubernetes.io/component": "agent",
}
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
D4 = "Standard_D4s_v5"
TEAM = "team=ml:NoSchedule"
SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"


def world(**changes: Any) -> dict[str, Any]:
    """A healthy spot GPU setup, as raw objects; `changes` replace its parts."""
    parts: dict[str, Any] = {
        "nodes": [
            node("spot-0", "gpuspot", spot=True, gpus=1, taints=BOTH),
            node("spot-1", "gpuspot", spot=True, gpus=1, taints=BOTH),
            node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]),
            node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4),
        ],
        "daemonsets": [
            daemonset("nvidia-device-plugin-daemonset", "kube-system", BOTH, image=PLUGIN_IMAGE),
            daemonset(
                "spot-rebalancer-agent",
                "spot-rebalancer",
                BOTH,
                labels=AGENT_LABELS,
                node_selector={"kubernetes.azure.com/scalesetpriority": "spot"},
            ),
        ],
        "workloads": [deployment("llm", BOTH, gpus=1)],
        "declared": [],
        "node_groups": None,
        "spot_seen": frozenset(),
        "now": None,
    }
    parts.update(changes)
    return parts


def setup(parts: dict[str, Any]) -> Setup:
    return Setup(
        nodes=[NodeInfo.from_json(n) for n in parts["nodes"]],
        workloads=[WorkloadInfo.from_json("Deployment", w) for w in parts["workloads"]],
        daemonsets=None
        if parts["daemonsets"] is None
        else [DaemonSetInfo.from_json(d) for d in parts["daemonsets"]],
        declared_pools=declared_pools(PoolShape.model_validate(p) for p in parts["declared"]),
        node_groups=parts["node_groups"],
        spot_pools_seen=parts["spot_seen"],
        now=parts["now"],
    )


def found(parts: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(str(f.check), f.severity, str(f.object)) for f in diagnose(setup(parts))]


BARE_SPOT = [
    node("spot-0", "gpuspot", spot=True, gpus=0, taints=BOTH),
    node("spot-1", "gpuspot", spot=True, gpus=0, taints=BOTH),
    node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]),
]
AKS_DOCS_PLUGIN = daemonset(
    "nvidia-device-plugin-daemonset", "kube-system", [GPU], image=PLUGIN_IMAGE
)
NO_OD_GPU = [
    node("spot-0", "gpuspot", spot=True, gpus=1, taints=BOTH),
    node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4),
]
ON_DEMAND = [node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU])]
# Spot GPU nodes that joined at 00:55 and advertise no GPU yet.
NEW_BARE_SPOT = [
    node(f"spot-{i}", "gpuspot", spot=True, gpus=0, taints=BOTH, created="2026-01-01T00:55:00Z")
    for i in range(2)
] + ON_DEMAND
ZERO_POOL = NodeGroup("aks-gpuondemand-12345678-vmss", "gpuondemand", 0, 3, 0)

CASES: dict[str, tuple[dict[str, Any], list[tuple[str, str, str]]]] = {
    "healthy": (world(), []),
    "device plugin without the spot toleration, spot nodes without GPUs": (
        world(nodes=BARE_SPOT, daemonsets=[AKS_DOCS_PLUGIN]),
        [
            (
                "device-plugin-not-on-spot",
                ERROR,
                "DaemonSet kube-system/nvidia-device-plugin-daemonset",
            )
        ],
    ),
    "device plugin without the spot toleration, but GPUs advertised (something else does)": (
        world(daemonsets=[AKS_DOCS_PLUGIN]),
        [],
    ),
    "no device plugin and spot nodes without GPUs": (
        world(nodes=BARE_SPOT, daemonsets=[]),
        [("device-plugin-missing", ERROR, "Node spot-0")],
    ),
    "the device plugin may run there, yet no GPUs": (
        world(nodes=BARE_SPOT),
        [("gpus-not-advertised", WARNING, "DaemonSet kube-system/nvidia-device-plugin-daemonset")],
    ),
    "new spot nodes whose device plugin is still registering: not judged yet": (
        world(
            nodes=NEW_BARE_SPOT,
            now=datetime(2026, 1, 1, 1, 0, tzinfo=UTC),
        ),
        [],
    ),
    "the same nodes ten minutes on": (
        world(
            nodes=NEW_BARE_SPOT,
            now=datetime(2026, 1, 1, 1, 5, tzinfo=UTC),
        ),
        [("gpus-not-advertised", WARNING, "DaemonSet kube-system/nvidia-device-plugin-daemonset")],
    ),
    "spot nodes without GPUs that are not Ready: not judged": (
        world(
            nodes=[
                node("spot-0", "gpuspot", spot=True, gpus=0, taints=BOTH, ready=False),
                node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]),
            ],
            daemonsets=[AKS_DOCS_PLUGIN],
        ),
        [],
    ),
    "DaemonSets not readable: their checks skipped": (
        world(nodes=BARE_SPOT, daemonsets=None),
        [],
    ),
    "our agent without the spot toleration": (
        world(
            daemonsets=[
                daemonset("spot-rebalancer-agent", "spot-rebalancer", [GPU], labels=AGENT_LABELS)
            ]
        ),
        [("agent-not-on-spot", ERROR, "DaemonSet spot-rebalancer/spot-rebalancer-agent")],
    ),
    "a DaemonSet like our agent but not ours": (
        world(daemonsets=[daemonset("spot-rebalancer-agent", "spot-rebalancer", [GPU])]),
        [],
    ),
    "an inference workload without the spot toleration": (
        world(workloads=[deployment("embedder", [GPU], gpus=1)]),
        [("workload-cannot-use-spot", WARNING, "Deployment inference/embedder")],
    ),
    "an inference workload pinned to spot: no on-demand pool takes it": (
        world(workloads=[deployment("llm", BOTH, node_selector={SPOT_LABEL: "spot"})]),
        [("workload-no-on-demand-fallback", ERROR, "Deployment inference/llm")],
    ),
    "the on-demand pool's own taint not tolerated": (
        world(
            nodes=[
                *world()["nodes"][:2],
                node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU, TEAM]),
            ]
        ),
        [("workload-no-on-demand-fallback", ERROR, "Deployment inference/llm")],
    ),
    "no on-demand GPU pool, none declared": (
        world(nodes=NO_OD_GPU),
        [("workload-no-on-demand-fallback", ERROR, "Deployment inference/llm")],
    ),
    "no on-demand GPU pool, but one declared": (
        world(nodes=NO_OD_GPU, declared=[{"name": "gpuondemand", "gpus": 1, "taints": [GPU]}]),
        [],
    ),
    "an autoscaled pool at zero, undeclared": (
        world(nodes=NO_OD_GPU, node_groups=[ZERO_POOL]),
        [
            ("workload-no-on-demand-fallback", ERROR, "Deployment inference/llm"),
            ("on-demand-pool-undeclared", WARNING, "NodePool gpuondemand"),
        ],
    ),
    "a pool at zero that the eviction history knows as spot": (
        world(nodes=NO_OD_GPU, node_groups=[ZERO_POOL], spot_seen=frozenset({"gpuondemand"})),
        [("workload-no-on-demand-fallback", ERROR, "Deployment inference/llm")],
    ),
    "a pool at zero while every workload has a fallback: nothing to say": (
        world(node_groups=[NodeGroup("aks-spare-12345678-vmss", "spare", 0, 3, 0)]),
        [],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_findings(case: str) -> None:
    parts, expected = CASES[case]
    assert found(parts) == expected


def _apply(parts: dict[str, Any], finding: Finding) -> dict[str, Any]:
    """`parts` with the finding's YAML applied as kubectl would: the patch's tolerations replace
    the object's (a strategic merge patch replaces that list), the pools it declares added."""
    changed = copy.deepcopy(parts)
    # A placeholder the user fills in: the pool they give workloads to fail over to.
    document = yaml.safe_load(finding.yaml.replace("<your on-demand GPU pool>", "gpuondemand"))
    if "controller" in document:
        changed["declared"] += document["controller"]["pools"]
        return changed
    key = "daemonsets" if finding.object.kind == "DaemonSet" else "workloads"
    for obj in changed[key]:
        if obj["metadata"]["name"] == finding.object.name:
            tolerations = document["spec"]["template"]["spec"]["tolerations"]
            obj["spec"]["template"]["spec"]["tolerations"] = tolerations
    return changed


@pytest.mark.parametrize("case", [c for c, (_, expected) in CASES.items() if expected])
def test_each_yaml_fixes_its_finding(case: str) -> None:
    parts, _ = CASES[case]
    for finding in diagnose(setup(parts)):
        if not finding.yaml or finding.object.kind not in ("DaemonSet", "Deployment", "NodePool"):
            continue
        fixed = _apply(parts, finding)
        if finding.check == Check.DEVICE_PLUGIN_NOT_ON_SPOT:
            # The device plugin now runs there: its nodes advertise their GPUs.
            fixed["nodes"] = world()["nodes"]
        assert finding.key not in {f.key for f in diagnose(setup(fixed))}, finding


def test_a_finding_keeps_the_existing_tolerations_and_says_why() -> None:
    (finding,) = diagnose(setup(world(nodes=BARE_SPOT, daemonsets=[AKS_DOCS_PLUGIN])))
    tolerations = yaml.safe_load(finding.yaml)["spec"]["template"]["spec"]["tolerations"]
    assert tolerations == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
         "effect": "NoSchedule"},
    ]  # fmt: skip
    assert "spot:NoSchedule not tolerated" in finding.what
    assert "2 Ready nodes of 2 advertise no nvidia.com/gpu" in finding.what
    assert finding.command == (
        "kubectl -n kube-system patch daemonset nvidia-device-plugin-daemonset "
        "--patch-file fix.yaml"
    )
    assert finding.why and finding.fix


def test_the_declaration_names_the_pool_at_zero() -> None:
    findings = diagnose(setup(world(nodes=NO_OD_GPU, node_groups=[ZERO_POOL])))
    for finding in findings:
        declared = yaml.safe_load(finding.yaml)["controller"]["pools"]
        assert declared[0]["name"] == "gpuondemand" and declared[0]["gpus"] == 1


def test_setup_of_takes_the_controllers_managed_workloads_and_spot_history() -> None:
    cpu_only = deployment("web", BOTH, gpus=0)
    opted_out = deployment("batch", BOTH, gpus=1)
    opted_out["metadata"]["annotations"] = {"spot-rebalancer.io/ignore": "true"}
    workloads = {
        ("Deployment", "inference", name): WorkloadInfo.from_json("Deployment", obj)
        for name, obj in (("llm", deployment("llm", BOTH)), ("web", cpu_only),
                          ("batch", opted_out))
    }  # fmt: skip
    entry = Entry("E1", "Preempt", "n", "gpuspot", "eastus-1", "sku", True, _now())
    snapshot = Snapshot(
        now=_now(), nodes={}, pods={}, workloads=workloads, replicaset_owners={},
        history=History(since=_now(), entries=(entry,)),
    )  # fmt: skip
    declared = {"od": Pool("od", False, (), {}, ())}
    result = setup_of(snapshot, settings=Settings(declared_pools=declared), daemonsets=None)
    assert [w.name for w in result.workloads] == ["llm"]
    assert result.spot_pools_seen == {"gpuspot"}
    assert result.declared_pools == declared


def _now() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


STATUS_130 = """
time: 2026-01-01 10:00:00.123 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    status: Healthy
nodeGroups:
- name: aks-gpuondemand-12345678-vmss
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 0, ready: 0, notStarted: 0}
      longUnregistered: 0
      unregistered: 0
    cloudProviderTarget: 0
    minSize: 0
    maxSize: 3
- name: some-other-group
  health: {minSize: 1, maxSize: 2, nodeCounts: {registered: {total: 1}}}
"""
STATUS_OLD = """Cluster-autoscaler status at 2023-01-01 10:00:00 +0000 UTC:
Cluster-wide:
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3)
NodeGroups:
  Name:        aks-gpuondemand-12345678-vmss
  Health:      Healthy (ready=0 ... cloudProviderTarget=0 (minSize=0, maxSize=3))
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            STATUS_130,
            [
                NodeGroup("aks-gpuondemand-12345678-vmss", "gpuondemand", 0, 3, 0),
                NodeGroup("some-other-group", "", 1, 2, 1),
            ],
        ),
        (STATUS_OLD, None),  # before 1.30: free text, not read
        ("nodeGroups: 3", None),
        ("{unbalanced", None),
        ("nodeGroups: [{health: {}}, 7]", []),
    ],
)
def test_node_groups_from_the_autoscalers_status(
    text: str, expected: list[NodeGroup] | None
) -> None:
    assert node_groups_from_status(text) == expected


def test_helm_fixes_name_the_chart_the_release_came_from() -> None:
    """A user has the published chart, not a checkout's charts/ folder: the fix upgrades the
    release from the chart and version the controller was installed with."""
    published = helm_upgrade_command("oci://registry.example/charts/spot-rebalancer", "0.3.0")
    assert published == (
        "helm upgrade <release> oci://registry.example/charts/spot-rebalancer --version 0.3.0 "
        "--reuse-values -f fix.yaml"
    )
    parts = world(nodes=NO_OD_GPU, node_groups=[ZERO_POOL])
    chart_fixes = [f for f in diagnose(setup(parts)) if f.command.startswith("helm ")]
    assert chart_fixes
    for finding in chart_fixes:
        assert finding.command == "helm upgrade <release> <chart> --reuse-values -f fix.yaml"
    named = replace(setup(parts), helm_upgrade=published)
    assert {f.command for f in diagnose(named) if f.command.startswith("helm ")} == {published}


def test_a_target_the_controller_does_not_act_on_is_said() -> None:
    target = {"spot-rebalancer.io/availability-target": "99.9"}
    acted = WorkloadInfo.from_json("Deployment", deployment("llm", BOTH, annotations=target))
    stateful = WorkloadInfo.from_json("StatefulSet", deployment("db", BOTH, annotations=target))
    large = WorkloadInfo.from_json(
        "Deployment", deployment("big", BOTH, replicas=101, annotations=target)
    )
    plain = WorkloadInfo.from_json("Deployment", deployment("plain", BOTH, replicas=101))
    base = setup(world())
    findings = diagnose(replace(base, workloads=[acted, stateful, large, plain]))
    said = {f.object.name: f.what for f in findings if f.check is Check.TARGET_NOT_ACTED_ON}
    assert sorted(said) == ["big", "db"]  # not llm (acted on), not plain (no target)
    assert said["db"].startswith("availability target 99.9 % not acted on: a StatefulSet")
    assert "101 replicas: a target plans at most 100" in said["big"]
