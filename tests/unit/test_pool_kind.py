"""VMSS agent pools and Karpenter NodePools side by side: which pool a Node is in, spot or not,
and what placement requires so that Karpenter provisions the capacity type it chose."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from rebalancer import names, pool_kind
from rebalancer.config import PoolShape
from rebalancer.controller.actions import EndLoadHold, StartReturn
from rebalancer.controller.admission import View, review
from rebalancer.controller.history import History
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.placement import Decision, affinity_patch
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.policy import parse
from rebalancer.controller.pools import declared_pools, on_demand_fallback, pools_of
from rebalancer.controller.records import ReturnRecord
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.timefmt import iso
from tests.unit.test_placement import apply_adds, cluster, patch_of, request, view_of
from tests.unit.test_planner import NOW, WATCHED, deployment, node_json, pod, snapshot

# What karpenter-provider-azure writes on a NAP Node (pkg/cloudprovider/cloudprovider.go
# vmInstanceToNodeClaim, pkg/providers/instance/aksmachineinstanceutils.go): the capacity type,
# AKS's priority labels for it (regular on on-demand, which VMSS nodes never show), the NodePool,
# the zone and the size; under the AKS machine API, one machines agent pool for every NodePool.
GPU_SPOT_NAP = {
    names.KARPENTER_NODEPOOL_LABEL: "gpu",
    names.KARPENTER_CAPACITY_TYPE_LABEL: "spot",
    names.AKS_SPOT_LABEL: "spot",
    "kubernetes.azure.com/priority": "spot",
    names.AKS_AGENTPOOL_LABEL: "aksmachines",
    names.ZONE_LABEL: "eastus-1",
    names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
    "karpenter.azure.com/sku-gpu-count": "1",
}
GPU_ON_DEMAND_NAP = {
    **GPU_SPOT_NAP,
    names.KARPENTER_CAPACITY_TYPE_LABEL: "on-demand",
    names.AKS_SPOT_LABEL: "regular",
    "kubernetes.azure.com/priority": "regular",
    names.ZONE_LABEL: "eastus-2",
}


def node(name: str, labels: dict[str, str]) -> NodeInfo:
    return NodeInfo.from_json(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": []},
        }
    )


@pytest.mark.parametrize(
    ("labels", "pool", "spot"),
    [
        ({names.AKS_AGENTPOOL_LABEL: "gpuspot", names.AKS_SPOT_LABEL: "spot"}, "gpuspot", True),
        ({names.AKS_AGENTPOOL_LABEL: "gpuondemand"}, "gpuondemand", False),
        (GPU_SPOT_NAP, "gpu:spot", True),
        (GPU_ON_DEMAND_NAP, "gpu:on-demand", False),
        # Karpenter's KWOK provider: no AKS labels at all.
        (
            {names.KARPENTER_NODEPOOL_LABEL: "a", names.KARPENTER_CAPACITY_TYPE_LABEL: "spot"},
            "a:spot",
            True,
        ),
        (
            {names.KARPENTER_NODEPOOL_LABEL: "a", names.KARPENTER_CAPACITY_TYPE_LABEL: "reserved"},
            "a:reserved",
            False,
        ),
        ({}, "", False),
    ],
)
def test_the_pool_and_capacity_type_of_a_node(
    labels: dict[str, str], pool: str, spot: bool
) -> None:
    info = node("n", labels)
    assert (info.pool, info.spot) == (pool, spot)


def test_one_nodepool_allowing_both_capacity_types_is_two_pools_beside_a_vmss_pool() -> None:
    pools = pools_of(
        [
            node("nap-spot-0", GPU_SPOT_NAP),
            node("nap-od-0", GPU_ON_DEMAND_NAP),
            node("vmss-0", {names.AKS_AGENTPOOL_LABEL: "gpuspot", names.AKS_SPOT_LABEL: "spot"}),
        ]
    )
    assert {name: p.spot for name, p in pools.items()} == {
        "gpu:spot": True,
        "gpu:on-demand": False,
        "gpuspot": True,
    }
    assert pools["gpu:on-demand"].labels[names.KARPENTER_CAPACITY_TYPE_LABEL] == "on-demand"
    # The on-demand part is a fail-over target; the shared machines agent pool is not a pool.
    assert on_demand_fallback({}, pools, gpus=1).pools == ("gpu:on-demand",)


def test_a_nodepool_with_no_on_demand_node_yet_is_declared_by_name_and_capacity_type() -> None:
    (shape,) = declared_pools([PoolShape(name="gpu:on-demand", gpus=1)]).values()
    assert shape.labels == {
        names.KARPENTER_NODEPOOL_LABEL: "gpu",
        names.KARPENTER_CAPACITY_TYPE_LABEL: "on-demand",
    }
    assert not shape.spot
    assert on_demand_fallback({}, {shape.name: shape}, gpus=1).pools == ("gpu:on-demand",)
    # A pod template that requires the NodePool's spot capacity does not fit it.
    spot_only = {"nodeSelector": {names.KARPENTER_CAPACITY_TYPE_LABEL: "spot"}}
    assert on_demand_fallback(spot_only, {shape.name: shape}, gpus=1).pools == ()


@pytest.mark.parametrize(
    ("shape", "error"),
    [
        ({"name": "gpu:spot"}, "spot is true for capacity type spot"),
        ({"name": "gpu:on-demand", "spot": True}, "spot is false for capacity type on-demand"),
        (
            {"name": "gpu:on-demand", "labels": {names.KARPENTER_CAPACITY_TYPE_LABEL: "spot"}},
            "karpenter.sh/capacity-type is the pool's capacity type, not spot",
        ),
        ({"name": "gpu:cheap"}, "string should match pattern"),
    ],
)
def test_a_declared_nodepool_pool_that_contradicts_itself_is_refused(
    shape: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match="(?i)" + error):
        PoolShape.model_validate(shape)


def test_on_demand_placement_in_a_nodepool_requires_its_name_and_capacity_type() -> None:
    pod_json: dict[str, Any] = {"metadata": {}, "spec": {}}
    decision = Decision("gpu:on-demand", "", False, "fail-over")
    patched = apply_adds(json.loads(json.dumps(pod_json)), affinity_patch(pod_json, decision))
    (term,) = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # Exactly the labels Karpenter provisions for: a pending pod with these makes it launch an
    # on-demand node of that NodePool (tests/k8s/test_karpenter.py shows it with real Karpenter).
    assert term["matchExpressions"] == [
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]
    assert patched["metadata"]["annotations"] == {names.PLACED: "gpu:on-demand/"}


def test_spot_placement_in_a_nodepool_prefers_its_capacity_type_and_zone() -> None:
    pod_json: dict[str, Any] = {"metadata": {}, "spec": {}}
    decision = Decision("gpu:spot", "eastus-1", True, "spot")
    patched = apply_adds(pod_json, affinity_patch(pod_json, decision))
    (preferred,) = patched["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred["preference"]["matchExpressions"] == [
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        {"key": names.ZONE_LABEL, "operator": "In", "values": ["eastus-1"]},
    ]


def test_a_policy_names_a_nodepool_or_one_capacity_type_of_it() -> None:
    both = parse({names.POOLS: "gpu-nodes"})
    assert both.allows_pool("gpu-nodes:spot") and both.allows_pool("gpu-nodes:on-demand")
    assert not both.allows_pool("gpu:spot")
    spot_only = parse({names.POOLS: "gpu-nodes:spot,gpuondemand"})
    assert spot_only.allows_pool("gpu-nodes:spot")
    assert not spot_only.allows_pool("gpu-nodes:on-demand")
    assert spot_only.allows_pool("gpuondemand")


def test_pool_kind_round_trips() -> None:
    assert pool_kind.pool_of(pool_kind.labels_of("gpu:spot")) == "gpu:spot"
    assert pool_kind.pool_of(pool_kind.labels_of("gpuspot")) == "gpuspot"
    assert pool_kind.policy_name("gpu:on-demand") == "gpu"
    assert pool_kind.policy_name("gpuspot") == "gpuspot"


# ---- make-before-break under Karpenter: what consolidation may not take ------------------------


def placed_annotations(
    policy: dict[str, str], state_kw: dict[str, Any], **request_kw: Any
) -> dict[str, str]:
    state = cluster(policy, **state_kw)
    result = review(request(**request_kw), view_of(state), [])
    assert result.outcome == "placed", result.outcome
    patched = apply_adds(request(**request_kw)["request"]["object"], patch_of(result.response))
    return dict(patched["metadata"]["annotations"])


def test_a_replacement_for_a_replica_under_notice_is_kept_from_consolidation() -> None:
    state = snapshot(
        [
            node_json("spot-0", pool="spota", zone="eastus-1", notice_seconds=30),
            node_json("spot-1", pool="spota", zone="eastus-2"),
            node_json("od-0", pool="ondemand", spot=False),
        ],
        [pod("infer-1", "spot-0")],
        [deployment(replicas=1, annotations={names.SPREAD: "zone"})],
    )
    decided = plan(state, Settings())
    risks = assess(nodes=state.nodes.values(), history=WATCHED, now=NOW, settings=RiskSettings())
    view = View.of_pass(state, decided.actions, risks=risks, declared={})
    result = review(request(), view, [])
    assert result.decision is not None and not result.decision.spot
    patched = apply_adds(request()["request"]["object"], patch_of(result.response))
    assert patched["metadata"]["annotations"][names.KARPENTER_DO_NOT_DISRUPT] == "true"


def test_an_ordinary_placement_leaves_consolidation_alone() -> None:
    annotations = placed_annotations({names.SPREAD: "zone"}, {})
    assert names.KARPENTER_DO_NOT_DISRUPT not in annotations


def test_every_pod_of_a_workload_with_spares_is_kept_from_consolidation() -> None:
    annotations = placed_annotations({names.SPARE_REPLICAS: "1"}, {})
    assert annotations[names.KARPENTER_DO_NOT_DISRUPT] == "true"


def test_a_pod_that_says_otherwise_keeps_its_own_value() -> None:
    state = cluster({names.SPARE_REPLICAS: "1"})
    body = request()
    body["request"]["object"]["metadata"]["annotations"] = {names.KARPENTER_DO_NOT_DISRUPT: "false"}
    result = review(body, view_of(state), [])
    patched = apply_adds(body["request"]["object"], patch_of(result.response))
    assert patched["metadata"]["annotations"][names.KARPENTER_DO_NOT_DISRUPT] == "false"


def test_a_spare_not_placed_is_kept_from_consolidation_all_the_same() -> None:
    # A spot-only NodePool whose new nodes have no assessed risk yet: no group the policy
    # accepts and no on-demand pool, so the pod is not placed (no_fit); it is a spare still.
    state = snapshot(
        [nap_json("nap-spot-0", "spot"), nap_json("nap-spot-1", "spot")],
        [pod("p0", "nap-spot-0")],
        [deployment(1, annotations={names.SPARE_REPLICAS: "1"})],
    )
    view = View.of_pass(state, (), risks={}, declared={})
    result = review(request(), view, [])
    assert result.outcome == "no_fit"
    patched = apply_adds(request()["request"]["object"], patch_of(result.response))
    assert patched["metadata"]["annotations"] == {names.KARPENTER_DO_NOT_DISRUPT: "true"}
    assert "affinity" not in patched["spec"]
    # Without spares, a pod not placed is left as it is.
    plain = snapshot(
        [nap_json("nap-spot-0", "spot")], [pod("p0", "nap-spot-0")],
        [deployment(1, annotations={names.SPREAD: "zone"})],
    )  # fmt: skip
    unplaced = review(request(), View.of_pass(plain, (), risks={}, declared={}), [])
    assert (unplaced.outcome, "patch" in unplaced.response["response"]) == ("no_fit", False)


# ---- returns to spot under Karpenter ------------------------------------------------------------


def nap_json(name: str, capacity: str, *, zone: str = "eastus-1") -> dict[str, Any]:
    labels = {
        names.KARPENTER_NODEPOOL_LABEL: "gpu",
        names.KARPENTER_CAPACITY_TYPE_LABEL: capacity,
        names.ZONE_LABEL: zone,
        names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "allocatable": {"nvidia.com/gpu": "1"}},
    }  # fmt: skip


def test_a_return_to_a_nodepools_spot_part_starts_without_an_idle_spot_node() -> None:
    # After a fail-over: one replica on the NodePool's last spot node (full), one on the on-demand
    # node Karpenter launched. No spot node has room; Karpenter launches one for the new replica.
    state = snapshot(
        [nap_json("nap-spot-0", "spot"), nap_json("nap-od-0", "on-demand")],
        [pod("p0", "nap-spot-0"), pod("p1", "nap-od-0")],
        [deployment(2)],
        history=History(since=NOW - timedelta(days=1), entries=()),
    )
    (start,) = [a for a in plan(state, Settings()).actions if isinstance(a, StartReturn)]
    assert start.record is not None
    assert (start.record.pool, start.record.retire, start.replicas) == ("gpu:spot", "ml/p1", 3)


def test_a_full_vmss_spot_pool_still_has_no_room_for_a_return() -> None:
    state = snapshot(
        [node_json("spot-0"), node_json("od-0", pool="odgpu", spot=False)],
        [pod("p0", "spot-0"), pod("p1", "od-0")],
        [deployment(2)],
        history=History(since=NOW - timedelta(days=1), entries=()),
    )
    assert [a for a in plan(state, Settings()).actions if isinstance(a, StartReturn)] == []


def test_required_spot_pools_of_both_kinds_are_one_term_each_way() -> None:
    # An availability target requires the accepted spot pools of the zone: an agent pool and a
    # NodePool's spot part cannot share one expression, so each is a term (terms are ORed).
    own = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    pod_json: dict[str, Any] = {
        "metadata": {},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [own]}
                }
            }
        },
    }
    decision = Decision(
        "gpu:spot", "eastus-1", True, "target", required_pools=("gpu:spot", "gpuspot")
    )
    patched = apply_adds(json.loads(json.dumps(pod_json)), affinity_patch(pod_json, decision))
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    zone = {"key": names.ZONE_LABEL, "operator": "In", "values": ["eastus-1"]}
    assert terms == [
        {
            "matchExpressions": [
                own["matchExpressions"][0],
                {"key": names.AKS_AGENTPOOL_LABEL, "operator": "In", "values": ["gpuspot"]},
                zone,
            ]
        },
        {
            "matchExpressions": [
                own["matchExpressions"][0],
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                zone,
            ]
        },
    ]


def returning(replicas: int = 2, **record: Any) -> dict[str, str]:
    """A Deployment's annotations with a return to spot in progress (its new replica loading)."""
    started = ReturnRecord(
        base_replicas=replicas - 1, retire="ml/infer-od", pool="spota", started_at=iso(NOW),
        known_pods=("infer-od",), **record,
    )  # fmt: skip
    return {names.RETURN_ANNOTATION: started.to_json()}


@pytest.mark.parametrize(
    "policy", [{names.SPREAD: "zone"}, {}], ids=["placed by its policy", "no policy"]
)
def test_a_returns_new_replica_is_held_from_consolidation_while_it_loads(
    policy: dict[str, str],
) -> None:
    state = cluster({**policy, **returning()}, replicas=2)
    result = review(request(), view_of(state), [])
    assert result.outcome == ("placed" if policy else "no_policy")
    patched = apply_adds(request()["request"]["object"], patch_of(result.response))
    annotations = patched["metadata"]["annotations"]
    # Held, and marked so that the controller gives it back once the pod is Ready.
    assert annotations[names.KARPENTER_DO_NOT_DISRUPT] == "true"
    assert annotations[names.HELD_UNTIL_READY] == "true"


def test_a_return_started_this_pass_holds_its_new_replica_before_the_record_shows() -> None:
    state = cluster({names.SPREAD: "zone"}, replicas=1)
    key = ("Deployment", "ml", "infer")
    started = StartReturn(key, replicas=2, record=None)
    view = View.of_pass(state, [started], risks=view_of(state).risks, declared={})
    patched = apply_adds(
        request()["request"]["object"], patch_of(review(request(), view, []).response)
    )
    assert patched["metadata"]["annotations"][names.HELD_UNTIL_READY] == "true"


def test_a_spares_hold_during_a_return_is_for_good() -> None:
    annotations = placed_annotations({names.SPARE_REPLICAS: "1", **returning(3)}, {"replicas": 3})
    assert annotations[names.KARPENTER_DO_NOT_DISRUPT] == "true"
    assert names.HELD_UNTIL_READY not in annotations


def held_pod(name: str, *, ready: bool, marked: bool = True) -> Any:
    notes = {names.KARPENTER_DO_NOT_DISRUPT: "true"}
    if marked:
        notes[names.HELD_UNTIL_READY] = "true"
    return pod(name, "spot-1", ready=ready, annotations=notes)


@pytest.mark.parametrize(
    ("annotations", "ready", "marked", "ended"),
    [
        ({}, True, True, True),  # loaded, the return over (its record dropped)
        (returning(completed=True), True, True, True),  # finished, the old replica leaving
        (returning(), True, True, False),  # Ready, but the return still retires the old one
        ({}, False, True, False),  # still loading
        ({}, True, False, False),  # a spare's, a replacement's or its own: for good
    ],
)
def test_a_return_replicas_hold_ends_once_it_is_ready_and_the_return_is_over(
    annotations: dict[str, str], ready: bool, marked: bool, ended: bool
) -> None:
    state = snapshot(
        [
            node_json("spot-0", pool="spota", zone="eastus-1"),
            node_json("spot-1", pool="spota", zone="eastus-2"),
            node_json("od-0", pool="ondemand", spot=False),
        ],
        [pod("infer-od", "od-0"), held_pod("infer-new", ready=ready, marked=marked)],
        [deployment(replicas=2, annotations=annotations)],
    )
    ends = [a for a in plan(state, Settings()).actions if isinstance(a, EndLoadHold)]
    assert ends == ([EndLoadHold(("ml", "infer-new"))] if ended else [])
    if ended:
        assert ends[0].patch() == {
            "metadata": {
                "annotations": {names.KARPENTER_DO_NOT_DISRUPT: None, names.HELD_UNTIL_READY: None}
            }
        }


def test_a_load_hold_that_cannot_be_judged_stays_and_is_said_for_its_workload_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rebalancer.controller.contain import Containment, on_workload
    from rebalancer.controller.planning import load_holds

    def broken(workload: Any) -> None:
        raise ValueError("a record no one can read")

    monkeypatch.setattr(load_holds, "active_record", broken)
    state = snapshot(
        [
            node_json("spot-1", pool="spota", zone="eastus-2"),
            node_json("od-0", pool="ondemand", spot=False),
        ],
        [pod("infer-od", "od-0"), held_pod("infer-new", ready=True)],
        [deployment(replicas=2)],
    )
    contain = Containment()
    assert not load_holds.end_load_holds(state, contain).actions
    (failure,) = contain.failures
    assert failure.method == "load-hold"
    assert failure.where == on_workload(("Deployment", "ml", "infer"))
