"""Four ways the simulator's own version of the actions once differed from what the executor
writes (issue 22): each action here does in the virtual cluster what its write does to a Node or
a pod (`rebalancer/controller/node_patches.py`, `Evict.body()`)."""

from __future__ import annotations

import pytest

from rebalancer import names
from rebalancer.controller.actions import Cordon, Evict, MarkDrained, Restore
from rebalancer.simulate.adapter import apply
from rebalancer.simulate.world import Pod
from tests.simulate.world_kit import GRACE, small_world, spot_node, spot_pod


def test_marking_a_node_drained_for_a_second_event_keeps_the_first() -> None:
    # The agent acknowledges every event id listed there: overwriting the first id would leave
    # its event unacknowledged to Azure.
    world = small_world()
    node = spot_node(world)
    node.annotations[names.DRAINED_FOR_ANNOTATION] = "EVENT-1"
    assert apply(world, MarkDrained(node.name, event_id="EVENT-2"))
    assert node.annotations[names.DRAINED_FOR_ANNOTATION] == "EVENT-1,EVENT-2"


def test_restore_leaves_a_node_that_was_cordoned_before_us_cordoned() -> None:
    world = small_world()
    node = spot_node(world)
    node.unschedulable = True  # an operator's kubectl cordon, before the notice
    apply(world, Cordon(node.name, event_id="EVENT-1", event_type="Preempt"))
    assert apply(world, Restore(node.name, event_id="EVENT-1"))
    assert node.unschedulable is True
    assert names.CORDONED_FOR not in node.annotations


def test_cordon_excludes_the_node_from_load_balancers_and_restore_undoes_it() -> None:
    world = small_world()
    node = spot_node(world)
    assert apply(world, Cordon(node.name, event_id="EVENT-1", event_type="Preempt"))
    assert node.labels[names.LB_EXCLUSION_LABEL] == "true"
    assert node.unschedulable is True
    assert apply(world, Restore(node.name, event_id="EVENT-1"))
    assert names.LB_EXCLUSION_LABEL not in node.labels
    assert node.unschedulable is False


def test_an_eviction_ends_the_pod_within_the_grace_the_plan_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = small_world()
    pod = spot_pod(world)
    graces: list[float] = []
    delete = world.delete_pod

    def spy(target: Pod, grace_seconds: float) -> bool:
        graces.append(grace_seconds)
        return delete(target, grace_seconds) is not False

    monkeypatch.setattr(world, "delete_pod", spy)
    cut = 7  # the deadline is nearer than the pod's own 30 s
    evict = Evict(("inference", pod.name), pod.uid, pod.node or "", "EVENT-1", grace_seconds=cut)
    assert apply(world, evict)
    assert graces == [cut]
    assert cut < GRACE
    # Without a cut, the pod's own grace.
    other = next(p for p in world.pods.values() if p is not pod)
    assert apply(world, Evict(("inference", other.name), other.uid, other.node or "", "EVENT-1"))
    assert graces == [cut, GRACE]
