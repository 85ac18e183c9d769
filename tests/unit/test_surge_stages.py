"""The surge's state machine (planning/surge.py): each stage read from a record and the cluster,
and what the planner does in it. Every stage has a case here."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from rebalancer.controller.actions import Delete, ForgetSurge, ScaleBack, SetDeletionCost, Step
from rebalancer.controller.model import ORIGINAL_COST_ANNOTATION, PodInfo, WorkloadInfo
from rebalancer.controller.planner import Plan, Settings, plan
from rebalancer.controller.planning.notices import active_notices
from rebalancer.controller.planning.surge import Stage, stage_of
from rebalancer.controller.returns import LOWEST as LOWEST_DELETION_COST
from rebalancer.controller.snapshot import Snapshot
from rebalancer.names import CORDONED_FOR
from rebalancer.vocabulary import Reason
from tests.unit.test_planner import (
    EVENT,
    KEY,
    LOWERED,
    NOW,
    SURGE,
    cluster_nodes,
    deployment,
    node_json,
    pod,
    snapshot,
)

NODES = cluster_nodes(annotations={CORDONED_FOR: EVENT})
LOADING = [
    pod("p0", "spot-0"),
    pod("p1", "spot-1"),
    pod("p2", "od-0"),
    pod("p3", "od-0", ready=False),
]
READY = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0"), pod("p3", "od-0")]
MARKED = [pod("p0", "spot-0", annotations=LOWERED), *READY[1:]]
WITHOUT_DOOMED = READY[1:]
CANCELLED_NODES = [node_json("spot-0", annotations={CORDONED_FOR: EVENT}), *NODES[1:]]
ORIGINAL = {**LOWERED, ORIGINAL_COST_ANNOTATION: "100"}


def case(
    pods: list[PodInfo],
    workload: WorkloadInfo,
    *,
    nodes: list[dict[str, Any]] = NODES,
    later: float = 0,
) -> Snapshot:
    return snapshot(nodes, pods, [workload], now=NOW + timedelta(seconds=later))


CASES = {
    Stage.LOADING: case(LOADING, deployment(4, surge=SURGE)),
    Stage.NOT_HELD: case(LOADING, deployment(3, surge=SURGE)),
    Stage.DOOMED_GONE: case(WITHOUT_DOOMED, deployment(4, surge=SURGE)),
    Stage.CANCELLING: case(
        [pod("p0", "spot-0", annotations=ORIGINAL), *LOADING[1:]],
        deployment(4, surge=SURGE),
        nodes=CANCELLED_NODES,
    ),
    Stage.CANCELLED: case(LOADING, deployment(4, surge=SURGE), nodes=CANCELLED_NODES),
    Stage.MARKING: case(READY, deployment(4, surge=SURGE)),
    Stage.READY: case(MARKED, deployment(4, surge=SURGE)),
    Stage.DEADLINE: case(LOADING, deployment(4, surge=SURGE), later=26),  # 4 s left, margin 5
    Stage.FINISHING: case(READY, deployment(3, surge=replace(SURGE, completed=True))),
    Stage.DONE: case(WITHOUT_DOOMED, deployment(3, surge=replace(SURGE, completed=True))),
}


def planned(snap: Snapshot) -> Plan:
    return plan(snap, Settings())


def test_every_stage_has_a_case() -> None:
    assert set(CASES) == set(Stage)


@pytest.mark.parametrize("stage", list(Stage), ids=lambda s: s.name)
def test_the_stage_read_from_the_record_and_the_cluster(stage: Stage) -> None:
    snap = CASES[stage]
    settings = Settings()
    (workload,) = snap.workloads.values()
    assert stage_of(snap, settings, active_notices(snap, settings), workload) == stage


def surge_actions(stage: Stage) -> list[Any]:
    kinds = (ScaleBack, SetDeletionCost, Delete, ForgetSurge)
    return [a for a in planned(CASES[stage]).actions if isinstance(a, kinds)]


def test_what_each_stage_does() -> None:
    assert surge_actions(Stage.LOADING) == []
    assert surge_actions(Stage.FINISHING) == []
    assert surge_actions(Stage.DONE) == [ForgetSurge(KEY)]
    (let_go,) = surge_actions(Stage.NOT_HELD)
    assert (let_go.replicas, let_go.reason) == (None, Reason.SURGE_NOT_HELD)
    assert let_go.record.completed and let_go.record.reverted
    assert surge_actions(Stage.DOOMED_GONE) == [ScaleBack(KEY, 3, Reason.DOOMED_GONE)]
    assert surge_actions(Stage.CANCELLING) == [SetDeletionCost(("ml", "p0"), "100", restore=True)]
    (cancelled,) = surge_actions(Stage.CANCELLED)
    assert cancelled == ScaleBack(KEY, 3, Reason.CANCELLED) and cancelled.record is None
    assert surge_actions(Stage.MARKING) == [
        SetDeletionCost(("ml", "p0"), LOWEST_DELETION_COST, save_original="")
    ]
    (ready,) = surge_actions(Stage.READY)
    assert ready == ScaleBack(KEY, 3, Reason.REPLACEMENTS_READY) and ready.record.completed
    delete, scale_back = surge_actions(Stage.DEADLINE)
    assert (delete.pod, delete.grace_seconds) == (("ml", "p0"), 3)
    assert scale_back == ScaleBack(KEY, 3, Reason.DEADLINE)


def test_the_deadline_deletes_a_step_before_it_scales_back() -> None:
    """A ReplicaSet scaling down removes a not-ready replacement before a Ready doomed pod: the
    deletion must be done when the scale-back is sent."""
    steps = planned(CASES[Stage.DEADLINE]).steps
    where = {type(a): i for i, step in enumerate(steps) for a in step}
    assert where[Delete] < where[ScaleBack]
    assert (Delete.step, ScaleBack.step) == (Step.BEFORE_SCALE_BACK, Step.SCALE_BACK)
