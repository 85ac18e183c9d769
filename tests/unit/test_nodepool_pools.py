"""Pools read from Karpenter NodePools (AKS node auto-provisioning): a NodePool's spot and
on-demand parts, shaped as their nodes will look, enter the planner as declared pools do, so a
NodePool that allows on-demand is a fail-over target before any of its nodes exists, without a
declaration. NodePools as NAP users write them (karpenter.sh/v1)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from rebalancer import names
from rebalancer.config import PoolShape
from rebalancer.controller.actions import ReportBlocked, ScaleUp
from rebalancer.controller.karpenter import NodePoolInfo, nodepool_pools
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.nodepool_source import NODEPOOLS, NodePoolSource
from rebalancer.controller.options import with_nodepools
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.pools import declared_pools, on_demand_fallback, pools_of, with_declared
from rebalancer.controller.scheduling import Taint
from rebalancer.kube.errors import NotFound, ServerError
from tests.unit.test_planner import node_json, of_type, pod, snapshot

A100 = "Standard_NC24ads_A100_v4"
A10_THIRD = "Standard_NC8ads_A10_v4"  # a third of an A10: no whole GPUs in Azure's size table
GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
SPOT_TAINT = {"key": names.AKS_SPOT_LABEL, "value": "spot", "effect": "NoSchedule"}
GPU_COUNT = "karpenter.azure.com/sku-gpu-count"


def nodepool_json(
    name: str = "gpu",
    *,
    capacity_types: list[str] | None = None,
    taints: list[dict[str, str]] | None = None,
    extra: list[dict[str, Any]] | None = None,
    status: dict[str, Any] | None = None,
    sizes: tuple[str, ...] = (A100,),
) -> dict[str, Any]:
    named = [{"key": names.INSTANCE_TYPE_LABEL, "operator": "In", "values": list(sizes)}]
    requirements: list[dict[str, Any]] = [
        *(named if sizes else []),
        {
            "key": names.KARPENTER_CAPACITY_TYPE_LABEL,
            "operator": "In",
            "values": capacity_types or ["spot", "on-demand"],
        },
        *(extra or []),
    ]
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "requirements": requirements,
                    "taints": [GPU_TAINT] if taints is None else taints,
                    "startupTaints": [{"key": "node.cilium.io/agent-not-ready",
                                       "effect": "NoExecute"}],
                },
            }
        },
        "status": status or {},
    }  # fmt: skip


def parts_of(obj: dict[str, Any], live: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return nodepool_pools([NodePoolInfo.from_json(obj)], live or {})


def test_a_nodepool_allowing_both_capacity_types_gives_two_pools_shaped_as_its_nodes() -> None:
    zone = {"key": names.ZONE_LABEL, "operator": "In", "values": ["eastus-2"]}
    count = {"key": GPU_COUNT, "operator": "In", "values": ["1"]}
    parts = parts_of(nodepool_json(extra=[zone, count]))
    assert sorted(parts) == ["gpu:on-demand", "gpu:spot"]
    on_demand = parts["gpu:on-demand"]
    assert (on_demand.spot, parts["gpu:spot"].spot) == (False, True)
    # Its taints are the template's (Karpenter adds no spot taint; startup taints go away).
    assert on_demand.taints == (Taint("sku", "gpu", "NoSchedule"),)
    assert on_demand.gpus_per_node == 1
    assert on_demand.nodes == ()
    assert on_demand.labels == {
        "team": "ml",
        names.INSTANCE_TYPE_LABEL: A100,
        names.ZONE_LABEL: "eastus-2",
        GPU_COUNT: "1",
        names.KARPENTER_NODEPOOL_LABEL: "gpu",
        names.KARPENTER_CAPACITY_TYPE_LABEL: "on-demand",
    }


@pytest.mark.parametrize(
    ("extra", "gpus", "zones"),
    [
        ([], 0, ()),  # unknown: a GPU replica does not fit until declared or seen on a node
        ([{"key": GPU_COUNT, "operator": "In", "values": ["1"]}], 1, ()),
        ([{"key": GPU_COUNT, "operator": "In", "values": ["1", "2"]}], 2, ()),
        ([{"key": GPU_COUNT, "operator": "Gt", "values": ["3"]}], 4, ()),
        ([{"key": GPU_COUNT, "operator": "In", "values": ["x"]}], 0, ()),
        (
            [{"key": names.ZONE_LABEL, "operator": "In", "values": ["eastus-3", "eastus-1"]}],
            0,
            ("eastus-1", "eastus-3"),
        ),
    ],
)
def test_what_a_nodepools_requirements_say_of_its_nodes(
    extra: list[dict[str, Any]], gpus: int, zones: tuple[str, ...]
) -> None:
    info = NodePoolInfo.from_json(nodepool_json(extra=extra, sizes=()))
    assert (info.gpus, info.zones) == (gpus, zones)
    # Several zones: no zone label, as a pool whose nodes span zones shows none.
    (part, _) = nodepool_pools([info], {}).values()
    assert names.ZONE_LABEL not in part.labels


def test_gpus_per_node_unknown_from_requirements_are_those_its_nodes_show() -> None:
    spot_node = NodeInfo.from_json(
        {
            "metadata": {
                "name": "nap-spot-0",
                "labels": {
                    names.KARPENTER_NODEPOOL_LABEL: "gpu",
                    names.KARPENTER_CAPACITY_TYPE_LABEL: "spot",
                },
            },
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": []},
        }
    )
    live = pools_of([spot_node])
    unsized = nodepool_json(sizes=(A10_THIRD,))  # a GPU size the size table does not count
    assert parts_of(unsized)["gpu:on-demand"].gpus_per_node == 0
    assert parts_of(unsized, live)["gpu:on-demand"].gpus_per_node == 1


# Requirements as karpenter-provider-azure's users write them (its examples and e2e suites:
# sku-family, sku-series, sku-name, sku-gpu-name, instance types), and the GPUs per node they give.
FAMILY_N = {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]}
A100_SIZES = ["Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4"]


def requirement(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("requirements", "gpus"),
    [
        # One size: its GPUs, from Azure's size table.
        ([requirement(names.INSTANCE_TYPE_LABEL, "In", A100)], 1),
        ([requirement("karpenter.azure.com/sku-name", "In", "Standard_NC80adis_H100_v5")], 2),
        # Several: the largest, which Karpenter launches for a replica that needs it.
        ([requirement(names.INSTANCE_TYPE_LABEL, "In", *A100_SIZES)], 4),
        ([requirement("karpenter.azure.com/sku-series", "In", "NCads_v4")], 4),
        ([FAMILY_N, requirement("karpenter.azure.com/sku-gpu-name", "In", "T4")], 4),
        ([FAMILY_N, requirement("karpenter.azure.com/sku-gpu-name", "In", "A100")], 8),
        # Every requirement on a size label narrows them, as Karpenter matches them.
        (
            [
                requirement(names.INSTANCE_TYPE_LABEL, "In", *A100_SIZES),
                requirement("karpenter.azure.com/sku-gpu-count", "Lt", "3"),
            ],
            2,
        ),
        ([FAMILY_N, requirement("karpenter.azure.com/sku-cpu", "Lt", "20")], 2),  # NC12, NV12...
        ([FAMILY_N, requirement("karpenter.azure.com/sku-version", "In", "5")], 8),
        (
            [
                requirement(names.INSTANCE_TYPE_LABEL, "In", *A100_SIZES),
                requirement(names.INSTANCE_TYPE_LABEL, "NotIn", "Standard_NC96ads_A100_v4"),
                requirement("kubernetes.io/arch", "In", "amd64"),
            ],
            2,
        ),
        # A size property the table cannot judge may rule the larger ones out: the fewest.
        (
            [
                requirement(names.INSTANCE_TYPE_LABEL, "In", *A100_SIZES),
                requirement("karpenter.azure.com/sku-memory", "Lt", "500000"),
            ],
            1,
        ),
        ([requirement("karpenter.azure.com/sku-family", "Matches", "N")], 1),
        # Sizes the table does not count: unknown, never guessed.
        ([requirement(names.INSTANCE_TYPE_LABEL, "In", A10_THIRD)], 0),
        ([requirement(names.INSTANCE_TYPE_LABEL, "In", "Standard_D4s_v5")], 0),
        ([requirement(names.INSTANCE_TYPE_LABEL, "In", A10_THIRD, A100)], 1),
    ],
)
def test_gpus_per_node_from_the_sizes_a_nodepool_names(
    requirements: list[dict[str, Any]], gpus: int
) -> None:
    obj = nodepool_json(sizes=(), extra=requirements)
    assert NodePoolInfo.from_json(obj).gpus == gpus
    assert parts_of(obj)["gpu:on-demand"].gpus_per_node == gpus


def test_a_replica_needing_more_gpus_than_the_smallest_size_fails_over_to_a_larger_one() -> None:
    """A NodePool listing a 1-GPU and a 2-GPU size, no node yet: a 2-GPU replica fits its
    on-demand part (Karpenter launches the 2-GPU size for it); a 4-GPU replica does not."""
    obj = nodepool_json(sizes=tuple(A100_SIZES[:2]))
    pools = parts_of(obj)
    tolerant = {"tolerations": [{"operator": "Exists"}]}
    assert on_demand_fallback(tolerant, pools, gpus=2).pools == ("gpu:on-demand",)
    assert on_demand_fallback(tolerant, pools, gpus=4).rejected == {
        "gpu:on-demand": ("needs 4 nvidia.com/gpu, nodes have 2",)
    }


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("karpenter.azure.com/sku-series", ["NCads_v4", "NDasr_v4"]),
        ("karpenter.azure.com/sku-name", [A100]),
    ],
)
def test_a_nodepool_naming_gpu_series_or_sku_names_is_a_gpu_nodepool(
    key: str, values: list[str]
) -> None:
    obj = nodepool_json(sizes=(), extra=[requirement(key, "In", *values)])
    assert NodePoolInfo.from_json(obj).gpu
    cpu = nodepool_json(sizes=(), extra=[requirement(key, "In", "Dsv5", "Standard_D4s_v5")])
    assert not NodePoolInfo.from_json(cpu).gpu


@pytest.mark.parametrize(
    ("changes", "parts"),
    [
        ({"capacity_types": ["spot"]}, ["gpu:spot"]),
        ({"capacity_types": ["on-demand", "reserved"]}, ["gpu:on-demand"]),  # no reservation
        ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, []),
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, ["gpu:on-demand"]),
    ],
)
def test_the_parts_a_nodepool_launches(changes: dict[str, Any], parts: list[str]) -> None:
    obj = nodepool_json(**{"capacity_types": ["on-demand"], **changes})
    assert sorted(parts_of(obj)) == parts
    deleting = nodepool_json(**{"capacity_types": ["on-demand"], **changes})
    deleting["metadata"]["deletionTimestamp"] = "2026-08-01T00:00:00Z"
    assert parts_of(deleting) == {}


# ---- the planner: a Preempt on a NAP spot node, nothing declared --------------------------------


def nap_node(name: str, capacity: str, *, notice_seconds: float | None = None) -> dict[str, Any]:
    obj = node_json(name, notice_seconds=notice_seconds)
    labels = obj["metadata"]["labels"]
    del labels[names.AKS_AGENTPOOL_LABEL]
    labels[names.KARPENTER_NODEPOOL_LABEL] = "gpu"
    labels[names.KARPENTER_CAPACITY_TYPE_LABEL] = capacity
    obj["spec"]["taints"] = [GPU_TAINT, SPOT_TAINT] if capacity == "spot" else [GPU_TAINT]
    return obj


def preempted(nodepools: list[dict[str, Any]], settings: Settings) -> tuple[int, list[str]]:
    """The surge's replicas and the blocked reports, for a Preempt on one of two NAP spot nodes
    (3 replicas) with no on-demand node."""
    state = snapshot(
        [nap_node("nap-0", "spot", notice_seconds=30), nap_node("nap-1", "spot")],
        [pod("p0", "nap-0"), pod("p1", "nap-1"), pod("p2", "nap-1")],
    )
    infos = [NodePoolInfo.from_json(obj) for obj in nodepools]
    result = plan(state, with_nodepools(settings, infos, state))
    (surge,) = of_type(result.actions, ScaleUp)
    return surge.replicas, [a.detail for a in of_type(result.actions, ReportBlocked)]


def test_a_nodepool_allowing_on_demand_is_a_fail_over_target_without_a_declaration() -> None:
    assert preempted([nodepool_json(taints=[GPU_TAINT, SPOT_TAINT])], Settings()) == (4, [])
    # The control: the same NodePool allowing spot only leaves the fail-over blocked.
    spot_only = nodepool_json(capacity_types=["spot"], taints=[GPU_TAINT, SPOT_TAINT])
    assert preempted([spot_only], Settings()) == (
        4,
        ["no on-demand pool in the cluster or declared in REBALANCER_POOLS"],
    )


def test_a_declaration_wins_over_the_nodepool_and_a_node_over_both() -> None:
    declared = declared_pools(
        [PoolShape(name="gpu:on-demand", gpus=1, taints=["sku=h100:NoSchedule"])]
    )
    _, blocked = preempted([nodepool_json()], Settings(declared_pools=declared))
    assert blocked == ["pool gpu:on-demand: taint sku=h100:NoSchedule not tolerated"]
    # Once the part has a node, its node decides (with_declared: the live shape is the truth).
    live = pools_of([NodeInfo.from_json(nap_node("nap-od-0", "on-demand"))])
    pools = with_declared(live, {**parts_of(nodepool_json()), **declared})
    assert pools["gpu:on-demand"].nodes == ("nap-od-0",)
    assert on_demand_fallback({"tolerations": [{"operator": "Exists"}]}, pools, gpus=1).pools == (
        "gpu:on-demand",
    )


# ---- the controller's list of NodePools ------------------------------------------------------


class Lister:
    """A Requester that answers the NodePools' list from a script of answers."""

    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.paths: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.paths.append(path)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, event: str, **_: Any) -> None:
        self.warnings.append(event)

    def exception(self, event: str, **_: Any) -> None:
        self.warnings.append(event)


async def test_the_controller_keeps_the_last_nodepools_read_and_none_without_karpenter() -> None:
    hostile = {"metadata": {"name": "bad", "resourceVersion": "9"},
               "spec": {"template": {"spec": {"taints": ["not an object"]}}}}  # fmt: skip
    listed = {"items": [nodepool_json(), hostile]}
    client = Lister(
        NotFound("no CRD", status=404),
        listed,
        listed,
        ServerError("etcd", status=500),
    )
    changes: list[int] = []
    errors: list[str] = []
    log = Log()
    source = NodePoolSource(
        client,  # type: ignore[arg-type]
        log=log,
        on_change=lambda: changes.append(1),
        on_error=errors.append,
    )
    await source.refresh()  # no Karpenter: nothing, and nothing said
    assert (source.nodepools, log.warnings, errors) == ((), [], [])
    await source.refresh()
    assert [np.name for np in source.nodepools] == ["gpu"]  # the unreadable one skipped alone
    assert log.warnings == ["NodePool skipped: cannot be read"]
    await source.refresh()  # unchanged: the loop is not woken again
    await source.refresh()  # a failed list keeps the NodePools read last
    assert [np.name for np in source.nodepools] == ["gpu"]
    assert (len(changes), errors) == (2, ["server_error"])
    assert client.paths == [NODEPOOLS] * 4


async def test_the_controller_lists_nodepools_again_until_stopped() -> None:
    client = Lister({"items": []}, {"items": [nodepool_json()]})
    stop = asyncio.Event()
    source = NodePoolSource(
        client,  # type: ignore[arg-type]
        log=Log(),
        on_change=stop.set,
        on_error=lambda kind: None,
        refresh_seconds=0.01,
    )
    await source.refresh()  # the empty list is a change from nothing read
    stop.clear()
    await asyncio.wait_for(source.run(stop), timeout=5)
    assert [np.name for np in source.nodepools] == ["gpu"]
