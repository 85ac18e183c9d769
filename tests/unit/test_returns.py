"""Return to spot, step by step: when to start, when to finish, when to give up (pure tables)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from rebalancer.controller.actions import (
    FinishReturn,
    ForgetReturn,
    ScaleUp,
    SetDeletionCost,
    StartReturn,
)
from rebalancer.controller.history import History
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.records import ReturnRecord
from rebalancer.controller.returns import LOWEST as LOWEST_DELETION_COST
from rebalancer.controller.returns import ReturnSettings
from rebalancer.names import COOLDOWN_UNTIL, RETURN_ANNOTATION, RETURN_BACKOFF_ANNOTATION
from tests.unit.test_planner import NOW, deployment, node_json, of_type, pod, preempt, snapshot

KEY = ("Deployment", "ml", "infer")
QUIET = {"spotgpu": 3600.0, "odgpu": 3600.0}


def nodes(**spot1: Any) -> list[dict[str, Any]]:
    return [
        node_json("spot-0"),
        node_json("spot-1", **spot1),
        node_json("od-0", pool="odgpu", spot=False),
    ]


def state(
    pods: list[Any],
    workload: Any = None,
    quiet: dict[str, float] | None = None,
    cluster: list[dict[str, Any]] | None = None,
) -> Any:
    return snapshot(
        cluster or nodes(), pods, [workload or deployment(2)], history=quiet_history(quiet or QUIET)
    )


def quiet_history(quiet: dict[str, float]) -> History:
    """A history in which each pool's last Preempt was `quiet[pool]` seconds ago (the longest:
    none since the record began)."""
    longest = max(quiet.values(), default=0.0)
    entries = tuple(
        preempt(pool, "eastus-1", NOW - timedelta(seconds=seconds), f"E-{pool}")
        for pool, seconds in quiet.items()
        if seconds < longest
    )
    return History(since=NOW - timedelta(seconds=longest), entries=entries)


AFTER_FAILOVER = [pod("p0", "spot-0"), pod("p1", "od-0")]  # spot-1 has room


def record(**changes: Any) -> ReturnRecord:
    base = ReturnRecord(2, "ml/p1", "spotgpu", "2026-11-29T12:00:00Z", ("p0", "p1"))
    return replace(base, **changes)


def returning(**changes: Any) -> Any:
    return replace(deployment(3), annotations={RETURN_ANNOTATION: record(**changes).to_json()})


def test_starts_one_return_when_a_quiet_spot_pool_has_room() -> None:
    (start,) = of_type(plan(state(AFTER_FAILOVER), Settings()).actions, StartReturn)
    assert start.workload == KEY and start.replicas == 3
    assert start.record == ReturnRecord(2, "ml/p1", "spotgpu", "2026-11-29T12:00:00Z", ("p0", "p1"))


@pytest.mark.parametrize(
    "case",
    [
        "not quiet",
        "cooldown",
        "notice in pool",
        "no room",
        "node not ready to schedule yet",
        "degraded",
        "outside window",
        "backoff",
        "disabled",
    ],
)
def test_does_not_start(case: str) -> None:
    pods = list(AFTER_FAILOVER)
    cluster = nodes()
    workload = deployment(2)
    settings = Settings()
    quiet = dict(QUIET)
    if case == "not quiet":
        quiet["spotgpu"] = 60
    elif case == "cooldown":
        until = (NOW + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster = nodes(annotations={COOLDOWN_UNTIL: until})
    elif case == "notice in pool":
        cluster = nodes(notice_seconds=30)
    elif case == "no room":
        pods.append(pod("other", "spot-1", owner=None))
    elif case == "node not ready to schedule yet":  # the node lifecycle controller's taint
        not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
        cluster[1]["spec"]["taints"] = [*cluster[1]["spec"]["taints"], not_ready]
    elif case == "degraded":
        pods[0] = pod("p0", "spot-0", ready=False)
    elif case == "outside window":
        now = NOW.hour * 60 + NOW.minute
        start, end = ((now + 60) % 1440, (now + 120) % 1440)
        window = f"{start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"
        settings = Settings(returns=ReturnSettings(window=window))
    elif case == "backoff":
        until = (NOW + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        workload = replace(workload, annotations={RETURN_BACKOFF_ANNOTATION: until})
    elif case == "disabled":
        settings = Settings(returns=ReturnSettings(enabled=False))
    result = plan(state(pods, workload, quiet, cluster), settings)
    assert of_type(result.actions, StartReturn) == [], case


def test_nothing_to_return_when_everything_runs_on_spot() -> None:
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1")]
    assert of_type(plan(state(pods), Settings()).actions, StartReturn) == []


def test_waits_while_the_spot_replica_loads() -> None:
    pods = [*AFTER_FAILOVER, pod("p2", "spot-1", ready=False)]
    result = plan(state(pods, returning()), Settings())
    assert [
        a for a in result.actions if isinstance(a, StartReturn | FinishReturn | SetDeletionCost)
    ] == []


def test_spot_replica_ready_retires_the_on_demand_one_first() -> None:
    pods = [*AFTER_FAILOVER, pod("p2", "spot-1")]
    first = plan(state(pods, returning()), Settings())
    assert of_type(first.actions, SetDeletionCost) == [
        SetDeletionCost(("ml", "p1"), LOWEST_DELETION_COST, save_original="")
    ]
    assert of_type(first.actions, FinishReturn) == []
    lowered = {
        "controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST,
        "spot-rebalancer.io/original-deletion-cost": "",
    }
    pods[1] = pod("p1", "od-0", annotations=lowered)
    second = plan(state(pods, returning()), Settings())
    assert of_type(second.actions, FinishReturn) == [FinishReturn(KEY, 2, "ReturnedToSpot")]
    assert of_type(second.actions, SetDeletionCost) == []  # no restoring while in play


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("landed on demand", "LandedOnDemand"),
        ("timeout", "SpotReplicaNotReady"),
        ("notice", "NoticeDuringReturn"),
    ],
)
def test_gives_up_cleanly(case: str, reason: str) -> None:
    cluster = nodes()
    workload = returning()
    new = pod("p2", "spot-1", ready=False)
    if case == "landed on demand":
        new = pod("p2", "od-0", ready=True)
    elif case == "timeout":
        workload = returning(started_at="2026-11-29T11:00:00Z")
    elif case == "notice":
        cluster = nodes(notice_seconds=30)
    first = plan(state([*AFTER_FAILOVER, new], workload, cluster=cluster), Settings())
    assert of_type(first.actions, SetDeletionCost) == [
        SetDeletionCost(("ml", "p2"), LOWEST_DELETION_COST, save_original="")
    ]
    lowered = {"controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST}
    marked = pod("p2", new.node_name, ready=new.ready, annotations=lowered)
    second = plan(state([*AFTER_FAILOVER, marked], workload, cluster=cluster), Settings())
    (finish,) = of_type(second.actions, FinishReturn)
    assert (finish.replicas, finish.reason) == (2, reason)
    assert finish.backoff_until == NOW + timedelta(seconds=600)


def test_replicas_changed_by_others_are_left_alone() -> None:
    workload = replace(returning(), replicas=5)
    result = plan(state([*AFTER_FAILOVER, pod("p2", "spot-1", ready=False)], workload), Settings())
    assert of_type(result.actions, FinishReturn) == [
        FinishReturn(KEY, None, "ReplicasChangedByOthers")
    ]


def test_a_finished_record_is_forgotten_once_the_retired_pod_is_gone() -> None:
    done = replace(deployment(2), annotations={RETURN_ANNOTATION: record(completed=True).to_json()})
    kept = plan(state([*AFTER_FAILOVER], done), Settings())
    assert of_type(kept.actions, ForgetReturn) == []
    gone = plan(state([pod("p0", "spot-0"), pod("p2", "spot-1")], done), Settings())
    assert of_type(gone.actions, ForgetReturn) == [ForgetReturn(KEY)]


def test_one_return_at_a_time_cluster_wide() -> None:
    other = replace(returning(), name="other")
    result = plan(
        snapshot(nodes(), AFTER_FAILOVER, [deployment(2), other], history=quiet_history(QUIET)),
        Settings(),
    )
    assert of_type(result.actions, StartReturn) == []


def test_the_retired_pod_keeps_its_low_cost_until_it_is_gone() -> None:
    lowered = {
        "controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST,
        "spot-rebalancer.io/original-deletion-cost": "",
    }
    done = replace(deployment(2), annotations={RETURN_ANNOTATION: record(completed=True).to_json()})
    pods = [pod("p0", "spot-0"), pod("p1", "od-0", annotations=lowered), pod("p2", "spot-1")]
    assert of_type(plan(state(pods, done), Settings()).actions, SetDeletionCost) == []


def test_a_return_that_gave_up_is_forgotten_once_its_new_pod_is_gone() -> None:
    """The give-up's scale-back removes the new pod; the on-demand pod it meant to retire stays
    and serves. Waiting for that one to go (as a successful return does) would block every later
    return of the workload for as long as it lives (found by `rebalancer simulate`)."""
    gave_up = record(completed=True, gave_up=True)
    workload = replace(deployment(2), annotations={RETURN_ANNOTATION: gave_up.to_json()})
    leaving = [*AFTER_FAILOVER, pod("p2", "spot-1", ready=False)]
    assert of_type(plan(state(leaving, workload), Settings()).actions, ForgetReturn) == []
    gone = plan(state(AFTER_FAILOVER, workload), Settings())
    assert of_type(gone.actions, ForgetReturn) == [ForgetReturn(KEY)]


def test_the_give_up_records_what_it_waits_for() -> None:
    lowered = {"controller.kubernetes.io/pod-deletion-cost": LOWEST_DELETION_COST}
    new = pod("p2", "od-0", ready=True, annotations=lowered)
    (finish,) = of_type(
        plan(state([*AFTER_FAILOVER, new], returning()), Settings()).actions, FinishReturn
    )
    assert finish.record is not None and finish.record.completed and finish.record.gave_up
    assert finish.record.waits_for == ("p2",)


def test_a_give_up_waits_for_its_own_new_pod_not_for_a_later_replacement() -> None:
    """A notice on a node of the workload gives a return up, and the surge that follows creates
    a replacement the return never knew either. Waiting for every pod it did not know kept the
    record, and so every later return of the workload, for as long as that replacement lived
    (found by `rebalancer simulate`: replicas stayed on demand for days)."""
    gave_up = record(completed=True, gave_up=True, waits_for=("p2",))
    workload = replace(deployment(2), annotations={RETURN_ANNOTATION: gave_up.to_json()})
    own = plan(state([*AFTER_FAILOVER, pod("p2", "spot-1", ready=False)], workload), Settings())
    assert of_type(own.actions, ForgetReturn) == []
    replacement = pod("p3", "spot-1")
    later = plan(state([*AFTER_FAILOVER, replacement], workload), Settings())
    assert of_type(later.actions, ForgetReturn) == [ForgetReturn(KEY)]


def test_a_give_up_record_written_before_keeps_its_meaning() -> None:
    gave_up = record(completed=True, gave_up=True, waits_for=("p2",))
    assert ReturnRecord.from_json(gave_up.to_json()) == gave_up
    older = json.loads(record(completed=True, gave_up=True).to_json())
    assert "waitsFor" not in older
    parsed = ReturnRecord.from_json(json.dumps(older))
    assert parsed.waits_for is None
    # Without the names it waits, as it did, for every pod it did not know.
    assert [p.name for p in parsed.leaving([*AFTER_FAILOVER, pod("p3", "spot-1")])] == ["p3"]


def test_no_return_starts_in_the_pass_that_surges_the_workload() -> None:
    """A notice dooms one replica while another runs on demand with spot room elsewhere: the
    surge and a return would both be planned from the same replica count (found by `rebalancer
    simulate`, whose world applied both); the surge goes first, the return waits."""
    cluster = [
        node_json("spot-0", pool="otherspot", notice_seconds=30),  # another spot pool is evicted
        node_json("spot-1"),  # the quiet spot pool has room
        node_json("od-0", pool="odgpu", spot=False),
    ]
    pods = [pod("p0", "spot-0"), pod("p1", "od-0")]
    result = plan(state(pods, deployment(2), cluster=cluster), Settings())
    assert of_type(result.actions, ScaleUp) and of_type(result.actions, StartReturn) == []
