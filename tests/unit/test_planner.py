"""The planner, step by step through a notice's life: pure tables, no I/O, no clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.config import PoolShape
from rebalancer.controller.actions import (
    Cordon,
    Delete,
    EndCooldown,
    Evict,
    ForgetSurge,
    Hold,
    MarkDrained,
    RecordHistory,
    ReportBlocked,
    Restore,
    ScaleBack,
    ScaleUp,
    SetDeletionCost,
    StartCooldown,
)
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import (
    ORIGINAL_COST_ANNOTATION,
    SURGE_ANNOTATION,
    NodeInfo,
    PodInfo,
    WorkloadInfo,
)
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.pools import declared_pools
from rebalancer.controller.records import Surge
from rebalancer.controller.returns import LOWEST as LOWEST_DELETION_COST
from rebalancer.controller.snapshot import Snapshot
from rebalancer.names import COOLDOWN_UNTIL, CORDONED_FOR
from rebalancer.vocabulary import Reason

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
EVENT = "A123BC45-1234-5678-AB90-ABCDEF123456"
SPOT = [
    {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"},
    {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
]
TOLERATE_BOTH = {
    "tolerations": [
        {
            "key": "kubernetes.azure.com/scalesetpriority",
            "operator": "Equal",
            "value": "spot",
            "effect": "NoSchedule",
        },
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    ]
}


def node_json(
    name: str,
    *,
    pool: str = "spotgpu",
    spot: bool = True,
    zone: str = "eastus-1",
    notice_seconds: float | None = None,
    event_type: str = "Preempt",
    annotations: dict[str, str] | None = None,
    gpus: int = 1,
) -> dict[str, Any]:
    labels = {
        names.AKS_AGENTPOOL_LABEL: pool,
        names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
        names.ZONE_LABEL: zone,
        names.AKS_SPOT_LABEL: "spot" if spot else "regular",
    }
    conditions = [{"type": "Ready", "status": "True"}]
    if notice_seconds is not None:
        deadline = (NOW + timedelta(seconds=notice_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions.append(
            {
                "type": names.CONDITION_TYPE,
                "status": "True",
                "message": f"EventType={event_type} EventId={EVENT} EventStatus=Scheduled NotBefore={deadline}",
                "lastTransitionTime": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    taints = SPOT if spot else [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"taints": taints},
        "status": {"conditions": conditions, "allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def pod(
    name: str,
    node: str,
    *,
    owner: tuple[str, str] | None = ("ReplicaSet", "infer-abc"),
    ready: bool = True,
    gpus: int = 1,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
    grace: int = 30,
) -> PodInfo:
    meta: dict[str, Any] = {
        "namespace": "ml",
        "name": name,
        "uid": f"uid-{name}",
        "annotations": annotations or {},
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return PodInfo.from_json(
        {
            "metadata": meta,
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": resources}],
                "terminationGracePeriodSeconds": grace,
            },
            "status": {
                "phase": "Running" if ready else "Pending",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def deployment(
    replicas: int = 3,
    *,
    surge: Surge | None = None,
    template: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int = 1,
) -> WorkloadInfo:
    notes = dict(annotations or {})
    if surge is not None:
        notes[SURGE_ANNOTATION] = surge.to_json()
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec = dict(TOLERATE_BOTH if template is None else template)
    spec["containers"] = [{"name": "c", "resources": resources}]
    return WorkloadInfo.from_json(
        "Deployment",
        {
            "metadata": {"namespace": "ml", "name": "infer", "annotations": notes},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "infer"}},
                "template": {"spec": spec},
            },
            "status": {"readyReplicas": replicas},
        },
    )


def preempt(pool: str, zone: str, when: datetime, event_id: str) -> Entry:
    return Entry(event_id, "Preempt", f"{pool}-n", pool, zone, "sku", True, when)


# A history that has watched for a day and knows the test's own notice (on spot-0, where the
# tests put it): nothing to record.
WATCHED = History(
    since=NOW - timedelta(days=1),
    entries=(
        replace(preempt("spotgpu", "eastus-1", NOW - timedelta(days=2), EVENT), node="spot-0"),
    ),
)


def snapshot(
    nodes: list[dict[str, Any]],
    pods: list[PodInfo],
    workloads: list[WorkloadInfo] | None = None,
    now: datetime = NOW,
    history: History = WATCHED,
) -> Snapshot:
    infos = [NodeInfo.from_json(n) for n in nodes]
    workload_list = workloads if workloads is not None else [deployment()]
    return Snapshot(
        now=now,
        nodes={n.name: n for n in infos},
        pods={p.key: p for p in pods},
        workloads={w.key: w for w in workload_list},
        replicaset_owners={("ml", "infer-abc"): "infer"},
        history=history,
    )


def cluster_nodes(**doomed: Any) -> list[dict[str, Any]]:
    return [
        node_json("spot-0", notice_seconds=30, **doomed),
        node_json("spot-1"),
        node_json("spot-2", zone="eastus-2"),
        node_json("od-0", pool="odgpu", spot=False),
    ]


def of_type(actions: tuple[Any, ...], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


KEY = ("Deployment", "ml", "infer")
SURGE = Surge(3, 1, (EVENT,), ("ml/p0",), "2026-11-29T12:00:30Z")


def test_a_notice_cordons_and_surges() -> None:
    pods = [
        pod("p0", "spot-0"),
        pod("p1", "spot-1"),
        pod("p2", "od-0"),
        pod("web", "spot-0", owner=None, gpus=0),
    ]
    result = plan(snapshot(cluster_nodes(), pods), Settings())
    assert of_type(result.actions, Cordon) == [Cordon("spot-0", EVENT, "Preempt")]
    (scale,) = of_type(result.actions, ScaleUp)
    assert scale.workload == KEY and scale.replicas == 4
    assert scale.record == Surge(3, 1, (EVENT,), ("ml/p0",), "2026-11-29T12:00:30Z")
    assert of_type(result.actions, SetDeletionCost) == []  # later, before the scale-back
    # Make before break: the GPU replica is not evicted; the other pod is.
    assert [a.pod for a in of_type(result.actions, Evict)] == [("ml", "web")]
    assert of_type(result.actions, MarkDrained) == []
    assert of_type(result.actions, ReportBlocked) == []


def test_surge_in_progress_waits_for_replacements() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [
        pod(
            "p0",
            "spot-0",
            annotations={
                "controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST,
                ORIGINAL_COST_ANNOTATION: "",
            },
        ),
        pod("p1", "spot-1"),
        pod("p2", "od-0"),
        pod("p3", "od-0", ready=False),  # the replacement, loading its model
    ]
    result = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    waiting = [a for a in result.actions if not isinstance(a, StartCooldown | Hold)]
    assert waiting == []  # nothing to do but wait: no scale-back, no eviction, no second surge
    # The workload's pods are held against evictions by others while the replacement loads.
    (hold,) = of_type(result.actions, Hold)
    assert hold == Hold("ml", "infer") and hold.selector == {"matchLabels": {"app": "infer"}}


LOWERED = {
    "controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST,
    ORIGINAL_COST_ANNOTATION: "",
}


def test_replacements_ready_lower_the_doomed_cost_then_scale_back() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0"), pod("p3", "od-0")]
    first = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    assert of_type(first.actions, SetDeletionCost) == [
        SetDeletionCost(("ml", "p0"), LOWEST_DELETION_COST, save_original="")
    ]
    assert of_type(first.actions, ScaleBack) == []  # not before the doomed pod goes first

    pods[0] = pod("p0", "spot-0", annotations=LOWERED)
    second = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    assert of_type(second.actions, ScaleBack) == [ScaleBack(KEY, 3, Reason.REPLACEMENTS_READY)]
    assert of_type(second.actions, Delete) == []


def test_deadline_near_deletes_doomed_pods_then_scales_back() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [
        pod("p0", "spot-0"),
        pod("p1", "spot-1"),
        pod("p2", "od-0"),
        pod("p3", "od-0", ready=False),
    ]
    later = NOW + timedelta(seconds=26)  # 4 s left, margin 5 s
    result = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)], now=later), Settings())
    deletes = of_type(result.actions, Delete)
    assert [(d.pod, d.grace_seconds) for d in deletes] == [(("ml", "p0"), 3)]
    assert of_type(result.actions, ScaleBack) == [ScaleBack(KEY, 3, Reason.DEADLINE)]
    order = [type(a) for a in result.actions]
    assert order.index(Delete) < order.index(ScaleBack)


def test_doomed_pods_gone_scale_back() -> None:
    pods = [pod("p1", "spot-1"), pod("p2", "od-0"), pod("p3", "od-0", ready=False)]
    nodes = [n for n in cluster_nodes() if n["metadata"]["name"] != "spot-0"]
    result = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    assert of_type(result.actions, ScaleBack) == [ScaleBack(KEY, 3, Reason.DOOMED_GONE)]


def test_cancellation_restores_costs_then_scales_back_then_uncordons() -> None:
    nodes = [
        node_json("spot-0", annotations={CORDONED_FOR: EVENT}),
        node_json("od-0", pool="odgpu", spot=False),
    ]
    lowered = {
        "controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST,
        ORIGINAL_COST_ANNOTATION: "100",
    }
    pods = [
        pod("p0", "spot-0", annotations=lowered),
        pod("p1", "od-0"),
        pod("p2", "od-0"),
        pod("p3", "od-0"),
    ]
    first = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    assert of_type(first.actions, Restore) == [Restore("spot-0", EVENT)]
    assert of_type(first.actions, SetDeletionCost) == [
        SetDeletionCost(("ml", "p0"), "100", restore=True)
    ]
    assert of_type(first.actions, ScaleBack) == []  # not before the old pod's cost is back

    pods[0] = pod("p0", "spot-0", annotations={"controller.kubernetes.io/pod-deletion-cost": "100"})
    second = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    assert of_type(second.actions, ScaleBack) == [ScaleBack(KEY, 3, Reason.CANCELLED)]


def test_replicas_changed_by_someone_else_are_left_alone() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [
        pod("p0", "spot-0", annotations=LOWERED),
        pod("p1", "spot-1"),
        pod("p2", "od-0"),
        pod("p3", "od-0"),
    ]
    result = plan(snapshot(nodes, pods, [deployment(7, surge=SURGE)]), Settings())
    assert of_type(result.actions, ScaleBack) == [ScaleBack(KEY, None, Reason.REPLICAS_CHANGED)]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            {"tolerations": TOLERATE_BOTH["tolerations"][:1]},
            "pool odgpu: taint sku=gpu:NoSchedule not tolerated",
        ),
        (
            {
                **TOLERATE_BOTH,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.azure.com/scalesetpriority",
                                            "operator": "In",
                                            "values": ["spot"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
            "pool odgpu: required node affinity (kubernetes.azure.com/scalesetpriority In ['spot']) not matched",
        ),
        (
            {**TOLERATE_BOTH, "nodeSelector": {"kubernetes.azure.com/scalesetpriority": "spot"}},
            "pool odgpu: nodeSelector kubernetes.azure.com/scalesetpriority=spot not matched",
        ),
    ],
)
def test_no_compatible_on_demand_pool_is_reported_and_the_rest_still_done(
    template: dict[str, Any], expected: str
) -> None:
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "spot-1")]
    result = plan(snapshot(cluster_nodes(), pods, [deployment(template=template)]), Settings())
    (blocked,) = of_type(result.actions, ReportBlocked)
    assert blocked.detail == expected
    assert of_type(result.actions, Cordon) and of_type(result.actions, ScaleUp)


def test_on_demand_pool_without_gpus_does_not_count() -> None:
    nodes = [
        node_json("spot-0", notice_seconds=30),
        node_json("sys-0", pool="system", spot=False, gpus=0),
    ]
    nodes[1]["spec"]["taints"] = []
    result = plan(snapshot(nodes, [pod("p0", "spot-0")]), Settings())
    (blocked,) = of_type(result.actions, ReportBlocked)
    assert "needs 1 nvidia.com/gpu, nodes have 0" in blocked.detail


GPU_ON_DEMAND = PoolShape(name="odgpu", gpus=1, taints=["sku=gpu:NoSchedule"])


@pytest.mark.parametrize(
    ("declared", "blocked"),
    [
        ([], "no on-demand pool in the cluster or declared in REBALANCER_POOLS"),
        ([GPU_ON_DEMAND], None),
        (
            [PoolShape(name="odgpu", gpus=1, taints=["sku=h100:NoSchedule"])],
            "pool odgpu: taint sku=h100:NoSchedule not tolerated",
        ),
    ],
)
def test_an_on_demand_pool_at_zero_nodes_counts_once_declared(
    declared: list[PoolShape], blocked: str | None
) -> None:
    nodes = [node_json("spot-0", notice_seconds=30), node_json("spot-1")]  # no on-demand Node
    settings = Settings(declared_pools=declared_pools(declared))
    result = plan(snapshot(nodes, [pod("p0", "spot-0")]), settings)
    assert [a.replicas for a in of_type(result.actions, ScaleUp)] == [4]
    assert [a.detail for a in of_type(result.actions, ReportBlocked)] == (
        [blocked] if blocked else []
    )


def test_an_on_demand_pool_seen_on_nodes_overrides_its_declaration() -> None:
    live = node_json("od-0", pool="odgpu", spot=False)
    live["spec"]["taints"] = [{"key": "sku", "value": "h100", "effect": "NoSchedule"}]
    nodes = [node_json("spot-0", notice_seconds=30), live]
    settings = Settings(declared_pools=declared_pools([GPU_ON_DEMAND]))
    result = plan(snapshot(nodes, [pod("p0", "spot-0")]), settings)
    (report,) = of_type(result.actions, ReportBlocked)
    assert report.detail == "pool odgpu: taint sku=h100:NoSchedule not tolerated"


def test_statefulset_replicas_are_evicted_at_once() -> None:
    pods = [pod("db-0", "spot-0", owner=("StatefulSet", "db"))]
    sts = replace(deployment(), kind="StatefulSet", name="db")
    result = plan(snapshot(cluster_nodes(), pods, [sts]), Settings())
    assert of_type(result.actions, ScaleUp) == []
    assert [a.pod for a in of_type(result.actions, Evict)] == [("ml", "db-0")]


def test_daemonsets_and_mirror_pods_stay_and_the_node_is_drained() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [
        pod("ds", "spot-0", owner=("DaemonSet", "agent")),
        pod("static", "spot-0", owner=None, annotations={"kubernetes.io/config.mirror": "x"}),
    ]
    result = plan(snapshot(nodes, pods), Settings())
    assert of_type(result.actions, Evict) == []
    assert of_type(result.actions, MarkDrained) == [MarkDrained("spot-0", EVENT)]


def test_terminating_pods_keep_the_node_from_being_marked_drained() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    result = plan(snapshot(nodes, [pod("p0", "spot-0", owner=None, deleting=True)]), Settings())
    assert of_type(result.actions, MarkDrained) == []
    assert of_type(result.actions, Evict) == []


def test_already_marked_is_not_marked_again() -> None:
    nodes = cluster_nodes(
        annotations={CORDONED_FOR: EVENT, names.DRAINED_FOR_ANNOTATION: EVENT.lower()}
    )
    assert of_type(plan(snapshot(nodes, []), Settings()).actions, MarkDrained) == []


@pytest.mark.parametrize(
    ("event_type", "cordon", "surge", "evict"),
    [
        ("Freeze", False, False, False),
        ("Reboot", True, False, True),
        ("Redeploy", True, False, True),
        ("Terminate", True, True, False),
        ("Hibernate", False, False, False),
    ],
)
def test_policy_per_event_type(event_type: str, cordon: bool, surge: bool, evict: bool) -> None:
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0")]
    result = plan(snapshot(cluster_nodes(event_type=event_type), pods), Settings())
    assert bool(of_type(result.actions, Cordon)) == cordon
    assert bool(of_type(result.actions, ScaleUp)) == surge
    assert bool(of_type(result.actions, Evict)) == evict


def test_a_wave_raises_an_existing_surge() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    nodes[1] = node_json("spot-1", notice_seconds=20)
    pods = [
        pod("p0", "spot-0"),
        pod("p1", "spot-1"),
        pod("p2", "od-0"),
        pod("p3", "od-0", ready=False),
    ]
    result = plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings())
    (scale,) = of_type(result.actions, ScaleUp)
    assert scale.replicas == 5
    assert scale.record.added == 2 and scale.record.doomed_pods == ("ml/p0", "ml/p1")
    assert scale.record.base_replicas == 3


def test_cooldown_on_the_rest_of_the_pool_and_zone() -> None:
    result = plan(snapshot(cluster_nodes(), [pod("p0", "spot-0")]), Settings(cooldown_seconds=600))
    assert of_type(result.actions, StartCooldown) == [
        StartCooldown("spot-1", NOW + timedelta(seconds=600))
    ]


def test_cooldown_ends_after_its_time_when_no_notice_remains() -> None:
    until = (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = [node_json("spot-1", annotations={COOLDOWN_UNTIL: until})]
    assert of_type(plan(snapshot(nodes, []), Settings()).actions, EndCooldown) == [
        EndCooldown("spot-1")
    ]
    not_yet = (NOW + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = [node_json("spot-1", annotations={COOLDOWN_UNTIL: not_yet})]
    assert of_type(plan(snapshot(nodes, []), Settings()).actions, EndCooldown) == []


def test_act_now_deletes_with_a_short_grace() -> None:
    nodes = [
        node_json("spot-0", annotations={names.DRAIN_REQUEST_ANNOTATION: "now"}),
        node_json("od-0", pool="odgpu", spot=False),
    ]
    pods = [pod("web", "spot-0", owner=None, gpus=0, grace=60)]
    result = plan(snapshot(nodes, pods), Settings(act_now_grace_seconds=5))
    assert [(d.pod, d.grace_seconds) for d in of_type(result.actions, Delete)] == [
        (("ml", "web"), 5)
    ]


@pytest.mark.parametrize(
    "workload",
    [deployment(annotations={"spot-rebalancer.io/ignore": "true"}), deployment(gpus=0)],
)
def test_unmanaged_workloads_are_simply_drained(workload: WorkloadInfo) -> None:
    pods = [pod("p0", "spot-0", gpus=0 if not workload.gpus_per_replica else 1)]
    result = plan(snapshot(cluster_nodes(), pods, [workload]), Settings())
    assert of_type(result.actions, ScaleUp) == []
    assert [a.pod for a in of_type(result.actions, Evict)] == [("ml", "p0")]


def test_planning_twice_gives_the_same_plan() -> None:
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("web", "spot-0", owner=None, gpus=0)]
    state = snapshot(cluster_nodes(), pods)
    assert plan(state, Settings()) == plan(state, Settings())


def test_a_completed_surge_is_not_surged_again_while_its_pods_go() -> None:
    done = replace(SURGE, completed=True)
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0"), pod("p3", "od-0")]
    result = plan(snapshot(nodes, pods, [deployment(3, surge=done)]), Settings())
    assert of_type(result.actions, ScaleUp) == []
    assert of_type(result.actions, ScaleBack) == []
    assert of_type(result.actions, ForgetSurge) == []
    # Once the doomed pod is gone the record is dropped.
    result = plan(snapshot(nodes, pods[1:], [deployment(3, surge=done)]), Settings())
    assert of_type(result.actions, ForgetSurge) == [ForgetSurge(KEY)]


def test_a_new_doomed_pod_after_a_completed_surge_starts_a_new_one() -> None:
    done = replace(SURGE, completed=True)
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    nodes[1] = node_json("spot-1", notice_seconds=20)
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0"), pod("p3", "od-0")]
    result = plan(snapshot(nodes, pods, [deployment(3, surge=done)]), Settings())
    (scale,) = of_type(result.actions, ScaleUp)
    assert scale.replicas == 4 and scale.record.added == 1 and not scale.record.completed
    assert scale.record.doomed_pods == ("ml/p0", "ml/p1")


@pytest.mark.parametrize(
    ("selector", "surged"),
    [("", True), ("app=llm", True), ("app=other", False), ("tier", False)],
)
def test_workload_selector(selector: str, surged: bool) -> None:
    workload = replace(deployment(), labels={"app": "llm"})
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0")]
    result = plan(snapshot(cluster_nodes(), pods, [workload]), Settings(workload_selector=selector))
    assert bool(of_type(result.actions, ScaleUp)) == surged


@pytest.mark.parametrize(("recent", "factor"), [(0, 1), (1, 1), (2, 2), (3, 3), (9, 4)])
def test_a_pool_that_keeps_being_evicted_is_avoided_longer(recent: int, factor: int) -> None:
    # `recent` Preempts in the last hour, the one on spot-0 (not recorded yet) among them.
    earlier = tuple(
        preempt("spotgpu", "eastus-1", NOW - timedelta(minutes=50), f"E{i}")
        for i in range(recent - 1)
    )
    history = History(since=NOW - timedelta(days=1), entries=earlier)
    state = snapshot(cluster_nodes(), [pod("p0", "spot-0")], history=history)
    result = plan(state, Settings(cooldown_seconds=600))
    (cooldown,) = of_type(result.actions, StartCooldown)
    assert cooldown.until == NOW + timedelta(seconds=600 * factor)


def test_a_notice_the_history_does_not_know_is_recorded_once() -> None:
    fresh = History(since=NOW - timedelta(days=1))
    result = plan(snapshot(cluster_nodes(), [pod("p0", "spot-0")], history=fresh), Settings())
    (record,) = of_type(result.actions, RecordHistory)
    assert [e.event_id for e in record.new] == [EVENT]
    assert (record.new[0].pool, record.new[0].zone, record.new[0].preempt) == (
        "spotgpu",
        "eastus-1",
        True,
    )
    known = plan(snapshot(cluster_nodes(), [pod("p0", "spot-0")], history=WATCHED), Settings())
    assert of_type(known.actions, RecordHistory) == []


def test_no_history_yet_starts_one_so_the_quiet_time_counts_from_now() -> None:
    result = plan(snapshot([node_json("spot-1")], [], history=History()), Settings())
    (record,) = of_type(result.actions, RecordHistory)
    assert record.history.since == NOW and record.new == ()


def test_a_scale_back_keeps_the_record_completed_but_drops_it_after_a_cancellation() -> None:
    nodes = cluster_nodes(annotations={CORDONED_FOR: EVENT})
    pods = [pod("p0", "spot-0", annotations=LOWERED), pod("p1", "spot-1"), pod("p2", "od-0")]
    pods.append(pod("p3", "od-0"))
    (done,) = of_type(
        plan(snapshot(nodes, pods, [deployment(4, surge=SURGE)]), Settings()).actions, ScaleBack
    )
    assert done.record == replace(SURGE, completed=True)
    cancelled_nodes = [node_json("spot-0", annotations={CORDONED_FOR: EVENT}), *nodes[1:]]
    unlowered = [pod("p0", "spot-0"), *pods[1:]]
    (undone,) = of_type(
        plan(
            snapshot(cancelled_nodes, unlowered, [deployment(4, surge=SURGE)]), Settings()
        ).actions,
        ScaleBack,
    )
    assert undone.reason == Reason.CANCELLED and undone.record is None


def test_a_grace_period_longer_than_the_notice_is_cut_to_fit_when_evicting() -> None:
    """60 s of grace on a node with 15 s of notice: evicted with 14 s, so it is gone (not merely
    terminating) before Azure takes the VM."""
    nodes = [node_json("spot-0", notice_seconds=15), node_json("od-0", pool="odgpu", spot=False)]
    slow = pod("web", "spot-0", owner=None, gpus=0, grace=60)
    quick = pod("side", "spot-0", owner=None, gpus=0, grace=10)
    evictions = of_type(plan(snapshot(nodes, [slow, quick]), Settings()).actions, Evict)
    assert {(e.pod[1], e.grace_seconds) for e in evictions} == {("web", 14), ("side", None)}


def terminating(name: str, node: str, *, ends_in: float) -> PodInfo:
    base = pod(name, node, owner=None, gpus=0, grace=60)
    return replace(base, deleting=True, deletion_at=NOW + timedelta(seconds=ends_in))


@pytest.mark.parametrize(("ends_in", "deleted_with"), [(60, 14), (16, 14), (14, None), (5, None)])
def test_a_pod_already_terminating_past_the_deadline_is_deleted_again_with_less_grace(
    ends_in: float, deleted_with: int | None
) -> None:
    """Someone else (AKS node auto-drain, a scale-down) started it with 60 s of grace; 15 s of
    notice are left. A second delete shortens the grace period; one that ends in time is left."""
    nodes = [node_json("spot-0", notice_seconds=15), node_json("od-0", pool="odgpu", spot=False)]
    result = plan(snapshot(nodes, [terminating("web", "spot-0", ends_in=ends_in)]), Settings())
    deletes = [(d.pod[1], d.grace_seconds) for d in of_type(result.actions, Delete)]
    assert deletes == ([] if deleted_with is None else [("web", deleted_with)])
    assert of_type(result.actions, MarkDrained) == []  # terminating is not gone


def test_an_agent_notice_on_a_node_that_runs_no_agent_is_not_acted_on() -> None:
    """Our agent runs on spot nodes; its condition on an on-demand node was written by someone
    else, and would drain a node Azure is not taking."""
    nodes = [node_json("od-0", pool="odgpu", spot=False, notice_seconds=30)]
    result = plan(snapshot(nodes, [pod("p2", "od-0")]), Settings())
    assert result.active == {} and of_type(result.actions, Cordon) == []
    assert [node for node, _ in result.ignored] == ["od-0"]
    anywhere = Settings(agent_node_selector="")  # an agent DaemonSet on every node
    assert of_type(plan(snapshot(nodes, [pod("p2", "od-0")]), anywhere).actions, Cordon)


# ---- a standing hold before any notice (hold_before_notice) -------------------------------------


def standing_holds(nodes: list[dict[str, Any]], **settings: Any) -> list[Any]:
    state = snapshot(nodes, [pod("infer-1", "spot-1"), pod("infer-2", "od-0")])
    return [
        a
        for a in plan(state, Settings(**settings)).actions
        if isinstance(a, Hold) and a.reason is Reason.HOLD_BEFORE_NOTICE
    ]


def quiet_nodes(**spot1: Any) -> list[dict[str, Any]]:
    return [node_json("spot-1", **spot1), node_json("od-0", pool="odgpu", spot=False)]


def test_a_managed_deployment_on_spot_is_held_before_any_notice_only_when_asked() -> None:
    assert standing_holds(quiet_nodes()) == []
    (hold,) = standing_holds(quiet_nodes(), hold_before_notice=True)
    assert (hold.namespace, hold.workload) == ("ml", "infer")


def test_the_standing_hold_yields_to_an_upgrade_drain_but_not_to_aks_auto_drain() -> None:
    cordoned = quiet_nodes()
    cordoned[0]["spec"]["unschedulable"] = True  # an upgrade or kubectl drain: no notice
    assert standing_holds(cordoned, hold_before_notice=True) == []
    remediated = quiet_nodes()
    remediated[0]["spec"]["unschedulable"] = True
    remediated[0]["spec"]["taints"] = [
        *remediated[0]["spec"]["taints"],
        {"key": names.AKS_REMEDIATOR_TAINT, "effect": "NoSchedule"},
    ]  # AKS node auto-drain acting on a Scheduled Event we have not seen yet
    assert len(standing_holds(remediated, hold_before_notice=True)) == 1
