"""Pod deletion costs we lowered, given back when the pod is no longer doomed."""

from __future__ import annotations

from collections.abc import Mapping

from rebalancer.controller.actions import Action, SetDeletionCost
from rebalancer.controller.contain import Containment, about
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.selection import targeted
from rebalancer.controller.returns import pods_in_play
from rebalancer.controller.snapshot import Snapshot
from rebalancer.notices import Notice
from rebalancer.vocabulary import Reason


def restore_deletion_costs(
    snapshot: Snapshot, active: Mapping[str, Notice], contain: Containment
) -> Proposal:
    return Proposal.of(
        contain.run("deletion-cost", about("pod deletion costs"), [], _restore, snapshot, active)
    )


def _restore(snapshot: Snapshot, active: Mapping[str, Notice]) -> list[Action]:
    """Pods we lowered that are no longer doomed (the notice was cancelled) get their cost back."""
    in_play = {
        key
        for workload in snapshot.workloads.values()
        for key in pods_in_play(workload, snapshot.pods_by_workload.get(workload.key, []))
    }
    in_surge = {
        pod
        for workload in snapshot.workloads.values()
        if workload.surge
        for pod in workload.surge.doomed_pods
    }
    actions: list[Action] = []
    for pod in snapshot.pods.values():
        if pod.original_deletion_cost is None or pod.deleting:
            continue
        if targeted(snapshot.workload_of(pod)):
            continue  # its own planner gives costs back (target_plan.py)
        if pod.node_name in active or f"{pod.namespace}/{pod.name}" in in_surge:
            continue
        if pod.key in in_play:
            continue
        original = pod.original_deletion_cost or None
        actions.append(
            SetDeletionCost(pod.key, original, restore=True, reason=Reason.COST_RESTORED)
        )
    return actions
