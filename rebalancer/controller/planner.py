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

`plan` is called once per pass and returns the actions in steps: the actions of one step are
independent and may run at once; a step starts when the one before it has finished.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from rebalancer import names
from rebalancer.controller.actions import (
    Action,
    Bound,
    Cordon,
    Delete,
    EndCooldown,
    Evict,
    FinishReturn,
    ForgetSurge,
    Hold,
    MarkDrained,
    RecordHistory,
    RecordPolicy,
    Release,
    ReportBlocked,
    Restore,
    ScaleBack,
    ScaleUp,
    SetDeletionCost,
    SetSpare,
    StartCooldown,
    WorkloadBasis,
)
from rebalancer.controller.contain import Containment, Failure, about, on_node, on_workload
from rebalancer.controller.history import WINDOWS, Entry
from rebalancer.controller.model import (
    MAX_RECORD_REPLICAS,
    NodeInfo,
    PodInfo,
    ScalerInfo,
    Spare,
    Surge,
    WorkloadInfo,
)
from rebalancer.controller.policy import Policy as PlacementPolicy
from rebalancer.controller.policy import declared, in_force
from rebalancer.controller.pools import Pool, on_demand_fallback, pools_of, with_declared
from rebalancer.controller.returns import (
    LOWEST,
    ReturnSettings,
    active_record,
    lower_cost,
    plan_returns,
    pods_in_play,
)
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.controller.target import TargetSettings
from rebalancer.controller.target_plan import plan_target
from rebalancer.notices import Notice
from rebalancer.strict import whole_number
from rebalancer.timefmt import iso, parse_iso
from rebalancer.vocabulary import (
    DEFAULT_EVENT_POLICY,
    MANUAL,
    EventType,
    NoticePolicy,
    Reason,
    Source,
)

# Cool-down taints written per pass: a wave's cordons and surges (planned in the next pass) must
# never queue behind them for the request budget.
STEERING_PER_PASS = 10
MAX_COOLDOWN_FACTOR = 4


@dataclass(frozen=True)
class Settings:
    event_policy: Mapping[str, NoticePolicy] = field(
        default_factory=lambda: dict(DEFAULT_EVENT_POLICY)
    )
    unknown_event_policy: NoticePolicy = NoticePolicy.NONE
    deadline_margin_seconds: float = 5.0  # delete what remains this long before the deadline
    act_now_grace_seconds: int = 5  # grace of deletions when the deadline is unknown or past
    cooldown_seconds: float = 600.0
    gpu_workloads_only: bool = True
    # Only workloads whose labels match (key -> value, or key -> None: the key exists).
    workload_selector: Mapping[str, str | None] = field(default_factory=dict)
    # Nodes that run our agent (the same form): an agent notice elsewhere was not written by it.
    agent_nodes: Mapping[str, str | None] = field(
        default_factory=lambda: {names.AKS_SPOT_LABEL: "spot"}
    )
    returns: ReturnSettings = field(default_factory=ReturnSettings)
    # Pools that may have no Node (REBALANCER_POOLS), for the fail-over check.
    declared_pools: Mapping[str, Pool] = field(default_factory=dict)
    record_history: bool = True
    # Hold a surge's doomed pods against evictions by others (a PodDisruptionBudget of ours).
    hold_doomed_pods: bool = True
    hold_before_notice: bool = False
    target: TargetSettings = field(default_factory=TargetSettings)

    def policy_for(self, event_type: str) -> NoticePolicy:
        return self.event_policy.get(event_type, self.unknown_event_policy)


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


# An HPA's bounds are raised before the surge they protect: were the surge written first, an HPA
# sync between the two writes would scale the Deployment back and the ReplicaSet would remove the
# replacement that has just been created (it is not Ready yet, so it goes first). Then cordons,
# surges and the history (each starts a clock: the node stops taking pods, the replacements start
# loading); holds, pod costs and deadline deletions before any scale-back, which must find the
# doomed pods already marked or gone; scale-backs and bounds put back; evictions, marks and the
# rest.
def _step(action: Action) -> int:
    if isinstance(action, Bound):
        return 0 if action.original is not None else 3
    if isinstance(action, Cordon | Restore | ScaleUp | RecordHistory):
        return 1
    if isinstance(action, Hold | SetDeletionCost | Delete):
        return 2
    if isinstance(action, ScaleBack | FinishReturn):
        return 3
    return 4


def plan(snapshot: Snapshot, settings: Settings) -> Plan:
    """Every sub-planner in turn, each object through `Containment`: a failure planning one
    object leaves it alone this pass and is reported (`Plan.failures`), never stops the rest."""
    contain = Containment()
    active = active_notices(snapshot, settings, contain)
    chosen = frozenset(w.key for w in snapshot.workloads.values() if managed(w, settings))
    actions: list[Action] = []
    actions += contain.run(
        "history", about("eviction history"), [], _record_history, snapshot, settings
    )
    actions += _cordon_and_restore(snapshot, active, contain)
    surge_actions, surged_pods = _surges(snapshot, settings, active, contain)
    actions += surge_actions
    actions += _scale_backs(snapshot, settings, active, contain)
    actions += contain.run("hold", about("holds"), [], _holds, snapshot, settings, surge_actions)
    actions += _bounds(snapshot, surge_actions, contain)
    actions += _drain(snapshot, settings, active, surged_pods, contain)
    cooldowns = contain.run(
        "cooldown", about("cool-downs"), [], _cooldowns, snapshot, settings, active
    )
    actions += cooldowns[:STEERING_PER_PASS]
    actions += contain.run(
        "deletion-cost", about("pod deletion costs"), [], _restore_deletion_costs, snapshot, active
    )
    actions += _policies(snapshot, contain)
    surging = frozenset(a.workload for a in surge_actions if isinstance(a, ScaleUp | ReportBlocked))
    spares = _spares(snapshot, settings, surging, contain)
    actions += spares
    surging |= {a.workload for a in spares if isinstance(a, SetSpare)}
    # A workload with an availability target is placed by its plan, never returned or moved.
    surging |= {w.key for w in snapshot.workloads.values() if _targeted(w)}
    actions += plan_returns(
        snapshot,
        managed=set(chosen),
        active_nodes=set(active),
        settings=settings.returns,
        busy=surging,
        contain=contain,
    )
    return Plan(
        steps=_in_steps(actions),
        active=active,
        managed=chosen,
        ignored=ignored_notices(snapshot, settings),
        refused=tuple((w.key, w.uid, w.refused) for w in snapshot.workloads.values() if w.refused),
        failures=tuple(contain.failures),
    )


def _in_steps(actions: list[Action]) -> tuple[tuple[Action, ...], ...]:
    steps: list[list[Action]] = [[] for _ in range(5)]
    for action in actions:
        steps[_step(action)].append(action)
    return tuple(tuple(step) for step in steps if step)


def active_notices(
    snapshot: Snapshot, settings: Settings, contain: Containment | None = None
) -> dict[str, Notice]:
    """The most urgent notice that calls for action on each node."""
    contain = contain or Containment()
    active = {}
    for node in snapshot.nodes.values():
        acting = contain.run("notice", on_node(node.name), [], _acting, node, settings)
        if acting:
            active[node.name] = acting[0]  # notices come sorted most urgent first
    return active


def _acting(node: NodeInfo, settings: Settings) -> list[Notice]:
    return [
        n
        for n in node.notices
        if settings.policy_for(n.event_type) != NoticePolicy.NONE and _trusted(n, node, settings)
    ]


def _trusted(notice: Notice, node: NodeInfo, settings: Settings) -> bool:
    """An agent notice counts only on a node that runs our agent: on any other node it was
    written by someone else (a compromised agent elsewhere is stopped by the chart's admission
    policy; this stops the rest)."""
    return notice.source != Source.AGENT or labels_match(node.labels, settings.agent_nodes)


def labels_match(labels: Mapping[str, str], selector: Mapping[str, str | None]) -> bool:
    return all(
        key in labels and (value is None or labels[key] == value) for key, value in selector.items()
    )


def ignored_notices(snapshot: Snapshot, settings: Settings) -> tuple[tuple[str, str], ...]:
    return tuple(
        (node.name, f"agent notice {n.event_id} on a node that runs no agent of ours")
        for node in snapshot.nodes.values()
        for n in node.notices
        if not _trusted(n, node, settings)
    )


def deadline_near(notice: Notice, now: datetime, settings: Settings) -> bool:
    return notice.act_now or notice.seconds_left(now) <= settings.deadline_margin_seconds


def grace_for(pod: PodInfo, notice: Notice, now: datetime, settings: Settings) -> int:
    """The grace period that still fits before the deadline (never more than the pod's own)."""
    if notice.act_now or notice.seconds_left(now) <= 0:
        return min(pod.grace_seconds, settings.act_now_grace_seconds)
    return max(0, min(pod.grace_seconds, int(notice.seconds_left(now)) - 1))


# ---- the eviction history --------------------------------------------------------------------


def new_entries(snapshot: Snapshot) -> list[Entry]:
    """Notices on nodes that the history does not know yet (every type: the risk model wants
    them all; counts look at Preempts), as the history admits them (`History.admit`: the
    controller's observation, rate-limited per node)."""
    seen = [
        Entry(
            event_id=notice.event_id,
            event_type=notice.event_type,
            node=node.name,
            pool=node.pool,
            zone=node.zone,
            sku=node.sku,
            spot=node.spot,
            first_seen=snapshot.now,
        )
        for node in snapshot.nodes.values()
        for notice in node.notices
        if notice.event_type != MANUAL
    ]
    return snapshot.history.admit(seen, now=snapshot.now)


def _record_history(snapshot: Snapshot, settings: Settings) -> list[Action]:
    new = new_entries(snapshot)
    history = snapshot.history
    if not settings.record_history or (history.since is not None and not new):
        return []
    # No record yet (or an unreadable one): start it now, so the quiet time counts from here.
    return [RecordHistory(history.with_entries(new, now=snapshot.now), tuple(new))]


def preempts_last_hour(snapshot: Snapshot, pool: str, zone: str) -> int:
    """Preempt notices of a pool and zone in the last hour: the history's, and the ones this
    pass sees that it has not recorded yet."""
    return preempt_counts(snapshot).get((pool, zone), 0)


def preempt_counts(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """`preempts_last_hour` of every (pool, zone) at once: one walk of the history and nodes."""
    window = WINDOWS["1h"]
    counts: dict[tuple[str, str], int] = defaultdict(int)
    recorded = snapshot.history.preempts(now=snapshot.now, window=window)
    for entry in (*recorded, *new_entries(snapshot)):
        if entry.preempt and snapshot.now - entry.first_seen <= window:
            counts[(entry.pool, entry.zone)] += 1
    return counts


# ---- cordon, surge, scale back, drain --------------------------------------------------------


def _cordon_and_restore(
    snapshot: Snapshot, active: Mapping[str, Notice], contain: Containment
) -> list[Action]:
    actions: list[Action] = []
    for name, node in snapshot.nodes.items():
        actions += contain.run("cordon", on_node(name), [], _cordon_one, node, active.get(name))
    return actions


def _cordon_one(node: NodeInfo, notice: Notice | None) -> list[Action]:
    recorded = node.annotations.get(names.CORDONED_FOR)
    if notice is not None and recorded is None:
        cordon = Cordon(
            node.name, notice.event_id, notice.event_type, basis=node.as_json(), uid=node.uid
        )
        return [cordon]
    if notice is None and recorded is not None:
        return [Restore(node.name, recorded, basis=node.as_json(), uid=node.uid)]
    return []


def managed(workload: WorkloadInfo | None, settings: Settings) -> bool:
    """Failed over make-before-break (the rest of a doomed node is simply drained)."""
    if workload is None or workload.opted_out or workload.refused:
        return False
    if not labels_match(workload.labels, settings.workload_selector):
        return False
    return workload.gpus_per_replica > 0 or not settings.gpu_workloads_only


def _doomed(pod: PodInfo) -> bool:
    return not (pod.daemonset or pod.mirror or pod.finished or pod.deleting)


def _terminates_too_late(pod: PodInfo, notice: Notice, now: datetime, settings: Settings) -> bool:
    """A terminating pod that will still run when the node must be empty: one second before the
    deadline, or, to act now, after the short grace period deletions then get (`grace_for`)."""
    if not pod.deleting or pod.daemonset or pod.mirror or pod.deletion_at is None:
        return False
    if notice.act_now or notice.deadline is None:
        return pod.deletion_at > now + timedelta(seconds=settings.act_now_grace_seconds + 1)
    return pod.deletion_at > notice.deadline - timedelta(seconds=1)


def _surges(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], contain: Containment
) -> tuple[list[Action], set[tuple[str, str]]]:
    """Surge Deployments with doomed replicas (a new surge, or a wave added to one)."""
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
    for key, doomed in sorted(doomed_by_workload.items()):
        workload = snapshot.workloads[key]
        planned, replaced = contain.run(
            "surge", on_workload(key), ([], set()), _surge_one, snapshot, workload, doomed, pools
        )
        actions += planned
        handled |= replaced
    return actions, handled


def _doomed_managed(
    snapshot: Snapshot, settings: Settings, node_name: str
) -> list[tuple[PodInfo, WorkloadInfo]]:
    """The doomed pods on a node that belong to a managed Deployment, with it."""
    found = []
    for pod in snapshot.pods_by_node.get(node_name, []):
        workload = snapshot.workload_of(pod)
        if (
            _doomed(pod)
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
    earliest = min((n for _, n in doomed), key=_deadline_key)
    deadline = None if earliest.act_now or earliest.deadline is None else iso(earliest.deadline)
    events = tuple(sorted({n.event_id for _, n in doomed}))
    old = workload.surge
    if old is None and _spares_absorb(snapshot, workload, names_now):
        # Spare replicas carry the loss: no surge, the doomed pods are drained at once so
        # that the ReplicaSet's new ones (placed by the policy) start now.
        return [], set()
    if old is None:
        record = Surge(workload.replicas, len(names_now), events, names_now, deadline)
        actions: list[Action] = [_scale_up(workload, basis, record, len(names_now))]
        fallback = on_demand_fallback(workload.template_spec, pools, gpus=workload.gpus_per_replica)
        if not fallback.pools:
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


def _scale_backs(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], contain: Containment
) -> list[Action]:
    """Finish each recorded surge whose replacements are Ready, or whose time is up."""
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
    return actions


def _scale_back_one(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], workload: WorkloadInfo
) -> list[Action]:
    actions: list[Action] = []
    active_events = {notice.event_id for notice in active.values()}
    key = workload.key
    surge = workload.surge
    if surge is None:
        return actions
    basis = WorkloadBasis.of(workload)
    doomed_names = set(surge.doomed_pods)
    pods = snapshot.pods_by_workload.get(key, [])
    if surge.completed:
        if not any(f"{pod.namespace}/{pod.name}" in doomed_names for pod in pods):
            actions.append(ForgetSurge(key, basis=basis))
        return actions
    if workload.replicas < surge.base_replicas + surge.added:
        # An owner (an operator, an autoscaler) set replicas back while the replacements
        # load: fighting it would flap. Let go, say so, and drain the doomed pods now, so that
        # their replacements start at once instead of at the deadline.
        reverted = replace(surge, completed=True, reverted=True)
        actions.append(ScaleBack(key, None, Reason.SURGE_NOT_HELD, reverted, basis=basis))
        return actions
    alive = [
        pod for pod in pods if f"{pod.namespace}/{pod.name}" in doomed_names and not pod.deleting
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
            actions.append(
                SetDeletionCost(pod.key, original, restore=True, reason=Reason.CANCELLED)
            )
        if lowered:
            return actions
        reason = Reason.CANCELLED
    elif ready_elsewhere >= surge.base_replicas:
        # Lowered only now, off the notice's critical path: the cost matters only to the
        # ReplicaSet's choice when we scale back, which waits for it.
        unmarked = [pod for pod in alive if pod.deletion_cost != LOWEST]
        actions += [lower_cost(pod, Reason.REPLACEMENTS_READY) for pod in unmarked]
        if unmarked:
            return actions
        reason = Reason.REPLACEMENTS_READY
    else:
        notices = [active[pod.node_name] for pod in alive if pod.node_name in active]
        if surge.deadline is None or any(deadline_near(n, snapshot.now, settings) for n in notices):
            reason = Reason.DEADLINE
            # Delete the doomed pods first: scaling down alone would remove the
            # replacements that are still loading, since not-ready pods go first.
            for pod in alive:
                notice = active.get(pod.node_name)
                if notice is not None:
                    grace = grace_for(pod, notice, snapshot.now, settings)
                    actions.append(Delete(pod.key, pod.uid, pod.node_name, notice.event_id, grace))
    if reason is None:
        return actions
    # A completed record keeps its doomed pods out of later surges and drains until they are
    # gone, which after a scale-back they soon are. After a cancellation they stay, serving,
    # and nothing of the surge is doomed any more: drop the record, or those pods would be
    # neither surged for, nor evicted, nor deleted when a later notice dooms their node.
    record = None if reason == Reason.CANCELLED else replace(surge, completed=True)
    if workload.replicas != surge.base_replicas + surge.added:
        # An HPA or a person changed replicas since the surge: drop our record, do not fight.
        actions.append(ScaleBack(key, None, Reason.REPLICAS_CHANGED, record, basis=basis))
    else:
        actions.append(ScaleBack(key, surge.base_replicas, reason, record, basis=basis))
    return actions


def _holds(snapshot: Snapshot, settings: Settings, planned: list[Action]) -> list[Action]:
    """While a surge's replacements load, a PodDisruptionBudget of ours (maxUnavailable 0, the
    Deployment's own selector) holds its pods: an eviction by anyone else (AKS node auto-drain
    evicts at notice time; kubectl drain; the cluster autoscaler) is refused, so the old
    replicas serve until the replacements are Ready. Our own removals are deletions, which no
    budget stops. One write per surged Deployment, none per pod: a wave's cordons come first.
    A hold whose surge is over is released."""
    held: dict[tuple[str, str], WorkloadInfo] = {}
    for workload in snapshot.workloads.values():
        surge = workload.surge
        if surge is not None and not surge.completed and workload.kind == "Deployment":
            held[(workload.namespace, workload.name)] = workload
    for action in planned:  # surges this pass starts: hold at once, AKS's drain starts now too
        if isinstance(action, ScaleUp):
            workload = snapshot.workloads[action.workload]
            held[(workload.namespace, workload.name)] = workload
    if not settings.hold_doomed_pods:
        held = {}
    standing = _held_before_notice(snapshot, settings) if settings.hold_before_notice else {}
    actions: list[Action] = []
    existing = {(h.namespace, h.workload) for h in snapshot.holds.values()}
    for (namespace, name), workload in sorted({**standing, **held}.items()):
        if (namespace, name) not in existing and workload.selector:
            reason = Reason.NOTICE if (namespace, name) in held else Reason.HOLD_BEFORE_NOTICE
            actions.append(Hold(namespace, name, workload.selector, reason=reason))
    held = {**standing, **held}
    for hold in sorted(snapshot.holds.values(), key=lambda h: h.key):
        if (hold.namespace, hold.workload) not in held:
            actions.append(Release(hold.namespace, hold.name))
    return actions


def _held_before_notice(
    snapshot: Snapshot, settings: Settings
) -> dict[tuple[str, str], WorkloadInfo]:
    """With `hold_before_notice`, every managed Deployment with a replica on spot is held all
    the time: AKS node auto-drain may evict at notice time, before our agent has seen the
    notice, and a user's PDB that allows one disruption lets it. The hold yields while one of
    its nodes is drained by someone else for another reason (cordoned, not by us, without a
    notice and without AKS auto-drain's taint: an upgrade, `kubectl drain`), which it must not
    block; the cluster autoscaler and Karpenter do not remove its nodes meanwhile (docs)."""
    nodes = snapshot.nodes
    standing: dict[tuple[str, str], WorkloadInfo] = {}
    for workload in snapshot.workloads.values():
        if workload.kind != "Deployment" or not managed(workload, settings):
            continue
        hosts = [
            nodes[p.node_name]
            for p in snapshot.pods_by_workload.get(workload.key, [])
            if p.node_name in nodes and not p.finished
        ]
        if any(n.spot for n in hosts) and not any(_drained_by_others(n) for n in hosts):
            standing[(workload.namespace, workload.name)] = workload
    return standing


def _drained_by_others(node: NodeInfo) -> bool:
    return (
        node.unschedulable
        and not node.notices
        and names.CORDONED_FOR not in node.annotations
        and not any(t.key == names.AKS_REMEDIATOR_TAINT for t in node.taints)
    )


def _spares_absorb(snapshot: Snapshot, workload: WorkloadInfo, doomed: tuple[str, ...]) -> bool:
    """The workload keeps spare replicas and, without the doomed ones, still has at least its
    owner's count Ready."""
    spare = workload.spare
    if spare is None or spare.gave_up or spare.added == 0:
        return False
    ready = [
        p
        for p in snapshot.pods_by_workload.get(workload.key, [])
        if p.ready and not p.deleting and f"{p.namespace}/{p.name}" not in doomed
    ]
    return len(ready) >= spare.base


def _spares(
    snapshot: Snapshot, settings: Settings, busy: frozenset[WorkloadKey], contain: Containment
) -> list[Action]:
    """Keep a Deployment's `spare-replicas` (its placement policy) on top of its owner's count,
    so that an eviction takes a spare instead of a needed replica (SpotHedge's N + k; the webhook
    spreads them like the others). Our record keeps the owner's count: a new count from the owner
    is a new base; a count set back to exactly the base twice is an owner that resets replicas
    (KServe, an operator), which we stop fighting and report. Not while a surge or a return is
    on it (they own the count for a while), nor with an HPA (it owns the count: its bounds would
    have to move for as long as the spares are wanted)."""
    actions: list[Action] = []
    for key, workload in sorted(snapshot.workloads.items()):
        actions += contain.run(
            "spares", on_workload(key), [], _spare_one, snapshot, settings, busy, workload
        )
    return actions


def _spare_one(
    snapshot: Snapshot, settings: Settings, busy: frozenset[WorkloadKey], workload: WorkloadInfo
) -> list[Action]:
    actions: list[Action] = []
    key = workload.key
    record = workload.spare
    policy = in_force(workload.annotations).policy
    wanted = policy.spare if policy is not None and managed(workload, settings) else 0
    targeted = policy is not None and bool(policy.target)
    if record is None and (wanted == 0 or workload.replicas == 0) and not targeted:
        return actions
    scaled = {(s.namespace, s.target) for s in snapshot.scalers.values()}
    if (
        workload.kind != "Deployment"
        or key in busy
        or workload.surge is not None
        or names.RETURN_ANNOTATION in workload.annotations
        or (workload.namespace, ("Deployment", workload.name)) in scaled
    ):
        return actions
    if policy is not None and policy.target and managed(workload, settings):
        return plan_target(snapshot, workload, policy, settings.target, settings.declared_pools)
    basis = WorkloadBasis.of(workload)
    replicas = workload.replicas
    why = "" if record is not None and record.spot is not None else None  # a target's, gone
    if record is None:
        fresh = Spare(base=replicas, added=wanted)
        actions.append(SetSpare(key, replicas + wanted, fresh, basis=basis))
        return actions
    if record.gave_up:
        if wanted == 0:
            actions.append(SetSpare(key, None, None, basis=basis))
        return actions
    if replicas == record.base + record.added:
        if wanted != record.added or why is not None:
            kept = Spare(record.base, wanted, record.reverted) if wanted else None
            actions.append(SetSpare(key, record.base + wanted, kept, basis=basis, why=why))
    elif replicas == record.base and record.added > 0:
        reverted = record.reverted + 1
        if reverted >= 2:
            given_up = Spare(record.base, 0, reverted, gave_up=True)
            actions.append(SetSpare(key, None, given_up, basis=basis, reason=Reason.SPARE_NOT_HELD))
        else:
            again = Spare(record.base, wanted, reverted)
            actions.append(SetSpare(key, record.base + wanted, again, basis=basis))
    else:  # the owner chose a new count: that is the base now
        rebased = Spare(replicas, wanted, record.reverted) if wanted and replicas else None
        actions.append(
            SetSpare(key, replicas + wanted if rebased else None, rebased, basis=basis, why=why)
        )
    return actions


def _policies(snapshot: Snapshot, contain: Containment) -> list[Action]:
    """Keep each workload's valid placement policy recorded on it, so a later invalid edit
    leaves it in force (policy.py); an invalid one is reported by the recorder, not written."""
    actions: list[Action] = []
    for key, workload in sorted(snapshot.workloads.items()):
        actions += contain.run("policy", on_workload(key), [], _policy_one, workload)
    return actions


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


def _bounds(snapshot: Snapshot, planned: list[Action], contain: Containment) -> list[Action]:
    """An HorizontalPodAutoscaler would scale a surged Deployment back within its sync period,
    and a ReplicaSet scaling down removes the not-ready replacements first. While a surge is on,
    the HPA's minReplicas (and maxReplicas, if lower) is raised to the surged count, its own
    values recorded on it; when the surge ends they are put back exactly."""
    need: dict[tuple[str, str], int] = {}  # (namespace, deployment) -> replicas to keep
    for workload in snapshot.workloads.values():
        surge = workload.surge
        if surge is not None and not surge.completed and workload.kind == "Deployment":
            need[(workload.namespace, workload.name)] = surge.base_replicas + surge.added
    for action in planned:
        if isinstance(action, ScaleUp):
            _, namespace, name = action.workload
            need[(namespace, name)] = action.replicas
    actions: list[Action] = []
    for scaler in sorted(snapshot.scalers.values(), key=lambda s: s.key):
        kind, target = scaler.target
        wanted = need.get((scaler.namespace, target)) if kind == "Deployment" else None
        actions += contain.run(
            "bound",
            about(f"HorizontalPodAutoscaler {scaler.namespace}/{scaler.name}"),
            [],
            _bound_one,
            scaler,
            wanted,
        )
    return actions


def _bound_one(scaler: ScalerInfo, wanted: int | None) -> list[Action]:
    basis = (scaler.min_replicas, scaler.max_replicas, scaler.original)
    if wanted is not None:
        if scaler.min_replicas < wanted or scaler.max_replicas < wanted:
            original = scaler.saved or f"{scaler.min_replicas},{scaler.max_replicas}"
            low, high = max(scaler.min_replicas, wanted), max(scaler.max_replicas, wanted)
            return [Bound(scaler.namespace, scaler.name, low, high, original, basis)]
        return []
    if scaler.original is None:
        return []
    return [Bound(scaler.namespace, scaler.name, *_original_bounds(scaler), None, basis)]


def _original_bounds(scaler: ScalerInfo) -> tuple[int, int]:
    """The bounds we recorded before raising them ("min,max"), read strictly: anyone who may
    annotate the HPA could write "100000,100000" there. Unreadable or not ours (its seal, seal.py):
    today's bounds stay, only the record goes."""
    low, _, high = scaler.saved.partition(",") if scaler.saved else ("", "", "")
    try:
        bounds = (
            whole_number(low, low=1, high=MAX_RECORD_REPLICAS),
            whole_number(high, low=1, high=MAX_RECORD_REPLICAS),
        )
    except ValueError:
        return scaler.min_replicas, scaler.max_replicas
    if bounds[0] > bounds[1]:
        return scaler.min_replicas, scaler.max_replicas
    return bounds


def _drain(
    snapshot: Snapshot,
    settings: Settings,
    active: Mapping[str, Notice],
    surged: set[tuple[str, str]],
    contain: Containment,
) -> list[Action]:
    actions: list[Action] = []
    for node_name, notice in sorted(active.items()):
        actions += contain.run(
            "drain",
            on_node(node_name),
            [],
            _drain_one,
            snapshot,
            settings,
            node_name,
            notice,
            surged,
        )
    return actions


def _drain_one(
    snapshot: Snapshot,
    settings: Settings,
    node_name: str,
    notice: Notice,
    surged: set[tuple[str, str]],
) -> list[Action]:
    actions: list[Action] = []
    node = snapshot.nodes[node_name]
    on_node = snapshot.pods_by_node.get(node_name, [])
    remaining = [pod for pod in on_node if _doomed(pod)]
    near = deadline_near(notice, snapshot.now, settings)
    for pod in remaining:
        if pod.key in surged:
            continue  # replaced make-before-break; removed by the scale-back
        grace = grace_for(pod, notice, snapshot.now, settings)
        if near:
            actions.append(Delete(pod.key, pod.uid, node_name, notice.event_id, grace))
        else:
            # A grace period longer than the time left is cut to fit: the pod must be gone
            # before Azure takes the VM, not merely terminating.
            shorter = grace if grace < pod.grace_seconds else None
            actions.append(
                Evict(pod.key, pod.uid, node_name, notice.event_id, grace_seconds=shorter)
            )
    for pod in on_node:
        if _terminates_too_late(pod, notice, snapshot.now, settings):
            # Already terminating (evicted by someone else, scaled away) with a grace period
            # that ends after the deadline: a second delete may shorten it, never lengthen it.
            grace = grace_for(pod, notice, snapshot.now, settings)
            actions.append(Delete(pod.key, pod.uid, node_name, notice.event_id, grace))
    drained_for = node.annotations.get(names.DRAINED_FOR_ANNOTATION, "")
    marked = {part.strip().upper() for part in drained_for.split(",") if part.strip()}
    # Drained means gone, not merely terminating: Azure may take the VM once we say so.
    terminating = any(pod.deleting and not pod.daemonset for pod in on_node)
    if not remaining and not terminating and notice.event_id.upper() not in marked:
        actions.append(MarkDrained(node_name, notice.event_id, basis=node.as_json(), uid=node.uid))
    return actions


# ---- steering away from an evicted pool ------------------------------------------------------


def cooldown_for(settings: Settings, preempts_last_hour: int) -> float:
    """The base cool-down, times the pool's Preempt notices in the last hour (at most 4x): a pool
    that keeps being evicted is avoided for longer."""
    return settings.cooldown_seconds * min(MAX_COOLDOWN_FACTOR, max(1, preempts_last_hour))


def _cooldowns(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice]
) -> list[Action]:
    """PreferNoSchedule on the rest of a spot pool (same pool and zone) that is being evicted."""
    counts = preempt_counts(snapshot)
    evicted_groups: dict[tuple[str, str], datetime] = {}
    for node_name, notice in active.items():
        node = snapshot.nodes[node_name]
        if node.spot and notice.event_type in (EventType.PREEMPT, MANUAL):
            started = notice.seen_at or snapshot.now
            count = counts.get((node.pool, node.zone), 0)
            until = started + timedelta(seconds=cooldown_for(settings, count))
            group = (node.pool, node.zone)
            evicted_groups[group] = max(until, evicted_groups.get(group, until))
    actions: list[Action] = []
    for name, node in sorted(snapshot.nodes.items()):
        if name in active or not node.spot:
            continue
        current = parse_iso(node.annotations.get(names.COOLDOWN_UNTIL))
        wanted = evicted_groups.get((node.pool, node.zone))
        if wanted is not None and (current is None or current < wanted):
            actions.append(StartCooldown(name, wanted, basis=node.as_json(), uid=node.uid))
        elif wanted is None and current is not None and current <= snapshot.now:
            actions.append(EndCooldown(name, basis=node.as_json(), uid=node.uid))
    return actions


def _restore_deletion_costs(snapshot: Snapshot, active: Mapping[str, Notice]) -> list[Action]:
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
        if _targeted(snapshot.workload_of(pod)):
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


def _targeted(workload: WorkloadInfo | None) -> bool:
    if workload is None:
        return False
    policy = in_force(workload.annotations).policy
    return policy is not None and bool(policy.target)


def _deadline_key(notice: Notice) -> datetime:
    if notice.act_now or notice.deadline is None:
        return datetime.min.replace(tzinfo=UTC)
    return notice.deadline


def min_deadline(first: str | None, second: str | None) -> str | None:
    """The earlier of two recorded deadlines; None (act now) is the earliest of all."""
    if first is None or second is None:
        return None
    return min(first, second, key=lambda text: parse_iso(text) or datetime.min.replace(tzinfo=UTC))
