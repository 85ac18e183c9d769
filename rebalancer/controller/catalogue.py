"""Every Kubernetes Event the controller writes: one constructor per (action, outcome).

The executor writes the cluster; these say what was done, on the object it was done to
(`involvedObject` complete, uid included, so `kubectl describe` shows it). Reasons come from
`rebalancer.vocabulary.EventReason`; docs/events.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rebalancer.controller.actions import (
    Action,
    Cordon,
    Delete,
    EndCooldown,
    Evict,
    FinishReturn,
    MarkDrained,
    NodeAction,
    Outcome,
    ReportBlocked,
    Restore,
    ScaleBack,
    ScaleUp,
    SetSpare,
    StartCooldown,
    StartReturn,
    WorkloadKey,
)
from rebalancer.controller.checkup import Finding
from rebalancer.controller.contain import Failure
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.pools import Options
from rebalancer.timefmt import iso
from rebalancer.vocabulary import ActionResult, EventReason, Reason, Rejection


@dataclass(frozen=True)
class KubeEvent:
    regarding: dict[str, str]
    reason: EventReason
    message: str
    warning: bool = False


def _node(action: NodeAction) -> dict[str, str]:
    return {"kind": "Node", "name": action.node, "uid": action.uid, "apiVersion": "v1"}


def _workload(key: WorkloadKey, uid: str) -> dict[str, str]:
    kind, namespace, name = key
    return {"kind": kind, "namespace": namespace, "name": name, "uid": uid, "apiVersion": "apps/v1"}


def _pod(action: Evict | Delete) -> dict[str, str]:
    namespace, name = action.pod
    return {
        "kind": "Pod",
        "namespace": namespace,
        "name": name,
        "uid": action.uid,
        "apiVersion": "v1",
    }


def replacement_placed(
    workload: WorkloadKey, uid: str, pod: str, node: NodeInfo, options: Options
) -> KubeEvent:
    """Where a surge's replacement went, and what else there was (no placement policy chooses
    yet: the Kubernetes scheduler does, steered by our PreferNoSchedule on evicted pools)."""
    kind = "spot" if node.spot else "on-demand"
    others = (
        f"on-demand pools that fit: {', '.join(options.on_demand) or 'none'}; spot pools with "
        f"room: {', '.join(options.spot_with_room) or 'none'}; spot pools being evicted "
        f"(avoided): {', '.join(options.spot_evicted) or 'none'}"
    )
    return KubeEvent(
        _workload(workload, uid),
        EventReason.REPLACEMENT_PLACED,
        f"Replacement {pod} scheduled on {node.name} ({kind} pool {node.pool}, zone "
        f"{node.zone or '?'}) by the Kubernetes scheduler. {others}",
    )


def misconfigured(finding: Finding) -> KubeEvent | None:
    """A doctor's finding, on the object to change (None for a pool: no API object to carry
    it). The YAML does not fit an Event: `kubectl spot-rebalancer doctor` prints it."""
    ref = finding.object
    if not ref.uid:
        return None
    regarding = {"kind": ref.kind, "name": ref.name, "uid": ref.uid, "apiVersion": ref.api_version}
    if ref.namespace:
        regarding["namespace"] = ref.namespace
    return KubeEvent(
        regarding,
        EventReason.MISCONFIGURED,
        f"{finding.check}: {finding.what}. {finding.fix} (`kubectl spot-rebalancer doctor` "
        "prints the YAML)",
        warning=True,
    )


def policy_refused(workload: WorkloadKey, uid: str, problems: str, kept: str) -> KubeEvent:
    return KubeEvent(
        _workload(workload, uid),
        EventReason.POLICY_REFUSED,
        f"Placement policy refused: {problems}. In force: {kept}",
        warning=True,
    )


def input_refused(workload: WorkloadKey, uid: str, problems: tuple[str, ...]) -> KubeEvent:
    return KubeEvent(
        _workload(workload, uid),
        EventReason.INPUT_REFUSED,
        "Left alone (drained plainly on a notice, no surge, return or spares) until fixed: "
        + "; ".join(problems),
        warning=True,
    )


def planning_failed(failure: Failure, uid: str) -> KubeEvent | None:
    """On the object a planning method failed on; None when it was not one object."""
    where = failure.where
    if where.workload is not None:
        regarding = _workload(where.workload, uid)
    elif where.node:
        regarding = {"kind": "Node", "name": where.node, "uid": uid, "apiVersion": "v1"}
    else:
        return None
    return KubeEvent(
        regarding,
        EventReason.PLANNING_FAILED,
        f"Planning ({failure.method}) failed and left this object alone for now: {failure.error}",
        warning=True,
    )


def pod_placed(
    workload: WorkloadKey, uid: str, pod: str, chosen: str, why: str, node: NodeInfo
) -> KubeEvent:
    """Where the policy sent a new pod, why, and where the scheduler put it (a spot choice is a
    preference: with no room there the pod goes wherever else it fits)."""
    landed = f"{node.pool}/{node.zone}"
    kept = "as chosen" if _same_place(chosen, node) else "not where chosen: no room there"
    return KubeEvent(
        _workload(workload, uid),
        EventReason.PLACED,
        f"Pod {pod} placed by policy in {chosen} ({why}); scheduled on {node.name} "
        f"({'spot' if node.spot else 'on-demand'}, {landed}), {kept}",
    )


def _same_place(chosen: str, node: NodeInfo) -> bool:
    pool, _, zone = chosen.partition("/")
    return pool == node.pool and (not zone or zone == node.zone)


def event_for(action: Action, outcome: Outcome) -> KubeEvent | None:
    """The Event that tells what happened, or None when nothing worth telling did."""
    if isinstance(action, Evict) and outcome.rejection is Rejection.BLOCKED:
        return KubeEvent(
            _pod(action),
            EventReason.EVICTION_BLOCKED,
            f"Eviction refused by a PodDisruptionBudget; node {action.node} is going away "
            f"({action.event_id}): retried, and deleted at the deadline if still here",
            warning=True,
        )
    if outcome.result is not ActionResult.APPLIED:
        return None
    match action:
        case Cordon():
            return KubeEvent(
                _node(action),
                EventReason.CORDONED,
                f"Cordoned for {action.event_type} event {action.event_id}",
            )
        case Restore():
            return KubeEvent(
                _node(action),
                EventReason.RESTORED,
                f"Notice {action.event_id} gone: cordon and taint undone",
            )
        case MarkDrained():
            return KubeEvent(_node(action), EventReason.DRAINED, f"Drained for {action.event_id}")
        case StartCooldown():
            until = iso(action.until) if action.until else "?"
            return KubeEvent(
                _node(action),
                EventReason.COOLDOWN,
                f"Its pool is being evicted: PreferNoSchedule until {until}",
            )
        case EndCooldown():
            return KubeEvent(
                _node(action), EventReason.COOLDOWN_OVER, "Cool-down over: PreferNoSchedule removed"
            )
        case ScaleUp():
            events = ", ".join(action.record.event_ids) if action.record else ""
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.SURGE,
                f"Scaled to {action.replicas} to replace {action.added} replica(s) on evicted "
                f"nodes before they go ({events})",
            )
        case ScaleBack() if action.reason == Reason.SURGE_NOT_HELD:
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.SURGE_NOT_HELD,
                f"Replicas were set back to {action.basis.replicas} by someone else (an operator "
                "or autoscaler that owns them) while replacements loaded: not fighting it; the "
                "pods on evicted nodes are drained now, so their replacements start at once",
                warning=True,
            )
        case ScaleBack():
            target = "left as is" if action.replicas is None else f"to {action.replicas}"
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.SCALE_BACK,
                f"Scaled back {target}: {action.reason}",
            )
        case Evict():
            return KubeEvent(
                _pod(action), EventReason.EVICTED, f"Evicted: node {action.node} is going away"
            )
        case Delete():
            return KubeEvent(
                _pod(action),
                EventReason.DELETED,
                f"Deleted with {action.grace_seconds}s grace: node {action.node} reaches its "
                f"deadline ({action.event_id})",
                warning=True,
            )
        case ReportBlocked():
            return KubeEvent(
                _workload(action.workload, action.uid),
                EventReason.FAILOVER_BLOCKED,
                f"No on-demand fallback: {action.detail}",
                warning=True,
            )
        case SetSpare() if action.reason is Reason.TARGET_ACCOUNT:
            return None  # bookkeeping: the stretch below is in the log and the record
        case SetSpare() if action.reason is Reason.SPARE_NOT_HELD:
            base = action.record.base if action.record else "?"
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.SPARES_NOT_HELD,
                f"Spare replicas given up: replicas were set back to {base} twice (an owner "
                "resets them); remove and set spot-rebalancer.io/spare-replicas again to retry",
                warning=True,
            )
        case SetSpare():
            if action.record is None:
                text = "Spare replicas removed" + (
                    f": scaled to {action.replicas}" if action.replicas is not None else ""
                )
            elif action.why:
                text = f"Availability target: scaled to {action.replicas}: {action.why}"
            else:
                text = (
                    f"Keeping {action.record.added} spare replicas on top of the owner's "
                    f"{action.record.base}: scaled to {action.replicas}"
                )
            return KubeEvent(_workload(action.workload, action.basis.uid), EventReason.SPARES, text)
        case StartReturn() if action.record is not None and action.record.purpose == "risk":
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.MOVE_STARTED,
                f"Moving {action.record.retire} before any notice: {action.record.why}; scaled "
                f"to {action.replicas}, the new pod is placed by the policy and the risky one "
                "goes once it is Ready",
            )
        case FinishReturn() if action.purpose == "risk":
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.MOVE_FINISHED,
                f"Move off a risky spot group finished: {action.reason}",
                warning=action.backoff_until is not None,
            )
        case StartReturn():
            record = action.record
            pool, retire = (record.pool, record.retire) if record else ("?", "?")
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.RETURN_STARTED,
                f"Returning a replica to spot pool {pool}: scaled to {action.replicas}; "
                f"{retire} goes once the new one is Ready",
            )
        case FinishReturn():
            return KubeEvent(
                _workload(action.workload, action.basis.uid),
                EventReason.RETURN_FINISHED,
                f"Return to spot finished: {action.reason}",
                warning=action.backoff_until is not None,
            )
    return None
