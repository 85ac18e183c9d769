"""The doctor's checks of Karpenter NodePools (AKS node auto-provisioning) as tables, like
tests/unit/test_checkup.py: each misconfiguration gives its finding, a healthy setup none, and the
YAML of each finding, applied as kubectl would, makes it go away."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from rebalancer import names
from rebalancer.controller.checkup import ERROR, Finding, Setup, diagnose
from rebalancer.controller.karpenter import NodePoolInfo
from rebalancer.plugin import doctor
from rebalancer.plugin.view import build_view
from rebalancer.vocabulary import Check
from rebalancer_sim.patch import merge_patch
from tests.unit.kube_objects import node
from tests.unit.test_checkup import AKS_DOCS_PLUGIN, BOTH, D4, GPU, SPOT, setup, world
from tests.unit.test_plugin import ENV, NOW, controller, raw

SPOT_TAINT = {"key": names.AKS_SPOT_LABEL, "value": "spot", "effect": "NoSchedule"}
GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
A100 = "Standard_NC24ads_A100_v4"
# A third of an A10: a GPU size whose whole GPUs Azure's size table does not state (gpu_sizes.py).
A10_THIRD = "Standard_NC8ads_A10_v4"


def nodepool(
    name: str,
    capacity_types: list[str] | None,
    *,
    taints: list[dict[str, str]],
    sizes: tuple[str, ...] = (A100,),
    gpus: int | None = None,
) -> dict[str, Any]:
    """A NodePool as NAP users write one (karpenter.sh/v1); `gpus`: a sku-gpu-count requirement."""
    requirements: list[dict[str, Any]] = [
        {"key": names.INSTANCE_TYPE_LABEL, "operator": "In", "values": list(sizes)},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
    ]
    if gpus is not None:
        requirements.append({"key": GPU_COUNT, "operator": "In", "values": [str(gpus)]})
    if capacity_types is not None:
        requirements.append(
            {"key": names.KARPENTER_CAPACITY_TYPE_LABEL, "operator": "In", "values": capacity_types}
        )
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass",
                                     "name": "default"},
                    "requirements": requirements,
                    "taints": taints,
                }
            }
        },
    }  # fmt: skip


def nap_node(name: str, nodepool_name: str, capacity: str, *, gpus: int = 1) -> dict[str, Any]:
    """A NAP node: karpenter-provider-azure's labels (no VMSS pool of its own)."""
    obj = node(name, "aksmachines", spot=capacity == "spot", gpus=gpus, taints=BOTH)
    obj["metadata"]["labels"].update(
        {
            names.KARPENTER_NODEPOOL_LABEL: nodepool_name,
            names.KARPENTER_CAPACITY_TYPE_LABEL: capacity,
        }
    )
    return obj


GPU_COUNT = "karpenter.azure.com/sku-gpu-count"
SPOT_GPU_POOL = nodepool("gpu", ["spot"], taints=[SPOT_TAINT, GPU_TAINT])
NAP_ONLY = [nap_node("nap-0", "gpu", "spot"), node("sys-0", "system", spot=False, gpus=0,
                                                    taints=[], sku=D4)]  # fmt: skip


GPU_POOL_NAMING_ITS_COUNT = nodepool(
    "gpu", ["spot", "on-demand"], taints=[SPOT_TAINT, GPU_TAINT], gpus=1
)
UNSIZED_GPU_POOL = nodepool(
    "gpu", ["spot", "on-demand"], taints=[SPOT_TAINT, GPU_TAINT], sizes=(A10_THIRD,)
)
DELETED_ON_DEMAND_POOL = nodepool("gpuod", ["on-demand"], taints=[GPU_TAINT], gpus=1)
DELETED_ON_DEMAND_POOL["metadata"]["deletionTimestamp"] = "2026-08-01T00:00:00Z"


def disrupted(obj: dict[str, Any], **disruption: Any) -> dict[str, Any]:
    """The NodePool with `spec.disruption` as given (karpenter.sh/v1 field names)."""
    changed = copy.deepcopy(obj)
    changed["spec"]["disruption"] = disruption
    return changed


BOTH_GPU_POOL = nodepool("gpu", ["spot", "on-demand"], taints=[SPOT_TAINT, GPU_TAINT])
KEEPS_EMPTY = ("nodepool-keeps-empty-nodes", "warning", "NodePool gpu")


def nap_world(**changes: Any) -> dict[str, Any]:
    """A NAP cluster: no VMSS GPU pool, one GPU NodePool allowing spot and on-demand, whose
    on-demand part (no node yet) the settings declare."""
    parts = world(nodes=NAP_ONLY, declared=[ON_DEMAND_PART])
    parts["nodepools"] = [nodepool("gpu", ["spot", "on-demand"], taints=[SPOT_TAINT, GPU_TAINT])]
    parts.update(changes)
    return parts


def nap_setup(parts: dict[str, Any]) -> Setup:
    base = setup(parts)
    pools = parts["nodepools"]
    return Setup(
        nodes=base.nodes,
        workloads=base.workloads,
        daemonsets=base.daemonsets,
        declared_pools=base.declared_pools,
        node_groups=base.node_groups,
        spot_pools_seen=base.spot_pools_seen,
        now=base.now,
        nodepools=None if pools is None else [NodePoolInfo.from_json(p) for p in pools],
    )


def found(parts: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(str(f.check), f.severity, str(f.object)) for f in diagnose(nap_setup(parts))]


ON_DEMAND_PART = {"name": "gpu:on-demand", "gpus": 1, "taints": [SPOT, GPU]}
CAPACITY = names.KARPENTER_CAPACITY_TYPE_LABEL
NO_FALLBACK = ("workload-no-on-demand-fallback", ERROR, "Deployment inference/llm")
CASES: dict[str, tuple[dict[str, Any], list[tuple[str, str, str]]]] = {
    "a GPU NodePool allowing spot and on-demand: healthy": (nap_world(), []),
    "a GPU NodePool that may launch spot only, nothing on-demand": (
        nap_world(nodepools=[SPOT_GPU_POOL], declared=[]),
        [("nodepool-spot-only", ERROR, "NodePool gpu"), NO_FALLBACK],
    ),
    "a NodePool allowing on-demand, its on-demand part undeclared: read from the NodePool": (
        nap_world(declared=[]),  # its GPUs per node from its spot node
        [],
    ),
    "the same before NAP has launched any node, sizes naming no GPU count: GPUs unknown": (
        nap_world(
            declared=[],
            nodes=[node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4)],
            nodepools=[UNSIZED_GPU_POOL],
        ),
        [NO_FALLBACK, ("on-demand-pool-undeclared", "warning", "NodePool gpu")],
    ),
    "the same, its instance types in Azure's size table: GPUs per node from them": (
        nap_world(
            declared=[], nodes=[node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4)]
        ),
        [],
    ),
    "the same, the NodePool naming its GPU count": (
        nap_world(
            declared=[],
            nodes=[node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4)],
            nodepools=[GPU_POOL_NAMING_ITS_COUNT],
        ),
        [],
    ),
    "an on-demand GPU NodePool without node, GPUs per node unknown, undeclared": (
        nap_world(
            nodepools=[
                SPOT_GPU_POOL,
                nodepool("gpuod", ["on-demand"], taints=[GPU_TAINT], sizes=(A10_THIRD,)),
            ],
            declared=[],
        ),
        [NO_FALLBACK, ("on-demand-pool-undeclared", "warning", "NodePool gpuod")],
    ),
    "an on-demand GPU NodePool being deleted: no fail-over target": (
        nap_world(
            nodepools=[SPOT_GPU_POOL, DELETED_ON_DEMAND_POOL],
            declared=[],
        ),
        [("nodepool-spot-only", ERROR, "NodePool gpu"), NO_FALLBACK],
    ),
    "spot only, but a separate on-demand GPU NodePool": (
        nap_world(
            nodepools=[SPOT_GPU_POOL, nodepool("gpuod", ["on-demand"], taints=[GPU_TAINT])],
            declared=[{"name": "gpuod:on-demand", "gpus": 1, "taints": [GPU]}],
        ),
        [],
    ),
    "spot only, but a VMSS on-demand GPU pool": (
        nap_world(
            nodepools=[SPOT_GPU_POOL],
            nodes=[*NAP_ONLY, node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU])],
            declared=[],
        ),
        [],
    ),
    "a CPU NodePool that may launch spot only: not the doctor's business": (
        nap_world(
            nodepools=[
                nodepool("gpu", ["spot", "on-demand"], taints=[SPOT_TAINT, GPU_TAINT]),
                nodepool("batch", ["spot"], taints=[SPOT_TAINT], sizes=(D4,)),
            ]
        ),
        [],
    ),
    "a GPU NodePool whose consolidation is off: its emptied on-demand nodes stay": (
        nap_world(nodepools=[disrupted(BOTH_GPU_POOL, consolidateAfter="Never")]),
        [KEEPS_EMPTY],
    ),
    "a budget of 0 nodes for every reason, always active": (
        nap_world(nodepools=[disrupted(BOTH_GPU_POOL, budgets=[{"nodes": "0"}])]),
        [KEEPS_EMPTY],
    ),
    "both, and a 0% budget naming Empty beside others kept": (
        nap_world(
            nodepools=[
                disrupted(
                    BOTH_GPU_POOL,
                    consolidationPolicy="WhenEmptyOrUnderutilized",
                    consolidateAfter="Never",
                    budgets=[
                        {"nodes": "0%", "reasons": ["Empty", "Drifted"]},
                        {"nodes": "0", "reasons": ["Empty"]},
                        {"nodes": "1", "reasons": ["Drifted"]},
                    ],
                )
            ]
        ),
        [KEEPS_EMPTY],
    ),
    "budgets that leave empty nodes alone: Underutilized only, a schedule, or 1 node": (
        nap_world(
            nodepools=[
                disrupted(
                    BOTH_GPU_POOL,
                    consolidateAfter="30s",
                    budgets=[
                        {"nodes": "0", "reasons": ["Underutilized"]},
                        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"},
                        {"nodes": "1"},
                        {"nodes": "0", "reasons": []},  # names no reason: applies to none
                    ],
                )
            ]
        ),
        [],
    ),
    "a spot-only GPU NodePool keeping empty nodes: no fallback node to leave behind": (
        nap_world(
            nodepools=[
                BOTH_GPU_POOL,
                disrupted(
                    nodepool("gpu2", ["spot"], taints=[SPOT_TAINT, GPU_TAINT]),
                    consolidateAfter="Never",
                ),
            ]
        ),
        [],
    ),
    "a CPU NodePool keeping empty nodes: not the doctor's business": (
        nap_world(
            nodepools=[
                BOTH_GPU_POOL,
                disrupted(
                    nodepool("batch", ["on-demand"], taints=[], sizes=(D4,)),
                    consolidateAfter="Never",
                ),
            ]
        ),
        [],
    ),
    "NodePools not readable: their checks skipped": (
        nap_world(nodepools=None, daemonsets=[AKS_DOCS_PLUGIN]),
        [],
    ),
    "the device plugin without the spot toleration a spot GPU NodePool's nodes get": (
        nap_world(daemonsets=[AKS_DOCS_PLUGIN]),
        [
            (
                "device-plugin-not-on-spot",
                ERROR,
                "DaemonSet kube-system/nvidia-device-plugin-daemonset",
            )
        ],
    ),
    "the same before NAP has launched any node": (
        nap_world(
            daemonsets=[AKS_DOCS_PLUGIN],
            nodes=[node("sys-0", "system", spot=False, gpus=0, taints=[], sku=D4)],
        ),
        [
            (
                "device-plugin-not-on-spot",
                ERROR,
                "DaemonSet kube-system/nvidia-device-plugin-daemonset",
            )
        ],
    ),
    "an on-demand-only GPU NodePool: the device plugin needs no spot toleration": (
        nap_world(
            daemonsets=[AKS_DOCS_PLUGIN],
            nodepools=[nodepool("gpu", ["on-demand"], taints=[GPU_TAINT])],
            nodes=[nap_node("nap-0", "gpu", "on-demand")],
        ),
        [],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_nap_findings(case: str) -> None:
    parts, expected = CASES[case]
    assert found(parts) == expected


def _apply(parts: dict[str, Any], finding: Finding) -> dict[str, Any]:
    """The finding's YAML applied as its command does: a merge patch of a NodePool replaces its
    requirements list; a strategic merge patch of a DaemonSet replaces its tolerations."""
    changed = copy.deepcopy(parts)
    document = yaml.safe_load(finding.yaml)
    if "controller" in document:  # chart values: a pool declaration
        changed["declared"] += document["controller"]["pools"]
    elif finding.object.kind == "NodePool":  # kubectl patch --type merge (RFC 7386)
        changed["nodepools"] = [
            merge_patch(obj, document) if obj["metadata"]["name"] == finding.object.name else obj
            for obj in changed["nodepools"]
        ]
    else:
        for obj in changed["daemonsets"]:
            if obj["metadata"]["name"] == finding.object.name:
                tolerations = document["spec"]["template"]["spec"]["tolerations"]
                obj["spec"]["template"]["spec"]["tolerations"] = tolerations
    return changed


NAP_CHECKS = (
    Check.NODEPOOL_SPOT_ONLY,
    Check.NODEPOOL_KEEPS_EMPTY_NODES,
    Check.DEVICE_PLUGIN_NOT_ON_SPOT,
    Check.POOL_AT_ZERO_UNDECLARED,
)


@pytest.mark.parametrize("case", [c for c, (_, expected) in CASES.items() if expected])
def test_each_nap_yaml_fixes_its_finding(case: str) -> None:
    parts, _ = CASES[case]
    fixed_some = False
    for finding in diagnose(nap_setup(parts)):
        if finding.check not in NAP_CHECKS:
            continue
        assert finding.yaml and finding.command
        fixed = _apply(parts, finding)
        after = {f.key for f in diagnose(nap_setup(fixed))}
        assert finding.key not in after, finding
        if finding.check == Check.POOL_AT_ZERO_UNDECLARED:
            # The declaration, as the finding wrote it, is the fallback the workload lacked.
            assert not any(key[0] == str(Check.NO_ON_DEMAND_FALLBACK) for key in after), after
        fixed_some = True
    assert fixed_some


def test_the_spot_only_patch_keeps_every_other_requirement() -> None:
    (finding, _) = diagnose(nap_setup(nap_world(nodepools=[SPOT_GPU_POOL], declared=[])))
    requirements = yaml.safe_load(finding.yaml)["spec"]["template"]["spec"]["requirements"]
    assert requirements == [
        {"key": names.INSTANCE_TYPE_LABEL, "operator": "In", "values": [A100]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {
            "key": names.KARPENTER_CAPACITY_TYPE_LABEL,
            "operator": "In",
            "values": ["spot", "on-demand"],
        },
    ]
    assert "gpu:on-demand" in finding.fix  # the part the controller then reads
    assert finding.command == "kubectl patch nodepool gpu --type merge --patch-file fix.yaml"


@pytest.mark.parametrize(
    ("requirements", "capacity_types", "gpu"),
    [
        ([], ("on-demand",), False),  # Karpenter's default
        (
            [{"key": CAPACITY, "operator": "In", "values": ["reserved", "on-demand"]}],
            ("on-demand", "reserved"),
            False,
        ),
        ([{"key": CAPACITY, "operator": "Exists"}], ("spot", "on-demand"), False),
        (
            [{"key": "karpenter.azure.com/sku-gpu-count", "operator": "Gt", "values": ["-1"]}],
            ("on-demand",),
            False,  # 0 GPUs allowed
        ),
        (
            [{"key": names.KARPENTER_CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]}],
            ("spot",),
            False,
        ),
        (
            [{"key": names.KARPENTER_CAPACITY_TYPE_LABEL, "operator": "NotIn", "values": ["spot"]}],
            ("on-demand",),
            False,
        ),
        (
            [{"key": "karpenter.azure.com/sku-gpu-count", "operator": "Gt", "values": ["0"]}],
            ("on-demand",),
            True,
        ),
        (
            [{"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]}],
            ("on-demand",),
            True,
        ),
        (
            [{"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N", "D"]}],
            ("on-demand",),
            False,
        ),
        (
            [{"key": names.INSTANCE_TYPE_LABEL, "operator": "In", "values": [A100, D4]}],
            ("on-demand",),
            False,
        ),
    ],
)
def test_what_a_nodepool_may_launch(
    requirements: list[dict[str, Any]], capacity_types: tuple[str, ...], gpu: bool
) -> None:
    obj = {
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": {"requirements": requirements}}},
    }
    info = NodePoolInfo.from_json(obj)
    assert (info.capacity_types, info.gpu) == (capacity_types, gpu)


def test_the_plugins_doctor_reads_the_nodepools_it_gathered() -> None:
    # The release declares no on-demand pool: nothing offers on-demand GPUs.
    release = controller(env={k: v for k, v in ENV.items() if k != "REBALANCER_POOLS"})
    nap = raw(nodes=NAP_ONLY, nodepools=[SPOT_GPU_POOL], deployments=[release])
    view = build_view(nap, now=NOW, namespace=None)
    checks = {f.check for f in doctor.findings_of(view)}
    assert Check.NODEPOOL_SPOT_ONLY in checks
    # Not readable (forbidden): the NodePool checks are skipped, never guessed.
    forbidden = raw(nodes=NAP_ONLY, nodepools=None, deployments=[release])
    unread = build_view(forbidden, now=NOW, namespace=None)
    assert Check.NODEPOOL_SPOT_ONLY not in {f.check for f in doctor.findings_of(unread)}


def test_letting_empty_nodes_go_keeps_every_other_disruption_choice() -> None:
    """The fix turns consolidation on for empty nodes only (Never had it off for underused ones
    too), and takes Empty out of the zero budgets: Drifted stays at 0, the 1-node budget stays."""
    obj = disrupted(
        BOTH_GPU_POOL,
        consolidateAfter="Never",
        budgets=[
            {"nodes": "0%", "reasons": ["Empty", "Drifted"]},
            {"nodes": "0", "reasons": ["Empty"]},
            {"nodes": "0"},
            {"nodes": "1", "reasons": ["Drifted"]},
        ],
    )
    (finding,) = diagnose(nap_setup(nap_world(nodepools=[obj])))
    assert yaml.safe_load(finding.yaml) == {
        "spec": {
            "disruption": {
                "consolidateAfter": "10m",
                "consolidationPolicy": "WhenEmpty",
                "budgets": [
                    {"nodes": "0%", "reasons": ["Drifted"]},
                    {"nodes": "0", "reasons": ["Underutilized", "Drifted"]},
                    {"nodes": "1", "reasons": ["Drifted"]},
                ],
            }
        }
    }
    assert finding.command == "kubectl patch nodepool gpu --type merge --patch-file fix.yaml"
    # Without a workload to fail over, no fallback node is ever emptied: nothing said.
    assert diagnose(nap_setup(nap_world(nodepools=[obj], workloads=[]))) == []
