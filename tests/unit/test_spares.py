"""Spare replicas (a placement policy's `spare-replicas`): kept on top of the owner's count, a new
count from the owner is the new base, an owner that keeps setting the count back is not fought."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rebalancer import names
from rebalancer.controller.actions import Bound, Evict, Outcome, ScaleUp, SetSpare, StartReturn
from rebalancer.controller.catalogue import event_for
from rebalancer.controller.keda import held_through
from rebalancer.controller.model import ScaledObjectInfo, ScalerInfo, ScalerMetric
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.records import Spare
from rebalancer.vocabulary import ActionResult, EventReason, Reason
from tests.unit.test_planner import deployment, node_json, of_type, pod, snapshot
from tests.unit.test_returns import quiet_history

KEY = ("Deployment", "ml", "infer")
PODS = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "od-0")]


def nodes() -> list[dict[str, Any]]:
    return [
        node_json("spot-0"),
        node_json("spot-1", zone="eastus-2"),
        node_json("od-0", pool="odgpu", spot=False),
    ]


def spares(
    replicas: int, policy: dict[str, str] | None, record: Spare | None = None, **kw: Any
) -> list[SetSpare]:
    notes = dict(policy or {})
    if record is not None:
        notes[names.SPARE_RECORD] = record.to_json()
    workload = deployment(replicas, annotations=notes)
    state = snapshot(nodes(), PODS, [workload])
    if "scalers" in kw:
        state = replace(state, scalers=kw["scalers"])
    return of_type(plan(state, Settings()).actions, SetSpare)


ONE = {names.SPARE_REPLICAS: "1"}


def test_spares_are_added_on_top_of_the_owners_count_and_recorded() -> None:
    (added,) = spares(3, ONE)
    assert (added.replicas, added.record) == (4, Spare(base=3, added=1))
    assert added.patch() == {
        "metadata": {"annotations": {names.SPARE_RECORD: Spare(3, 1).to_json()}},
        "spec": {"replicas": 4},
    }
    event = event_for(added, Outcome(ActionResult.APPLIED))
    assert event is not None and event.reason is EventReason.SPARES
    assert "1 spare replicas on top of the owner's 3" in event.message


def test_nothing_to_do_once_kept_and_a_changed_policy_changes_them() -> None:
    assert spares(4, ONE, Spare(3, 1)) == []
    (more,) = spares(4, {names.SPARE_REPLICAS: "2"}, Spare(3, 1))
    assert (more.replicas, more.record) == (5, Spare(3, 2))
    (gone,) = spares(4, None, Spare(3, 1))  # the policy no longer asks for any
    assert (gone.replicas, gone.record) == (3, None)


def test_a_new_count_from_the_owner_is_the_new_base() -> None:
    (rebased,) = spares(6, ONE, Spare(3, 1))  # the owner scaled to 6
    assert (rebased.replicas, rebased.record) == (7, Spare(6, 1))


def test_an_owner_that_sets_the_count_back_twice_is_not_fought() -> None:
    (again,) = spares(3, ONE, Spare(3, 1))  # set back to the owner's count, once
    assert (again.replicas, again.record) == (4, Spare(3, 1, reverted=1))
    (given_up,) = spares(3, ONE, Spare(3, 1, reverted=1))  # and again
    assert given_up.replicas is None
    assert given_up.record == Spare(3, 0, reverted=2, gave_up=True)
    assert given_up.reason is Reason.SPARE_NOT_HELD
    event = event_for(given_up, Outcome(ActionResult.APPLIED))
    assert event is not None and event.warning and event.reason is EventReason.SPARES_NOT_HELD
    assert spares(3, ONE, Spare(3, 0, 2, gave_up=True)) == []  # stays given up


def test_no_spares_while_a_return_owns_the_count() -> None:
    returning = {**ONE, names.RETURN_ANNOTATION: "{}"}
    assert spares(3, returning) == []


def test_with_an_hpa_the_spares_ride_on_the_count_it_wants_and_its_bounds_hold_them() -> None:
    # 80 % CPU over the 3 Ready at a target of 60 %: the HPA (3 to 6) wants ceil(4.0) = 4.
    cpu = ScalerMetric("cpu", 60.0, 80.0)
    hpa = ScalerInfo("ml", "infer", ("Deployment", "infer"), 3, 6, None, metrics=(cpu,))
    (added,) = spares(3, ONE, scalers={hpa.key: hpa})
    assert (added.replicas, added.record) == (5, Spare(base=4, added=1))
    workload = deployment(3, annotations=ONE)
    state = replace(snapshot(nodes(), PODS, [workload]), scalers={hpa.key: hpa})
    (bound,) = of_type(plan(state, Settings()).actions, Bound)
    assert (bound.min_replicas, bound.max_replicas, bound.original) == (5, 6, "3,6")
    # Kept: nothing to write while the HPA's status still says 4 pods' load, its own bounds
    # (3, 6) recorded under the 5 we hold.
    held = replace(hpa, min_replicas=5, saved="3,6")
    assert spares(5, ONE, Spare(4, 1), scalers={hpa.key: held}) == []
    # An HPA an operator owns (KEDA's) sets its bounds back: no spares, a record dropped.
    owned = replace(hpa, owner="ScaledObject infer")
    assert spares(3, ONE, scalers={hpa.key: owned}) == []
    (dropped,) = spares(5, ONE, Spare(4, 1), scalers={hpa.key: owned})
    assert (dropped.replicas, dropped.record) == (None, None)
    # Unless its ScaledObject holds them (keda.py): the same spares, its bounds raised instead.
    scaled = ScaledObjectInfo("ml", "infer", "so-uid", "1", 3, 6, None)
    scaled_key = (scaled.namespace, scaled.name)
    joined = held_through({hpa.key: replace(owned, owner_uid="so-uid")}, {scaled_key: scaled})
    (added,) = spares(3, ONE, scalers=joined)
    assert (added.replicas, added.record) == (5, Spare(base=4, added=1))
    state = replace(snapshot(nodes(), PODS, [workload]), scalers=joined)
    (bound,) = of_type(plan(state, Settings()).actions, Bound)
    assert (bound.through, bound.min_replicas, bound.max_replicas, bound.original) == (
        "infer",
        5,
        6,
        "3,6",
    )


def test_a_spare_and_a_return_are_not_started_in_the_same_pass() -> None:
    after_failover = [pod("p0", "spot-0"), pod("p1", "od-0")]  # spot-1 has room: a return
    quiet = quiet_history({"spotgpu": 3600.0, "odgpu": 3600.0})
    without = snapshot(nodes(), after_failover, [deployment(2)], history=quiet)
    assert of_type(plan(without, Settings()).actions, StartReturn)
    with_spare = snapshot(nodes(), after_failover, [deployment(2, annotations=ONE)], history=quiet)
    actions = plan(with_spare, Settings()).actions
    assert of_type(actions, SetSpare) and not of_type(actions, StartReturn)


def test_spares_absorb_a_notice_without_a_surge_and_the_doomed_pod_goes_at_once() -> None:
    """3 needed + 1 spare, one replica's node under notice: 3 others are Ready, so no surge; the
    doomed pod is evicted now so that its replacement (placed by the policy) starts now."""
    cluster = [
        node_json("spot-0", notice_seconds=30),
        node_json("spot-1"),
        node_json("spot-2", zone="eastus-2"),
        node_json("od-0", pool="odgpu", spot=False),
    ]
    pods = [pod("p0", "spot-0"), pod("p1", "spot-1"), pod("p2", "spot-2"), pod("p3", "od-0")]
    notes = {**ONE, names.SPARE_RECORD: Spare(3, 1).to_json()}
    actions = plan(snapshot(cluster, pods, [deployment(4, annotations=notes)]), Settings()).actions
    assert of_type(actions, ScaleUp) == []
    (evicted,) = of_type(actions, Evict)
    assert evicted.pod == ("ml", "p0")
    # One of the others not Ready: the spare cannot carry it, the surge happens as without one.
    short = [*pods[:2], pod("p2", "spot-2", ready=False), pods[3]]
    actions = plan(snapshot(cluster, short, [deployment(4, annotations=notes)]), Settings()).actions
    (surge,) = of_type(actions, ScaleUp)
    assert surge.replicas == 5
