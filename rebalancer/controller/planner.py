"""The planner: a snapshot of the cluster and `now` in, the actions to take out. Pure.

No clock, no I/O: the same code runs in the controller, in unit tests and in simulations.
Everything it needs to resume is read back from the cluster objects (our annotations), so a new
leader, a restart or a dry run plans the same next step. Each action carries a reason.

On a notice for a node (policy "failover"):
1. cordon it, taint it, exclude it from external load balancers (recording the node's state
   before, so a cancellation restores it exactly);
2. surge each Deployment with GPU replicas there by the number of doomed replicas: replacements
   start loading while the old ones serve;
3. scale back once the replacements are Ready (first giving the doomed pods the lowest deletion
   cost, so the ReplicaSet removes them and not the replacements), or the doomed pods are gone,
   or the deadline minus the margin has come (then the doomed pods are deleted first, because a
   ReplicaSet scaling down removes not-ready pods before ready ones whatever their cost);
4. evict everything else there (StatefulSet replicas at once: a replacement with the same name
   can only start once the old pod is gone), delete what remains at the deadline minus the
   margin with a grace period that fits the time left;
5. mark the node drained for the event (the agent then acknowledges it to Azure);
6. taint the other spot nodes of the same pool and zone PreferNoSchedule for a cool-down, so
   replacements prefer capacity that is not being evicted.
Policy "drain" does 1, 4 and 5 only. When the notice disappears, everything is undone.
Every notice not yet in the eviction history is written into it (`RecordHistory`); the cool-down
and the return to spot's quiet time are read from that history, so they survive a new leader.

`plan` is called once per pass and returns the actions in steps (`actions.Step`: each action
carries its own): the actions of one step are independent and may run at once; a step starts
when the one before it has finished. Each part of the plan is a sub-planner of its own module
(`planning/`), which returns a `Proposal`: its actions, and the objects it claims, which the
ones after it leave alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rebalancer.controller.actions import Action, Step
from rebalancer.controller.contain import Containment, Failure
from rebalancer.controller.planning.bounds import bounds
from rebalancer.controller.planning.cooldowns import cooldowns
from rebalancer.controller.planning.cordons import cordons
from rebalancer.controller.planning.deletion_costs import restore_deletion_costs
from rebalancer.controller.planning.drain import drain
from rebalancer.controller.planning.eviction_history import preempts_last_hour, record_history
from rebalancer.controller.planning.holds import holds
from rebalancer.controller.planning.load_holds import end_load_holds
from rebalancer.controller.planning.notices import active_notices, ignored_notices
from rebalancer.controller.planning.policies import record_policies
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.selection import managed
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.planning.spares import spares
from rebalancer.controller.planning.surge import scale_backs, surges
from rebalancer.controller.returns import plan_returns
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.notices import Notice

__all__ = ["Plan", "Settings", "managed", "plan", "preempts_last_hour"]


@dataclass(frozen=True)
class Plan:
    steps: tuple[tuple[Action, ...], ...]
    active: Mapping[str, Notice]  # node -> the notice acted on
    managed: frozenset[WorkloadKey] = frozenset()  # failed over make-before-break
    ignored: tuple[tuple[str, str], ...] = ()  # (node, why) of notices not acted on
    # Workloads left alone because records on them are unreadable: (key, uid, problems).
    refused: tuple[tuple[WorkloadKey, str, tuple[str, ...]], ...] = ()
    failures: tuple[Failure, ...] = ()  # objects a sub-planner failed on, left alone this pass

    @property
    def actions(self) -> tuple[Action, ...]:
        return tuple(action for step in self.steps for action in step)


def plan(snapshot: Snapshot, settings: Settings) -> Plan:
    """Every sub-planner in turn, each object through `Containment`: a failure planning one
    object leaves it alone this pass and is reported (`Plan.failures`), never stops the rest."""
    contain = Containment()
    active = active_notices(snapshot, settings, contain)
    chosen = frozenset(w.key for w in snapshot.workloads.values() if managed(w, settings))
    history = record_history(snapshot, settings, contain)
    cordoned = cordons(snapshot, active, contain)
    surge = surges(snapshot, settings, active, contain)
    spare = spares(snapshot, settings, surge.workloads, contain)
    proposals = [
        history,
        cordoned,
        surge,
        scale_backs(snapshot, settings, active, contain),
        holds(snapshot, settings, surge, contain),
        bounds(snapshot, surge, spare, contain),
        drain(snapshot, settings, active, surge.pods, contain),
        cooldowns(snapshot, settings, active, contain),
        restore_deletion_costs(snapshot, active, contain),
        end_load_holds(snapshot, contain),
        record_policies(snapshot, contain),
    ]
    returns = plan_returns(
        snapshot,
        managed=set(chosen),
        active_nodes=set(active),
        settings=settings.returns,
        busy=surge.workloads | spare.workloads,
        contain=contain,
    )
    proposals += [spare, Proposal.of(returns)]
    return Plan(
        steps=_in_steps([action for p in proposals for action in p.actions]),
        active=active,
        managed=chosen,
        ignored=ignored_notices(snapshot, settings),
        refused=tuple((w.key, w.uid, w.refused) for w in snapshot.workloads.values() if w.refused),
        failures=tuple(contain.failures),
    )


def _in_steps(actions: list[Action]) -> tuple[tuple[Action, ...], ...]:
    steps: list[list[Action]] = [[] for _ in range(Step.COUNT)]
    for action in actions:
        steps[action.step].append(action)
    return tuple(tuple(step) for step in steps if step)
