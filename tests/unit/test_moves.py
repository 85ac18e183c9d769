"""Moves before any notice: a replica in a spot group riskier than its workload's placement policy
accepts is replaced make-before-break, with the return to spot's machinery (pure tables)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.actions import FinishReturn, Outcome, SetDeletionCost, StartReturn
from rebalancer.controller.catalogue import event_for
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.records import ReturnRecord
from rebalancer.controller.returns import LOWEST
from rebalancer.controller.risk import Risk
from rebalancer.controller.snapshot import Snapshot
from rebalancer.vocabulary import ActionResult, EventReason, Reason
from tests.unit.test_planner import deployment, node_json, of_type, pod
from tests.unit.test_planner import snapshot as base_snapshot
from tests.unit.test_returns import quiet_history

SKU = "Standard_NC24ads_A100_v4"
KEY = ("Deployment", "ml", "infer")


def risk(zone: str, level: str, rate: float) -> Risk:
    return Risk("spotgpu", zone, SKU, "eastus", rate, level, rate, rate, None, "", ())


RISKS = {
    ("spotgpu", "eastus-1", SKU): risk("eastus-1", "high", 0.3),
    ("spotgpu", "eastus-2", SKU): risk("eastus-2", "low", 0.02),
}


def cluster() -> list[dict[str, Any]]:
    return [
        node_json("spot-0", zone="eastus-1"),
        node_json("spot-1", zone="eastus-2"),
        node_json("od-0", pool="odgpu", spot=False),
    ]


def state(pods: list[Any], policy: dict[str, str] | None, replicas: int = 2, **kw: Any) -> Snapshot:
    workload = deployment(replicas, annotations=policy)
    if "record" in kw:
        notes = {**workload.annotations, names.RETURN_ANNOTATION: kw["record"].to_json()}
        workload = replace(workload, annotations=notes)
    history = quiet_history({"spotgpu": 3600.0, "odgpu": 3600.0})
    return replace(
        base_snapshot(cluster(), pods, [workload], history=history), risks=kw.get("risks", RISKS)
    )


RISKY = [pod("p0", "spot-0"), pod("p1", "spot-1")]  # p0 in the high-risk zone
MEDIUM = {names.MAX_RISK: "medium"}


def test_a_replica_in_a_group_above_max_risk_is_moved_make_before_break() -> None:
    (start,) = of_type(plan(state(RISKY, MEDIUM), Settings()).actions, StartReturn)
    assert start.replicas == 3 and start.reason is Reason.RISK_MOVE
    assert start.record is not None
    assert (start.record.retire, start.record.purpose, start.record.pool) == ("ml/p0", "risk", "")
    assert start.record.why == "spotgpu/eastus-1 risk high is above max-risk medium"
    event = event_for(start, Outcome(ActionResult.APPLIED))
    assert event is not None and event.reason is EventReason.MOVE_STARTED
    assert start.record.why in event.message


def test_no_move_without_a_policy_that_refuses_the_group() -> None:
    assert of_type(plan(state(RISKY, None), Settings()).actions, StartReturn) == []
    assert (
        of_type(plan(state(RISKY, {names.MAX_RISK: "high"}), Settings()).actions, StartReturn) == []
    )


def test_no_move_when_there_is_nowhere_better() -> None:
    # Only the spot pool is allowed, and its low-risk node is taken by another pod.
    busy = [*RISKY, pod("other", "spot-1", owner=None)]
    policy = {**MEDIUM, names.POOLS: "spotgpu"}
    assert of_type(plan(state(busy, policy), Settings()).actions, StartReturn) == []
    # With on-demand allowed, on-demand is better.
    (start,) = of_type(plan(state(busy, MEDIUM), Settings()).actions, StartReturn)
    assert start.record is not None and start.record.retire == "ml/p0"


def test_no_move_while_the_risk_is_unknown_or_the_workload_degraded() -> None:
    assert of_type(plan(state(RISKY, MEDIUM, risks={}), Settings()).actions, StartReturn) == []
    degraded = [pod("p0", "spot-0"), pod("p1", "spot-1", ready=False)]
    assert of_type(plan(state(degraded, MEDIUM), Settings()).actions, StartReturn) == []


def moving(**changes: Any) -> ReturnRecord:
    base = ReturnRecord(
        2, "ml/p0", "", "2026-11-29T12:00:00Z", ("p0", "p1"), purpose="risk", why="high"
    )
    return replace(base, **changes)


def test_a_move_finishes_once_the_new_replica_is_ready_where_the_policy_accepts() -> None:
    new_on_demand = [*RISKY, pod("p2", "od-0")]
    (mark,) = of_type(
        plan(state(new_on_demand, MEDIUM, 3, record=moving()), Settings()).actions,
        SetDeletionCost,
    )
    assert mark.pod == ("ml", "p0") and mark.cost == LOWEST
    marked = [
        pod("p0", "spot-0", annotations={"controller.kubernetes.io/pod-deletion-cost": LOWEST}),
        pod("p1", "spot-1"),
        pod("p2", "od-0"),
    ]
    (finish,) = of_type(
        plan(state(marked, MEDIUM, 3, record=moving()), Settings()).actions, FinishReturn
    )
    assert (finish.reason, finish.replicas, finish.purpose) == (Reason.MOVED, 2, "risk")
    event = event_for(finish, Outcome(ActionResult.APPLIED))
    assert event is not None and event.reason is EventReason.MOVE_FINISHED and not event.warning


def test_a_move_gives_up_when_the_new_replica_lands_in_a_group_the_policy_refuses() -> None:
    landed_risky = [*RISKY, pod("p2", "spot-0", ready=False)]
    (mark,) = of_type(
        plan(state(landed_risky, MEDIUM, 3, record=moving()), Settings()).actions,
        SetDeletionCost,
    )
    assert mark.pod == ("ml", "p2")  # the new pod goes first, so the scale-back removes it
    assert mark.reason is Reason.LANDED_RISKY


def test_the_return_to_spot_keeps_min_on_demand_and_the_policys_groups() -> None:
    after_failover = [pod("p0", "spot-1"), pod("p1", "od-0")]
    (start,) = of_type(plan(state(after_failover, None), Settings()).actions, StartReturn)
    assert start.record is not None and start.record.purpose == "return"
    keep_one = {names.MIN_ON_DEMAND: "1"}
    assert of_type(plan(state(after_failover, keep_one), Settings()).actions, StartReturn) == []
    # Room only in the high-risk zone: a policy with max-risk medium does not return there.
    full = [*after_failover, pod("other", "spot-1", owner=None)]
    returns = of_type(plan(state(full, None), Settings()).actions, StartReturn)
    assert len(returns) == 1
    assert of_type(plan(state(full, MEDIUM), Settings()).actions, StartReturn) == []


def test_a_move_record_reads_back_and_an_odd_purpose_is_refused() -> None:
    record = moving()
    assert ReturnRecord.from_json(record.to_json()) == record
    text = record.to_json().replace('"risk"', '"elsewhere"')
    with pytest.raises(ValueError, match="purpose"):
        ReturnRecord.from_json(text)
