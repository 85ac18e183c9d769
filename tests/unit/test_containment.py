"""Containment (issue 18): whatever one tenant or one agent writes, the planner never raises and
plans every object that input did not touch exactly as it would without it; a bug in one
sub-planner leaves only the object it was planning alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer import names
from rebalancer.controller.actions import Action, RecordHistory, ScaleUp
from rebalancer.controller.model import NodeInfo, PodInfo, ScalerInfo, WorkloadInfo
from rebalancer.controller.planner import Plan, Settings, plan
from rebalancer.controller.planning import surge
from rebalancer.controller.snapshot import Snapshot
from rebalancer.strict import moment, whole_number
from tests.unit.test_planner import KEY, NOW, TOLERATE_BOTH, cluster_nodes, deployment, pod

ANCIENT = "0001-01-01T00:00:00+01:00"
TRICKY = [
    "²", "\uff11", "7" * 5000, "-1", "1e999", "NaN", "", " ", "0", "10001", ANCIENT,
    "9999-12-31T23:59:59-01:00", "2026-11-29T12:00:00", "[" * 3000 + "]" * 3000, "null", "{}",
    '{"baseReplicas":0,"added":1,"eventIds":[],"doomedPods":["x/y"]}',
]  # fmt: skip
WORKLOAD_KEYS = [
    names.MIN_ON_DEMAND, names.SPARE_REPLICAS, names.POOLS, names.MAX_RISK, names.SPREAD,
    names.FAILOVER_TO, names.SURGE_ANNOTATION, names.RETURN_ANNOTATION,
    names.RETURN_BACKOFF_ANNOTATION, names.SPARE_RECORD, names.POLICY_IN_FORCE,
    names.OPT_OUT_ANNOTATION,
]  # fmt: skip
NODE_KEYS = [
    names.EVENTS_ANNOTATION, names.CORDONED_FOR, names.DRAINED_FOR_ANNOTATION,
    names.COOLDOWN_UNTIL, names.DRAIN_REQUEST_ANNOTATION, names.WAS_UNSCHEDULABLE,
]  # fmt: skip

scalars = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.booleans(),
    st.none(),
)
records = st.dictionaries(
    st.sampled_from(
        [
            "baseReplicas",
            "added",
            "eventIds",
            "doomedPods",
            "deadline",
            "completed",
            "retire",
            "pool",
            "startedAt",
            "knownPods",
            "gaveUp",
            "waitsFor",
            "purpose",
            "base",
            "reverted",
            "min_on_demand",
            "spare",
            "pools",
            "max_risk",
            "spread",
            "failover_to",
        ]
    ),
    st.one_of(scalars, st.lists(st.one_of(st.text(max_size=12), scalars), max_size=4)),
    max_size=12,
).map(json.dumps)
values = st.one_of(st.sampled_from(TRICKY), st.text(max_size=40), records)


def hostile_workload(annotated: dict[str, str], replicas: int) -> WorkloadInfo:
    spec = dict(TOLERATE_BOTH)
    spec["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    return WorkloadInfo.from_json(
        "Deployment",
        {
            "metadata": {"namespace": "team-b", "name": "chat", "annotations": annotated},
            "spec": {"replicas": replicas, "template": {"spec": spec}},
            "status": {"readyReplicas": replicas},
        },
    )


def hostile_pod(name: str, node: str, annotated: dict[str, str]) -> PodInfo:
    return PodInfo.from_json(
        {
            "metadata": {
                "namespace": "team-b", "name": name, "uid": f"uid-{name}",
                "annotations": annotated,
                "ownerReferences": [{"kind": "ReplicaSet", "name": "chat-rs", "controller": True}],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )  # fmt: skip


def hostile_node(annotated: dict[str, str], message: str, notice: bool) -> dict[str, Any]:
    """A spot node of another pool and zone whose agent writes anything it may write: its own
    annotations and its own condition (labels are AKS's: the agent's admission policy)."""
    conditions: list[dict[str, str]] = [{"type": "Ready", "status": "True"}]
    if notice:
        conditions.append(
            {"type": names.CONDITION_TYPE, "status": "True", "message": message,
             "lastTransitionTime": "2026-11-29T11:59:00Z"}
        )  # fmt: skip
    return {
        "metadata": {
            "name": "hostile-0",
            "labels": {
                names.AKS_AGENTPOOL_LABEL: "teamb", names.AKS_SPOT_LABEL: "spot",
                names.ZONE_LABEL: "westus-1",
            },
            "annotations": annotated,
        },
        "spec": {"taints": []},
        "status": {"conditions": conditions, "allocatable": {"nvidia.com/gpu": "2"}},
    }  # fmt: skip


def victim_snapshot(extra: dict[str, Any] | None = None) -> Snapshot:
    """`ml/infer`, with a replica on spot-0 under a Preempt (tests.unit.test_planner), and
    whatever hostile objects `extra` adds."""
    extra = extra or {}
    nodes = [NodeInfo.from_json(n) for n in [*cluster_nodes(), *extra.get("nodes", [])]]
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0"), *extra.get("pods", [])]
    workloads = [deployment(), *extra.get("workloads", [])]
    return Snapshot(
        now=NOW,
        nodes={n.name: n for n in nodes},
        pods={p.key: p for p in pods},
        workloads={w.key: w for w in workloads},
        replicaset_owners={("ml", "infer-abc"): "infer", ("team-b", "chat-rs"): "chat"},
        scalers={s.key: s for s in extra.get("scalers", [])},
    )


def about_victim(result: Plan) -> list[Action]:
    """The actions for ml/infer, its pods and the nodes of its pool (not the global history)."""
    return [a for a in result.actions if "team-b" not in repr(a) and "hostile-0" not in repr(a)
            and not isinstance(a, RecordHistory)]  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload_notes=st.dictionaries(st.sampled_from(WORKLOAD_KEYS), values, max_size=6),
    replicas=st.integers(min_value=0, max_value=4),
    node_notes=st.dictionaries(st.sampled_from(NODE_KEYS), values, max_size=4),
    message=st.one_of(st.sampled_from(TRICKY), st.text(max_size=80)),
    notice=st.booleans(),
    pod_notes=st.dictionaries(
        st.sampled_from([names.ORIGINAL_COST_ANNOTATION, names.DELETION_COST, names.PLACED]),
        values,
        max_size=3,
    ),
    bounds=st.one_of(st.none(), values),
)
def test_hostile_input_never_raises_and_never_changes_what_others_get(
    workload_notes: dict[str, str],
    replicas: int,
    node_notes: dict[str, str],
    message: str,
    notice: bool,
    pod_notes: dict[str, str],
    bounds: str | None,
) -> None:
    scaler = ScalerInfo.from_json(
        {
            "metadata": {"namespace": "team-b", "name": "chat",
                         "annotations": {} if bounds is None else
                         {names.HPA_ORIGINAL_ANNOTATION: bounds}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "chat"},
                     "minReplicas": 1, "maxReplicas": 3},
        }
    )  # fmt: skip
    extra = {
        "workloads": [hostile_workload(workload_notes, replicas)],
        "nodes": [hostile_node(node_notes, message, notice)],
        "pods": [hostile_pod("chat-0", "hostile-0", pod_notes), hostile_pod("chat-1", "od-0", {})],
        "scalers": [scaler],
    }
    clean = plan(victim_snapshot(), Settings())
    hostile = plan(victim_snapshot(extra), Settings())  # never raises
    assert about_victim(hostile) == about_victim(clean)
    assert not [f for f in hostile.failures if "team-b" not in f.where.subject]


def test_a_bug_planning_one_workload_leaves_only_that_one_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two Deployments doomed on one node; surging one raises: the other is surged, the node is
    drained (the failed one's pod plainly), and the failure names the workload."""
    other = hostile_workload({}, 1)
    snap = victim_snapshot({"workloads": [other], "pods": [hostile_pod("chat-0", "spot-0", {})]})
    real = surge._surge_one

    def broken(snapshot: Snapshot, workload: WorkloadInfo, *args: Any) -> Any:
        if workload.name == "chat":
            raise KeyError("a bug")
        return real(snapshot, workload, *args)

    monkeypatch.setattr(surge, "_surge_one", broken)
    result = plan(snap, Settings())
    surged = [a.workload for a in result.actions if isinstance(a, ScaleUp)]
    assert surged == [KEY]
    (failure,) = result.failures
    assert (failure.method, failure.where.workload) == ("surge", ("Deployment", "team-b", "chat"))
    assert "KeyError" in failure.error
    evicted = {a.pod for a in result.actions if type(a).__name__ == "Evict"}
    assert ("team-b", "chat-0") in evicted  # drained plainly, not forgotten


@pytest.mark.parametrize(
    "text",
    ["²", "\uff11", "7" * 5000, "-1", "1e3", "0x10", "", " ", "10001", None, 3],
)
def test_whole_numbers_are_ascii_digits_in_range(text: Any) -> None:
    with pytest.raises(ValueError):
        whole_number(text, high=10_000)


def test_whole_numbers_read_plain_digits() -> None:
    assert whole_number(" 42 ", high=10_000) == 42
    assert whole_number("0", high=3) == 0


@pytest.mark.parametrize(
    "text",
    [ANCIENT, "9999-12-31T23:59:59-01:00", "2026-11-29T12:00:00", "\uff11\uff19\uff17\uff10-01-01T00:00:00Z",
     "2026-11-29T12:00:00." + "0" * 40 + "Z", "1969-12-31T23:59:59Z", 5, None],
)  # fmt: skip
def test_times_are_bounded_rfc3339_with_a_zone(text: Any) -> None:
    with pytest.raises(ValueError):
        moment(text)


def test_times_read_as_utc() -> None:
    assert moment("2026-11-29T13:00:00+01:00") == NOW
    assert moment("2026-11-29T12:00:00Z") == NOW
