"""What one sub-planner proposes for a pass."""

from __future__ import annotations

from dataclasses import dataclass

from rebalancer.controller.actions import Action, PodKey, WorkloadKey


@dataclass(frozen=True)
class Proposal:
    """A sub-planner's actions, and the objects it claims for this pass: the sub-planners after
    it leave those alone. A surge claims the doomed pods it replaces make-before-break (the
    drain does not evict them: its scale-back removes them) and the workloads it scales; spares
    and availability targets claim the workloads whose count they keep (a return does not move
    their replicas)."""

    actions: tuple[Action, ...] = ()
    pods: frozenset[PodKey] = frozenset()
    workloads: frozenset[WorkloadKey] = frozenset()

    @staticmethod
    def of(actions: list[Action]) -> Proposal:
        return Proposal(tuple(actions))
