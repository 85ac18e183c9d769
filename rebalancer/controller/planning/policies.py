"""Each workload's valid placement policy recorded on it, so a later invalid edit leaves it
in force (policy.py)."""

from __future__ import annotations

from rebalancer import names
from rebalancer.controller.actions import Action, RecordPolicy, WorkloadBasis
from rebalancer.controller.contain import Containment, on_workload
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.policy import Policy as PlacementPolicy
from rebalancer.controller.policy import declared, in_force
from rebalancer.controller.snapshot import Snapshot


def record_policies(snapshot: Snapshot, contain: Containment) -> Proposal:
    """Keep each workload's valid placement policy recorded on it, so a later invalid edit
    leaves it in force (policy.py); an invalid one is reported by the recorder, not written."""
    actions: list[Action] = []
    for key, workload in sorted(snapshot.workloads.items()):
        actions += contain.run("policy", on_workload(key), [], _policy_one, workload)
    return Proposal.of(actions)


def _policy_one(workload: WorkloadInfo) -> list[Action]:
    recorded = workload.annotations.get(names.POLICY_IN_FORCE)
    basis = WorkloadBasis.of(workload)
    if not declared(workload.annotations):
        return [RecordPolicy(workload.key, basis=basis)] if recorded is not None else []
    result = in_force(workload.annotations)
    if result.policy is not None and not result.refused:
        # The record as the executor wrote it carries a seal (seal.py): compared as a policy,
        # or every pass would write it again, and each write wake the next pass.
        try:
            kept = PlacementPolicy.from_json(recorded) if recorded is not None else None
        except ValueError:
            kept = None
        if kept != result.policy:
            return [RecordPolicy(workload.key, result.policy.to_json(), basis=basis)]
    return []
