"""The surge: a Deployment with replicas on a doomed node is scaled up by their number, so
that their replacements load while they serve (make-before-break), then scaled back.

A new surge (or a wave added to one) is recorded on the Deployment (`Surge`, model.py) with the
ScaleUp that starts it; from then on `stage_of` reads where it stands from that record and the
cluster, and `_scale_back_one` does what the stage calls for. The scale-back comes once the
replacements are Ready (first giving the doomed pods the lowest deletion cost, so the ReplicaSet
removes them and not the replacements), or the doomed pods are gone, or the deadline minus the
margin has come (then the doomed pods are deleted first, because a ReplicaSet scaling down
removes not-ready pods before ready ones whatever their cost), or the notice is cancelled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from enum import Enum

from rebalancer.controller.actions import (
    Action,
    Delete,
    ForgetSurge,
    ReportBlocked,
    ScaleBack,
    ScaleUp,
    SetDeletionCost,
    WorkloadBasis,
)
from rebalancer.controller.contain import Containment, on_node, on_workload
from rebalancer.controller.model import PodInfo, WorkloadInfo
from rebalancer.controller.planning.notices import (
    deadline_key,
    deadline_near,
    grace_for,
    min_deadline,
)
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.selection import doomed, managed
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.planning.spares import spares_absorb
from rebalancer.controller.pools import Pool, on_demand_fallback, pools_of, with_declared
from rebalancer.controller.records import Surge
from rebalancer.controller.returns import LOWEST, active_record, lower_cost
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.notices import Notice
from rebalancer.timefmt import iso
from rebalancer.vocabulary import NoticePolicy, Reason, Source


def surges(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], contain: Containment
) -> Proposal:
    """Surge Deployments with doomed replicas (a new surge, or a wave added to one). Claims the
    doomed pods replaced make-before-break and the workloads surged (or blocked)."""
    doomed_by_workload: dict[WorkloadKey, list[tuple[PodInfo, Notice]]] = defaultdict(list)
    for node_name, notice in active.items():
        if settings.policy_for(notice.event_type) != NoticePolicy.FAILOVER:
            continue
        found = contain.run(
            "surge", on_node(node_name), [], _doomed_managed, snapshot, settings, node_name
        )
        for pod, workload in found:
            doomed_by_workload[workload.key].append((pod, notice))

    actions: list[Action] = []
    handled: set[tuple[str, str]] = set()
    pools = (
        with_declared(pools_of(snapshot.nodes.values()), settings.declared_pools)
        if doomed_by_workload
        else {}
    )
    for key, doomed_here in sorted(doomed_by_workload.items()):
        workload = snapshot.workloads[key]
        planned, replaced = contain.run(
            "surge",
            on_workload(key),
            ([], set()),
            _surge_one,
            snapshot,
            workload,
            doomed_here,
            pools,
        )
        actions += planned
        handled |= replaced
    claimed = frozenset(a.workload for a in actions if isinstance(a, ScaleUp | ReportBlocked))
    return Proposal(tuple(actions), frozenset(handled), claimed)


def _doomed_managed(
    snapshot: Snapshot, settings: Settings, node_name: str
) -> list[tuple[PodInfo, WorkloadInfo]]:
    """The doomed pods on a node that belong to a managed Deployment, with it."""
    found = []
    for pod in snapshot.pods_by_node.get(node_name, []):
        workload = snapshot.workload_of(pod)
        if (
            doomed(pod)
            and workload is not None
            and managed(workload, settings)
            and workload.kind == "Deployment"
        ):
            found.append((pod, workload))
    return found


def _surge_one(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    doomed: list[tuple[PodInfo, Notice]],
    pools: Mapping[str, Pool],
) -> tuple[list[Action], set[tuple[str, str]]]:
    """One Deployment's surge: its actions, and the doomed pods it replaces make-before-break
    (the drain leaves those to the scale-back)."""
    key = workload.key
    basis = WorkloadBasis.of(workload)
    doomed_keys = {pod.key for pod, _ in doomed}
    if active_record(workload) is not None:
        # A return in progress gives up this pass (a notice touches it); surge next pass,
        # from the replica count it leaves.
        return [], doomed_keys
    if workload.surge_unreadable:
        # Without the record we cannot scale back exactly: drain these pods plainly.
        reason = Reason.UNREADABLE_RECORD
        return [ReportBlocked(key, "surge record unreadable", reason, workload.uid)], set()
    names_now = tuple(sorted(f"{p.namespace}/{p.name}" for p, _ in doomed))
    earliest = min((n for _, n in doomed), key=deadline_key)
    deadline = None if earliest.act_now or earliest.deadline is None else iso(earliest.deadline)
    events = tuple(sorted({n.event_id for _, n in doomed}))
    old = workload.surge
    if old is None and spares_absorb(snapshot, workload, names_now):
        # Spare replicas carry the loss: no surge, the doomed pods are drained at once so
        # that the ReplicaSet's new ones (placed by the policy) start now.
        return [], set()
    if old is None:
        record = Surge(workload.replicas, len(names_now), events, names_now, deadline)
        actions: list[Action] = [_scale_up(workload, basis, record, len(names_now))]
        fallback = on_demand_fallback(workload.template_spec, pools, gpus=workload.gpus_per_replica)
        # Karpenter's disruption takes no capacity away: its replacements are placed as any
        # new replica (admission.py), so no on-demand pool is missing.
        in_place = all(n.source == Source.KARPENTER for _, n in doomed)
        if not fallback.pools and not in_place:
            reason = Reason.NO_ON_DEMAND_POOL
            actions.append(ReportBlocked(key, fallback.blocked_reason, reason, workload.uid))
        return actions, doomed_keys
    fresh = [name for name in names_now if name not in old.doomed_pods]
    if old.reverted:
        # Not held: never surged again (the owner would undo it again); drained plainly.
        return [], set()
    if not fresh:
        return [], doomed_keys
    if old.completed:
        # Pods of a finished surge are on their way out: keep naming them, so they are never
        # taken for new doomed pods, and surge for the new ones only, from today's count.
        record = Surge(
            workload.replicas,
            len(fresh),
            events,
            tuple(sorted({*old.doomed_pods, *fresh})),
            deadline,
        )
    else:  # a wave: more replicas of the same workload are now doomed
        record = Surge(
            old.base_replicas,
            old.added + len(fresh),
            tuple(sorted({*old.event_ids, *events})),
            tuple(sorted({*old.doomed_pods, *fresh})),
            min_deadline(old.deadline, deadline),
        )
    return [_scale_up(workload, basis, record, len(fresh))], doomed_keys


def _scale_up(workload: WorkloadInfo, basis: WorkloadBasis, record: Surge, added: int) -> ScaleUp:
    return ScaleUp(
        workload.key, replicas=workload.replicas + added, record=record, added=added, basis=basis
    )


class Stage(Enum):
    """Where a recorded surge stands, read from its record and the cluster every pass (nothing
    else is kept: a new leader reads the same stage). Each stage has one thing to do:

        LOADING ──► MARKING ──► READY ─────────┐
           │  └───► DEADLINE ──────────────────┤
           │  └───► DOOMED_GONE ───────────────┼──► FINISHING ──► DONE (record forgotten)
           │  └───► CANCELLING ──► CANCELLED   │    (scaled back, doomed pods on their way out)
           └──────► NOT_HELD ──────────────────┘
                               (CANCELLED drops the record: the old pods stay and serve)
    """

    LOADING = "loading"  # replacements loading, the doomed pods serve: nothing to do yet
    NOT_HELD = "not held"  # the owner set replicas back: let go, say so
    DOOMED_GONE = "doomed gone"  # nothing left to replace: scale back
    CANCELLING = "cancelling"  # the notice is gone: the doomed pods get their cost back first
    CANCELLED = "cancelled"  # ... then scale back; the replacements (newer) go
    MARKING = "marking"  # replacements Ready: the doomed pods get the lowest cost first
    READY = "ready"  # ... then scale back; the doomed pods go
    DEADLINE = "deadline"  # time is up: delete the doomed pods, then scale back
    FINISHING = "finishing"  # scaled back, the doomed pods not gone yet
    DONE = "done"  # they are gone: forget the record


# The scale-back's reason for each stage that scales back.
SCALE_BACK_REASON = {
    Stage.DOOMED_GONE: Reason.DOOMED_GONE,
    Stage.CANCELLED: Reason.CANCELLED,
    Stage.READY: Reason.REPLACEMENTS_READY,
    Stage.DEADLINE: Reason.DEADLINE,
}


def scale_backs(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], contain: Containment
) -> Proposal:
    """Move each recorded surge on from its stage."""
    actions: list[Action] = []
    for key, workload in sorted(snapshot.workloads.items()):
        if workload.surge is not None:
            actions += contain.run(
                "scale-back",
                on_workload(key),
                [],
                _scale_back_one,
                snapshot,
                settings,
                active,
                workload,
            )
    return Proposal.of(actions)


def _doomed_alive(snapshot: Snapshot, workload: WorkloadInfo, surge: Surge) -> list[PodInfo]:
    doomed_names = set(surge.doomed_pods)
    return [
        pod
        for pod in snapshot.pods_by_workload.get(workload.key, [])
        if f"{pod.namespace}/{pod.name}" in doomed_names and not pod.deleting
    ]


def stage_of(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], workload: WorkloadInfo
) -> Stage:
    """The stage of the workload's recorded surge (`workload.surge` is set)."""
    surge = workload.surge
    assert surge is not None
    pods = snapshot.pods_by_workload.get(workload.key, [])
    doomed_names = set(surge.doomed_pods)
    if surge.completed:
        if any(f"{pod.namespace}/{pod.name}" in doomed_names for pod in pods):
            return Stage.FINISHING
        return Stage.DONE
    if workload.replicas < surge.base_replicas + surge.added:
        return Stage.NOT_HELD
    alive = _doomed_alive(snapshot, workload, surge)
    if not alive:
        return Stage.DOOMED_GONE
    if not {notice.event_id for notice in active.values()}.intersection(surge.event_ids):
        lowered = any(pod.original_deletion_cost is not None for pod in alive)
        return Stage.CANCELLING if lowered else Stage.CANCELLED
    ready_elsewhere = sum(
        1
        for pod in pods
        if pod.ready
        and not pod.deleting
        and f"{pod.namespace}/{pod.name}" not in doomed_names
        and pod.node_name not in active
    )
    if ready_elsewhere >= surge.base_replicas:
        unmarked = any(pod.deletion_cost != LOWEST for pod in alive)
        return Stage.MARKING if unmarked else Stage.READY
    notices = [active[pod.node_name] for pod in alive if pod.node_name in active]
    if surge.deadline is None or any(deadline_near(n, snapshot.now, settings) for n in notices):
        return Stage.DEADLINE
    return Stage.LOADING


def _scale_back_one(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], workload: WorkloadInfo
) -> list[Action]:
    """What the surge's stage calls for."""
    surge = workload.surge
    if surge is None:
        return []
    key = workload.key
    basis = WorkloadBasis.of(workload)
    stage = stage_of(snapshot, settings, active, workload)
    if stage in (Stage.LOADING, Stage.FINISHING):
        return []
    if stage == Stage.DONE:
        return [ForgetSurge(key, basis=basis)]
    if stage == Stage.NOT_HELD:
        # An owner (an operator, an autoscaler) set replicas back while the replacements
        # load: fighting it would flap. Let go, say so, and drain the doomed pods now, so that
        # their replacements start at once instead of at the deadline.
        reverted = replace(surge, completed=True, reverted=True)
        return [ScaleBack(key, None, Reason.SURGE_NOT_HELD, reverted, basis=basis)]
    alive = _doomed_alive(snapshot, workload, surge)
    if stage == Stage.CANCELLING:
        # Cancelled: give the old pods their cost back first, so that scaling back
        # removes the replacements (the newer pods) and keeps the old ones.
        return [
            SetDeletionCost(
                pod.key, pod.original_deletion_cost or None, restore=True, reason=Reason.CANCELLED
            )
            for pod in alive
            if pod.original_deletion_cost is not None
        ]
    if stage == Stage.MARKING:
        # Lowered only now, off the notice's critical path: the cost matters only to the
        # ReplicaSet's choice when we scale back, which waits for it.
        return [
            lower_cost(pod, Reason.REPLACEMENTS_READY)
            for pod in alive
            if pod.deletion_cost != LOWEST
        ]
    actions: list[Action] = []
    if stage == Stage.DEADLINE:
        # Delete the doomed pods first: scaling down alone would remove the replacements that
        # are still loading, since not-ready pods go first.
        for pod in alive:
            notice = active.get(pod.node_name)
            if notice is not None:
                grace = grace_for(pod, notice, snapshot.now, settings)
                actions.append(Delete(pod.key, pod.uid, pod.node_name, notice.event_id, grace))
    reason = SCALE_BACK_REASON[stage]
    # A completed record keeps its doomed pods out of later surges and drains until they are
    # gone, which after a scale-back they soon are. After a cancellation they stay, serving,
    # and nothing of the surge is doomed any more: drop the record, or those pods would be
    # neither surged for, nor evicted, nor deleted when a later notice dooms their node.
    record = None if stage == Stage.CANCELLED else replace(surge, completed=True)
    if workload.replicas != surge.base_replicas + surge.added:
        # An HPA or a person changed replicas since the surge: drop our record, do not fight.
        actions.append(ScaleBack(key, None, Reason.REPLICAS_CHANGED, record, basis=basis))
    else:
        actions.append(ScaleBack(key, surge.base_replicas, reason, record, basis=basis))
    return actions
