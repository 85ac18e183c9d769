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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from rebalancer import names
from rebalancer.controller.model import NodeInfo, PodInfo, Surge, WorkloadInfo
from rebalancer.controller.pools import Pool, on_demand_fallback, pools_of, with_declared
from rebalancer.controller.returns import (
    LOWEST,
    FinishReturn,
    ForgetReturn,
    LowerCost,
    ReturnSettings,
    StartReturn,
    active_record,
    plan_returns,
    pods_in_play,
)
from rebalancer.notices import Notice
from rebalancer.timefmt import iso, parse_iso

LOWEST_DELETION_COST = LOWEST

CORDONED_FOR = f"{names.PREFIX}/cordoned-for"
WAS_UNSCHEDULABLE = f"{names.PREFIX}/was-unschedulable"
ADDED_LB_EXCLUSION = f"{names.PREFIX}/added-lb-exclusion"
COOLDOWN_UNTIL = f"{names.PREFIX}/cooldown-until"
EVICTING_TAINT = f"{names.PREFIX}/evicting"
COOLDOWN_TAINT = f"{names.PREFIX}/cooldown"
LB_EXCLUSION_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


class Policy(StrEnum):
    FAILOVER = "failover"  # surge replacements, then drain
    DRAIN = "drain"  # cordon and drain only
    NONE = "none"


class Reason(StrEnum):
    NOTICE = "Notice"
    REPLACEMENTS_READY = "ReplacementsReady"
    DOOMED_GONE = "DoomedPodsGone"
    DEADLINE = "DeadlineNear"
    CANCELLED = "NoticeGone"
    REPLICAS_CHANGED = "ReplicasChangedByOthers"
    DRAINED = "Drained"
    COOLDOWN = "PoolBeingEvicted"
    COOLDOWN_OVER = "CooldownOver"
    NO_ON_DEMAND_POOL = "NoCompatibleOnDemandPool"
    UNREADABLE_RECORD = "UnreadableSurgeRecord"


@dataclass(frozen=True)
class Settings:
    event_policy: Mapping[str, Policy] = field(
        default_factory=lambda: {
            "Preempt": Policy.FAILOVER,
            "Terminate": Policy.FAILOVER,
            "Manual": Policy.FAILOVER,
            "Redeploy": Policy.DRAIN,
            "Reboot": Policy.DRAIN,
            "Freeze": Policy.NONE,
        }
    )
    unknown_event_policy: Policy = Policy.NONE
    deadline_margin_seconds: float = 5.0  # delete what remains this long before the deadline
    act_now_grace_seconds: int = 5  # grace of deletions when the deadline is unknown or past
    cooldown_seconds: float = 600.0
    gpu_workloads_only: bool = True
    # Only workloads whose labels match (key -> value, or key -> None: the key exists).
    workload_selector: Mapping[str, str | None] = field(default_factory=dict)
    returns: ReturnSettings = field(default_factory=ReturnSettings)
    # Pools that may have no Node (REBALANCER_POOLS), for the fail-over check.
    declared_pools: Mapping[str, Pool] = field(default_factory=dict)

    def policy_for(self, event_type: str) -> Policy:
        return self.event_policy.get(event_type, self.unknown_event_policy)


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    nodes: Mapping[str, NodeInfo]
    pods: Mapping[tuple[str, str], PodInfo]
    workloads: Mapping[tuple[str, str, str], WorkloadInfo]
    replicaset_owners: Mapping[tuple[str, str], str]  # (namespace, replicaset) -> deployment
    # Preempt notices per (pool, zone) in the last hour, this one included.
    recent_evictions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Seconds since each pool's last Preempt (at most since this process started watching).
    pool_quiet_seconds: Mapping[str, float] = field(default_factory=dict)


# ---- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cordon:
    node: str
    event_id: str
    event_type: str
    reason: Reason = Reason.NOTICE


@dataclass(frozen=True)
class Restore:
    """Undo our cordon, taint and label on a node whose notice is gone."""

    node: str
    event_id: str
    reason: Reason = Reason.CANCELLED


@dataclass(frozen=True)
class ScaleUp:
    workload: tuple[str, str, str]
    replicas: int
    record: Surge
    reason: Reason = Reason.NOTICE


@dataclass(frozen=True)
class ScaleBack:
    """Set replicas back (None: leave them, someone else changed them) and mark the record done."""

    workload: tuple[str, str, str]
    replicas: int | None
    reason: Reason


@dataclass(frozen=True)
class ForgetSurge:
    """Drop a completed surge record once none of its doomed pods exists any more."""

    workload: tuple[str, str, str]
    reason: Reason = Reason.DOOMED_GONE


@dataclass(frozen=True)
class SetDeletionCost:
    pod: tuple[str, str]
    cost: str | None  # None: remove the annotation
    save_original: str | None = None  # store this as the original before lowering
    restore: bool = False


@dataclass(frozen=True)
class Evict:
    pod: tuple[str, str]
    uid: str
    node: str
    event_id: str


@dataclass(frozen=True)
class Delete:
    pod: tuple[str, str]
    uid: str
    node: str
    event_id: str
    grace_seconds: int
    reason: Reason = Reason.DEADLINE


@dataclass(frozen=True)
class MarkDrained:
    node: str
    event_id: str
    reason: Reason = Reason.DRAINED


@dataclass(frozen=True)
class StartCooldown:
    node: str
    until: datetime
    reason: Reason = Reason.COOLDOWN


@dataclass(frozen=True)
class EndCooldown:
    node: str
    reason: Reason = Reason.COOLDOWN_OVER


@dataclass(frozen=True)
class ReportBlocked:
    workload: tuple[str, str, str]
    detail: str
    reason: Reason = Reason.NO_ON_DEMAND_POOL


Action = (
    Cordon
    | Restore
    | ScaleUp
    | ScaleBack
    | ForgetSurge
    | SetDeletionCost
    | Evict
    | Delete
    | MarkDrained
    | StartCooldown
    | EndCooldown
    | ReportBlocked
    | StartReturn
    | FinishReturn
    | ForgetReturn
)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    active: Mapping[str, Notice]  # node -> the notice acted on


# ---- planning --------------------------------------------------------------------------------


def plan(snapshot: Snapshot, settings: Settings) -> Plan:
    active = active_notices(snapshot, settings)
    pods_by_node: dict[str, list[PodInfo]] = defaultdict(list)
    pods_by_workload: dict[tuple[str, str, str], list[PodInfo]] = defaultdict(list)
    for pod in snapshot.pods.values():
        if pod.node_name:
            pods_by_node[pod.node_name].append(pod)
        workload = workload_of(snapshot, pod)
        if workload is not None:
            pods_by_workload[workload.key].append(pod)
    actions: list[Action] = []
    actions += _cordon_and_restore(snapshot, active)
    surge_actions, surged_pods = _surges(snapshot, settings, active, pods_by_node)
    actions += surge_actions
    actions += _scale_backs(snapshot, settings, active, pods_by_workload)
    actions += _drain(snapshot, settings, active, pods_by_node, surged_pods)
    actions += _cooldowns(snapshot, settings, active)
    in_play = {
        key
        for workload in snapshot.workloads.values()
        for key in pods_in_play(workload, pods_by_workload.get(workload.key, []))
    }
    actions += _restore_deletion_costs(snapshot, active, in_play)
    actions += _returns(snapshot, settings, active, pods_by_node, pods_by_workload)
    return Plan(actions=tuple(actions), active=active)


def _returns(
    snapshot: Snapshot,
    settings: Settings,
    active: Mapping[str, Notice],
    pods_by_node: Mapping[str, list[PodInfo]],
    pods_by_workload: Mapping[tuple[str, str, str], list[PodInfo]],
) -> list[Action]:
    planned = plan_returns(
        now=snapshot.now,
        nodes=snapshot.nodes,
        pods_by_node=pods_by_node,
        pods_by_workload=pods_by_workload,
        workloads=snapshot.workloads,
        managed={w.key for w in snapshot.workloads.values() if managed(w, settings)},
        active_nodes=set(active),
        quiet=snapshot.pool_quiet_seconds,
        settings=settings.returns,
    )
    return [
        SetDeletionCost(a.pod, LOWEST, save_original=a.original) if isinstance(a, LowerCost) else a
        for a in planned
    ]


def active_notices(snapshot: Snapshot, settings: Settings) -> dict[str, Notice]:
    """The most urgent notice that calls for action on each node."""
    active = {}
    for node in snapshot.nodes.values():
        acting = [n for n in node.notices if settings.policy_for(n.event_type) != Policy.NONE]
        if acting:
            active[node.name] = acting[0]  # notices come sorted most urgent first
    return active


def deadline_near(notice: Notice, now: datetime, settings: Settings) -> bool:
    return notice.act_now or notice.seconds_left(now) <= settings.deadline_margin_seconds


def grace_for(pod: PodInfo, notice: Notice, now: datetime, settings: Settings) -> int:
    """The grace period that still fits before the deadline (never more than the pod's own)."""
    if notice.act_now or notice.seconds_left(now) <= 0:
        return min(pod.grace_seconds, settings.act_now_grace_seconds)
    return max(0, min(pod.grace_seconds, int(notice.seconds_left(now)) - 1))


def _cordon_and_restore(snapshot: Snapshot, active: Mapping[str, Notice]) -> list[Action]:
    actions: list[Action] = []
    for name, node in snapshot.nodes.items():
        recorded = node.annotations.get(CORDONED_FOR)
        notice = active.get(name)
        if notice is not None and recorded is None:
            actions.append(
                Cordon(node=name, event_id=notice.event_id, event_type=notice.event_type)
            )
        elif notice is None and recorded is not None:
            actions.append(Restore(node=name, event_id=recorded))
    return actions


def workload_of(snapshot: Snapshot, pod: PodInfo) -> WorkloadInfo | None:
    if pod.owner is None:
        return None
    if pod.owner.kind == "ReplicaSet":
        deployment = snapshot.replicaset_owners.get((pod.namespace, pod.owner.name))
        if deployment is None:
            return None
        return snapshot.workloads.get(("Deployment", pod.namespace, deployment))
    if pod.owner.kind == "StatefulSet":
        return snapshot.workloads.get(("StatefulSet", pod.namespace, pod.owner.name))
    return None


def managed(workload: WorkloadInfo | None, settings: Settings) -> bool:
    """Failed over make-before-break (the rest of a doomed node is simply drained)."""
    if workload is None or workload.opted_out:
        return False
    for key, value in settings.workload_selector.items():
        if key not in workload.labels or (value is not None and workload.labels[key] != value):
            return False
    return workload.gpus_per_replica > 0 or not settings.gpu_workloads_only


def _doomed(pod: PodInfo) -> bool:
    return not (pod.daemonset or pod.mirror or pod.finished or pod.deleting)


def _surges(
    snapshot: Snapshot,
    settings: Settings,
    active: Mapping[str, Notice],
    pods_by_node: Mapping[str, list[PodInfo]],
) -> tuple[list[Action], set[tuple[str, str]]]:
    """Surge Deployments with doomed replicas; scale back the surges whose work is done."""
    doomed_by_workload: dict[tuple[str, str, str], list[tuple[PodInfo, Notice]]] = defaultdict(list)
    for node_name, notice in active.items():
        if settings.policy_for(notice.event_type) != Policy.FAILOVER:
            continue
        for pod in pods_by_node.get(node_name, []):
            workload = workload_of(snapshot, pod)
            if (
                _doomed(pod)
                and workload is not None
                and managed(workload, settings)
                and workload.kind == "Deployment"
            ):
                doomed_by_workload[workload.key].append((pod, notice))

    actions: list[Action] = []
    handled: set[tuple[str, str]] = set()
    pools = (
        with_declared(pools_of(snapshot.nodes.values()), settings.declared_pools)
        if doomed_by_workload
        else {}
    )
    for key, doomed in sorted(doomed_by_workload.items()):
        workload = snapshot.workloads[key]
        if active_record(workload) is not None:
            # A return in progress gives up this pass (a notice touches it); surge next pass,
            # from the replica count it leaves.
            handled.update(pod.key for pod, _ in doomed)
            continue
        if workload.surge_unreadable:
            # Without the record we cannot scale back exactly: drain these pods plainly.
            actions.append(ReportBlocked(key, "surge record unreadable", Reason.UNREADABLE_RECORD))
            continue
        handled.update(pod.key for pod, _ in doomed)
        names_now = tuple(sorted(f"{p.namespace}/{p.name}" for p, _ in doomed))
        earliest = min((n for _, n in doomed), key=_deadline_key)
        deadline = None if earliest.act_now or earliest.deadline is None else iso(earliest.deadline)
        events = tuple(sorted({n.event_id for _, n in doomed}))
        if workload.surge is not None and workload.surge.completed:
            # Pods of a finished surge are on their way out; only new doomed pods need a surge.
            old = workload.surge
            fresh = [name for name in names_now if name not in old.doomed_pods]
            if fresh:
                record = Surge(
                    workload.replicas,
                    len(fresh),
                    events,
                    tuple(sorted(set(old.doomed_pods) | set(fresh))),
                    deadline,
                )
                actions.append(ScaleUp(key, workload.replicas + len(fresh), record))
        elif workload.surge is None:
            record = Surge(workload.replicas, len(names_now), events, names_now, deadline)
            actions.append(ScaleUp(key, workload.replicas + len(names_now), record))
            fallback = on_demand_fallback(
                workload.template_spec, pools, gpus=workload.gpus_per_replica
            )
            if not fallback.pools:
                actions.append(ReportBlocked(key, fallback.blocked_reason))
        else:
            new = [name for name in names_now if name not in workload.surge.doomed_pods]
            if new:  # a wave: more replicas of the same workload are now doomed
                old = workload.surge
                record = Surge(
                    old.base_replicas,
                    old.added + len(new),
                    tuple(sorted(set(old.event_ids) | set(events))),
                    tuple(sorted(set(old.doomed_pods) | set(new))),
                    min_deadline(old.deadline, deadline),
                )
                actions.append(ScaleUp(key, workload.replicas + len(new), record))
    return actions, handled


def _scale_backs(
    snapshot: Snapshot,
    settings: Settings,
    active: Mapping[str, Notice],
    pods_by_workload: Mapping[tuple[str, str, str], list[PodInfo]],
) -> list[Action]:
    """Finish each recorded surge whose replacements are Ready, or whose time is up."""
    actions: list[Action] = []
    active_events = {notice.event_id for notice in active.values()}
    for key, workload in sorted(snapshot.workloads.items()):
        surge = workload.surge
        if surge is None:
            continue
        doomed_names = set(surge.doomed_pods)
        pods = pods_by_workload.get(key, [])
        if surge.completed:
            if not any(f"{pod.namespace}/{pod.name}" in doomed_names for pod in pods):
                actions.append(ForgetSurge(key))
            continue
        alive = [
            pod
            for pod in pods
            if f"{pod.namespace}/{pod.name}" in doomed_names and not pod.deleting
        ]
        ready_elsewhere = sum(
            1
            for pod in pods
            if pod.ready
            and not pod.deleting
            and f"{pod.namespace}/{pod.name}" not in doomed_names
            and pod.node_name not in active
        )
        reason: Reason | None = None
        if not alive:
            reason = Reason.DOOMED_GONE
        elif not active_events.intersection(surge.event_ids):
            # Cancelled: give the old pods their cost back first, so that scaling back
            # removes the replacements (the newer pods) and keeps the old ones.
            lowered = [pod for pod in alive if pod.original_deletion_cost is not None]
            for pod in lowered:
                original = pod.original_deletion_cost or None
                actions.append(SetDeletionCost(pod.key, original, restore=True))
            if lowered:
                continue
            reason = Reason.CANCELLED
        elif ready_elsewhere >= surge.base_replicas:
            # Lowered only now, off the notice's critical path: the cost matters only to the
            # ReplicaSet's choice when we scale back, which waits for it.
            unmarked = [pod for pod in alive if pod.deletion_cost != LOWEST_DELETION_COST]
            for pod in unmarked:
                actions.append(
                    SetDeletionCost(
                        pod.key, LOWEST_DELETION_COST, save_original=pod.deletion_cost or ""
                    )
                )
            if unmarked:
                continue
            reason = Reason.REPLACEMENTS_READY
        else:
            notices = [active[pod.node_name] for pod in alive if pod.node_name in active]
            if surge.deadline is None or any(
                deadline_near(n, snapshot.now, settings) for n in notices
            ):
                reason = Reason.DEADLINE
                # Delete the doomed pods first: scaling down alone would remove the
                # replacements that are still loading, since not-ready pods go first.
                for pod in alive:
                    notice = active.get(pod.node_name)
                    if notice is not None:
                        grace = grace_for(pod, notice, snapshot.now, settings)
                        actions.append(
                            Delete(pod.key, pod.uid, pod.node_name, notice.event_id, grace)
                        )
        if reason is None:
            continue
        if workload.replicas != surge.base_replicas + surge.added:
            # An HPA or a person changed replicas since the surge: drop our record, do not fight.
            actions.append(ScaleBack(key, None, Reason.REPLICAS_CHANGED))
        else:
            actions.append(ScaleBack(key, surge.base_replicas, reason))
    return actions


def _drain(
    snapshot: Snapshot,
    settings: Settings,
    active: Mapping[str, Notice],
    pods_by_node: Mapping[str, list[PodInfo]],
    surged: set[tuple[str, str]],
) -> list[Action]:
    actions: list[Action] = []
    for node_name, notice in sorted(active.items()):
        node = snapshot.nodes[node_name]
        on_node = pods_by_node.get(node_name, [])
        remaining = [pod for pod in on_node if _doomed(pod)]
        near = deadline_near(notice, snapshot.now, settings)
        for pod in remaining:
            if pod.key in surged:
                continue  # replaced make-before-break; removed by the scale-back
            if near:
                grace = grace_for(pod, notice, snapshot.now, settings)
                actions.append(Delete(pod.key, pod.uid, node_name, notice.event_id, grace))
            else:
                actions.append(Evict(pod.key, pod.uid, node_name, notice.event_id))
        drained_for = node.annotations.get(names.DRAINED_FOR_ANNOTATION, "")
        marked = {part.strip().upper() for part in drained_for.split(",") if part.strip()}
        # Drained means gone, not merely terminating: Azure may take the VM once we say so.
        terminating = any(pod.deleting and not pod.daemonset for pod in on_node)
        if not remaining and not terminating and notice.event_id.upper() not in marked:
            actions.append(MarkDrained(node_name, notice.event_id))
    return actions


MAX_COOLDOWN_FACTOR = 4


def cooldown_for(snapshot: Snapshot, settings: Settings, node: NodeInfo) -> float:
    """The base cool-down, times the pool's Preempt notices in the last hour (at most 4x): a pool
    that keeps being evicted is avoided for longer."""
    count = snapshot.recent_evictions.get((node.pool, node.zone), 1)
    return settings.cooldown_seconds * min(MAX_COOLDOWN_FACTOR, max(1, count))


def _cooldowns(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice]
) -> list[Action]:
    """PreferNoSchedule on the rest of a spot pool (same pool and zone) that is being evicted."""
    evicted_groups: dict[tuple[str, str], datetime] = {}
    for node_name, notice in active.items():
        node = snapshot.nodes[node_name]
        if node.spot and notice.event_type in ("Preempt", "Manual"):
            started = notice.seen_at or snapshot.now
            until = started + timedelta(seconds=cooldown_for(snapshot, settings, node))
            group = (node.pool, node.zone)
            evicted_groups[group] = max(until, evicted_groups.get(group, until))
    actions: list[Action] = []
    for name, node in sorted(snapshot.nodes.items()):
        if name in active or not node.spot:
            continue
        current = parse_iso(node.annotations.get(COOLDOWN_UNTIL))
        wanted = evicted_groups.get((node.pool, node.zone))
        if wanted is not None and (current is None or current < wanted):
            actions.append(StartCooldown(name, wanted))
        elif wanted is None and current is not None and current <= snapshot.now:
            actions.append(EndCooldown(name))
    return actions


def _restore_deletion_costs(
    snapshot: Snapshot, active: Mapping[str, Notice], in_play: set[tuple[str, str]]
) -> list[Action]:
    """Pods we lowered that are no longer doomed (the notice was cancelled) get their cost back."""
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
        if pod.node_name in active or f"{pod.namespace}/{pod.name}" in in_surge:
            continue
        if pod.key in in_play:
            continue
        original = pod.original_deletion_cost or None
        actions.append(SetDeletionCost(pod.key, original, restore=True))
    return actions


def _deadline_key(notice: Notice) -> datetime:
    if notice.act_now or notice.deadline is None:
        return datetime.min.replace(tzinfo=UTC)
    return notice.deadline


def min_deadline(first: str | None, second: str | None) -> str | None:
    """The earlier of two recorded deadlines; None (act now) is the earliest of all."""
    if first is None or second is None:
        return None
    return min(first, second, key=lambda text: parse_iso(text) or datetime.min.replace(tzinfo=UTC))
